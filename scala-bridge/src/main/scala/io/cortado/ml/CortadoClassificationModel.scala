// SPDX-License-Identifier: Apache-2.0
package io.cortado.ml

import java.lang.ref.WeakReference
import java.nio.charset.StandardCharsets

import scala.collection.JavaConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.hadoop.conf.Configuration
import org.apache.spark.{SPARK_VERSION, SparkContext}
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.ml.Model

import org.apache.spark.ml.param.{IntParam, Param, ParamMap, ParamPair, Params}
import org.apache.spark.ml.util.{Identifiable, MLReadable, MLReader, MLWritable, MLWriter}
import org.apache.spark.sql.{DataFrame, Dataset, Encoders, Row, SparkSession}
import org.apache.spark.sql.functions.lit
import org.apache.spark.sql.types.StructType

import io.cortado.CortadoConfigException
import io.cortado.jni.NativeLib
import io.cortado.spark.{JobPlan, OnnxExport}
import io.cortado.storage.HadoopFiles

/**
 * A trained Cortado net as a Spark ML Model: `transform` adds, per row, the class scores
 * (`rawPredictionCol`), their softmax (`probabilityCol`), the predicted class index
 * (`predictionCol`, a double, as Spark's classifiers give it) and, for each of `outputBlobs`,
 * that blob's values as a vector column named after it.
 *
 * The TEST phase of the net runs, with these weights, in batches of its feed layer's batch size
 * (CoSData, MemoryData; the last batch of a partition padded) or of its Input's first axis (a
 * deploy net; the last batch smaller). Each executor builds the net once per concurrent task and
 * keeps it for the next partitions and transforms (see [[NetPool]]).
 *
 * Made by [[CortadoClassifier.fit]], loaded with `CortadoClassificationModel.load(path)`, or
 * from a net prototxt and a .caffemodel trained anywhere with
 * [[CortadoClassificationModel.fromCaffe]]. Saved with `write.save(path)`: the folder holds
 * Spark ML's `metadata` (the params), `data/net.prototxt`, `data/weights.caffemodel` and, for a
 * model this API trained, `data/training.log` (Caffe's log format, for `cortado plot`).
 *
 * @param netText     the net prototxt (train_test or deploy)
 * @param netSource   the name of the net in messages (its file)
 * @param weights     the .caffemodel bytes
 * @param trainingLog the training log, Caffe's format with a timestamp per line; empty for a
 *                    model trained elsewhere
 */
