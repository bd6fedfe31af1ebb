// SPDX-License-Identifier: Apache-2.0
package io.cortado.storage

import java.io.{FileNotFoundException, IOException}
import java.util.UUID

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}
import org.apache.hadoop.io.IOUtils

import io.cortado.CortadoIOException

/**
 * Whole files through Hadoop's FileSystem API, so that any path Hadoop knows works (`file:`,
 * `hdfs:`, `s3a:`, or a plain path on the default file system). Errors are CortadoIOException
 * naming the path. Thread-safe.
 */
object HadoopFiles {

  /**
   * `file:relative/path` as `file:` and the absolute path against this JVM's working
   * directory (Hadoop's Path refuses a scheme with a relative path, with a URISyntaxException;
   * CaffeOnSpark's users wrote such paths); any other path as it is.
   */
  def absoluteLocal(path: String): String =
    if (path.startsWith("file:") && !path.startsWith("file:/")) {
      "file:" + java.nio.file.Paths.get(path.stripPrefix("file:")).toAbsolutePath.normalize
    } else path

  /** The whole file; a missing file or a read failure names the path. */
  def readBytes(path: String, conf: Configuration): Array[Byte] = {
    val p = new Path(path)
    try {
      val fs = p.getFileSystem(conf)
      val length = fs.getFileStatus(p).getLen
      if (length > Int.MaxValue - 8) {
        throw new CortadoIOException(s"$path: $length bytes do not fit a Java array")
      }
      val bytes = new Array[Byte](length.toInt)
      val in = fs.open(p)
      try IOUtils.readFully(in, bytes, 0, bytes.length)
      finally in.close()
      bytes
    } catch {
      case e: FileNotFoundException => throw new CortadoIOException(s"$path does not exist", e)
      case e: IOException => throw new CortadoIOException(s"cannot read $path: $e", e)
    }
  }

  /** The file's length in bytes; a missing file or a failed look-up names the path. */
  def length(path: String, conf: Configuration): Long = {
    val p = new Path(path)
    try p.getFileSystem(conf).getFileStatus(p).getLen
    catch {
      case e: FileNotFoundException => throw new CortadoIOException(s"$path does not exist", e)
      case e: IOException => throw new CortadoIOException(s"cannot look up $path: $e", e)
    }
  }

  /**
   * Writes `bytes` to `path` through a temporary file in the same directory renamed into place,
   * so that readers never see a partial file under the final name. An existing file is replaced.
   */
  def writeBytesAtomic(path: String, bytes: Array[Byte], conf: Configuration): Unit = {
    val target = new Path(path)
    val temp = new Path(target.getParent, s".${target.getName}.${UUID.randomUUID()}.tmp")
    try {
      val fs = target.getFileSystem(conf)
      val out = fs.create(temp, true)
      try out.write(bytes)
      finally out.close()
      if (fs.exists(target)) fs.delete(target, false)
      if (!fs.rename(temp, target)) {
        fs.delete(temp, false)
        throw new CortadoIOException(s"cannot rename $temp to $path")
      }
    } catch {
      case e: CortadoIOException => throw e
      case e: IOException => throw new CortadoIOException(s"cannot write $path: $e", e)
    }
  }

  /**
   * Runs `write` with a temporary path beside `path` (a hidden name, which Hadoop's and Spark's
   * readers skip) and renames it to `path` once `write` returns, so that `path` never holds
   * half an output (a file or a directory, such as a DataFrame's); the temporary path is removed
   * when `write` fails. An existing `path` fails before any work, with CortadoIOException
   * naming `what` it is and the path, and is never overwritten.
   */
  def writeAtomically(path: String, conf: Configuration, what: String)(
      write: String => Unit): Unit = {
    val target = new Path(path)
    val fs =
      try target.getFileSystem(conf)
      catch { case e: IOException => throw new CortadoIOException(s"$what $path: $e", e) }
    def refuse(): Unit = if (fs.exists(target)) {
      throw new CortadoIOException(s"$what $path already exists: remove it or name another")
    }
    refuse()
    val temp = new Path(target.getParent, s".${target.getName}.${UUID.randomUUID()}.tmp")
    try {
      write(temp.toString)
      refuse()
      if (!fs.rename(temp, target)) {
        throw new CortadoIOException(s"cannot rename $temp to $path ($what)")
      }
    } catch {
      case scala.util.control.NonFatal(e) =>
        try fs.delete(temp, true)
        catch { case scala.util.control.NonFatal(d) => e.addSuppressed(d) }
        throw e
    }
  }

  /**
   * Fails unless a file can be written at `path` (as writeBytesAtomic writes it): `path` is not
   * a directory and a file can be created, then deleted, beside it (creating its directory
   * when missing). Checked before long work whose result would otherwise be lost.
   */
  def checkWritable(path: String, conf: Configuration): Unit = {
    val target = new Path(path)
    try {
      val fs = target.getFileSystem(conf)
      if (fs.exists(target) && fs.getFileStatus(target).isDirectory) {
        throw new CortadoIOException(s"$path is a directory, not a file that can be written")
      }
      val probe = new Path(target.getParent, s".${target.getName}.${UUID.randomUUID()}.probe")
      fs.create(probe, true).close()
      fs.delete(probe, false)
    } catch {
      case e: CortadoIOException => throw e
      case e: IOException => throw new CortadoIOException(s"cannot write $path: $e", e)
    }
  }

  /** Deletes the file at `path` if there is one. */
  def delete(path: String, conf: Configuration): Unit = {
    val p = new Path(path)
    try p.getFileSystem(conf).delete(p, false)
    catch {
      case e: IOException => throw new CortadoIOException(s"cannot delete $path: $e", e)
    }
  }

  /** Deletes `path` and, when it is a directory, everything under it, if it exists. */
  def deleteTree(path: String, conf: Configuration): Unit = {
    val p = new Path(path)
    try p.getFileSystem(conf).delete(p, true)
    catch {
      case e: IOException => throw new CortadoIOException(s"cannot delete $path: $e", e)
    }
  }

  /** True when `path` exists. */
  def exists(path: String, conf: Configuration): Boolean = {
    val p = new Path(path)
    try p.getFileSystem(conf).exists(p)
    catch {
      case e: IOException => throw new CortadoIOException(s"cannot look up $path: $e", e)
    }
  }

  /** The names of the files directly in `dir` (none when it does not exist). */
  def listNames(dir: String, conf: Configuration): Seq[String] = {
    val p = new Path(dir)
    try {
      val fs: FileSystem = p.getFileSystem(conf)
      if (!fs.exists(p)) Seq.empty
      else fs.listStatus(p).toSeq.filter(_.isFile).map(_.getPath.getName)
    } catch {
      case e: IOException => throw new CortadoIOException(s"cannot list $dir: $e", e)
    }
  }
}
