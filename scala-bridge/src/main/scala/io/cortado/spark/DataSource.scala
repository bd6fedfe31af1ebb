// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.charset.StandardCharsets

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.{DataFrame, SparkSession}

import io.cortado.CortadoConfigException
import io.cortado.storage.HadoopFiles

/**
 * Where CaffeOnSpark's main class finds a phase's data: the source named by the net's feed layer
 * of that phase. A CoSData layer names a DataFrame (`cos_data_param.source`, read as
 * `cos_data_param.dataframe_format`, default parquet: [[DataFrameSource]]); a MemoryData or
 * CoSData layer with `source_class: "com.yahoo.ml.caffe.LMDB"` names an LMDB database
 * (`memory_data_param.source` or `cos_data_param.source`: [[LmdbDataSource]]).
 */
sealed trait DataSource {

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

  def load(spark: SparkSession): DataFrame = spark.read.format(format).load(source)
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
   * whose net is found as [[Cortado]] finds it. An LMDB database is opened here (in the
   * driver), so a missing one fails now, naming it. Throws CortadoConfigException, naming the
   * net and the layer, when the phase has no feed layer with a source (a CoSData layer, or a
   * MemoryData layer with source_class LMDB), or its source cannot be read through Spark
   * (LevelDB, sequence files, LMDB on HDFS); CortadoIOException for a missing LMDB database.
   */
  def of(solverFile: String, phase: String, conf: Configuration): DataSource = {
    val (netText, netSource) = netOf(solverFile, conf)
    val layers = Prototxt.parse(netText).messages("layer").filter(inPhase(_, phase))
    def describe(l: Prototxt) =
      s"$netSource: layer '${l.get("name").getOrElse("")}' (${l.get("type").getOrElse("")})"
    def isFeed(l: Prototxt) = l.get("type").contains("CoSData") ||
      (l.get("type").contains("MemoryData") && l.get("source_class").exists(_.nonEmpty))
    layers.filter(isFeed) match {
      case Seq(layer) =>
        val name = layer.get("name").getOrElse("")
        val sourceClass = layer.get("source_class").getOrElse("")
        if (layer.get("type").contains("MemoryData")) {
          memoryData(layer, name, sourceClass, describe(layer), phase)
        } else {
          cosData(layer, name, sourceClass, describe(layer), phase)
        }
      case Seq() =>
        val hint = layers.collectFirst {
          case l if l.get("type").exists(Set("Data", "ImageData")) =>
            s" ${describe(l)} reads ${l.message("data_param").flatMap(_.get("source"))
              .getOrElse("a database")}: $DataLayerHint"
          case l if l.get("type").contains("MemoryData") =>
            l.message("memory_data_param").flatMap(_.get("source")).filter(_.nonEmpty) match {
              case Some(source) =>
                s" ${describe(l)} reads $source but has no source_class: set source_class: " +
                  s"$Quoted to read it as an LMDB database"
              case None =>
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
            s"with source_class: ${several.flatMap(_.get("name")).mkString(", ")}); one is " +
            "supported")
    }
  }

  /** A MemoryData layer with source_class: LMDB only; its tops name the columns. */
  private def memoryData(layer: Prototxt, name: String, sourceClass: String, owner: String,
      phase: String): DataSource = {
    if (sourceClass != LmdbSource.SourceClass) {
      throw new CortadoConfigException(
        s"$owner: source_class $sourceClass is not supported on a MemoryData layer; it reads " +
          s"an LMDB database with source_class: $Quoted (DataFrames are " +
          "read by CoSData layers)")
    }
    val param = layer.message("memory_data_param")
    val source = param.flatMap(_.get("source")).getOrElse("")
    if (source.isEmpty) {
      throw new CortadoConfigException(
        s"$owner: memory_data_param.source is not set: it names the $phase LMDB database")
    }
    val tops = layer.all("top")
    val lmdb = lmdbSource(name, source, sourceClass, owner, tops.headOption.getOrElse("data"),
      tops.lift(1))
    val shape = Seq("channels", "height", "width").map(f => param.map(_.int(f, 0)).getOrElse(0))
    if (shape.product != lmdb.db.sampleSize) {
      throw new CortadoConfigException(
        s"$owner: memory_data_param gives samples of shape ${shape.mkString(" x ")} " +
          s"(${shape.product} values), but the records of LMDB database '$source' are " +
          s"${lmdb.db.shape.mkString(" x ")} (${lmdb.db.sampleSize} values)")
    }
    lmdb
  }