class CortadoClassificationModel private[ml] (
    override val uid: String,
    val netText: String,
    val netSource: String,
    val weights: Array[Byte],
    val trainingLog: Seq[String])
    extends Model[CortadoClassificationModel] with CortadoModelParams with MLWritable {

  final val device: IntParam = new IntParam(this, "device",
    "where transform runs the net: -1 the CPU, else the CUDA device of that index", (d: Int) => d >= -1)
  setDefault(device -> -1)

  def getDevice: Int = $(device)

  def setFeaturesCol(value: String): this.type = set(featuresCol, value)
  def setLabelCol(value: String): this.type = set(labelCol, value)
  def setPredictionCol(value: String): this.type = set(predictionCol, value)
  def setProbabilityCol(value: String): this.type = set(probabilityCol, value)
  def setRawPredictionCol(value: String): this.type = set(rawPredictionCol, value)
  def setFeaturesTop(value: String): this.type = set(featuresTop, value)
  def setLabelTop(value: String): this.type = set(labelTop, value)
  def setScoresBlob(value: String): this.type = set(scoresBlob, value)
  def setOutputBlobs(value: Array[String]): this.type = set(outputBlobs, value)
  def setDevice(value: Int): this.type = set(device, value)

  private def data: ModelData = ModelData(netText, netSource, weights, s"$netSource weights",
    $(device))

  /** The net's inputs and outputs as transform uses them; throws when the net does not fit. */
  private def plan(labelColumn: String): InferencePlan = InferencePlan.make(data,
    $(featuresCol), labelColumn, $(featuresTop), $(labelTop), $(scoresBlob), $(outputBlobs).toSeq)

  // The last broadcast of `data`, with its SparkContext and what it holds: the next transforms
  // reuse it.
  @transient private var shippedData
      : Option[(WeakReference[SparkContext], ModelData, Broadcast[ModelData])] = None

  /**
   * `data` broadcast to the executors of `sc`: once per model and device, rather than once per
   * transform (each broadcast serializes, compresses and stores the weights again). Freed with
   * the model.
   */
  private def broadcastData(sc: SparkContext): Broadcast[ModelData] = synchronized {
    val current = data
    shippedData match {
      case Some((context, shipped, b)) if (context.get eq sc) && shipped == current => b
      case _ =>
        val b = sc.broadcast(current)
        shippedData = Some((new WeakReference(sc), current, b))
        b
    }
  }

  override def transformSchema(schema: StructType): StructType = {
    checkInputColumn(schema, $(featuresCol), "features")
    if (schema.fieldNames.contains($(labelCol))) checkInputColumn(schema, $(labelCol), "label")
    plan($(labelCol))
    CortadoModelParams.outputSchema(this, schema)
  }

  override def transform(dataset: Dataset[_]): DataFrame = {
    val outSchema = transformSchema(dataset.schema, logging = true)
    val hasLabel = dataset.schema.fieldNames.contains($(labelCol))
    // Without labels the net's label top reads zeros from a column dropped afterwards.
    val zeros = s"__cortado_label_${uid}"
    val input = if (hasLabel) dataset.toDF else dataset.toDF.withColumn(zeros, lit(0f))
    val labelColumn = if (hasLabel) $(labelCol) else zeros
    val p = plan(labelColumn)
    val shipped = broadcastData(dataset.sparkSession.sparkContext)
    val schema = input.schema
    val (raw, prob, pred) = ($(rawPredictionCol).nonEmpty, $(probabilityCol).nonEmpty,
      $(predictionCol).nonEmpty)
    val added = outSchema.fields.drop(dataset.schema.length)
    // Through Dataset.mapPartitions and a row encoder: Spark converts rows with generated code
    // (RDD[Row] and createDataFrame would convert each field through interpreted converters).
    val result = input.mapPartitions { (rows: Iterator[Row]) =>
      Inference.run(shipped.value, p, schema, rows, raw, prob, pred)
    }(Encoders.row(StructType(schema.fields ++ added)))
    if (hasLabel) result else result.drop(zeros)
  }

  override def copy(extra: ParamMap): CortadoClassificationModel =
    copyValues(new CortadoClassificationModel(uid, netText, netSource, weights, trainingLog),
      extra).setParent(parent)

  /**
   * The training curves (loss raw and smoothed, learning rate, test outputs, against iteration
   * and time) of [[trainingLog]] as a PNG image of `width` x `height` pixels.
   */
  def trainingCurves(width: Int = 1200, height: Int = 900): Array[Byte] = {
    if (trainingLog.isEmpty) {
      throw new CortadoConfigException(s"model $uid has no training log: it was not trained " +
        "by CortadoClassifier")
    }
    val name = s"${new java.io.File(netSource).getName} ($uid)"
    NativeLib.plotLog(trainingLog.mkString("\n") + "\n", name, width, height)
  }

  /** Writes [[trainingCurves]] to a Hadoop path (a temporary name, then renamed). */
  def saveTrainingCurves(path: String, width: Int = 1200, height: Int = 900): Unit =
    HadoopFiles.writeBytesAtomic(path, trainingCurves(width, height),
      SparkSession.active.sparkContext.hadoopConfiguration)

  /**
   * Writes this model as an ONNX model (see docs/onnx.md) to `path`, any Hadoop path: the TEST
   * phase of [[netText]] with [[weights]]. The feed layer's (or a deploy net's Input's) tops
   * become the graph's inputs, holding what the layer's transform gives (for Caffe's LeNet, the
   * pixels times 0.00390625), losses and accuracies are left out, and the other output blobs
   * (the class scores) are the graph's outputs, named after them. Runs in the driver; no Spark
   * job. The model is written under a temporary name and renamed into place; an existing
   * `path` is refused before any work.
   *
   * @param opset        the default-domain opset the model declares, 13 (the default) to 17
   * @param dynamicBatch axis 0 of every graph input and output is the symbolic "N", so that the
   *                     model takes any batch size (the default); false: the net's own shapes
   * @throws io.cortado.CortadoConfigException naming the net and the layer with its type when
   *                     a layer has no ONNX counterpart, or an opset out of range
   */
  def exportOnnx(path: String, opset: Int = OnnxExport.DefaultOpset,
      dynamicBatch: Boolean = true): Unit = {
    val conf = SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
      .map(_.sparkContext.hadoopConfiguration).getOrElse(new Configuration())
    OnnxExport.write(netText, netSource, weights, opset, dynamicBatch, path, conf)
  }

  override def write: MLWriter = new CortadoClassificationModel.Writer(this)

  override def toString: String = s"CortadoClassificationModel: uid=$uid, net=$netSource"
}

