// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.tools

import java.io.{FileNotFoundException, IOException, PrintStream}

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession

import io.cortado.{CortadoConfigException, CortadoException, CortadoIOException}
import io.cortado.caffeonspark.{Config, DataSource, LmdbRDD}
import io.cortado.storage.HadoopFiles

/**
 * What the conversion tools share: their main (a SparkSession, CaffeOnSpark's command line read
 * by [[io.cortado.caffeonspark.Config]], an exit status), the checks of their inputs, and an
 * output written under a temporary name and renamed into place.
 */
private[caffeonspark] object Tool {

  val UsageExit = 2
  val FailureExit = 1

  /** The session on `sc` (the active or default one, else one made on it). */
  def session(sc: SparkContext): SparkSession = DataSource.session(sc)

  /**
   * Runs the tool `name` on `args` with the session `spark` gives: `body` does the work with the
   * session's SparkContext and the parsed Config. Returns the exit status: 0, [[UsageExit]] for
   * a bad command line (the message and `usage` on `err`), [[FailureExit]] for a failure (its
   * message on `err`: a task's Cortado exception, unwrapped from Spark's).
   */
  def run(name: String, usage: String, args: Seq[String], spark: () => SparkSession,
      err: PrintStream)(body: (SparkContext, Config) => Unit): Int = {
    try {
      val sc = spark().sparkContext
      val conf =
        try new Config(sc, args.toArray)
        catch {
          case e: IllegalArgumentException =>
            err.println(s"$name: ${e.getMessage}")
            err.println(usage)
            return UsageExit
        }
      body(sc, conf)
      0
    } catch {
      case e: UsageException =>
        err.println(s"$name: ${e.getMessage}")
        err.println(usage)
        UsageExit
      case NonFatal(e) if cortadoCause(e).isDefined =>
        err.println(s"$name: ${cortadoCause(e).get.getMessage}")
        FailureExit
      case NonFatal(e) =>
        err.println(s"$name: $e")
        e.printStackTrace(err)
        FailureExit
    }
  }

  /**
   * A tool's `main`: [[run]] with a session made for it, stopped afterwards; a failure ends the
   * JVM with its status (in a YARN application master, where ending the JVM reports a failed
   * application in any case, it throws instead).
   */
  def main(name: String, usage: String, args: Array[String])(
      body: (SparkContext, Config) => Unit): Unit = {
    var session: SparkSession = null
    val code =
      try {
        run(name, usage, args.toSeq, () => {
          session = SparkSession.builder().appName(name).getOrCreate()
          session
        }, System.err)(body)
      } finally {
        if (session != null) session.stop()
      }
    if (code != 0) {
      val yarnCluster = sys.props.get("spark.master").contains("yarn") &&
        sys.props.get("spark.submit.deployMode").contains("cluster")
      if (yarnCluster) throw new IllegalStateException(s"$name failed (exit status $code)")
      sys.exit(code)
    }
  }

  /** A command line that lacks what the tool needs. */
  final class UsageException(message: String) extends IllegalArgumentException(message)

  /**
   * The records of the LMDB database `-imageRoot` names, in `-lmdb_partitions` partitions, with
   * `-output` given; the database is opened now, so a missing one fails before any output.
   */
  def lmdbRecords(sc: SparkContext, conf: Config): LmdbRDD = {
    val rdd = new LmdbRDD(sc, required("imageRoot", conf.imageRoot), conf.lmdb_partitions)
    required("output", conf.outputPath)
    rdd.partitions
    rdd
  }

  /** `value` (a flag's), failing with a UsageException naming `-flag` when null or empty. */
  def required(flag: String, value: String): String = {
    if (value == null || value.isEmpty) throw new UsageException(s"-$flag must be given")
    value
  }

  /**
   * Fails with CortadoIOException unless `path` exists (a directory when `directory`, else a
   * file), naming `-flag` and the path.
   */
  def checkExists(sc: SparkContext, flag: String, path: String, directory: Boolean): Unit = {
    val p = new Path(HadoopFiles.absoluteLocal(path))
    val kind = if (directory) "a directory" else "a file"
    try {
      val status = p.getFileSystem(sc.hadoopConfiguration).getFileStatus(p)
      if (status.isDirectory != directory) {
        throw new CortadoIOException(s"-$flag $path is not $kind")
      }
    } catch {
      case _: FileNotFoundException =>
        throw new CortadoIOException(s"-$flag $path does not exist")
      case e: IOException => throw new CortadoIOException(s"-$flag $path: cannot look it up: $e", e)
    }
  }

  /**
   * Writes the output `output` with `save`, given a path to write to: a temporary name beside
   * `output` (a hidden directory), renamed to `output` once `save` returns, so that `output`
   * never holds half an output; removed when `save` fails. An existing `output` fails with
   * CortadoIOException naming it, before any work.
   */
  def writeOutput(sc: SparkContext, output: String)(save: String => Unit): Unit =
    HadoopFiles.writeAtomically(HadoopFiles.absoluteLocal(output), sc.hadoopConfiguration,
      "-output")(save)

  /** The first CortadoException in `e`'s causes (a task's reaches the driver wrapped). */
  def cortadoCause(e: Throwable): Option[Throwable] =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).take(16)
      .collectFirst { case c: CortadoException => c }

  /**
   * Checks the inputs of the image-folder tools: -imageRoot and -labelFile given, the root a
   * directory and the label file a file. Throws UsageException for a missing flag,
   * CortadoIOException naming a missing path.
   */
  def checkImageFolder(sc: SparkContext, conf: Config): Unit = {
    checkExists(sc, "imageRoot", required("imageRoot", conf.imageRoot), directory = true)
    checkExists(sc, "labelFile", required("labelFile", conf.labelFile), directory = false)
  }

  /** Fails with CortadoConfigException when the label file has no lines but blank ones. */
  def checkLabels(sc: SparkContext, labelFile: String): Unit =
    if (sc.textFile(HadoopFiles.absoluteLocal(labelFile)).filter(_.trim.nonEmpty).isEmpty()) {
      throw new CortadoConfigException(s"-labelFile $labelFile names no images")
    }
}
