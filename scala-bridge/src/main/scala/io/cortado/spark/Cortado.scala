// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.util.concurrent.atomic.AtomicInteger

import scala.collection.JavaConverters._
import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.types._
import org.apache.spark.storage.StorageLevel
import org.slf4j.LoggerFactory

import io.cortado.{CortadoConfigException, CortadoException}
import io.cortado.jni.{NativeLib, NativeNet}
import io.cortado.spark.TaskData.{onePartition, selectColumns}
import io.cortado.storage.{HadoopFiles, SerializableConfiguration}

/**
 * Training, testing and feature extraction on DataFrames, as CaffeOnSpark's `CaffeOnSpark`
 * class offers them. Each call first reads and validates the solver and net in the driver
 * through JNI (a bad prototxt throws CortadoConfigException naming file:line before any Spark
 * job starts) and checks the DataFrame's columns against the feed layer's tops, then runs one
 * Spark job of one task that does the work natively. The parts: [[JobPlan]] (the driver's
 * checks), [[TrainingTask]], [[ForwardTasks]] (test and features) and [[TaskData]].
 *
 * Data: the net's feed layer (a `CoSData` layer, or `MemoryData` with `source_class`) of the
 * phase at hand reads each top from the column of the same name: cos_data_param's top names
 * for CoSData, the layer's top names for MemoryData. See [[io.cortado.data.RowConverter]] for
 * the column types.
 *
 * Training runs on Config.clusterSize workers (see [[Config]]): one task on one partition, or
 * one Spark barrier stage of N tasks (rank = partition id), each training on its own partition
 * of the DataFrame (repartitioned into N when it has another number of partitions) and
 * exchanging gradients with the others after every iteration, so that N workers of batch b
 * train as one of batch N*b. Worker 0 tests, reports progress and writes the snapshots. The
 * test nets run during training only in [[trainWithValidation]]. Snapshots are written by
 * the task to a Hadoop path (see [[Config]]: snapshotPrefix, snapshotInterval, resumeLatest).
 * The training log reaches the driver while the task runs (see [[addProgressListener]]).
 *
 * Serializable, as CaffeOnSpark's class and Spark's SparkSession are, so that a closure that
 * reaches an instance without using it can still be shipped: in spark-shell and notebooks a
 * cell's closure holds the earlier cells it names, and `val features = cortado.features(...)`
 * puts the cell of `val cortado = new Cortado(spark)` behind every later Dataset closure over
 * `features`. A copy has neither the SparkSession nor the listeners: use the driver's.
 */
