// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.PrintStream
import java.math.{BigDecimal, MathContext}

import scala.util.control.NonFatal

import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.sql.types.{DoubleType, StringType, StructField, StructType}

import io.cortado.CortadoException
import io.cortado.cli.Options

/**
 * The jar's main class, taking CaffeOnSpark's command line so that its `spark-submit` lines keep
 * working:
 *
 * {{{
 * spark-submit --master local[2] --class io.cortado.spark.CortadoOnSpark cortado.jar \
 *   -train -test -conf lenet_solver.prototxt -model file:/tmp/lenet.caffemodel -output out
 * }}}
 *
 *  - `-train` trains on the TRAIN net's data and writes `-model`;
 *  - `-test` tests `-model` on the TEST net's data, prints each metric as Caffe does
 *    (`accuracy = 0.8912`) and, when `-output` is given, writes them there as rows (metric,
 *    value) in `-outputFormat`;
 *  - `-features b1,b2` (with `-label`) writes the id and one array<float> column per blob for
 *    every row of the TEST data to `-output` in `-outputFormat` (json or parquet); it replaces
 *    `-test`, as in CaffeOnSpark.
 *
 * The data of a phase is what its feed layer names (see [[DataSource]]): the DataFrame of a
 * CoSData layer's `cos_data_param.source`, or the LMDB database of a MemoryData (or CoSData)
 * layer with `source_class: "com.yahoo.ml.caffe.LMDB"` (`memory_data_param.source`), read in
 * parallel by the executors from a local path (see [[LmdbSource]]). Exit status: 0 on success,
 * 2 for a bad command line (the usage is printed), 1 when the work fails.
 */
object CortadoOnSpark {

  val UsageExit = 2
  val FailureExit = 1

  /** What the command line says about what is not supported; printed with the usage. */
  val Notes: String =
    """Data: each phase reads the DataFrame named by its CoSData layer's cos_data_param.source
      |(format: cos_data_param.dataframe_format, default parquet; source_class DataFrameSource,
      |ImageDataFrame or none), or the LMDB database of a MemoryData layer with source_class
      |"com.yahoo.ml.caffe.LMDB" (memory_data_param.source; also cos_data_param.source on a
      |CoSData layer). An LMDB path is local (file:/... or a plain path) and must exist on every
      |executor; HDFS is refused. Data layers (LMDB, LevelDB) are not read: use such a MemoryData
      |layer, or `cortado train`.
      |Training runs on -clusterSize workers, one Spark task each in one barrier stage (rank =
      |partition id), each on its own partition of the training data and -devices devices (the
      |GPUs Spark assigned the task, else the first N GPUs when the solver asks for a GPU, else
      |CPU replicas); gradients go between workers through -connection (ethernet: tcp;
      |infiniband: ucx over RDMA, which every host must have unless -connectionFallback
      |ethernet lets ucx run over TCP) or -comm (mpi: OpenMPI, which needs ompi-server).
      |-persistent is accepted and ignored (the tasks keep their data in memory); -resize is
      |accepted and ignored (image columns must already have the layer's shape).""".stripMargin

  def main(args: Array[String]): Unit = {
    var session: SparkSession = null
    val code =
      try {
        run(args.toSeq, () => {
          session = SparkSession.builder().appName("CortadoOnSpark").getOrCreate()
          session
        }, System.out, System.err)
      } finally {
        if (session != null) session.stop()
      }
    // Always exit: Spark 3.5 before 3.5.6 leaves a non-daemon timer thread behind once a barrier
    // stage (training on several workers) has run (SPARK-51450), and the driver JVM would not
    // end after stop().
    sys.exit(code)
  }

  /**
   * Parses `args` and does what they say with the SparkSession `spark` gives (called only once
   * the command line is valid). Returns the exit status; writes results to `out`, problems to
   * `err`.
   */
  def run(args: Seq[String], spark: () => SparkSession, out: PrintStream,
      err: PrintStream): Int =
    Options.parse(args) match {
      case Left(message) =>
        err.println(s"CortadoOnSpark: $message")
        err.println(Options.Usage)
        err.println(Notes)
        UsageExit
      case Right(options) =>
        try {
          execute(options, outputGiven(args), spark(), out, err)
          0
        } catch {
          case NonFatal(e) if cortadoCause(e).isDefined =>
            // A task's CortadoException reaches the driver inside a SparkException: its own
            // message says what is wrong.
            err.println(s"CortadoOnSpark: ${cortadoCause(e).get.getMessage}")
            FailureExit
          case NonFatal(e) =>
            err.println(s"CortadoOnSpark: $e")
            e.printStackTrace(err)
            FailureExit
        }
    }

  private def cortadoCause(e: Throwable): Option[Throwable] =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).take(16)
      .collectFirst { case c: CortadoException => c }

  /** Whether -output was on the command line (its default only applies to -features). */
  private def outputGiven(args: Seq[String]): Boolean =
    args.exists(a => a == "-output" || a == "--output")

  private def execute(o: Options, outputGiven: Boolean, spark: SparkSession, out: PrintStream,
      err: PrintStream): Unit = {
    if (o.persistent) {
      err.println("CortadoOnSpark: note: -persistent is ignored: the training task keeps its " +
        "data in memory")
    }
    if (o.resize) {
      err.println("CortadoOnSpark: note: -resize is ignored: image columns must already have " +
        "the data layer's shape")
    }
    val hadoopConf = spark.sparkContext.hadoopConfiguration
    val cortado = new Cortado(spark)
    val config = Config.fromOptions(o)
    // Both sources are checked before any work, so that a bad -test source fails before
    // a long training run rather than after it.
    val trainSource = if (o.train) Some(DataSource.of(o.conf, "TRAIN", hadoopConf)) else None
    val testSource =
      if (o.runTest || o.extractFeatures) Some(DataSource.of(o.conf, "TEST", hadoopConf)) else None

    trainSource.foreach { source =>
      val model = cortado.train(source.load(spark), config)
      out.println(s"Model written to $model")
    }
    testSource.foreach { source =>
      val data = source.load(spark)
      if (o.extractFeatures) {
        cortado.features(data, o.featureBlobs, config)
          .write.format(o.outputFormat).save(o.output)
        out.println(s"Features ${o.featureBlobs.mkString(", ")} written to ${o.output}")
      } else {
        val metrics = cortado.test(data, config).toSeq.sortBy(_._1)
        metrics.foreach { case (name, value) => out.println(s"$name = ${caffeFormat(value)}") }
        if (outputGiven) {
          val schema = StructType(Seq(StructField("metric", StringType, nullable = false),
            StructField("value", DoubleType, nullable = false)))
          val rows = metrics.map { case (k, v) => Row(k, v) }
          spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), schema)
            .write.format(o.outputFormat).save(o.output)
          out.println(s"Test results written to ${o.output}")
        }
      }
    }
  }

  /** A value as Caffe's log prints a float: six significant digits, no trailing zeros. */
  def caffeFormat(value: Double): String =
    if (value.isNaN || value.isInfinite) value.toString
    else if (value == 0.0) "0"
    else new BigDecimal(value).round(new MathContext(6)).stripTrailingZeros().toPlainString
}
