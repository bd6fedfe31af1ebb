// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.{DataFrame, SparkSession}

import io.cortado.CortadoConfigException
import io.cortado.jni.{DataLayerInfo, NativeImage, NativeLib, NativeNet}
import io.cortado.storage.HadoopFiles

/**
 * Where CaffeOnSpark's main class finds a phase's data: the source named by the net's feed layer
 * of that phase. A CoSData layer names a DataFrame (`cos_data_param.source`, read as
 * `cos_data_param.dataframe_format`, default parquet: [[DataFrameSource]]); a MemoryData or
 * CoSData layer with `source_class: "com.yahoo.ml.caffe.LMDB"` names an LMDB database
 * (`memory_data_param.source` or `cos_data_param.source`: [[LmdbDataSource]]).
 */
trait DataSource {

  /** The feed layer's name. */
  def layer: String

  /** The path (or table) as the layer gives it. */
  def source: String

  /** The layer's `source_class`, as written. */
  def sourceClass: String

  /** The data, with one column per top of the feed layer, named as [[Cortado]] expects. */
  def load(spark: SparkSession): DataFrame
}

/**
 * A DataFrame read with `spark.read.format(format).load(source)`.
 *
 * @param format the DataFrameReader format
 */
final case class DataFrameSource(layer: String, source: String, format: String,
    sourceClass: String) extends DataSource {

  def load(spark: SparkSession): DataFrame =
    spark.read.format(format).load(HadoopFiles.absoluteLocal(source))
}

/**
 * An LMDB database of Datum records read through [[LmdbSource]]: columns `id` (the record's
 * key), `dataColumn` (array<float>) and, when the layer has a label top, `labelColumn` (int).
 *
 * @param db          the database as the driver found it (path, count, shape)
 * @param owner       the net and layer, starting error messages
 */
final case class LmdbDataSource(layer: String, source: String, sourceClass: String,
    dataColumn: String, labelColumn: Option[String], db: LmdbInfo, owner: String)
    extends DataSource {

  def load(spark: SparkSession): DataFrame =
    LmdbSource.load(spark, source, dataColumn, labelColumn, owner = owner)
}

/**
 * A feed layer whose `source_class` names a class of the application's own (on the driver's and
 * executors' class path, e.g. through `--jars`) rather than one of CaffeOnSpark's built-in
 * sources: a subclass of `io.cortado.caffeonspark.DataSource`, which makes the samples' RDD and
 * turns them into batches (see that class). Its data is read through
 * `io.cortado.caffeonspark.DataSource.getSource`, which makes the class with CaffeOnSpark's
 * Config; [[load]] here fails saying so.
 */
final case class ClassSource(layer: String, source: String, sourceClass: String, phase: String,
    owner: String) extends DataSource {

  def load(spark: SparkSession): DataFrame =
    throw new CortadoConfigException(
      s"$owner: source_class $sourceClass is a class of the application's: read it through " +
        "io.cortado.caffeonspark.DataSource.getSource (CaffeOnSpark's API or main class)")
}

object DataSource {

  /**
   * CaffeOnSpark's source classes read through Spark as DataFrames here: DataFrameSource (any
   * DataFrame) and ImageDataFrame (a DataFrame of images, whose columns the CoSData tops name).
   * An empty source_class means a DataFrame too.
   */
  val DataFrameClasses: Set[String] =
    Set("", "com.yahoo.ml.caffe.DataFrameSource", "com.yahoo.ml.caffe.ImageDataFrame")

  /** The LMDB source class as a prototxt string. */
  private val Quoted = "\"" + LmdbSource.SourceClass + "\""

  private val DataLayerHint =
    "Data layers (LMDB or LevelDB) are not read through Spark: name the LMDB database in a " +
      s"MemoryData layer with source_class: $Quoted and " +
      "memory_data_param.source (as CaffeOnSpark's nets do), convert the data to a DataFrame " +
      "for a CoSData layer, or train from the database with `cortado train`"

