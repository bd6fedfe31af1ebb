// SPDX-License-Identifier: Apache-2.0
package io.cortado;

/**
 * A CUDA, cuBLAS, cuDNN or NCCL call failed (native code kCuda).
 *
 * <p>Thrown by the JNI shim (see docs/dev/errors.md for which native error codes map here); the
 * message is the native one.
 */
public class CortadoCudaException extends CortadoException {
  private static final long serialVersionUID = 1L;

  public CortadoCudaException(String message) {
    super(message);
  }

  public CortadoCudaException(String message, Throwable cause) {
    super(message, cause);
  }
}
