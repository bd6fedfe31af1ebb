// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.{File, PrintStream}
import java.math.{BigDecimal, MathContext}

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.{SparkConf, SparkFiles}
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.types.{DoubleType, StringType, StructField, StructType}

import io.cortado.{CortadoConfigException, CortadoException, CortadoIOException}
import io.cortado.cli.Options
import io.cortado.jni.{NativeLib, SolverInfo}
import io.cortado.storage.HadoopFiles

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
 *    (`accuracy = 0.8912`) and, when `-output` is given, writes them there as CaffeOnSpark did:
 *    a text file of `name: value` lines (with `-testDataFrame`, a DataFrame of rows (metric,
 *    value) in `-outputFormat` instead);
 *  - `-features b1,b2` (with `-label`) writes the id and one array<float> column per blob for
 *    every row of the TEST data to `-output` in `-outputFormat` (json or parquet); it replaces
 *    `-test`, as in CaffeOnSpark;
 *  - `-exportOnnx path` (Cortado's own) writes `-model`, after training when `-train` is
 *    given, as an ONNX model to `path` ([[Cortado.exportOnnx]]), before any test or features.
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
      |CoSData layer). A local LMDB path (file:/... or a plain path) must exist on every
      |executor; one on another file system (hdfs:) is copied to every node. Data layers
      |(LMDB, LevelDB) are not read: use such a MemoryData layer, or `cortado train`.
      |Training runs on -clusterSize workers, one Spark task each in one barrier stage (rank =
      |partition id), each on its own partition of the training data and -devices devices (the
      |GPUs Spark assigned the task, else the first N GPUs when the solver asks for a GPU, else
      |CPU replicas); gradients go between workers through -connection (ethernet: tcp;
      |infiniband: ucx over RDMA, which every host must have unless -connectionFallback
      |ethernet lets ucx run over TCP) or -comm (mpi: OpenMPI, which needs ompi-server).
      |-persistent is accepted and ignored (the tasks keep their data in memory).""".stripMargin

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
    if (inYarnApplicationMaster) {
      // YARN's application master runs this main in a thread and reports the application's
      // status from how it ends: returning is success, an exception failure; System.exit (even
      // with 0) reports FAILED ("Shutdown hook called before final status was reported"). The
      // application master ends its JVM itself.
      if (code != 0) {
        throw new IllegalStateException(s"CortadoOnSpark failed (exit status $code); its " +
          "messages are above, in the driver's stderr")
      }
    } else {
      // Always exit: Spark 3.5 before 3.5.6 leaves a non-daemon timer thread behind once a
      // barrier stage (training on several workers) has run (SPARK-51450), and the driver JVM
      // would not end after stop().
      sys.exit(code)
    }
  }

  /**
   * Whether this JVM is the driver of a YARN cluster-mode application (the application master
   * sets Spark's configuration as system properties before it calls main).
   */
  private def inYarnApplicationMaster: Boolean =
    sys.props.get("spark.master").contains("yarn") &&
      sys.props.get("spark.submit.deployMode").contains("cluster")

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
        options.warnings.foreach(w => err.println(s"CortadoOnSpark: warning: $w"))
        try {
          execute(options, args, spark(), out, err)
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

  /**
   * Whether -output was on the command line: -test writes its results only then (CaffeOnSpark
   * wrote a file named `output` in the driver's working directory without it).
   */
  private def outputGiven(args: Seq[String]): Boolean =
    args.exists(a => a == "-output" || a == "--output")

  private def execute(given: Options, args: Seq[String], spark: SparkSession,
      out: PrintStream, err: PrintStream): Unit = {
    val o = given.copy(conf = shippedFile(given.conf))
    if (o.persistent) {
      err.println("CortadoOnSpark: note: -persistent is ignored: the training task keeps its " +
        "data in memory")
    }
    o.toolFlags.foreach { case (name, _) =>
      err.println(s"CortadoOnSpark: note: -$name is a flag of CaffeOnSpark's conversion tools " +
        "(Binary2DataFrame, Binary2Sequence, CocoDataSetConverter), not of training; ignored")
    }
    val hadoopConf = spark.sparkContext.hadoopConfiguration
    val cortado = new Cortado(spark)
    // The solver, read once for what the command line decides from it.
    lazy val solver = NativeLib.solverInfo(JobPlan.readText(o.conf, hadoopConf), o.conf)
    val config = {
      val c = withTimeouts(Config.fromOptions(o), spark.sparkContext.getConf)
      if (o.train) {
        c.copy(snapshotPrefix = snapshotsBesideModel(o.conf, solver.snapshotPrefix, o.model))
      } else c
    }
    // Both sources are checked before any work, so that a bad -test source fails before
    // a long training run rather than after it.
    val trainSource = if (o.train) Some(DataSource.of(o.conf, "TRAIN", hadoopConf)) else None
    // An existing -exportOnnx path fails now rather than after a long training run.
    if (o.exportOnnx.nonEmpty && HadoopFiles.exists(HadoopFiles.absoluteLocal(o.exportOnnx),
        hadoopConf)) {
      throw new CortadoIOException(
        s"-exportOnnx ${o.exportOnnx} already exists: remove it or name another")
    }
    val testSource =
      if (o.runTest || o.extractFeatures) Some(DataSource.of(o.conf, "TEST", hadoopConf)) else None
    def load(source: DataSource) = source match {
      case l: LmdbDataSource if o.lmdbPartitions > 0 =>
        LmdbSource.load(spark, l.source, l.dataColumn, l.labelColumn,
          partitions = o.lmdbPartitions, owner = l.owner)
      case i: ImageSource => i.copy(images = config.imageOptions).load(spark)
      case c: ClassSource =>
        io.cortado.caffeonspark.DataSource.applicationData(spark, args, c.phase == "TRAIN")
      case other => other.load(spark)
    }

    trainSource.foreach { source =>
      validationSource(o, solver, testSource, hadoopConf, err) match {
        case Some(validation) =>
          // As CaffeOnSpark's main: a solver that tests (test_interval and test_iter set)
          // trains with validation on the TEST net's data.
          val passes = cortado.trainWithValidation(load(source),
            load(validation), config).collect()
          out.println(s"Model written to ${o.model}")
          passes.lastOption.foreach { last =>
            val metrics = last.schema.fieldNames.drop(1).map { name =>
              s"$name = ${caffeFormat(last.getAs[Double](name))}"
            }
            out.println(s"Tested ${passes.length} time${if (passes.length == 1) "" else "s"} " +
              s"during training; at iteration ${last.getInt(0)}: ${metrics.mkString(", ")}")
          }
        case None =>
          val model = cortado.train(load(source), config)
          out.println(s"Model written to $model")
      }
    }
    if (o.exportOnnx.nonEmpty) {
      cortado.exportOnnx(config, o.exportOnnx)
      out.println(s"ONNX model written to ${o.exportOnnx}")
    }
    testSource.foreach { source =>
      val data = load(source)
      if (o.extractFeatures) {
        val features = cortado.features(data, o.featureBlobs, config)
        // CaffeOnSpark's columns: SampleID (a string: the id column's value, or the row's
        // number), then the blobs.
        val columns = col(config.idColumn).cast(StringType).as(SampleIdColumn) +:
          o.featureBlobs.map(col)
        writeOutput(o.output, hadoopConf) {
          features.select(columns: _*).write.format(o.outputFormat).save(o.output)
        }
        out.println(s"Features ${o.featureBlobs.mkString(", ")} written to ${o.output}")
      } else {
        val metrics = cortado.test(data, config).toSeq.sortBy(_._1)
        metrics.foreach { case (name, value) => out.println(s"$name = ${caffeFormat(value)}") }
        if (outputGiven(args)) {
          if (o.testDataFrame) {
            val schema = StructType(Seq(StructField("metric", StringType, nullable = false),
              StructField("value", DoubleType, nullable = false)))
            val rows = metrics.map { case (k, v) => Row(k, v) }
            writeOutput(o.output, hadoopConf) {
              spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), schema)
                .write.format(o.outputFormat).save(o.output)
            }
          } else {
            HadoopFiles.writeBytesAtomic(o.output, testResultText(metrics), hadoopConf)
          }
          out.println(s"Test results written to ${o.output}")
        }
      }
    }
  }

  /**
   * Where the snapshots go, as CaffeOnSpark put them: the solver's snapshot_prefix (or, when
   * unset, the solver file's name without extension) in -model's directory, so that a job's
   * snapshots land beside its model on HDFS rather than in the driver's working directory. An
   * absolute prefix (or a URI) stays as written; empty (the solver's own) when -model names no
   * directory. Also used by io.cortado.caffeonspark.Config.
   *
   * @param solverFile the solver prototxt (-conf)
   * @param given      its snapshot_prefix as written (empty when unset)
   * @param model      where the trained model goes (-model)
   */
  private[cortado] def snapshotsBesideModel(solverFile: String, given: String,
      model: String): String = {
    val dir = Option(new Path(model).getParent)
    val absolute = given.startsWith("/") || given.matches("^[A-Za-z][A-Za-z0-9+.-]*:.*")
    if (dir.isEmpty || absolute) ""
    else {
      val name =
        if (given.nonEmpty) given
        else new Path(solverFile).getName.replaceFirst("\\.[^.]*$", "")
      s"${dir.get.toString.stripSuffix("/")}/$name"
    }
  }

  /** [[snapshotsBesideModel]] for the solver at `solverFile`, read with `conf`. */
  private[cortado] def snapshotsBesideModel(solverFile: String, model: String,
      conf: Configuration): String =
    snapshotsBesideModel(solverFile,
      NativeLib.solverInfo(JobPlan.readText(solverFile, conf), solverFile).snapshotPrefix, model)

  /**
   * A solver named as CaffeOnSpark's users name it on YARN: shipped with `--files` and given to
   * `-conf` by its bare name. A relative path without a scheme that is a file in the driver's
   * working directory (where YARN puts the `--files` of a cluster-mode driver, and where a
   * client-mode user stands) or among the files Spark fetched for this application
   * (SparkFiles) is that local file, as `file:` and its absolute path; the net it names by a
   * relative path is then read from the same directory. Any other path is a Hadoop path, as
   * before (a relative one on the default file system, e.g. HDFS).
   */
  private[cortado] def shippedFile(path: String): String = {
    val relative = path.nonEmpty && !path.startsWith("/") &&
      !path.matches("^[A-Za-z][A-Za-z0-9+.-]*:.*")
    if (!relative) path
    else {
      val candidates = Iterator(new File(path)) ++
        scala.util.Try(new File(SparkFiles.get(path))).toOption.iterator
      candidates.find(_.isFile).map(f => "file:" + f.getAbsolutePath).getOrElse(path)
    }
  }

  /** The Spark settings of the command line's timeouts (seconds). */
  val StartTimeoutKey = "spark.cortado.startTimeout"
  val CommTimeoutKey = "spark.cortado.commTimeout"
  val ElasticTimeoutKey = "spark.cortado.elasticTimeout"
  val ElasticGrowKey = "spark.cortado.elasticGrow"

  /**
   * `config` with the timeouts the Spark configuration sets (CaffeOnSpark's command line has no
   * flags for them): spark.cortado.startTimeout (how long the driver waits for the workers'
   * task slots and the workers for each other) and spark.cortado.commTimeout (a gradient
   * exchange fails when no byte moved for this long), in seconds.
   */
  private[cortado] def withTimeouts(config: Config, conf: SparkConf): Config = {
    def seconds(key: String, default: Double): Double = conf.getOption(key).map { text =>
      val value = scala.util.Try(text.trim.stripSuffix("s").toDouble).getOrElse(Double.NaN)
      if (!(value > 0) || value.isInfinite) {
        throw new CortadoConfigException(s"$key='$text' is not a number of seconds above 0")
      }
      value
    }.getOrElse(default)
    config.copy(startTimeoutSeconds = seconds(StartTimeoutKey, config.startTimeoutSeconds),
      commTimeoutSeconds = seconds(CommTimeoutKey, config.commTimeoutSeconds),
      elasticTimeoutSeconds = seconds(ElasticTimeoutKey, config.elasticTimeoutSeconds),
      elasticGrowSeconds = seconds(ElasticGrowKey, config.elasticGrowSeconds))
  }

  /** The id column of the features CortadoOnSpark writes, named as CaffeOnSpark names it. */
  val SampleIdColumn = "SampleID"

  /**
   * The TEST net's data source when the solver tests during training (test_interval and
   * test_iter(0) greater than 0, CaffeOnSpark's rule for training with validation): `known`
   * when the command line already found it, else found now; None when the solver does not
   * test, or when the TEST net has no data source (said on `err`).
   */
  private def validationSource(o: Options, info: SolverInfo, known: Option[DataSource],
      conf: Configuration, err: PrintStream): Option[DataSource] = {
    val tests = info.testInterval > 0 && info.testIter.headOption.exists(_ > 0)
    if (!tests) None
    else if (known.isDefined) known
    else {
      try Some(DataSource.of(o.conf, "TEST", conf))
      catch {
        case e: CortadoConfigException =>
          err.println(s"CortadoOnSpark: note: the solver sets test_interval and test_iter, but " +
            s"training runs without validation: ${e.getMessage}")
          None
      }
    }
  }

  /**
   * Runs `write`, which writes `path`; when it fails, what it left at `path` (Spark leaves a
   * directory behind) is removed if `path` did not exist before, so that a re-run can write it.
   */
  private def writeOutput(path: String, conf: Configuration)(write: => Unit): Unit = {
    val existed = HadoopFiles.exists(path, conf)
    try write
    catch {
      case NonFatal(e) =>
        if (!existed) {
          try HadoopFiles.deleteTree(path, conf)
          catch { case NonFatal(d) => e.addSuppressed(d) }
        }
        throw e
    }
  }

  /**
   * Test results as CaffeOnSpark's main class wrote them: one `name: value` line per output
   * (its values, comma-separated, were the output's mean; one value per scalar output here).
   */
  def testResultText(metrics: Seq[(String, Double)]): Array[Byte] =
    metrics.map { case (name, value) => s"$name: $value\n" }.mkString
      .getBytes(java.nio.charset.StandardCharsets.UTF_8)

  /** A value as Caffe's log prints a float: six significant digits, no trailing zeros. */
  def caffeFormat(value: Double): String =
    if (value.isNaN || value.isInfinite) value.toString
    else if (value == 0.0) "0"
    else new BigDecimal(value).round(new MathContext(6)).stripTrailingZeros().toPlainString
}