  /**
   * The data source of the `phase` ("TRAIN" or "TEST") net of the solver at `solverFile`,
   * whose net is found as [[Cortado]] finds it; the layers are read natively
   * (NativeLib.dataLayers). An LMDB database is opened here (in the driver), so a missing one
   * fails now, naming it. A source_class that is none of CaffeOnSpark's built-in sources
   * gives a [[ClassSource]] when the class is on the class path and extends
   * io.cortado.caffeonspark.DataSource. Throws CortadoConfigException, naming the net and the
   * layer, when the phase has no feed layer with a source (a CoSData layer, or a MemoryData
   * layer with source_class), its source cannot be read through Spark (Data layers: LevelDB,
   * LMDB), or its source_class names no such class; CortadoIOException for a missing LMDB
   * database.
   */
  def of(solverFile: String, phase: String, conf: Configuration): DataSource = {
    val (netSource, layers) = dataLayers(solverFile, phase, conf)
    def describe(l: DataLayerInfo) = s"$netSource: layer '${l.name}' (${l.`type`})"
    layers.filter(_.feed) match {
      case Seq(layer) =>
        if (layer.`type` == "MemoryData") memoryData(layer, describe(layer), phase)
        else cosData(layer, describe(layer), phase)
      case Seq() =>
        val hint = layers.collectFirst {
          case l if l.`type` == "Data" || l.`type` == "ImageData" =>
            s" ${describe(l)} reads ${if (l.source.nonEmpty) l.source else "a database"}: " +
              DataLayerHint
          case l if l.`type` == "MemoryData" =>
            if (l.source.nonEmpty) {
              s" ${describe(l)} reads ${l.source} but has no source_class: set source_class: " +
                s"$Quoted to read it as an LMDB database"
            } else {
              s" ${describe(l)} names no source; a MemoryData layer is fed through the " +
                "DataFrame API (io.cortado.spark.Cortado), not by the main class"
            }
        }.getOrElse("")
        throw new CortadoConfigException(
          s"$netSource: the $phase net has no CoSData layer, nor a MemoryData layer with " +
            s"source_class, so there is no data source to read.$hint")
      case several =>
        throw new CortadoConfigException(
          s"$netSource: the $phase net has ${several.size} feed layers (CoSData, or MemoryData " +
            s"with source_class: ${several.map(_.name).mkString(", ")}); one is supported")
    }
  }

  /**
   * The net's name in messages (its file, or the solver's when embedded) and the data layers of
   * its `phase` ("TRAIN" or "TEST") net, for the solver at `solverFile`, as [[of]] reads them.
   */
  private[cortado] def dataLayers(solverFile: String, phase: String, conf: Configuration)
      : (String, Seq[DataLayerInfo]) = {
    val info = NativeLib.solverInfo(JobPlan.readText(solverFile, conf), solverFile)
    val (netText, netSource) = JobPlan.netOf(solverFile, info, conf)
    val phaseId = if (phase == "TRAIN") NativeNet.TRAIN else NativeNet.TEST
    (netSource, NativeLib.dataLayers(netText, netSource, phaseId).toSeq)
  }

  /**
   * A MemoryData layer with source_class LMDB, ImageDataFrame or SeqImageDataSource; its tops
   * name the columns.
   */
  private def memoryData(layer: DataLayerInfo, owner: String, phase: String): DataSource = {
    val sourceClass = layer.sourceClass
    val imageClasses = Set(ImageSource.DataFrameClass, ImageSource.SequenceClass)
    if (sourceClass != LmdbSource.SourceClass && !imageClasses(sourceClass)) {
      return classSource(layer, owner, phase,
        s"on a MemoryData layer Cortado reads an LMDB database with source_class: $Quoted, a " +
          s"DataFrame of images with ${ImageSource.DataFrameClass} or a sequence file of " +
          s"images with ${ImageSource.SequenceClass} (other DataFrames are read by CoSData " +
          "layers)")
    }
    if (layer.source.isEmpty) {
      throw new CortadoConfigException(
        s"$owner: memory_data_param.source is not set: it names the $phase " +
          (if (sourceClass == LmdbSource.SourceClass) "LMDB database" else "images"))
    }
    if (imageClasses(sourceClass)) {
      val columns = layer.columns.toSeq
      val shape = layer.sampleShapes.headOption.map(_.toSeq).getOrElse(Seq.empty)
      if (shape.size != 3 || columns.isEmpty || columns.size > 2 ||
        columns.contains("id") || columns.distinct.size != columns.size) {
        throw new CortadoConfigException(
          s"$owner: an image source needs channels, height and width (memory_data_param) and " +
            "one or two tops (data, then label) named other than 'id'")
      }
      // With crop_size, an image larger than the layer is cut to its size as CaffeOnSpark's
      // transformer cut it: at a random place in TRAIN, at the centre in TEST.
      val crop =
        if (layer.cropSize <= 0) NativeImage.NO_CROP
        else if (phase == "TRAIN") NativeImage.RANDOM_CROP
        else NativeImage.CENTRE_CROP
      return ImageSource(layer.name, layer.source, sourceClass, layer.dataframeFormat,
        layer.columnSelect.toSeq, layer.imageEncoded, columns.head, columns.lift(1), shape,
        owner, crop = crop)
    }
    val columns = layer.columns.toSeq
    val lmdb = lmdbSource(layer, owner, columns.headOption.getOrElse("data"), columns.lift(1))
    // The data top's sample (channels x height x width), as the feed takes it.
    val shape = layer.sampleShapes.headOption.map(_.toSeq).getOrElse(Seq.empty)
    if (shape.product != lmdb.db.sampleSize) {
      throw new CortadoConfigException(
        s"$owner: memory_data_param gives samples of shape ${shape.mkString(" x ")} " +
          s"(${shape.product} values), but the records of LMDB database '${layer.source}' are " +
          s"${lmdb.db.shape.mkString(" x ")} (${lmdb.db.sampleSize} values)")
    }
    lmdb
  }