final class Cortado(@transient val spark: SparkSession) extends Serializable {
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
   * renamed) and returns that path. The native training session keeps Caffe's cadence and log:
   * every `display` iterations (and at iteration 0 and the end, as Caffe) Caffe's
   * `Iteration N (X iter/s, Ys/D iters, Z images/s), loss = L` and `Iteration N, lr = R`, and
   * the snapshots written, go to this class's logger in the driver as the task runs, and to
   * the progress listeners. The test nets are not built (see [[trainWithValidation]]).
   *
   * Every `snapshot` iterations (the solver's, or Config.snapshotInterval) the task writes a
   * snapshot under the snapshot prefix through [[io.cortado.storage.Snapshots]] (model,
   * digests, then state, each to a temporary name renamed into place), and with the solver's
   * `snapshot_after_train` (default true) one at the end when max_iter is not a multiple of
   * the interval; with an interval of 0 it writes none. A run resumed from a snapshot
   * (Config.snapshot, or Config.resumeLatest) continues at its iteration.
   */
  def train(source: DataFrame, config: Config): String =
    runTraining(source, None, config)._1

  /**
   * [[train]], testing on `validation` as Caffe tests during training: every `test_interval`
   * iterations of the solver (and at the start with `test_initialization`, Caffe's default,
   * and at the end when test_interval divides max_iter), the TEST net runs `test_iter`
   * batches of the validation rows (cycling through them) with the current weights. Each pass
   * is logged as Caffe logs it (`Test net output #0: accuracy = Y`) and sent to the progress
   * listeners. The TEST net's feed layer reads `validation` as [[test]] would. Writes the
   * model to `config.model`, as [[train]], and returns the test passes as a DataFrame:
   * `iteration` (int) and one double column per TEST net output, named after it (`accuracy`,
   * `loss`), one row per pass.
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
    val plan = JobPlan.make(config, NativeNet.TRAIN, source.schema, validation.map(_.schema),
      hadoopConf)
    val interval =
      if (config.snapshotInterval >= 0) config.snapshotInterval else plan.info.snapshot
    lazy val prefix = JobPlan.snapshotPrefix(config, plan.info, hadoopConf)
    val resume = JobPlan.resumeFrom(config, prefix, hadoopConf)
    val snapshots = SnapshotPlan(if (interval > 0) Some(prefix) else None,
      config.snapshotInterval, new SerializableConfiguration(hadoopConf), plan.info.snapshotHdf5)
    // Before training: a model or snapshot that cannot be written would be lost after it.
    HadoopFiles.checkWritable(config.model, hadoopConf)
    snapshots.prefix.foreach(p => HadoopFiles.checkWritable(s"${p}_iter_0.caffemodel", hadoopConf))
    val conf = plan.netConf
    val converter = plan.converter
    val testing = plan.validation
    val trainRows = selectColumns(source, plan.specs, None).rdd
    val validationRows = (validation, testing) match {
      case (Some(df), Some(t)) => Some(selectColumns(df, t.specs, None).rdd)
      case _ => None
    }
    if (config.maxAttempts < 1) {
      throw new CortadoConfigException(
        s"Config.maxAttempts must be at least 1, not ${config.maxAttempts}")
    }
    val sc = spark.sparkContext
    // The workers asked for, and how few an elastic run may go on with.
    val full = Workers.plan(config, sc).count
    val minimum = Elastic.minWorkers(config, full)
    val elastic = minimum < full
    if (elastic && snapshots.prefix.isEmpty) {
      throw new CortadoConfigException(s"Config.minWorkers $minimum of $full workers: an " +
        "elastic run resumes from a snapshot at each change of workers, and this one takes " +
        "none: set the solver's snapshot (or Config.snapshotInterval)")
    }
    val watch = new ClusterWatch(sc)
    // The training rows for each number of workers, kept (in memory where it allows) across
    // attempts, so that an attempt on as many workers as an earlier one reads them again
    // without a shuffle.
    val partitioned = mutable.Map.empty[Int, RDD[(Int, Row)]]
    var workersBefore = full
    // The last worker the run lost, for the message of a run that gives up waiting for slots.
    var lastLost: Option[ClusterWatch.Lost] = None
    val solverName = config.solverFile.substring(config.solverFile.lastIndexOf('/') + 1)
    // The Spark UI's record of this run (see CortadoUi) comes first, so that a listener that
    // looks at the UI finds there the event it is handed.
    val run = CortadoUi.runs(spark.sparkContext).map(_.start(solverName, plan.info.maxIter))
    val listening = run.toList ++ listeners.asScala.toList


    val tell: String => Unit = text => listening.foreach { l =>
      try l.onProgress(LogEvent(text))
      catch { case NonFatal(e) => log.warn(s"a progress listener failed: $e") }
    }

    // One attempt: a Spark job of one task per worker, resuming from `from`.
    def attempt(number: Int, from: Resume, lastIteration: AtomicInteger): TrainingTask.Result = {
      val planned = Workers.plan(config, sc)
      val count =
        if (full == 1) 1
        else {
          val (timeout, afterLoss) =
            if (number == 1) (config.startTimeoutSeconds, None)
            else (if (elastic) config.elasticTimeoutSeconds else config.startTimeoutSeconds,
              Some(watch))
          try Workers.awaitSlots(sc, full, minimum, timeout, afterLoss)
          catch {
            case short: SlotShortage =>
              // The last word of a run that gives up here names the worker it lost.
              throw new SlotShortage(short.getMessage +
                lastLost.map(l => s", after $l").getOrElse(""))
          }
        }
      val workers = planned.copy(count = count)
      val scaling = Elastic.scaling(config.elasticScaling, full, count, conf.batchSize,
        plan.info.iterSize, plan.info.baseLr)
      val attemptConf = Elastic.apply(conf, scaling)
      val attemptSnapshots = if (elastic) snapshots.copy(about = scaling.describe) else snapshots
      run.foreach(_.attemptStarted(number, workers.count))
      if (count != workersBefore) {
        deliver(listening)(ResizeEvent(number, workersBefore, count, full, math.max(0,
          from.iteration), config.elasticScaling, scaling.batch, scaling.iterSize,
          scaling.baseLr, scaling.how))
      }
      workersBefore = count
      val data = partitioned.getOrElseUpdate(count,
        TaskData.trainingPartitions(trainRows, validationRows, count, full)
          .persist(StorageLevel.MEMORY_ONLY))
      // One task per worker: more would train independent models.
      require(data.getNumPartitions == workers.count,
        s"${data.getNumPartitions} training partitions for ${workers.count} workers")
      if (workers.count > 1 && number == 1) {
        log.info(s"Training with ${workers.count} workers through ${workers.backend}, " +
          s"${workers.devices} device${if (workers.devices == 1) "" else "s"} each, batch " +
          s"${attemptConf.batchSize} per device: " +
          s"${attemptConf.batchSize.toLong * workers.devices * workers.count} per iteration " +
          s"in all; training data in ${trainRows.getNumPartitions} partition" +
          s"${if (trainRows.getNumPartitions == 1) "" else "s"}" +
          (if (TaskData.fitsBarrierStage(trainRows, workers.count)) " (one per worker)"
          else s", repartitioned into ${workers.count}"))
      }
      // An elastic run short of workers grows back: once the cluster has the slots again, the
      // workers are asked to stop at the next snapshot (or at once, with a snapshot of their
      // own, when the next is more than elasticGrowSeconds away), and the next attempt resumes
      // from it on every worker.
      val grow = new GrowBack(count < full, full, interval, plan.info.maxIter,
        config.elasticGrowSeconds, watch, lastIteration)
      val tracking: TrainingEvent => Unit = { event =>
        event match {
          case i: IterationEvent =>
            lastIteration.accumulateAndGet(i.iteration, math.max)
            grow.onIteration(i)
          case _ =>
        }
        deliver(listening)(event)
      }
      // The Spark UI names the training job after the solver; the caller's description is back
      // afterwards.
      val description = sc.getLocalProperty(JobDescription)
      sc.setJobDescription(s"Cortado training: $solverName, ${workers.count} worker" +
        (if (workers.count == 1) "" else "s"))
      val attemptId = s"${workers.token}-$number"
      sc.setLocalProperty(ClusterWatch.AttemptProperty, attemptId)
      watch.startAttempt(attemptId, barrier = workers.count > 1)
      try {
        val server = Progress.Server.start(sc.getConf, tracking)
        try {
          grow.start(server, text => tell(text))
          val address = server.address
          val task = (rows: Iterator[(Int, Row)]) => Iterator.single(
            TrainingTask.run(attemptConf, converter, testing, from, attemptSnapshots, address,
              workers, rows))
          val results =
            try {
              if (workers.count > 1) data.barrier().mapPartitions(task).collect()
              else data.mapPartitions(task).collect()
            } catch {
              case NonFatal(e) if workers.count > 1 =>
                // The worker lost, by rank, executor and host, rather than Spark's stage.
                watch.catchUp(5000)
                watch.lostWorker match {
                  case Some(lost) if lost.executorLost || Attempts.isCancellation(e) =>
                    lastLost = Some(lost)
                    val named = new CortadoException(lost.toString)
                    named.addSuppressed(e)
                    throw named
                  case _ => throw e
                }
            }
          results.head.stoppedAt.foreach(at => throw new StoppedToResize(at, full))
          results.head
        } finally {
          grow.stop()
          server.close()
        }
      } finally {
        sc.setLocalProperty(JobDescription, description)
        sc.setLocalProperty(ClusterWatch.AttemptProperty, null)
      }
    }

    try {
      val result = Attempts.run(config.maxAttempts, resume, snapshots, tell)(attempt)
      if (result.unsent.nonEmpty) {
        log.warn(s"${result.unsent.size} training log events did not reach the driver while " +
          "the task ran; here they are")
      }
      result.unsent.foreach(deliver(listening))
      HadoopFiles.writeBytesAtomic(config.model,
        modelFileBytes(result.model, config.model, plan.info.snapshotHdf5), hadoopConf)
      run.foreach(_.finished())
      (config.model, result.tests)
    } catch {
      case NonFatal(e) =>
        run.foreach(_.failed(e.toString))
        throw e
    } finally {
      watch.close()
      partitioned.values.foreach(_.unpersist(blocking = false))
    }
  }

  /**
   * The trained model's bytes (a binary NetParameter) as the model file holds them: Caffe's
   * HDF5 layout when the solver's snapshot_format is HDF5 or the name ends in `.h5` (Caffe's
   * tools tell the formats apart by that suffix), else the binary proto.
   */
  private def modelFileBytes(model: Array[Byte], path: String, hdf5: Boolean): Array[Byte] =
    if (hdf5 || path.endsWith(".h5")) {
      if (!path.endsWith(".h5")) {
        log.warn(s"$path: written in HDF5 (the solver's snapshot_format), but Caffe's tools " +
          "read a model as HDF5 only when its name ends in .h5")
      }
      NativeLib.snapshotToHdf5(model, false, null, path)
    } else model

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
    val plan = JobPlan.make(config, NativeNet.TEST, source.schema, None, hadoopConf)
    val outputs = plan.outputs
    val model = readModel(config)
    val conf = plan.netConf
    val converter = plan.converter
    val modelName = config.model
    val data = selectColumns(source, plan.specs, None)
    val sums = onePartition(data)
      .mapPartitions(rows => Iterator.single(ForwardTasks.test(conf, converter, model, modelName,
        outputs, rows)))
      .collect()
      .head
    sums.toMap
  }

  /** Config.model's bytes; an empty file is refused here, in the driver, naming it. */
  private def readModel(config: Config): Array[Byte] = {
    val bytes = HadoopFiles.readBytes(config.model, hadoopConf)
    if (bytes.isEmpty) {
      throw new CortadoConfigException(s"${config.model} is empty (0 bytes), not a .caffemodel")
    }
    JobPlan.protoBytes(bytes, state = false, config.model)
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
   * per blob, named after it, holding the row's sample of that blob, or, for a blob whose first
   * axis is not the batch (an aggregate such as `accuracy` or `loss`), the batch's whole blob,
   * repeated on each of its rows (as CaffeOnSpark gives them). The last batch is padded with
   * copies of its last row, whose outputs are dropped. Computed when an action runs it.
   */
  def features(source: DataFrame, blobs: Seq[String], config: Config): DataFrame = {
    require(config.model.nonEmpty, "Config.model: the model to extract features with is required")
    require(blobs.nonEmpty, "features: no blobs requested")
    val plan = JobPlan.make(config, NativeNet.TEST, source.schema, None, hadoopConf)
    val missing = blobs.filterNot(plan.blobNames.contains)
    if (missing.nonEmpty) {
      throw new CortadoConfigException(
        s"${plan.netConf.netSource}: the TEST net has no blob ${missing.mkString(", ")} " +
          s"(it has: ${plan.blobNames.mkString(", ")})")
    }
    val model = readModel(config)
    val idField = source.schema.fields.find(_.name == config.idColumn)
    val data = selectColumns(source, plan.specs, idField.map(_.name))
    val conf = plan.netConf
    val converter = plan.converter
    val hasId = idField.isDefined
    val modelName = config.model
    val rows = onePartition(data).mapPartitions { rows =>
      ForwardTasks.features(conf, converter, model, modelName, blobs, hasId, rows)
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
   * Writes the TEST net of `config`'s solver (its net file or embedded net, with
   * Config.solverOverrides) with the weights of `config.model` (binary, or Caffe's HDF5) as an
   * ONNX model to `path`, any Hadoop path (see docs/onnx.md): the data layers' tops become the
   * graph's inputs, holding what the layer's transform gives (pixels times its `scale`, say),
   * losses and accuracies are left out, and the other output blobs are the graph's outputs,
   * named after them. Runs in the driver; no Spark job. The model is written under a temporary
   * name and renamed into place; an existing `path` is refused before any work.
   *
   * @param opset        the default-domain opset the model declares, 13 (the default) to 17
   * @param dynamicBatch axis 0 of every graph input and output is the symbolic "N", so that the
   *                     model takes any batch size (the default); false: the net's own shapes
   * @throws io.cortado.CortadoConfigException naming the net and the layer with its type when
   *                     a layer has no ONNX counterpart, or an opset out of range
   */
  def exportOnnx(config: Config, path: String, opset: Int = OnnxExport.DefaultOpset,
      dynamicBatch: Boolean = true): Unit = {
    require(config.model.nonEmpty, "Config.model: the model to export is required")
    val info = NativeLib.solverInfo(JobPlan.solverTextOf(config, hadoopConf), config.solverFile)
    val (netText, netSource) = JobPlan.netOf(config.solverFile, info, hadoopConf)
    OnnxExport.write(netText, netSource, readModel(config), opset, dynamicBatch, path,
      hadoopConf)
  }
}

object Cortado {

  private val log = LoggerFactory.getLogger(classOf[Cortado])

  /** The local property behind SparkContext.setJobDescription. */
  private val JobDescription = "spark.job.description"
}
