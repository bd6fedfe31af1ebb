// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import java.io.IOException
import java.util.UUID

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileUtil, Path}

import io.cortado.CortadoIOException

/**
 * CaffeOnSpark's `FSUtils`: files copied between the local file system and any Hadoop path.
 * Paths are resolved with Hadoop's default configuration, as CaffeOnSpark's were. A copy is
 * written to a temporary name beside the destination and renamed into place, so that an
 * existing file is never left half-written; errors are CortadoIOException naming the paths.
 *
 * CaffeOnSpark's `GenModelOrState`, which snapshots a `com.yahoo.ml.jcaffe.CaffeNet`, is not
 * here: Cortado does not have CaffeOnSpark's low-level net API (jcaffe); training writes the
 * model and snapshots itself (see docs/caffeonspark.md).
 */
object FSUtils {

  /** The prefix of a local path as CaffeOnSpark's flags give it. */
  val localfsPrefix: String = "file:"

  /** The prefix of an HDFS path. */
  val hdfsPrefix: String = "hdfs:"

  /** Copies the local file `localFilePath` (a plain path) to `hdfsPath`, replacing it. */
  def CopyFileToHDFS(localFilePath: String, hdfsPath: String): Unit =
    copy(new Path("file://" + localFilePath), new Path(hdfsPath))

  /** Copies `hdfsPath` to the local file `localFilePath` (a plain path), replacing it. */
  def CopyFileToLocal(hdfsPath: String, localFilePath: String): Unit =
    copy(new Path(hdfsPath), new Path("file://" + localFilePath))

  /**
   * A local file holding `fileName`: its own path when it starts with `file:`, else a copy of
   * it made as `tmpFileName` in the working directory (with `.h5` appended when `fileName` ends
   * in `.h5`, as Caffe tells the formats apart by the name); "" for a name of 3 characters or
   * fewer, as CaffeOnSpark.
   */
  def GetLocalFileName(fileName: String, tmpFileName: String): String = {
    if (fileName.startsWith(localfsPrefix)) fileName.substring(localfsPrefix.length)
    else if (fileName.length > 3) {
      val local = System.getProperty("user.dir") + "/" + tmpFileName +
        (if (fileName.endsWith(".h5")) ".h5" else "")
      CopyFileToLocal(fileName, local)
      local
    } else ""
  }

  private def copy(from: Path, to: Path): Unit = {
    val conf = new Configuration()
    val temp = new Path(to.getParent, s".${to.getName}.${UUID.randomUUID()}.tmp")
    try {
      val src = from.getFileSystem(conf)
      val dst = to.getFileSystem(conf)
      if (!src.getFileStatus(from).isFile) {
        throw new CortadoIOException(s"cannot copy $from to $to: $from is not a file")
      }
      if (!FileUtil.copy(src, from, dst, temp, false, true, conf)) {
        throw new CortadoIOException(s"cannot copy $from to $to")
      }
      if (dst.exists(to)) dst.delete(to, true)
      if (!dst.rename(temp, to)) {
        dst.delete(temp, false)
        throw new CortadoIOException(s"cannot rename $temp to $to")
      }
    } catch {
      case e: CortadoIOException => throw e
      case e: java.io.FileNotFoundException =>
        throw new CortadoIOException(s"cannot copy $from to $to: ${e.getMessage}", e)
      case e: IOException => throw new CortadoIOException(s"cannot copy $from to $to: $e", e)
    }
  }
}
