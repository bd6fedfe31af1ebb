// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.IOException
import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.StandardCharsets
import java.util.concurrent.atomic.AtomicBoolean

import scala.collection.JavaConverters._
import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path
import org.apache.spark.{TaskContext, TaskKilledException}
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.types._
import org.slf4j.LoggerFactory

import io.cortado.{CortadoCommException, CortadoConfigException, CortadoIOException}
import io.cortado.api.SolverSnapshot
import io.cortado.data.{BatchFeeder, RowConverter, TopSpec}
import io.cortado.jni.{NativeFeed, NativeLib, NativeNet, NativeSolver}
import io.cortado.storage.{HadoopFiles, SerializableConfiguration, Snapshots}

/**
 * Training, testing and feature extraction on DataFrames, as CaffeOnSpark's `CaffeOnSpark`
 * class offers them. Each call first reads and validates the solver and net in the driver
 * through JNI (a bad prototxt throws CortadoConfigException naming file:line before any Spark
 * job starts) and checks the DataFrame's columns against the feed layer's tops, then runs one
 * Spark job of one task that does the work natively.
 *
 * Data: the net's feed layer (a `CoSData` layer, or `MemoryData` with `source_class`) of the
 * phase at hand reads each top from the column of the same name: cos_data_param's top names
 * for CoSData, the layer's top names for MemoryData. See [[RowConverter]] for the column types.
 *
 * So far one task on one device trains (the DataFrame is repartitioned to one partition);
 * the test nets run during training only in [[trainWithValidation]]. Snapshots are written by
 * the task to a Hadoop path (see [[Config]]: snapshotPrefix, snapshotInterval, resumeLatest).
 * The training log reaches the driver while the task runs (see [[addProgressListener]]).
 */
final class Cortado(@transient val spark: SparkSession) {
  import Cortado._

  private def hadoopConf = spark.sparkContext.hadoopConfiguration

  @transient private val listeners =
    new java.util.concurrent.CopyOnWriteArrayList[ProgressListener]()

  /**
   * Adds a listener that receives every training event of this instance's training runs
   * (iterations with loss, learning rate and speed; test passes; snapshots) while the
   * training task runs. The same events are logged in Caffe's format by this class's logger.
   */
  def addProgressListener(listener: ProgressListener): Unit = listeners.add(listener)

  def removeProgressListener(listener: ProgressListener): Unit = listeners.remove(listener)

  /**
   * Trains the solver's net on `source` for the solver's max_iter iterations (cycling through
   * the data as often as needed), writes the model to `config.model` (a temporary name, then
   * renamed) and returns that path. The training log (every `display` iterations Caffe's
   * `Iteration N (X iter/s, Ys/D iters, Z images/s), loss = L` and `Iteration N, lr = R`, and
   * the snapshots written) goes to this class's logger in the driver as the task runs, and to
   * the progress listeners. The test nets do not run (see [[trainWithValidation]]).
   *
   * Every `snapshot` iterations (the solver's, or Config.snapshotInterval) the task writes a
   * snapshot under the snapshot prefix through [[Snapshots]] (model, then state, each to a
   * temporary name renamed into place), and with the solver's `snapshot_after_train` (default
   * true) one at the end when max_iter is not a multiple of the interval. A run resumed from
   * a snapshot (Config.snapshot, or Config.resumeLatest) continues at its iteration.
   */
  def train(source: DataFrame, config: Config): String =
    runTraining(source, None, config)._1