object CortadoClassificationModel extends MLReadable[CortadoClassificationModel] {

  /**
   * A model of the net prototxt `netFile` (a train_test net with a feed layer in its TEST phase,
   * or a deploy net with an Input) and the weights in `caffemodelFile` (binary or HDF5), trained
   * anywhere: Caffe, `cortado train`, CaffeOnSpark. Hadoop paths. The weights are checked
   * against the net now, by building it once in the driver.
   */
  def fromCaffe(netFile: String, caffemodelFile: String): CortadoClassificationModel = {
    val conf = SparkSession.active.sparkContext.hadoopConfiguration
    val text = JobPlan.readText(netFile, conf)
    NativeLib.validateNet(text, netFile)
    val weights = JobPlan.protoBytes(HadoopFiles.readBytes(caffemodelFile, conf), state = false,
      caffemodelFile)
    checkWeights(text, netFile, weights, caffemodelFile)
    new CortadoClassificationModel(Identifiable.randomUID("cortado"), text, netFile, weights,
      Seq.empty)
  }

  /** Builds the TEST net and loads `weights`: a mismatch throws, naming the layer and shapes. */
  private def checkWeights(text: String, source: String, weights: Array[Byte],
      weightsName: String): Unit = {
    import io.cortado.jni.NativeNet
    val handle = NativeNet.create(text, source, NativeNet.TEST, -1, 1L)
    try NativeNet.loadWeights(handle, weights, weightsName)
    finally NativeNet.dispose(handle)
  }

  override def read: MLReader[CortadoClassificationModel] = new Reader

  override def load(path: String): CortadoClassificationModel = super.load(path)

  private val NetFile = "data/net.prototxt"
  private val WeightsFile = "data/weights.caffemodel"
  private val LogFile = "data/training.log"

  private class Writer(model: CortadoClassificationModel) extends MLWriter {
    override protected def saveImpl(path: String): Unit = {
      val conf = sparkSession.sparkContext.hadoopConfiguration
      Metadata.save(model, path, conf)
      HadoopFiles.writeBytesAtomic(s"$path/$NetFile", model.netText.getBytes(StandardCharsets.UTF_8),
        conf)
      HadoopFiles.writeBytesAtomic(s"$path/$WeightsFile", model.weights, conf)
      if (model.trainingLog.nonEmpty) {
        HadoopFiles.writeBytesAtomic(s"$path/$LogFile",
          (model.trainingLog.mkString("\n") + "\n").getBytes(StandardCharsets.UTF_8), conf)
      }
    }
  }

