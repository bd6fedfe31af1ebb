// SPDX-License-Identifier: Apache-2.0
package io.cortado;

/**
 * A file, blob or layer is missing, or a read or write failed (native codes kNotFound and kIo).
 *
 * <p>Thrown by the JNI shim (see docs/dev/errors.md for which native error codes map here); the
 * message is the native one.
 */
public class CortadoIOException extends CortadoException {
  private static final long serialVersionUID = 1L;

  public CortadoIOException(String message) {
    super(message);
  }

  public CortadoIOException(String message, Throwable cause) {
    super(message, cause);
  }
}