  /**
   * [[train]], testing on `validation` as Caffe tests during training: every `test_interval`
   * iterations of the solver (and at the start with `test_initialization`, Caffe's default),
   * the TEST net runs `test_iter` batches of the validation rows (cycling through them) with
   * the current weights. Each pass is logged as Caffe logs it (`Test net output #0: accuracy =
   * Y`) and sent to the progress listeners. The TEST net's feed layer reads `validation` as
   * [[test]] would. Writes the model to `config.model`, as [[train]], and returns the test
   * passes as a DataFrame: `iteration` (int) and one double column per TEST net output, named
   * after it (`accuracy`, `loss`), one row per pass.
   */
  def trainWithValidation(source: DataFrame, validation: DataFrame, config: Config): DataFrame = {
    val (_, tests) = runTraining(source, Some(validation), config)
    val names = tests.headOption.map(_.outputs.map(_._1)).getOrElse(Seq.empty)
    val schema = StructType(StructField("iteration", IntegerType, nullable = false) +:
      names.map(StructField(_, DoubleType, nullable = false)))
    val rows = tests.map(t => Row.fromSeq(t.iteration +: t.outputs.map(_._2)))
    spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), schema)
  }

  private def runTraining(source: DataFrame, validation: Option[DataFrame], config: Config)
      : (String, Seq[TestEvent]) = {
    require(config.model.nonEmpty, "Config.model: where the trained model goes is required")
    val plan = makePlan(config, NativeNet.TRAIN, source.schema, validation.map(_.schema))
    val interval =
      if (config.snapshotInterval >= 0) config.snapshotInterval else plan.solver.int("snapshot", 0)
    lazy val prefix = snapshotPrefix(config, plan.solver)
    val resume = resumeFrom(config, prefix)
    val snapshots =
      if (interval <= 0) None
      else {
        Some(SnapshotPlan(prefix, interval, plan.solver.bool("snapshot_after_train", default = true),
          new SerializableConfiguration(hadoopConf)))
      }
    val conf = plan.netConf
    val converter = plan.converter
    val testing = plan.validation
    val trainRows = selectColumns(source, plan.specs, None).rdd.map(r => (0, r))
    val data = (validation, testing) match {
      case (Some(df), Some(t)) => trainRows.union(selectColumns(df, t.specs, None).rdd.map((1, _)))
      case _ => trainRows
    }
    val listening = listeners.asScala.toList
    val server = Progress.Server.start(spark.sparkContext.getConf, deliver(listening))
    val result =
      try {
        val address = server.address
        onePartition(data)
          .mapPartitions { rows =>
            Iterator.single(trainTask(conf, converter, testing, resume, snapshots, address, rows))
          }
          .collect()
          .head
      } finally server.close()
    if (result.unsent.nonEmpty) {
      log.warn(s"${result.unsent.size} training log events did not reach the driver while " +
        "the task ran; here they are")
    }
    result.unsent.foreach(deliver(listening))
    HadoopFiles.writeBytesAtomic(config.model, result.model, hadoopConf)
    (config.model, result.tests)
  }

  /** Logs an event in Caffe's format and hands it to the listeners. */
  private def deliver(listening: Seq[ProgressListener])(event: TrainingEvent): Unit = {
    event.logLines.foreach(line => log.info(line))
    listening.foreach { l =>
      try l.onProgress(event)
      catch { case NonFatal(e) => log.warn(s"a progress listener failed: $e") }
    }
  }

  /** Trains with the solver at `solverFile` and writes the model to `model` (see above). */
  def train(source: DataFrame, solverFile: String, model: String): String =
    train(source, Config(solverFile, model = model))

  /**
   * Runs the TEST net with the weights of `config.model` over the whole batches of `source`
   * and returns the mean of each net output over them ("accuracy", "loss"; a blob of several
   * values gives "name[i]" for each).
   */
  def test(source: DataFrame, config: Config): Map[String, Double] = {
    require(config.model.nonEmpty, "Config.model: the model to test is required")
    val plan = makePlan(config, NativeNet.TEST, source.schema)
    val outputs = plan.outputs
    val model = HadoopFiles.readBytes(config.model, hadoopConf)
    val conf = plan.netConf
    val data = selectColumns(source, plan.specs, None)
    val sums = onePartition(data)
      .mapPartitions(rows => Iterator.single(testTask(conf, plan.converter, model, outputs, rows)))
      .collect()
      .head
    sums.toMap
  }

  /** [[test]] for Java. */
  def testAsJava(source: DataFrame, config: Config): java.util.Map[String, java.lang.Double] =
    test(source, config).map { case (k, v) => k -> java.lang.Double.valueOf(v) }.asJava

  /** [[test]] as a DataFrame of (metric: string, value: double), one row per metric. */
  def testDataFrame(source: DataFrame, config: Config): DataFrame = {
    import spark.implicits._
    test(source, config).toSeq.sortBy(_._1).toDF("metric", "value")
  }

  /**
   * The values of `blobs` in the TEST net (weights from `config.model`) for every row of
   * `source`: a DataFrame with the id column (see Config.idColumn) and one array<float> column
   * per blob, named after it, holding the row's sample of that blob. The last batch is padded
   * with copies of its last row, whose outputs are dropped. Computed when an action runs it.
   */
  def features(source: DataFrame, blobs: Seq[String], config: Config): DataFrame = {
    require(config.model.nonEmpty, "Config.model: the model to extract features with is required")
    require(blobs.nonEmpty, "features: no blobs requested")
    val plan = makePlan(config, NativeNet.TEST, source.schema)
    val missing = blobs.filterNot(plan.blobNames.contains)
    if (missing.nonEmpty) {
      throw new CortadoConfigException(
        s"${plan.netConf.netSource}: the TEST net has no blob ${missing.mkString(", ")} " +
          s"(it has: ${plan.blobNames.mkString(", ")})")
    }
    val model = HadoopFiles.readBytes(config.model, hadoopConf)
    val idField = source.schema.fields.find(_.name == config.idColumn)
    val data = selectColumns(source, plan.specs, idField.map(_.name))
    val conf = plan.netConf
    val converter = plan.converter
    val hasId = idField.isDefined
    val rows = onePartition(data).mapPartitions { rows =>
      featuresTask(conf, converter, model, blobs, hasId, rows)
    }
    val idType = idField.map(_.dataType).getOrElse(LongType)
    val schema = StructType(StructField(config.idColumn, idType) +:
      blobs.map(b => StructField(b, ArrayType(FloatType, containsNull = false))))
    spark.createDataFrame(rows, schema)
  }

  /** [[features]] for Java. */
  def features(source: DataFrame, blobs: java.util.List[String], config: Config): DataFrame =
    features(source, blobs.asScala.toSeq, config)

  /**
   * Reads and validates solver and net, and checks the data's columns (driver side); with
   * `validationSchema`, also the validation data's columns against the TEST net's feed layer.
   */
  private def makePlan(config: Config, phase: Int, schema: StructType,
      validationSchema: Option[StructType] = None): Plan = {
    if (config.devices != 1) {
      throw new CortadoConfigException(
        s"Config.devices is ${config.devices}; only one device per executor is supported yet")
    }
    val solverText = readText(config.solverFile)
    NativeLib.validateSolver(solverText, config.solverFile)
    val solver = Prototxt.parse(solverText)
    val (netText, netSource) = solver.get("net").orElse(solver.get("train_net")) match {
      case Some(path) =>
        val resolved = resolveNet(path, config.solverFile)
        (readText(resolved), resolved)
      case None =>
        val embedded = solver.message("net_param").orElse(solver.message("train_net_param"))
        (embedded.map(_.text).getOrElse {
          throw new CortadoConfigException(s"${config.solverFile}: the solver names no net")
        }, config.solverFile)
    }
    NativeLib.validateNet(netText, netSource)
    // The CPU unless the solver asks for a GPU explicitly (Caffe's default is GPU; a CPU-only
    // build would fail on every solver that leaves solver_mode out).
    val device =
      if (solver.get("solver_mode").exists(Set("GPU", "1"))) solver.int("device_id", 0) else -1
    val conf = NetConf(trainingSolverText(solverText), config.solverFile, netText, netSource,
      device, solver.int("max_iter", 0), solver.int("display", 0))
    val net = Prototxt.parse(netText)
    val phaseName = if (phase == NativeNet.TRAIN) "TRAIN" else "TEST"
    // The native net gives the feed layer and its shapes exactly as the task will see them.
    var testFeed: Option[(String, Seq[(String, Seq[Int])])] = None
    val (layer, shapes, blobNames) =
      if (phase == NativeNet.TRAIN) {
        val h = NativeSolver.create(conf.solverText, conf.solverSource, netText, netSource, -1)
        try {
          val (l, s) = feedOf(h, phaseName, netSource)
          if (validationSchema.isDefined) testFeed = Some(feedOf(h, "TEST", netSource))
          (l, s, Seq.empty[String])
        } finally NativeSolver.dispose(h)
      } else {
        val h = NativeNet.create(netText, netSource, NativeNet.TEST, -1, 1L)
        try {
          val (l, s) = feedOf(h, phaseName, netSource)
          (l, s, NativeNet.blobNames(h).toSeq)
        } finally NativeNet.dispose(h)
      }
    val specs = topSpecs(net, phaseName, layer, shapes, netSource)
    val validation = validationSchema.map { valSchema =>
      val interval = solver.int("test_interval", 0)
      if (interval <= 0 || solver.int("test_iter", 0) <= 0) {
        throw new CortadoConfigException(
          s"${config.solverFile}: validation needs test_interval and test_iter greater than 0 " +
            s"(test_interval is $interval, test_iter ${solver.int("test_iter", 0)})")
      }
      val (testLayer, testShapes) = testFeed.get
      val testSpecs = topSpecs(net, "TEST", testLayer, testShapes, netSource)
      Validation(s"TEST/$testLayer", testSpecs, RowConverter(valSchema, testSpecs), interval,
        solver.bool("test_initialization", default = true))
    }
    Plan(conf.copy(feedLayer = s"$phaseName/$layer", batchSize = shapes.head._2.head), specs,
      RowConverter(schema, specs), outputBlobs(net, phaseName), blobNames, solver, validation)
  }

  private def readText(path: String): String =
    new String(HadoopFiles.readBytes(path, hadoopConf), StandardCharsets.UTF_8)

  private def resolveNet(path: String, solverFile: String): String = {
    val p = new Path(path)
    if (p.isAbsolute || HadoopFiles.exists(path, hadoopConf)) path
    else new Path(new Path(solverFile).getParent, p).toString
  }

  /**
   * Config.snapshotPrefix, or the solver's snapshot_prefix upgraded as Caffe does (unset: the
   * solver file's path without extension; a directory: the solver file's name in it), made
   * fully qualified so that the executor resolves it as the driver does.
   */
  private def snapshotPrefix(config: Config, solver: Prototxt): String = {
    val solverPath = new Path(config.solverFile)
    val stem = solverPath.getName.replaceFirst("""\.[^.]*$""", "")
    val given =
      if (config.snapshotPrefix.nonEmpty) config.snapshotPrefix
      else solver.get("snapshot_prefix") match {
        case None | Some("") => new Path(solverPath.getParent, stem).toString
        case Some(p) if p.endsWith("/") || isDirectory(p) => new Path(new Path(p), stem).toString
        case Some(p) => p
      }
    val p = new Path(given)
    try p.getFileSystem(hadoopConf).makeQualified(p).toString
    catch {
      case e: IOException => throw new CortadoIOException(s"snapshot prefix $given: $e", e)
    }
  }

  private def isDirectory(path: String): Boolean = {
    val p = new Path(path)
    try p.getFileSystem(hadoopConf).getFileStatus(p).isDirectory
    catch { case _: IOException => false }
  }

  private def resumeFrom(config: Config, prefix: => String): Resume = {
    if (config.resumeLatest && (config.weights.nonEmpty || config.snapshot.nonEmpty)) {
      throw new CortadoConfigException(
        "Config.resumeLatest excludes Config.weights and Config.snapshot")
    }
    if (config.snapshot.nonEmpty && config.weights.isEmpty) {
      throw new CortadoConfigException(
        s"Config.snapshot ${config.snapshot} needs Config.weights: the snapshot's .caffemodel")
    }
    if (config.resumeLatest) {
      Snapshots.latest(prefix, hadoopConf) match {
        case Some(files) =>
          log.info(s"Resuming from ${files.state} (iteration ${files.iter})")
          val snapshot = Snapshots.read(files, hadoopConf)
          Resume(Some(snapshot.model), Some(snapshot.state))
        case None =>
          log.info(s"No snapshot under $prefix: training from scratch")
          Resume(None, None)
      }
    } else {
      Resume(
        if (config.weights.isEmpty) None
        else Some(HadoopFiles.readBytes(config.weights, hadoopConf)),
        if (config.snapshot.isEmpty) None
        else Some(HadoopFiles.readBytes(config.snapshot, hadoopConf)))
    }
  }
}

