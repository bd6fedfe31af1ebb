// SPDX-License-Identifier: Apache-2.0
package io.cortado.ml

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}
import java.text.SimpleDateFormat
import java.util.Date

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.ml.Estimator
import org.apache.spark.ml.param._
import org.apache.spark.ml.util.{DefaultParamsReadable, DefaultParamsWritable, Identifiable}
import org.apache.spark.sql.{Column, Dataset}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.types.{BooleanType, StructType}

import io.cortado.CortadoConfigException
import io.cortado.jni.{NativeLib, NativeNet}
import io.cortado.spark.{Config, Cortado, JobPlan, ProgressListener, TrainingEvent}
import io.cortado.storage.HadoopFiles

/**
 * Trains a Cortado (Caffe) net as a Spark ML Estimator: `fit` trains as
 * [[io.cortado.spark.Cortado.train]] does, on one worker or `workers` workers exchanging
 * gradients, and returns a [[CortadoClassificationModel]]. It works in a `Pipeline` after
 * Spark's feature stages (`VectorAssembler`'s vector column is read as the sample,
 * `StringIndexer`'s index as the label) and under `CrossValidator`/`TrainValidationSplit` with
 * param grids (over `baseLr` and `maxIter`, say).
 *
 * The solver prototxt (`solver`, a Hadoop path) names the net; the net's TRAIN phase needs a
 * feed layer (CoSData, or MemoryData with source_class) whose top `featuresTop` (default: its
 * first) is filled from `featuresCol` and whose top `labelTop` (default: the other of two) from
 * `labelCol`, whatever the columns are called in the net. Samples must have the top's size
 * (a 784-vector for a 1 x 28 x 28 top).
 *
 * {{{
 * val classifier = new CortadoClassifier().setSolver("hdfs:///models/lenet_solver.prototxt")
 *   .setFeaturesCol("features").setLabelCol("label").setMaxIter(2000)
 * val model = new Pipeline().setStages(Array(indexer, assembler, classifier)).fit(train)
 * model.transform(test).select("prediction", "probability")
 * }}}
 */