  /** A CoSData layer: a DataFrame, or an LMDB database with source_class LMDB. */
  private def cosData(layer: DataLayerInfo, owner: String, phase: String): DataSource = {
    val sourceClass = layer.sourceClass
    val known = DataFrameClasses + LmdbSource.SourceClass
    if (!known(sourceClass)) {
      return classSource(layer, owner, phase,
        s"CoSData layers read DataFrames (${DataFrameClasses.filter(_.nonEmpty).mkString(", ")}" +
          s", or none) or LMDB databases (${LmdbSource.SourceClass})")
    }
    if (layer.source.isEmpty) {
      throw new CortadoConfigException(
        s"$owner: cos_data_param.source is not set: it names the $phase data " +
          (if (sourceClass == LmdbSource.SourceClass) "(an LMDB database)"
          else "(a Parquet directory, or a path in cos_data_param.dataframe_format)"))
    }
    if (sourceClass != LmdbSource.SourceClass) {
      val format = if (layer.dataframeFormat.isEmpty) "parquet" else layer.dataframeFormat
      DataFrameSource(layer.name, layer.source, format, sourceClass)
    } else {
      // The data goes to the top that is not a scalar (INT, FLOAT), the label to the other.
      val tops = layer.columns.indices
      def scalar(i: Int) = layer.topTypes(i) == "INT" || layer.topTypes(i) == "FLOAT"
      val ordered = if (tops.size == 2 && scalar(0) && !scalar(1)) tops.reverse else tops
      if (ordered.isEmpty || ordered.size > 2) {
        throw new CortadoConfigException(
          s"$owner: an LMDB source gives a data and a label column, so cos_data_param needs " +
            s"one or two tops, not ${ordered.size}")
      }
      val names = ordered.map(layer.columns(_))
      lmdbSource(layer, owner, names.head, names.lift(1))
    }
  }

  /** The name of the base class of the application's source classes. */
  val UserSourceBase = "io.cortado.caffeonspark.DataSource"

  /**
   * A source_class that is none of the built-in sources: a class of the application's that
   * extends [[UserSourceBase]], found now (in the driver) so that a misspelt name fails before
   * any job, naming the layer, the class and what the built-in sources are (`builtIn`).
   */
  private def classSource(layer: DataLayerInfo, owner: String, phase: String,
      builtIn: String): ClassSource = {
    val name = layer.sourceClass
    val loader = Option(Thread.currentThread.getContextClassLoader)
      .getOrElse(getClass.getClassLoader)
    val found =
      try Some(Class.forName(name, false, loader))
      catch { case _: ClassNotFoundException | _: LinkageError => None }
    found match {
      case None =>
        throw new CortadoConfigException(
          s"$owner: source_class $name is not a class on the class path (add the jar that " +
            s"holds it with --jars); $builtIn; a class of one's own extends $UserSourceBase")
      case Some(c) if !Class.forName(UserSourceBase, false, loader).isAssignableFrom(c) =>
        throw new CortadoConfigException(
          s"$owner: source_class $name does not extend $UserSourceBase; $builtIn")
      case Some(_) => ClassSource(layer.name, layer.source, name, phase, owner)
    }
  }

  /** Opens the database in the driver: a missing path fails before any job. */
  private def lmdbSource(layer: DataLayerInfo, owner: String, data: String,
      label: Option[String]): LmdbDataSource = {
    val columns = data +: label.toSeq
    if (columns.contains("id") || columns.distinct.size != columns.size) {
      throw new CortadoConfigException(
        s"$owner: the tops read from an LMDB database (${columns.mkString(", ")}) need distinct " +
          "names other than 'id', the column of the records' keys")
    }
    LmdbDataSource(layer.name, layer.source, layer.sourceClass, data, label,
      LmdbSource.info(layer.source, owner), owner)
  }
}