object Cortado {

  private val log = LoggerFactory.getLogger(classOf[Cortado])

  /** The texts and settings a task builds its solver or net from. */
  private[spark] final case class NetConf(
      solverText: String,
      solverSource: String,
      netText: String,
      netSource: String,
      device: Int,
      maxIter: Int,
      display: Int,
      feedLayer: String = "",
      batchSize: Int = 0)

  private final case class Plan(
      netConf: NetConf,
      specs: Seq[TopSpec],
      converter: RowConverter,
      outputs: Seq[String],
      blobNames: Seq[String],
      solver: Prototxt,
      validation: Option[Validation] = None)

  /** The TEST net's feed layer during training, and when it runs (Caffe's test settings). */
  private final case class Validation(
      feedLayer: String,
      specs: Seq[TopSpec],
      converter: RowConverter,
      interval: Int,
      initialization: Boolean)

  private final case class Resume(weights: Option[Array[Byte]], state: Option[Array[Byte]])

  private final case class TrainResult(
      model: Array[Byte],
      tests: Seq[TestEvent],
      unsent: Seq[TrainingEvent])

  /** Where and how often the training task snapshots, and the Hadoop settings to write with. */
  private final case class SnapshotPlan(
      prefix: String,
      interval: Int,
      afterTrain: Boolean,
      hadoopConf: SerializableConfiguration)