class CortadoClassifier(override val uid: String)
    extends Estimator[CortadoClassificationModel] with CortadoModelParams
    with DefaultParamsWritable {

  def this() = this(Identifiable.randomUID("cortado"))

  final val solver: Param[String] = new Param[String](this, "solver",
    "the solver prototxt (a Hadoop path); its `net` names the net prototxt")

  final val solverText: Param[String] = new Param[String](this, "solverText",
    "the solver prototxt as text, in place of the solver file; a relative `net` in it is " +
      "relative to the working directory")

  final val netText: Param[String] = new Param[String](this, "netText",
    "the net prototxt as text, in place of the net the solver names")

  final val solverOverrides: Param[String] = new Param[String](this, "solverOverrides",
    "solver prototxt text whose fields replace the solver file's (\"weight_decay: 0.001\")")

  final val baseLr: DoubleParam = new DoubleParam(this, "baseLr",
    "the solver's base_lr, in place of the file's", ParamValidators.gt(0.0))

  final val maxIter: IntParam = new IntParam(this, "maxIter",
    "the solver's max_iter, in place of the file's", ParamValidators.gt(0))

  final val workers: IntParam = new IntParam(this, "workers",
    "Spark tasks that train together (a barrier stage), each on its part of the data; 0: one " +
      "per executor when Spark's configuration fixes their number, else 1",
    ParamValidators.gtEq(0))

  final val devices: IntParam = new IntParam(this, "devices",
    "devices per worker (GPUs when the solver asks for one, else CPU replicas)",
    ParamValidators.gtEq(1))

  final val connection: Param[String] = new Param[String](this, "connection",
    "how workers exchange gradients: \"ethernet\" (TCP) or \"infiniband\" (UCX over RDMA)")

  final val weights: Param[String] = new Param[String](this, "weights",
    "a .caffemodel to start from (fine-tuning); empty: the net's fillers")

  final val snapshotPrefix: Param[String] = new Param[String](this, "snapshotPrefix",
    "where snapshots go (a Hadoop path prefix); empty: the solver's snapshot_prefix")

  final val snapshotInterval: IntParam = new IntParam(this, "snapshotInterval",
    "iterations between snapshots; -1: the solver's `snapshot`; 0: none",
    ParamValidators.gtEq(-1))

  final val resumeLatest: BooleanParam = new BooleanParam(this, "resumeLatest",
    "resume from the newest complete snapshot under the snapshot prefix, if there is one")

  final val modelPath: Param[String] = new Param[String](this, "modelPath",
    "where fit also writes the trained .caffemodel (a Hadoop path); empty: nowhere")

  final val validationIndicatorCol: Param[String] = new Param[String](this,
    "validationIndicatorCol", "a boolean column: rows where it is true are not trained on but " +
      "tested during training, as Caffe tests its TEST net every test_interval iterations " +
      "(the solver sets test_interval and test_iter); the passes go to the training log and " +
      "curves; empty: no testing during training")

  setDefault(validationIndicatorCol -> "")
  setDefault(solverText -> "", netText -> "")
  setDefault(solverOverrides -> "", workers -> 1, devices -> 1, connection -> "",
    weights -> "", snapshotPrefix -> "", snapshotInterval -> 0, resumeLatest -> false,
    modelPath -> "")

  def setSolver(value: String): this.type = set(solver, value)
  def setSolverText(value: String): this.type = set(solverText, value)
  def setNetText(value: String): this.type = set(netText, value)
  def setSolverOverrides(value: String): this.type = set(solverOverrides, value)
  def setBaseLr(value: Double): this.type = set(baseLr, value)
  def setMaxIter(value: Int): this.type = set(maxIter, value)
  def setWorkers(value: Int): this.type = set(workers, value)
  def setDevices(value: Int): this.type = set(devices, value)
  def setConnection(value: String): this.type = set(connection, value)
  def setWeights(value: String): this.type = set(weights, value)
  def setSnapshotPrefix(value: String): this.type = set(snapshotPrefix, value)
  def setSnapshotInterval(value: Int): this.type = set(snapshotInterval, value)
  def setResumeLatest(value: Boolean): this.type = set(resumeLatest, value)
  def setModelPath(value: String): this.type = set(modelPath, value)
  def setValidationIndicatorCol(value: String): this.type = set(validationIndicatorCol, value)
  def setFeaturesCol(value: String): this.type = set(featuresCol, value)
  def setLabelCol(value: String): this.type = set(labelCol, value)
  def setPredictionCol(value: String): this.type = set(predictionCol, value)
  def setProbabilityCol(value: String): this.type = set(probabilityCol, value)
  def setRawPredictionCol(value: String): this.type = set(rawPredictionCol, value)
  def setFeaturesTop(value: String): this.type = set(featuresTop, value)
  def setLabelTop(value: String): this.type = set(labelTop, value)
  def setScoresBlob(value: String): this.type = set(scoresBlob, value)
  def setOutputBlobs(value: Array[String]): this.type = set(outputBlobs, value)

  def getSolver: String = $(solver)
  def getSolverOverrides: String = $(solverOverrides)
  def getBaseLr: Double = $(baseLr)
  def getMaxIter: Int = $(maxIter)
  def getWorkers: Int = $(workers)

  override def transformSchema(schema: StructType): StructType = {
    checkInputColumn(schema, $(featuresCol), "features")
    checkInputColumn(schema, $(labelCol), "label")
    if ($(validationIndicatorCol).nonEmpty) {
      val field = schema.fields.find(_.name == $(validationIndicatorCol)).getOrElse {
        throw new CortadoConfigException(s"validation indicator column " +
          s"'${$(validationIndicatorCol)}' is missing (the data has: " +
          s"${schema.fieldNames.mkString(", ")})")
      }
      if (field.dataType != BooleanType) {
        throw new CortadoConfigException(s"validation indicator column '${field.name}' is " +
          s"${field.dataType.simpleString}, not boolean")
      }
    }
    CortadoModelParams.outputSchema(this, schema)
  }

  /** Config.solverOverrides: `solverOverrides` with baseLr and maxIter when set, and `net`. */
  private def overrides(net: Option[String]): String = {
    val text = $(solverOverrides)
    def given(field: String, param: Param[_]): Seq[String] = get(param).toSeq.map { value =>
      if (s"(^|[\\s{])$field\\s*:".r.findFirstIn(text).isDefined) {
        throw new CortadoConfigException(s"$field is set twice: by the ${param.name} param " +
          s"and in solverOverrides ($text)")
      }
      s"$field: $value"
    }
    val netLine = net.toSeq.map { path =>
      if ("(^|[\\s{])(train_)?net(_param)?\\s*[:{]".r.findFirstIn(text).isDefined) {
        throw new CortadoConfigException(s"the net is set twice: by the netText param and in " +
          s"solverOverrides ($text)")
      }
      "net: \"" + path.replace("\\", "\\\\").replace("\"", "\\\"") + "\""
    }
    (text +: (given("base_lr", baseLr) ++ given("max_iter", maxIter) ++ netLine))
      .filter(_.trim.nonEmpty).mkString("\n")
  }

  override def fit(dataset: Dataset[_]): CortadoClassificationModel = {
    if (isDefined(solver) == $(solverText).nonEmpty) {
      throw new CortadoConfigException("CortadoClassifier: set either the solver param (a " +
        "file) or solverText, not " + (if (isDefined(solver)) "both" else "neither"))
    }
    transformSchema(dataset.schema, logging = true)
    val spark = dataset.sparkSession
    val hadoopConf = spark.sparkContext.hadoopConfiguration
    // The model, and the solver and net given as text, in a local folder of the driver, which
    // reads them (tasks get the texts).
    val scratch = Files.createTempDirectory("cortado-fit")
    def scratchFile(name: String, text: String): String = {
      val file = scratch.resolve(name)
      Files.write(file, text.getBytes(StandardCharsets.UTF_8))
      file.toUri.toString
    }
    val target =
      if ($(modelPath).nonEmpty) $(modelPath) else scratch.resolve("model.caffemodel").toUri.toString
    val solverFile =
      if (isDefined(solver)) $(solver) else scratchFile("solverText.prototxt", $(solverText))
    val net = if ($(netText).nonEmpty) Some(scratchFile("netText.prototxt", $(netText))) else None
    val config = CortadoClassifier.config(solverFile, target, $(weights), $(devices),
      $(snapshotPrefix), $(snapshotInterval), $(resumeLatest), $(workers), $(connection),
      overrides(net))
    val solverProto = JobPlan.solverTextOf(config, hadoopConf)
    val info = NativeLib.solverInfo(solverProto, config.solverFile)
    val (netProto, netSource) = JobPlan.netOf(config.solverFile, info, hadoopConf) match {
      case (text, source) if net.contains(source) => (text, "netText")
      case other => other
    }
    NativeLib.validateNet(netProto, netSource)

    // The feed layers' columns: the features and labels go in under the names they read.
    val trainColumns = feedColumns(netProto, netSource, NativeNet.TRAIN)
    val indicator = $(validationIndicatorCol)

    val log = ArrayBuffer.empty[String]
    val listener = new ProgressListener {
      private val format = new SimpleDateFormat("MMdd HH:mm:ss.SSS")
      private val pid = ProcessHandle.current().pid()
      def onProgress(event: TrainingEvent): Unit = log.synchronized {
        // glog's prefix, as Caffe's log has it, so that `cortado plot` finds the times.
        val prefix = s"I${format.format(new Date())}000 $pid cortado_ml] "
        event.logLines.foreach(line => log += prefix + line)
      }
    }
    val cortado = new Cortado(spark)
    cortado.addProgressListener(listener)
    val trained =
      try {
        if (indicator.isEmpty) cortado.train(dataset.toDF.select(trainColumns: _*), config)
        else {
          val flag = col(s"`$indicator`")
          val validation = dataset.toDF.filter(flag)
            .select(feedColumns(netProto, netSource, NativeNet.TEST): _*)
          cortado.trainWithValidation(dataset.toDF.filter(!flag).select(trainColumns: _*),
            validation, config)
        }
        HadoopFiles.readBytes(target, hadoopConf)
      } finally CortadoClassifier.deleteTree(scratch)
    val model = new CortadoClassificationModel(uid, netProto, netSource, trained,
      log.synchronized(log.toList))
    copyValues(model.setParent(this))
  }

  /**
   * The `phase` net's feed tops as columns: featuresCol and labelCol renamed to the columns
   * its featuresTop and labelTop read.
   */
  private def feedColumns(netText: String, netSource: String, phase: Int): Seq[Column] = {
    val feed = JobPlan.feedLayer(netText, netSource, phase)
    val from = FeedTops.columns(feed, netSource, "fit", $(featuresTop), $(labelTop),
      $(featuresCol), $(labelCol))
    from.indices.map(i => col(s"`${from(i)}`").as(feed.columns(i)))
  }

  override def copy(extra: ParamMap): CortadoClassifier = defaultCopy(extra)
}

object CortadoClassifier extends DefaultParamsReadable[CortadoClassifier] {

  override def load(path: String): CortadoClassifier = super.load(path)

  private def config(solverFile: String, target: String, initial: String, perWorker: Int,
      prefix: String, interval: Int, resume: Boolean, count: Int, link: String,
      overrideText: String): Config =
    Config(solverFile, model = target, weights = initial, devices = perWorker,
      snapshotPrefix = prefix, snapshotInterval = interval, resumeLatest = resume,
      clusterSize = count, connection = link, solverOverrides = overrideText)

  private def deleteTree(dir: Path): Unit = {
    val files = Files.walk(dir)
    try files.sorted(java.util.Comparator.reverseOrder[Path]()).forEach(p => Files.deleteIfExists(p))
    finally files.close()
  }
}
