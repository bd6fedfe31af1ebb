// SPDX-License-Identifier: Apache-2.0
package io.cortado;

/**
 * A prototxt, model file or parameter is wrong (native codes kInvalidArgument and kParse): the
 * message names the file and line, or the layer and its shapes.
 *
 * <p>Thrown by the JNI shim (see docs/dev/errors.md for which native error codes map here); the
 * message is the native one.
 */
public class CortadoConfigException extends CortadoException {
  private static final long serialVersionUID = 1L;

  public CortadoConfigException(String message) {
    super(message);
  }

  public CortadoConfigException(String message, Throwable cause) {
    super(message, cause);
  }
}