  /**
   * The solver text a training task uses: the solver itself never runs the test nets (the task
   * runs them at test_interval when it has validation data; without, they would wait for data
   * that train() does not feed), while test_iter and the test nets stay valid; nor does it log
   * its own display lines: the task reports progress to the driver (see [[Progress]]).
   */
  private[cortado] def trainingSolverText(text: String): String =
    text.replaceAll("""\b(test_interval|test_initialization|display)\s*:\s*[^\s#]+""", "") +
      s"\ntest_interval: ${Int.MaxValue}\ntest_initialization: false\ndisplay: 0\n"

  /** The one feed layer of `phase` in a net or solver: its name and its tops' shapes. */
  private def feedOf(handle: Long, phase: String, source: String)
      : (String, Seq[(String, Seq[Int])]) = {
    val layers = NativeFeed.layers(handle).toSeq.filter(_.startsWith(s"$phase/"))
    if (layers.size != 1) {
      throw new CortadoConfigException(
        s"$source: the $phase net needs exactly one CoSData (or MemoryData with source_class) " +
          s"layer to read a DataFrame, found ${layers.size}: ${layers.mkString(", ")}")
    }
    val layer = layers.head
    val tops = NativeFeed.topNames(handle, layer).toSeq
    (layer.stripPrefix(s"$phase/"),
      tops.indices.map(i => tops(i) -> NativeFeed.topShape(handle, layer, i).toSeq))
  }