  private class Reader extends MLReader[CortadoClassificationModel] {
    override def load(path: String): CortadoClassificationModel = {
      val conf = sparkSession.sparkContext.hadoopConfiguration
      val meta = Metadata.read(path, conf, classOf[CortadoClassificationModel].getName)
      val text = new String(HadoopFiles.readBytes(s"$path/$NetFile", conf), StandardCharsets.UTF_8)
      val weights = HadoopFiles.readBytes(s"$path/$WeightsFile", conf)
      val log =
        if (HadoopFiles.exists(s"$path/$LogFile", conf)) {
          new String(HadoopFiles.readBytes(s"$path/$LogFile", conf), StandardCharsets.UTF_8)
            .split("\n").toSeq.filter(_.nonEmpty)
        } else Seq.empty
      val model = new CortadoClassificationModel(meta.uid, text, meta.netSource(path), weights, log)
      meta.setParams(model)
      model
    }
  }
}

/**
 * Spark ML's metadata file (`metadata/part-00000`: one JSON line with class, uid, Spark version
 * and params), the format of Spark's own stages, so that a Pipeline holding Cortado stages
 * saves and loads as a PipelineModel.
 */
private[ml] final case class Metadata(uid: String, params: Map[String, String], className: String) {

  /** The net's name in messages: the folder it was loaded from. */
  def netSource(path: String): String = s"$path/data/net.prototxt"

  /** Sets the saved params on `instance` (each decoded by its param); others keep defaults. */
  def setParams(instance: Params): Unit = params.foreach { case (name, json) =>
    if (instance.hasParam(name)) {
      val param = instance.getParam(name).asInstanceOf[Param[Any]]
      instance.set(param, param.jsonDecode(json))
    }
  }
}

private[ml] object Metadata {

  private val mapper = new ObjectMapper()

  def save(instance: Params, path: String, conf: Configuration): Unit = {
    def encode(pairs: Seq[ParamPair[_]]): String =
      pairs.map { p =>
        mapper.writeValueAsString(p.param.name) + ":" +
          p.param.asInstanceOf[Param[Any]].jsonEncode(p.value)
      }.mkString("{", ",", "}")
    val set = instance.extractParamMap().toSeq.filter(p => instance.isSet(p.param))
    val defaults = instance.params.toSeq.flatMap { p =>
      instance.getDefault(p).map(v => ParamPair(
        p.asInstanceOf[Param[Any]], v))
    }
    val json = s"""{"class":${mapper.writeValueAsString(instance.getClass.getName)},""" +
      s""""timestamp":${System.currentTimeMillis()},""" +
      s""""sparkVersion":${mapper.writeValueAsString(SPARK_VERSION)},""" +
      s""""uid":${mapper.writeValueAsString(instance.uid)},""" +
      s""""paramMap":${encode(set)},"defaultParamMap":${encode(defaults)}}"""
    HadoopFiles.writeBytesAtomic(s"$path/metadata/part-00000",
      (json + "\n").getBytes(StandardCharsets.UTF_8), conf)
  }

  def read(path: String, conf: Configuration, expectedClass: String): Metadata = {
    val file = s"$path/metadata/part-00000"
    val text = new String(HadoopFiles.readBytes(file, conf), StandardCharsets.UTF_8)
    val root =
      try mapper.readTree(text)
      catch {
        case e: java.io.IOException =>
          throw new CortadoConfigException(s"$file is not Spark ML metadata: ${e.getMessage}")
      }
    def field(name: String): String = Option(root.get(name)).map(_.asText).getOrElse {
      throw new CortadoConfigException(s"$file has no '$name'")
    }
    val className = field("class")
    if (className != expectedClass) {
      throw new CortadoConfigException(s"$path holds a $className, not a $expectedClass")
    }
    def values(name: String): Map[String, String] = Option(root.get(name)).map { node =>
      node.fields().asScala.map(e => e.getKey -> mapper.writeValueAsString(e.getValue)).toMap
    }.getOrElse(Map.empty)
    Metadata(field("uid"), values("paramMap"), className)
  }
}
