// SPDX-License-Identifier: Apache-2.0
package io.cortado;

/**
 * A collective failed, a peer did not answer in time, or work was aborted (native codes kComm,
 * kTimeout and kAborted): the errors the driver's retry loop retries.
 *
 * <p>Thrown by the JNI shim (see docs/dev/errors.md for which native error codes map here); the
 * message is the native one.
 */
public class CortadoCommException extends CortadoException {
  private static final long serialVersionUID = 1L;

  public CortadoCommException(String message) {
    super(message);
  }

  public CortadoCommException(String message, Throwable cause) {
    super(message, cause);
  }
}