  private def inPhase(layer: Prototxt, phase: String): Boolean = {
    val includes = layer.messages("include")
    if (includes.nonEmpty) includes.exists(r => r.get("phase").forall(_ == phase))
    else !layer.messages("exclude").exists(_.get("phase").contains(phase))
  }

  /** Column and sample shape (as pushed, before the layer's transform) of each top of `name`. */
  private def topSpecs(net: Prototxt, phase: String, name: String,
      shapes: Seq[(String, Seq[Int])], source: String): Seq[TopSpec] = {
    val layer = net.messages("layer").find(l => l.get("name").contains(name) && inPhase(l, phase))
      .getOrElse(throw new CortadoConfigException(s"$source: layer '$name' not found"))
    val cos = layer.message("cos_data_param")
    shapes.zipWithIndex.map { case ((top, shape), i) =>
      val cosTop = cos.flatMap(c => c.messages("top").lift(i))
      if (cosTop.exists(_.bool("transpose", default = false))) {
        throw new CortadoConfigException(
          s"$source: layer '$name' top '$top': transposed tops cannot be fed from a DataFrame yet")
      }
      // transform_param is applied by the native layer: the rows hold raw samples.
      TopSpec(name, top, cosTop.flatMap(_.get("name")).getOrElse(top), shape.tail)
    }
  }

  /** The blobs of the `phase` net no later layer reads: its outputs, as Caffe finds them. */
  private def outputBlobs(net: Prototxt, phase: String): Seq[String] = {
    val available = scala.collection.mutable.LinkedHashSet.empty[String]
    net.messages("layer").filter(inPhase(_, phase)).foreach { l =>
      l.all("bottom").foreach(available.remove)
      l.all("top").foreach(available.add)
    }
    available.toSeq
  }

  /** The specs' columns in order, then the id column: the rows the converter reads. */
  private def selectColumns(df: DataFrame, specs: Seq[TopSpec], id: Option[String]): DataFrame =
    df.select((specs.map(_.column) ++ id).map(c => col(s"`$c`")): _*)

