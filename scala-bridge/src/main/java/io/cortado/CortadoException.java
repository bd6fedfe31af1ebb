// SPDX-License-Identifier: Apache-2.0
package io.cortado;

/**
 * Base class of the exceptions Cortado's native code throws; thrown as is for unimplemented
 * features and internal errors (a bug: please report it).
 *
 * <p>Thrown by the JNI shim (see docs/dev/errors.md for which native error codes map here); the
 * message is the native one.
 */
public class CortadoException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public CortadoException(String message) {
    super(message);
  }

  public CortadoException(String message, Throwable cause) {
    super(message, cause);
  }
}
