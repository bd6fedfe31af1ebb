// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import org.apache.hadoop.conf.Configuration
import org.slf4j.LoggerFactory

import io.cortado.jni.NativeLib
import io.cortado.storage.HadoopFiles

/**
 * ONNX export as the JVM side offers it ([[Cortado.exportOnnx]],
 * [[io.cortado.ml.CortadoClassificationModel.exportOnnx]], CortadoOnSpark's `-exportOnnx`):
 * the native side builds the net and writes the model's bytes (NativeLib.exportOnnx); this
 * object writes them to a Hadoop path.
 */
private[cortado] object OnnxExport {

  private val log = LoggerFactory.getLogger(getClass)

  /** The opset a model declares unless asked for another (ONNX's 13 to 17 are supported). */
  val DefaultOpset: Int = 13

  /**
   * Exports the TEST net of `netText` with `weights` (binary .caffemodel bytes, read only once
   * `path` is known to be free) and writes the model to `path` (any Hadoop path; `file:relative`
   * against the working directory) through a temporary name beside it, renamed into place: an
   * existing `path` fails before any work, with CortadoIOException naming it, and a failed
   * export leaves nothing behind.
   */
  def write(netText: String, netSource: String, weights: => Array[Byte], opset: Int,
      dynamicBatch: Boolean, path: String, conf: Configuration): Unit = {
    val target = HadoopFiles.absoluteLocal(path)
    HadoopFiles.writeAtomically(target, conf, "the ONNX model") { temp =>
      val bytes = NativeLib.exportOnnx(netText, netSource, weights, opset, dynamicBatch)
      HadoopFiles.writeBytesAtomic(temp, bytes, conf)
      log.info(s"ONNX model of $netSource (opset $opset" +
        s"${if (dynamicBatch) ", any batch size" else ""}, ${bytes.length} bytes) written to $path")
    }
  }
}