  private def onePartition(df: DataFrame): RDD[Row] = onePartition(df.rdd)

  private def onePartition[T](rdd: RDD[T]): RDD[T] =
    if (rdd.getNumPartitions == 1) rdd else rdd.repartition(1)

  /** Converts every row first, so that a bad row fails before any native work starts. */
  private def cache(converter: RowConverter, rows: Iterator[Row]): Array[Array[Array[Float]]] = {
    var index = -1L
    val samples = rows.map { row => index += 1; converter(row, index) }.toArray
    if (samples.isEmpty) throw new CortadoConfigException("the DataFrame has no rows")
    samples
  }

  /**
   * Feeds `samples` (cycling through them) into `layer` on a daemon thread until training is
   * over (`finished`) or the feed is aborted; a failure aborts the feed with a reason, so the
   * waiting forward pass fails, and is kept in `failure`.
   */
  private final class CyclingFeeder(handle: Long, layer: String,
      samples: Array[Array[Array[Float]]]) {
    private val feeder = new BatchFeeder(handle, layer)
    private val finished = new AtomicBoolean(false)
    @volatile var failure: Throwable = null
    private val thread = new Thread(() =>
      try feeder.feed(Iterator.continually(samples.iterator).flatten)
      catch {
        case _: CortadoCommException if finished.get =>
        case t: Throwable =>
          failure = t
          feeder.abort(s"the feeder thread of '$layer' failed: $t")
      }, "cortado-feeder")
    thread.setDaemon(true)
    thread.start()

    def stop(): Unit = {
      finished.set(true)
      feeder.abort("training finished")
      thread.join()
    }

    /** Stops the feed now: the waiting forward pass fails with `reason`. */
    def abort(reason: String): Unit = feeder.abort(reason)
  }

  /** Spark's own reaction to a killed task, which it reports as killed rather than failed. */
  private def killIfInterrupted(context: TaskContext): Unit =
    if (context.isInterrupted()) {
      throw new TaskKilledException(s"task of stage ${context.stageId()} killed")
    }

  /**
   * Turns a Spark task kill (a cancelled job or stage, a lost speculative race) into a native
   * abort: a daemon thread polls the task's interrupted flag and calls `abort` once, so a
   * solver step waiting on its feed fails at once instead of training on to max_iter. Outside
   * a Spark task it does nothing. `close` stops it; after that `abort` is never called.
   */
  private final class Watchdog(abort: String => Unit) extends AutoCloseable {
    private val context = Option(TaskContext.get())
    @volatile private var closed = false
    @volatile var fired = false
    private val lock = new Object
    private val thread = context.map { ctx =>
      val t = new Thread(() => {
        lock.synchronized {
          while (!closed && !ctx.isInterrupted()) lock.wait(100)
          if (!closed) {
            fired = true
            abort(s"the Spark task (stage ${ctx.stageId()}, partition ${ctx.partitionId()}) " +
              "was killed")
          }
        }
      }, "cortado-watchdog")
      t.setDaemon(true)
      t.start()
      t
    }

    /** Throws Spark's TaskKilledException when the task was killed. */
    def rethrowKill(): Unit = context.foreach(killIfInterrupted)

    override def close(): Unit = {
      lock.synchronized {
        closed = true
        lock.notifyAll()
      }
      thread.foreach(_.join())
    }
  }

