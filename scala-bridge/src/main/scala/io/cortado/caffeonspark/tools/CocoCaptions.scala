// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.tools

import java.io.IOException

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import io.cortado.CortadoIOException
import io.cortado.storage.HadoopFiles

/**
 * What the caption tools ([[Conversions]], [[Vocab]], [[CocoDataSetConverter]]) share: image
 * files read whole, their height and width read from their headers, and outputs written to a
 * temporary name and renamed into place.
 */
private[caffeonspark] object CocoCaptions {

  /**
   * The height and width of a JPEG (from its frame header, SOF0 to SOF15) or PNG (from its IHDR
   * chunk) image held in `bytes`, read without decoding the pixels; None for anything else, or
   * a header cut short.
   */
  def imageSize(bytes: Array[Byte]): Option[(Int, Int)] = {
    def u8(i: Int): Int = bytes(i) & 0xff
    def u16(i: Int): Int = (u8(i) << 8) | u8(i + 1)
    def u32(i: Int): Long = (u16(i).toLong << 16) | u16(i + 2)
    val png = Array(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a) // \x89PNG\r\n\x1a\n
    if (bytes.length >= 24 && png.indices.forall(i => u8(i) == png(i)) &&
        new String(bytes, 12, 4, "US-ASCII") == "IHDR") {
      val (width, height) = (u32(16), u32(20))
      if (width > 0 && height > 0 && width <= Int.MaxValue && height <= Int.MaxValue) {
        Some((height.toInt, width.toInt))
      } else None
    } else if (bytes.length >= 4 && u8(0) == 0xff && u8(1) == 0xd8) {
      // Markers from the one after SOI: standalone ones (RSTn, TEM, fill bytes) have no length;
      // the frame header comes before the first scan (SOS) or not at all.
      var i = 2
      while (i + 3 < bytes.length) {
        if (u8(i) != 0xff) return None
        val marker = u8(i + 1)
        if (marker == 0xff) {
          i += 1
        } else if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd8)) {
          i += 2
        } else if (marker == 0xd9 || marker == 0xda) {
          return None
        } else {
          val length = u16(i + 2)
          if (length < 2) return None
          val frame = marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 &&
            marker != 0xcc
          if (frame) {
            if (i + 8 >= bytes.length) return None
            val (height, width) = (u16(i + 5), u16(i + 7))
            return if (height > 0 && width > 0) Some((height, width)) else None
          }
          i += 2 + length
        }
      }
      None
    } else None
  }

  /** The whole of the file `path`; CortadoIOException naming it and `what` it is otherwise. */
  def readFile(path: Path, conf: Configuration, what: String): Array[Byte] =
    try HadoopFiles.readBytes(path.toString, conf)
    catch {
      case e: CortadoIOException =>
        throw new CortadoIOException(s"cannot read $what: ${e.getMessage}", e)
    }

  /** Throws CortadoIOException, naming `what` it is, when `path` does not exist. */
  def requireExists(path: String, conf: Configuration, what: String): Unit = {
    val exists =
      try {
        val p = new Path(path)
        p.getFileSystem(conf).exists(p)
      } catch {
        case e: IOException => throw new CortadoIOException(s"cannot read $what $path: $e", e)
        case e: IllegalArgumentException =>
          throw new CortadoIOException(s"$what '$path' is not a valid path: ${e.getMessage}", e)
      }
    if (!exists) throw new CortadoIOException(s"$what $path does not exist")
  }

  /** Throws CortadoIOException, naming `what` it is, when `path` exists. */
  def refuseExisting(path: String, conf: Configuration, what: String): Unit = {
    val p = new Path(path)
    if (p.getFileSystem(conf).exists(p)) {
      throw new CortadoIOException(
        s"$what $path already exists: remove it or name another (it is not overwritten)")
    }
  }

  /** `dir` under the output folder `output`, as CaffeOnSpark's tools name it; `output` if empty. */
  def under(output: String, dir: String): String =
    if (dir == null || dir.isEmpty) output
    else if (output.isEmpty || output.endsWith("/")) output + dir
    else s"$output/$dir"
}
