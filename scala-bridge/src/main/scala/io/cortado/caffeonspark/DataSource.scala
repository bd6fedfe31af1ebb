// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import org.apache.spark.sql.{DataFrame, Row, SparkSession}

import io.cortado.CortadoConfigException
import io.cortado.data.ImageOptions
import io.cortado.spark.{DataFrameSource => CortadoDataFrame, DataSource => CortadoSource,
  ImageSource, LmdbDataSource, LmdbSource}

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.DataSource`: the data of one phase's net, as named by its
 * feed layer (a CoSData layer, or a MemoryData layer with `source_class`). Get one with
 * [[DataSource.getSource]] and hand it to [[CaffeOnSpark]]'s methods. Cortado reads the data
 * as a DataFrame (see [[io.cortado.spark.DataSource]]) and feeds it natively, so this class
 * has none of CaffeOnSpark's queue and batch methods (`makeRDD`, `init`, `nextBatch`, ...),
 * and a subclass of one's own is not used by Cortado.
 *
 * The feed layer is found when first needed (the prototxts are read then, with the Config's
 * Hadoop configuration), and a source of the wrong kind for the layer's `source_class` throws
 * CortadoConfigException then.
 *
 * @param conf    the job's settings: the solver (`protoFile`) names the net
 * @param layerId CaffeOnSpark's index of the feed layer in the net; unused (Cortado finds the
 *                phase's feed layer itself), and -1 from getSource
 * @param isTrain the TRAIN net's source (true) or the TEST net's
 * @tparam T1 a sample: a Row of the DataFrame here
 * @tparam T2 CaffeOnSpark's batch holder: the rows of a batch here (never built)
 */
abstract class DataSource[T1, T2](val conf: Config, val layerId: Int, val isTrain: Boolean)
    extends Serializable {
  import DataSource._

  @transient private var found: Found = _

  /** Whether `source` is of this class's kind (else resolving fails, naming the layer). */
  protected def accepts(source: CortadoSource): Boolean

  /** The feed layer's batch size. */
  def batchSize(): Int = resolved.batchSize

  /** The path (or table) the feed layer reads, as it gives it. */
  def sourceFilePath: String = resolved.source.source

  /** The native API's source of this phase. */
  private[caffeonspark] def cortadoSource: CortadoSource = resolved.source

  /**
   * The data as the native API takes it: one column per top of the feed layer (images resized
   * with Config.resize).
   */
  private[caffeonspark] def load(spark: SparkSession): DataFrame = cortadoSource match {
    case i: ImageSource => i.copy(images = ImageOptions(resize = conf.resize)).load(spark)
    case other => other.load(spark)
  }

  private[caffeonspark] def resolved: Found = {
    if (found == null) use(find(conf, isTrain))
    found
  }

  /** Takes `f` as this source's, when it is of this class's kind. */
  private[caffeonspark] def use(f: Found): Unit = {
    if (!accepts(f.source)) {
      throw new CortadoConfigException(
        s"${f.netSource}: the ${phase(isTrain)} net's feed layer '${f.source.layer}' has " +
          s"source_class ${describe(f.source.sourceClass)}, which ${getClass.getSimpleName} " +
          "does not read: use DataSource.getSource")
    }
    found = f
  }
}

/**
 * An LMDB database of Caffe Datum records, named by a MemoryData (or CoSData) layer with
 * `source_class: "com.yahoo.ml.caffe.LMDB"`, read in Config.lmdb_partitions partitions (see
 * [[io.cortado.spark.LmdbSource]]).
 */
class LMDB(conf: Config, layerId: Int, isTrain: Boolean)
    extends DataSource[Row, Array[Row]](conf, layerId, isTrain) {

  protected def accepts(source: CortadoSource): Boolean = source.isInstanceOf[LmdbDataSource]

  override private[caffeonspark] def load(spark: SparkSession): DataFrame =
    cortadoSource match {
      case l: LmdbDataSource if conf.lmdb_partitions > 0 =>
        LmdbSource.load(spark, l.source, l.dataColumn, l.labelColumn,
          partitions = conf.lmdb_partitions, owner = l.owner)
      case other => other.load(spark)
    }
}

/**
 * A DataFrame named by a CoSData layer (`cos_data_param.source`, read as
 * `cos_data_param.dataframe_format`, default parquet), with `source_class:
 * "com.yahoo.ml.caffe.DataFrameSource"` or none.
 */
class DataFrameSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends DataSource[Row, Array[Row]](conf, layerId, isTrain) {

  protected def accepts(source: CortadoSource): Boolean = source.isInstanceOf[CortadoDataFrame]
}

/**
 * A DataFrame of images (`source_class: "com.yahoo.ml.caffe.ImageDataFrame"`): on a MemoryData
 * layer, CaffeOnSpark's columns label and data (optionally id, channels, height, width,
 * encoded; see [[io.cortado.spark.ImageSource]]); on a CoSData layer, the columns its tops
 * name.
 */
class ImageDataFrame(conf: Config, layerId: Int, isTrain: Boolean)
    extends DataSource[Row, Array[Row]](conf, layerId, isTrain) {

  protected def accepts(source: CortadoSource): Boolean = source match {
    case i: ImageSource => i.sourceClass == ImageSource.DataFrameClass
    case d => d.isInstanceOf[CortadoDataFrame]
  }
}

/**
 * CaffeOnSpark's sequence files of images (`source_class:
 * "com.yahoo.ml.caffe.SeqImageDataSource"` on a MemoryData layer): BytesWritable pairs of a
 * serialised (id, label) or (id, label, channels, height, width, encoded) tuple and the image
 * (see [[io.cortado.spark.ImageSource]]).
 */
class SeqImageDataSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends DataSource[Row, Array[Row]](conf, layerId, isTrain) {

  protected def accepts(source: CortadoSource): Boolean = source match {
    case i: ImageSource => i.sourceClass == ImageSource.SequenceClass
    case _ => false
  }
}

object DataSource {

  /** The phase's source as the native API found it, the net's name and the batch size. */
  private[caffeonspark] final case class Found(source: CortadoSource, netSource: String,
      batchSize: Int)

  private val ImageDataFrameClass = "com.yahoo.ml.caffe.ImageDataFrame"

  private def phase(isTrain: Boolean): String = if (isTrain) "TRAIN" else "TEST"

  private def describe(sourceClass: String): String =
    if (sourceClass.isEmpty) "(none)" else sourceClass

  /**
   * The data source of the TRAIN (`isTraining`) or TEST net of the solver at `conf.protoFile`:
   * an [[LMDB]], [[DataFrameSource]] or [[ImageDataFrame]] as the feed layer's
   * `source_class` names it (none: a DataFrame), found through
   * [[io.cortado.spark.DataSource.of]] (an LMDB database is opened now, so a missing one fails
   * here), or a [[SeqImageDataSource]] for a sequence file of images. Throws
   * CortadoConfigException, naming the net and the layer, when the phase has no feed layer with
   * a source that Cortado reads, or when `conf.protoFile` is not set.
   */
  def getSource(conf: Config, isTraining: Boolean): DataSource[_, _] = {
    val f = find(conf, isTraining)
    val source: DataSource[_, _] = f.source match {
      case _: LmdbDataSource => new LMDB(conf, -1, isTraining)
      case i: ImageSource if i.sourceClass == ImageSource.SequenceClass =>
        new SeqImageDataSource(conf, -1, isTraining)
      case d if d.sourceClass == ImageDataFrameClass => new ImageDataFrame(conf, -1, isTraining)
      case _ => new DataFrameSource(conf, -1, isTraining)
    }
    source.use(f)
    source
  }

  /** The phase's feed layer, read through the native API. */
  private[caffeonspark] def find(conf: Config, isTraining: Boolean): Found = {
    val solver = Option(conf.protoFile).getOrElse("")
    if (solver.isEmpty) {
      throw new CortadoConfigException(
        "Config.protoFile (-conf, the solver prototxt) is not set: it names the net whose " +
          "data layers give the data")
    }
    val name = phase(isTraining)
    val hadoopConf = conf.hadoopConf
    val (netSource, layers) = CortadoSource.dataLayers(solver, name, hadoopConf)
    val feeds = layers.filter(_.feed)
    val source = CortadoSource.of(solver, name, hadoopConf)
    val batch = feeds.find(_.name == source.layer).map(_.batchSize).getOrElse(0)
    Found(source, netSource, batch)
  }
}