  private def trainTask(conf: NetConf, converter: RowConverter, validation: Option[Validation],
      resume: Resume, snapshots: Option[SnapshotPlan], progress: Progress.Address,
      rows: Iterator[(Int, Row)]): TrainResult = {
    // Every row is converted first, so that a bad row fails before any native work starts.
    val trainRows = ArrayBuffer.empty[Array[Array[Float]]]
    val testRows = ArrayBuffer.empty[Array[Array[Float]]]
    rows.foreach {
      case (0, row) => trainRows += converter(row, trainRows.size.toLong)
      case (_, row) => testRows += validation.get.converter(row, testRows.size.toLong)
    }
    if (trainRows.isEmpty) throw new CortadoConfigException("the DataFrame has no rows")
    if (validation.isDefined && testRows.isEmpty) {
      throw new CortadoConfigException("the validation DataFrame has no rows")
    }
    val handle = NativeSolver.create(conf.solverText, conf.solverSource, conf.netText,
      conf.netSource, conf.device)
    val channel = new Progress.Client(Some(progress))
    try {
      resume match {
        case Resume(Some(model), Some(state)) => NativeSolver.restore(handle, model, state)
        case Resume(Some(model), None) =>
          // Fine-tuning: the given weights with this fresh solver's state (iteration 0).
          NativeSolver.restore(handle, model, NativeSolver.snapshot(handle, "init.caffemodel")(1))
        case _ =>
      }
      val feeders = new CyclingFeeder(handle, conf.feedLayer, trainRows.toArray) +:
        validation.toSeq.map(v => new CyclingFeeder(handle, v.feedLayer, testRows.toArray))
      val watchdog = new Watchdog(reason => feeders.foreach(_.abort(reason)))
      val tests = ArrayBuffer.empty[TestEvent]
      lazy val testNames = NativeSolver.testOutputNames(handle).toSeq.map(_.stripPrefix("0/"))
      def test(): Unit = {
        val event = TestEvent(NativeSolver.iter(handle),
          testNames.zip(NativeSolver.testAll(handle).map(_.toDouble)))
        tests += event
        channel.send(event)
      }
      def snapshot(plan: SnapshotPlan): Unit = {
        val files = Snapshots.write(NativeSolver.iter(handle), plan.prefix, plan.hadoopConf.value) {
          learnedNet =>
            val Array(model, state) = NativeSolver.snapshot(handle, learnedNet)
            SolverSnapshot(model, state)
        }
        channel.send(LogEvent(s"Snapshotting to binary proto file ${files.model}"))
        channel.send(LogEvent(s"Snapshotting solver state to binary proto file ${files.state}"))
      }
      val interval = snapshots.map(_.interval).getOrElse(0)
      val testInterval = validation.map(_.interval).getOrElse(0)
      var windowIters = 0
      var windowNanos = 0L
      var totalIters = 0L
      var totalNanos = 0L
      try {
        val start = NativeSolver.iter(handle)
        if (validation.exists(v => start % v.interval == 0 && (start > 0 || v.initialization)) &&
          start < conf.maxIter) {
          test()
        }
        // Steps end at multiples of display (a log line), of the snapshot interval and of the
        // test interval, as in Caffe, also when a resumed run starts between them.
        while (NativeSolver.iter(handle) < conf.maxIter) {
          val iter = NativeSolver.iter(handle)
          var n = conf.maxIter - iter
          if (conf.display > 0) n = math.min(n, conf.display - iter % conf.display)
          if (interval > 0) n = math.min(n, interval - iter % interval)
          if (testInterval > 0) n = math.min(n, testInterval - iter % testInterval)
          val t0 = System.nanoTime()
          val loss = NativeSolver.step(handle, n)
          val nanos = System.nanoTime() - t0
          windowIters += n
          windowNanos += nanos
          totalIters += n
          totalNanos += nanos
          val now = NativeSolver.iter(handle)
          if (conf.display <= 0 || now % conf.display == 0 || now == conf.maxIter) {
            val perSecond = if (windowNanos > 0) windowIters * 1e9 / windowNanos else 0.0
            channel.send(IterationEvent(now, loss, NativeSolver.learningRate(handle), perSecond,
              perSecond * conf.batchSize, windowIters))
            windowIters = 0
            windowNanos = 0L
          }
          snapshots.filter(now % _.interval == 0).foreach(snapshot)
          if (testInterval > 0 && now % testInterval == 0) test()
        }
        snapshots.filter(p => p.afterTrain && NativeSolver.iter(handle) % p.interval != 0)
          .foreach(snapshot)
      } catch {
        case t: Throwable if watchdog.fired =>
          watchdog.rethrowKill()
          throw t
        case t: Throwable if feeders.exists(_.failure != null) =>
          feeders.flatMap(f => Option(f.failure)).foreach(t.addSuppressed)
          throw t
      } finally {
        watchdog.close()
        feeders.foreach(_.stop())
      }
      if (totalIters > 0) {
        val seconds = totalNanos / 1e9
        channel.send(LogEvent(f"Trained $totalIters iterations in $seconds%.2f s of solver " +
          f"steps: ${1000 * seconds / totalIters}%.3f ms/iter, " +
          f"${totalIters * conf.batchSize / seconds}%.1f images/s"))
      }
      channel.send(LogEvent("Optimization Done."))
      TrainResult(NativeSolver.snapshot(handle, "model.caffemodel")(0), tests.toList,
        channel.unsent)
    } finally {
      channel.close()
      NativeSolver.dispose(handle)
    }
  }