  /** A CoSData layer: a DataFrame, or an LMDB database with source_class LMDB. */
  private def cosData(layer: Prototxt, name: String, sourceClass: String, owner: String,
      phase: String): DataSource = {
    val cos = layer.message("cos_data_param")
    val source = cos.flatMap(_.get("source")).getOrElse("")
    val known = DataFrameClasses + LmdbSource.SourceClass
    if (!known(sourceClass)) {
      throw new CortadoConfigException(
        s"$owner: source_class $sourceClass is not supported; CoSData layers read DataFrames " +
          s"(${DataFrameClasses.filter(_.nonEmpty).mkString(", ")}, or none) or LMDB " +
          s"databases (${LmdbSource.SourceClass})")
    }
    if (source.isEmpty) {
      throw new CortadoConfigException(
        s"$owner: cos_data_param.source is not set: it names the $phase data " +
          (if (sourceClass == LmdbSource.SourceClass) "(an LMDB database)"
          else "(a Parquet directory, or a path in cos_data_param.dataframe_format)"))
    }
    if (sourceClass != LmdbSource.SourceClass) {
      DataFrameSource(name, source, cos.flatMap(_.get("dataframe_format")).getOrElse("parquet"),
        sourceClass)
    } else {
      // The data goes to the top that is not a scalar (INT, FLOAT), the label to the other.
      val tops = cos.toSeq.flatMap(_.messages("top"))
      def scalar(t: Prototxt) = t.get("type").exists(Set("INT", "FLOAT"))
      val ordered = if (tops.size == 2 && scalar(tops.head) && !scalar(tops(1))) tops.reverse
        else tops
      if (ordered.isEmpty || ordered.size > 2) {
        throw new CortadoConfigException(
          s"$owner: an LMDB source gives a data and a label column, so cos_data_param needs " +
            s"one or two tops, not ${ordered.size}")
      }
      val names = ordered.map(_.get("name").getOrElse(""))
      lmdbSource(name, source, sourceClass, owner, names.head, names.lift(1))
    }
  }

  /** Opens the database in the driver: a missing path fails before any job. */
  private def lmdbSource(name: String, source: String, sourceClass: String, owner: String,
      data: String, label: Option[String]): LmdbDataSource = {
    val columns = data +: label.toSeq
    if (columns.contains("id") || columns.distinct.size != columns.size) {
      throw new CortadoConfigException(
        s"$owner: the tops read from an LMDB database (${columns.mkString(", ")}) need distinct " +
          "names other than 'id', the column of the records' keys")
    }
    LmdbDataSource(name, source, sourceClass, data, label, LmdbSource.info(source, owner), owner)
  }

  /** The net text and its source name: the solver's `net`/`train_net` file, or `net_param`. */
  private def netOf(solverFile: String, conf: Configuration): (String, String) = {
    val solver = Prototxt.parse(readText(solverFile, conf))
    solver.get("net").orElse(solver.get("train_net")) match {
      case Some(path) =>
        val p = new Path(path)
        val resolved =
          if (p.isAbsolute || HadoopFiles.exists(path, conf)) path
          else new Path(new Path(solverFile).getParent, p).toString
        (readText(resolved, conf), resolved)
      case None =>
        val embedded = solver.message("net_param").orElse(solver.message("train_net_param"))
        (embedded.map(_.text).getOrElse {
          throw new CortadoConfigException(s"$solverFile: the solver names no net")
        }, solverFile)
    }
  }

  private def readText(path: String, conf: Configuration): String =
    new String(HadoopFiles.readBytes(path, conf), StandardCharsets.UTF_8)

  private def inPhase(layer: Prototxt, phase: String): Boolean = {
    val includes = layer.messages("include")
    if (includes.nonEmpty) includes.exists(r => r.get("phase").forall(_ == phase))
    else !layer.messages("exclude").exists(_.get("phase").contains(phase))
  }
}