  /**
   * Builds the TEST net with `model`, forward only, keeping the data of the blobs `use` reads
   * (`keep`); then for each batch of samples: push, forward, `use`.
   */
  private def forEachBatch(conf: NetConf, model: Array[Byte], keep: Seq[String],
      batches: Iterator[Iterator[Array[Array[Float]]]])(use: Long => Unit): Unit = {
    val handle = NativeNet.create(conf.netText, conf.netSource, NativeNet.TEST, conf.device, 1L)
    try {
      NativeNet.loadWeights(handle, model, "model")
      NativeNet.forwardOnly(handle, keep.toArray)
      val feeder = new BatchFeeder(handle, conf.feedLayer)
      val context = Option(TaskContext.get())
      batches.foreach { batch =>
        // A killed task (a cancelled job) stops between batches.
        context.foreach(killIfInterrupted)
        feeder.feed(batch)
        NativeNet.forward(handle)
        use(handle)
      }
    } finally NativeNet.dispose(handle)
  }

  private def blobValues(handle: Long, blob: String): Array[Float] = {
    val count = NativeNet.blobShape(handle, blob).product
    val buffer = ByteBuffer.allocateDirect(4 * count).order(ByteOrder.nativeOrder())
    NativeNet.copyBlobData(handle, blob, buffer)
    val values = new Array[Float](count)
    buffer.asFloatBuffer().get(values)
    values
  }

  private def testTask(conf: NetConf, converter: RowConverter, model: Array[Byte],
      outputs: Seq[String], rows: Iterator[Row]): Seq[(String, Double)] = {
    val samples = cache(converter, rows)
    val batchSize = conf.batchSize
    val whole = samples.length / batchSize
    if (whole == 0) {
      throw new CortadoConfigException(
        s"test: the DataFrame has ${samples.length} rows, fewer than one batch ($batchSize)")
    }
    val sums = scala.collection.mutable.LinkedHashMap.empty[String, Double]
    val batches = samples.grouped(batchSize).take(whole).map(_.iterator)
    forEachBatch(conf, model, outputs, batches) { handle =>
      outputs.foreach { blob =>
        val values = blobValues(handle, blob)
        values.indices.foreach { i =>
          val name = if (values.length == 1) blob else s"$blob[$i]"
          sums(name) = sums.getOrElse(name, 0.0) + values(i)
        }
      }
    }
    sums.toSeq.map { case (k, v) => k -> v / whole }
  }

  private def featuresTask(conf: NetConf, converter: RowConverter, model: Array[Byte],
      blobs: Seq[String], hasId: Boolean, rows: Iterator[Row]): Iterator[Row] = {
    val idColumn = converter.width
    val ids = ArrayBuffer.empty[Any]
    var index = -1L
    val samples = rows.map { row =>
      index += 1
      ids += (if (hasId) row.get(idColumn) else index)
      converter(row, index)
    }.toArray
    val batchSize = conf.batchSize
    val out = ArrayBuffer.empty[Row]
    val batches = samples.grouped(batchSize).map(b => b ++ Array.fill(batchSize - b.length)(b.last))
    var done = 0
    forEachBatch(conf, model, blobs, batches.map(_.iterator)) { handle =>
      val values = blobs.map { b =>
        val shape = NativeNet.blobShape(handle, b).toSeq
        if (shape.headOption != Some(batchSize)) {
          throw new CortadoConfigException(
            s"features: blob '$b' has shape ${shape.mkString(" ")}; its first axis must be " +
              s"the batch ($batchSize) to give one value per row")
        }
        blobValues(handle, b)
      }
      val n = math.min(batchSize, samples.length - done)
      (0 until n).foreach { i =>
        val perSample = blobs.indices.map { j =>
          val size = values(j).length / batchSize
          java.util.Arrays.copyOfRange(values(j), i * size, (i + 1) * size).toSeq
        }
        out += Row.fromSeq(ids(done + i) +: perSample)
      }
      done += n
    }
    out.iterator
  }
}
