// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import java.lang.reflect.InvocationTargetException
import java.util.concurrent.ArrayBlockingQueue

import org.apache.spark.SparkContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, SparkSession}

import caffe.Caffe.{CoSDataParameter, LayerParameter, SolverParameter, TransformationParameter}
import io.cortado.{CortadoConfigException, CortadoException}
import io.cortado.data.ImageOptions
import io.cortado.jni.{DataLayerInfo, NativeImage}
import io.cortado.spark.{ClassSource, DataFrameSource => CortadoDataFrame,
  DataSource => CortadoSource, ImageSource, LmdbDataSource, LmdbSource}
import io.cortado.storage.HadoopFiles

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.DataSource`: the data of one phase's net, as named by its
 * feed layer (a CoSData layer, or a MemoryData layer with `source_class`). Get one with
 * [[DataSource.getSource]] and hand it to [[CaffeOnSpark]]'s methods.
 *
 * The built-in classes ([[LMDB]], [[DataFrameSource]], [[ImageDataFrame]],
 * [[SeqImageDataSource]], under this package's name or CaffeOnSpark's) are read by Cortado
 * directly, as a DataFrame fed natively. Any other `source_class` names a class of the
 * application's, which extends this class (or [[ImageDataSource]], or [[DataFrameSource]]) and
 * has CaffeOnSpark's constructor `(conf: Config, layerId: Int, isTrain: Boolean)`; it is made in
 * the driver by [[DataSource.getSource]] (which calls [[init]]), and its data goes through
 * CaffeOnSpark's queue, as CaffeOnSpark's processor drove it:
 *
 *  1. [[makeRDD]] (in the driver) gives the samples;
 *  1. in each of that RDD's partitions (on the executors), the source (a copy of the driver's)
 *     is initialised ([[init]], [[resetQueue]]), the task offers the partition's samples to
 *     the queue ([[offer]]) and then [[STOP_MARK]], while a transformer thread calls
 *     [[nextBatch]] with a holder from [[dummyDataHolder]] until it returns false;
 *  1. each call's samples (the ids it set in `sampleIds`, from index 0 on) become rows of the
 *     training DataFrame, one column per top of the feed layer.
 *
 * Where CaffeOnSpark's holder `T2` was one of its JNI classes (`FloatBlob`, `MatVector`), here it
 * is `Array[Array[Float]]`: one array per top of the feed layer in the layer's order, each of
 * `batchSize() x` the top's sample size (channels x height x width for an image), sample `i`
 * at `i x` that size. The sample is the data as pushed: the layer's `transform_param` applies
 * afterwards, natively. CaffeOnSpark's `dummyDataBlobs` (jcaffe's blobs) has no counterpart.
 *
 * @param conf      the job's settings: the solver (`protoFile`) names the net
 * @param layerId   CaffeOnSpark's index of the feed layer in [[Config.netParam]]
 *                  ([[Config.train_data_layer_id]] or [[Config.test_data_layer_id]] from
 *                  getSource); [[layerParameter]] is that layer (null when out of range).
 *                  Cortado finds the phase's feed layer itself for everything else.
 * @param isTrain   the TRAIN net's source (true) or the TEST net's
 * @param STOP_MARK the sample that tells [[nextBatch]] that the partition has no more
 * @tparam T1 a sample, as [[makeRDD]] gives it
 * @tparam T2 a batch holder (see above)
 */
abstract class DataSource[T1, T2](val conf: Config, val layerId: Int, val isTrain: Boolean,
    val STOP_MARK: T1) extends Serializable {
  import DataSource._

  /** The solver, set by [[init]]. */
  @transient protected[caffeonspark] var solverParameter: SolverParameter = _

  /** The feed layer (by [[layerId]]), set by [[init]]. */
  @transient protected[caffeonspark] var layerParameter: LayerParameter = _

  /** The feed layer's transform_param, set by [[init]]. */
  @transient protected[caffeonspark] var transformationParameter: TransformationParameter = _

  /** The samples offered and not yet taken by [[nextBatch]], made by [[resetQueue]]. */
  @transient protected var sourceQueue: ArrayBlockingQueue[T1] = _

  /**
   * What the feed layer reads (`memory_data_param.source` or `cos_data_param.source`), a
   * relative `file:` path made absolute; set by [[init]].
   */
  @transient var sourceFilePath: String = _

  /** The batch size: the feed layer's, set by [[init]] and by [[setBatchSize]]. */
  @transient protected var batchSize_ : Int = -1

  /** The solver's solver_mode (0 CPU, 1 GPU), set by [[init]]. */
  @transient protected var solverMode: Int = -1

  // Kept through serialisation: the executors' copies know the feed layer without reading it.
  private var found: Found = _

  /** The samples: built in the driver, each partition fed through the queue on an executor. */
  def makeRDD(sc: SparkContext): RDD[T1]

  /**
   * Sets the fields above from [[conf]] and the feed layer; called by getSource in the driver
   * and once in every partition on the executors. Subclasses that override it call this one
   * first; returning false fails the job, naming the class.
   */
  def init(): Boolean = {
    solverParameter = conf.solverParameter
    solverMode = solverParameter.getSolverMode.getNumber
    val net = conf.netParam
    if (layerId >= 0 && layerId < net.getLayerCount) {
      layerParameter = net.getLayer(layerId)
      transformationParameter = layerParameter.getTransformParam
    }
    val f = resolved
    batchSize_ = f.batchSize
    sourceFilePath = HadoopFiles.absoluteLocal(f.source.source)
    true
  }

  /**
   * A new, empty queue: room for `capacity_limit` samples (1024 when 0 or less, or above
   * 1024), or the present one emptied when it has that room.
   */
  def resetQueue(capacity_limit: Int = 0): Unit = {
    val capacity = if (capacity_limit <= 0 || capacity_limit > 1024) 1024 else capacity_limit
    if (sourceQueue == null || sourceQueue.remainingCapacity + sourceQueue.size != capacity) {
      sourceQueue = new ArrayBlockingQueue[T1](capacity)
    } else {
      sourceQueue.clear()
    }
  }

  def setBatchSize(size: Int): Unit = batchSize_ = size

  /** The feed layer's batch size (before [[init]]: read from the layer). */
  def batchSize(): Int = if (batchSize_ >= 0) batchSize_ else resolved.batchSize

  /** A holder for [[nextBatch]] to fill: `Array[Array[Float]]` as the class comment says. */
  def dummyDataHolder(): T2

  /** Puts a sample in the queue; false when it is full. */
  def offer(sample: T1): Boolean = sourceQueue.offer(sample)

  /**
   * Takes up to [[batchSize]] samples from the queue into `data`, setting `sampleIds(i)` for
   * each sample `i` it keeps; returns false once it has taken [[STOP_MARK]] (the batch then
   * holds the samples set before it, perhaps none).
   */
  def nextBatch(sampleIds: Array[String], data: T2): Boolean

  /**
   * The built-in sources' [[nextBatch]]: takes samples until [[batchSize]] are kept or
   * [[STOP_MARK]] comes (then returns false); `keep(sample, slot)` stores a sample at `slot`
   * of the holder and gives its id, or null when it leaves the sample out.
   */
  protected[caffeonspark] def takeBatch(sampleIds: Array[String])(
      keep: (T1, Int) => String): Boolean = {
    var count = 0
    while (count < batchSize_) {
      val sample = sourceQueue.take()
      if (sample == STOP_MARK) return false
      val id = keep(sample, count)
      if (id != null) {
        sampleIds(count) = id
        count += 1
      }
    }
    true
  }

  /** Whether the feed layer is a CoSData layer. */
  def useCoSDataLayer(): Boolean = resolved.feed.layerType == "CoSData"

  /** The feed layer's number of tops. */
  def getNumTops(): Int = resolved.feed.columns.size

  /** A CoSData top's type; null for a MemoryData layer's tops. */
  def getTopDataType(index: Int): CoSDataParameter.DataType = {
    val t = resolved.feed.topTypes(index)
    if (t.isEmpty) null else CoSDataParameter.DataType.valueOf(t)
  }

  /** A CoSData top's own transform_param (null when it has none, or for MemoryData). */
  def getTopTransformParam(index: Int): TransformationParameter =
    Option(layerParameter).filter(_.hasCosDataParam).map(_.getCosDataParam)
      .filter(p => index < p.getTopCount && p.getTop(index).hasTransformParam)
      .map(_.getTop(index).getTransformParam).orNull

  /** Whether `source` is of this class's kind (else resolving fails, naming the layer). */
  protected def accepts(source: CortadoSource): Boolean = true

  /** The data as the native API takes it: one column per top of the feed layer. */
  private[caffeonspark] def load(spark: SparkSession): DataFrame = SourceQueue.load(this, spark)

  /** The number of samples in the queue. */
  private[caffeonspark] def queued: Int = if (sourceQueue == null) 0 else sourceQueue.size

  /** The phase's feed layer, found when first needed. */
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

  /** Whether this is exactly `builtIn` (read natively), not an application's subclass of it. */
  protected[caffeonspark] def isExactly(builtIn: Class[_]): Boolean = getClass == builtIn
}

/**
 * CaffeOnSpark's `ImageDataSource`: images, as samples `(id, label, channels, height, width,
 * encoded, data)`, for a MemoryData layer (data top: channels x height x width; label top). A
 * subclass gives [[makeRDD]]; [[nextBatch]] decodes (JPEG, PNG) or rearranges (raw pixels,
 * interleaved as OpenCV holds them) each image into the data top natively, resized with
 * Config.resize, cropped as CaffeOnSpark's sources cropped (random in TRAIN, centre in TEST,
 * with crop_size); an image that cannot be decoded is left out (the executor's log names it),
 * as CaffeOnSpark skipped it. Raw dimensions of 0 mean the layer's.
 */
abstract class ImageDataSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends DataSource[(String, String, Int, Int, Int, Boolean, Array[Byte]),
      Array[Array[Float]]](conf, layerId, isTrain, (null, null, 0, 0, 0, false, null)) {

  @transient private var decode: ImageSource.Record => Array[Float] = _

  def dummyDataHolder(): Array[Array[Float]] = DataSource.holder(resolved.feed, batchSize())

  def nextBatch(sampleIds: Array[String], data: Array[Array[Float]]): Boolean = {
    val feed = resolved.feed
    if (decode == null) decode = DataSource.images(feed, conf.resize, isTrain).pixels
    val size = feed.shapes.head.product
    takeBatch(sampleIds) { case ((id, label, channels, height, width, encoded, bytes), slot) =>
      val record = ImageSource.Record(id, label, channels, height, width, Some(encoded), bytes)
      val values = decode(record)
      if (values != null) {
        System.arraycopy(values, 0, data(0), slot * size, size)
        if (data.length > 1) data(1)(slot) = ImageSource.labelValue(record, feed.owner)
        Option(id).getOrElse("")
      } else null
    }
  }
}

/**
 * An LMDB database of Caffe Datum records, named by a MemoryData (or CoSData) layer with
 * `source_class: "com.yahoo.ml.caffe.LMDB"`, read in Config.lmdb_partitions partitions (see
 * [[io.cortado.spark.LmdbSource]]). [[makeRDD]] gives its records as [[LmdbRDD]] does.
 */
class LMDB(conf: Config, layerId: Int, isTrain: Boolean)
    extends ImageDataSource(conf, layerId, isTrain) {

  override protected def accepts(source: CortadoSource): Boolean =
    !isExactly(classOf[LMDB]) || source.isInstanceOf[LmdbDataSource]

  def makeRDD(sc: SparkContext): RDD[(String, String, Int, Int, Int, Boolean, Array[Byte])] =
    new LmdbRDD(sc, HadoopFiles.absoluteLocal(resolved.source.source), conf.lmdb_partitions)

  override private[caffeonspark] def load(spark: SparkSession): DataFrame =
    resolved.source match {
      case l: LmdbDataSource if isExactly(classOf[LMDB]) =>
        if (conf.lmdb_partitions > 0) {
          LmdbSource.load(spark, l.source, l.dataColumn, l.labelColumn,
            partitions = conf.lmdb_partitions, owner = l.owner)
        } else l.load(spark)
      case _ => super.load(spark)
    }
}

/**
 * A DataFrame named by a CoSData layer (`cos_data_param.source`, read as
 * `cos_data_param.dataframe_format`, default parquet), with `source_class:
 * "com.yahoo.ml.caffe.DataFrameSource"` or none. Its samples are CaffeOnSpark's `(id, values)`:
 * the row's `id` column (else "") and the value of each top's column. [[nextBatch]] takes
 * numbers, strings holding a number, arrays of numbers, Spark ML vectors and bytes (a JPEG or
 * PNG image decoded into the top's shape; a RAW_IMAGE top's pixels interleaved as OpenCV holds
 * them; otherwise one value per byte).
 */
class DataFrameSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends DataSource[(String, Array[Any]), Array[Array[Float]]](conf, layerId, isTrain,
      ("", Array[Any]())) {

  override protected def accepts(source: CortadoSource): Boolean =
    !isExactly(classOf[DataFrameSource]) || source.isInstanceOf[CortadoDataFrame]

  def makeRDD(sc: SparkContext): RDD[(String, Array[Any])] = {
    val feed = resolved.feed
    val format = if (feed.dataframeFormat.isEmpty) "parquet" else feed.dataframeFormat
    val df = DataSource.session(sc).read.format(format)
      .load(HadoopFiles.absoluteLocal(feed.source))
    feed.columns.filterNot(df.columns.contains).foreach { missing =>
      throw new CortadoConfigException(s"${feed.owner}: the DataFrame at ${feed.source} has " +
        s"no column '$missing' (it has: ${df.columns.mkString(", ")})")
    }
    val columns = feed.columns.map(df.schema.fieldIndex)
    val id = if (df.columns.contains("id")) df.schema.fieldIndex("id") else -1
    df.rdd.map { row =>
      val key = if (id < 0 || row.isNullAt(id)) "" else row.get(id).toString
      (key, columns.map(i => row.get(i)).toArray[Any])
    }
  }

  def dummyDataHolder(): Array[Array[Float]] = DataSource.holder(resolved.feed, batchSize())

  def nextBatch(sampleIds: Array[String], data: Array[Array[Float]]): Boolean = {
    val feed = resolved.feed
    takeBatch(sampleIds) { case ((id, values), slot) =>
      feed.columns.indices.foreach { t =>
        val size = feed.shapes(t).product
        val floats = SourceQueue.floats(values(t), feed, t, conf.resize, s"sample '$id'")
        System.arraycopy(floats, 0, data(t), slot * size, size)
      }
      Option(id).getOrElse("")
    }
  }
}

/**
 * A DataFrame of images (`source_class: "com.yahoo.ml.caffe.ImageDataFrame"`): on a MemoryData
 * layer, CaffeOnSpark's columns label and data (optionally id, channels, height, width,
 * encoded; see [[io.cortado.spark.ImageSource]]); on a CoSData layer, the columns its tops
 * name.
 */
class ImageDataFrame(conf: Config, layerId: Int, isTrain: Boolean)
    extends ImageDataSource(conf, layerId, isTrain) {

  override protected def accepts(source: CortadoSource): Boolean =
    !isExactly(classOf[ImageDataFrame]) || (source match {
      case i: ImageSource => i.sourceClass == ImageSource.DataFrameClass
      case d => d.isInstanceOf[CortadoDataFrame]
    })

  def makeRDD(sc: SparkContext): RDD[(String, String, Int, Int, Int, Boolean, Array[Byte])] =
    DataSource.imageRecords(this, sc)

  override private[caffeonspark] def load(spark: SparkSession): DataFrame =
    DataSource.loadBuiltIn(this, classOf[ImageDataFrame], spark)
}

/**
 * CaffeOnSpark's sequence files of images (`source_class:
 * "com.yahoo.ml.caffe.SeqImageDataSource"` on a MemoryData layer): BytesWritable pairs of a
 * serialised (id, label) or (id, label, channels, height, width, encoded) tuple and the image
 * (see [[io.cortado.spark.ImageSource]]).
 */
class SeqImageDataSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends ImageDataSource(conf, layerId, isTrain) {

  override protected def accepts(source: CortadoSource): Boolean =
    !isExactly(classOf[SeqImageDataSource]) || (source match {
      case i: ImageSource => i.sourceClass == ImageSource.SequenceClass
      case _ => false
    })

  def makeRDD(sc: SparkContext): RDD[(String, String, Int, Int, Int, Boolean, Array[Byte])] =
    DataSource.imageRecords(this, sc)

  override private[caffeonspark] def load(spark: SparkSession): DataFrame =
    DataSource.loadBuiltIn(this, classOf[SeqImageDataSource], spark)
}

object DataSource {

  /**
   * The feed layer as the sources use it: each top's column, CoSData type (empty for
   * MemoryData) and sample shape (as pushed), and `owner` (the net and layer) for messages.
   */
  private[caffeonspark] final case class Feed(name: String, layerType: String, source: String,
      dataframeFormat: String, columns: Seq[String], topTypes: Seq[String],
      shapes: Seq[Seq[Int]], imageEncoded: Boolean, cropSize: Int, owner: String)

  /** The phase's source as the native API found it, the net's name, the batch, the layer. */
  private[caffeonspark] final case class Found(source: CortadoSource, netSource: String,
      batchSize: Int, feed: Feed)

  private def phase(isTrain: Boolean): String = if (isTrain) "TRAIN" else "TEST"

  private def describe(sourceClass: String): String =
    if (sourceClass.isEmpty) "(none)" else sourceClass

  /**
   * The data source of the TRAIN (`isTraining`) or TEST net of the solver at `conf.protoFile`:
   * an [[LMDB]], [[DataFrameSource]], [[ImageDataFrame]] or [[SeqImageDataSource]] as the feed
   * layer's `source_class` names it (none: a DataFrame), found through
   * [[io.cortado.spark.DataSource.of]] (an LMDB database is opened now, so a missing one fails
   * here), or an instance of the application's class that `source_class` names (see the class
   * comment), made with CaffeOnSpark's constructor `(conf, layerId, isTraining)`. Its
   * [[DataSource.init]] has run. Throws CortadoConfigException, naming the net and the layer,
   * when the phase has no feed layer with a source that Cortado reads, when the class is
   * missing, does not extend DataSource, has no such constructor or fails to initialise, or
   * when `conf.protoFile` is not set.
   */
  def getSource(conf: Config, isTraining: Boolean): DataSource[_, _] = {
    val f = find(conf, isTraining)
    val layerId = if (isTraining) conf.train_data_layer_id else conf.test_data_layer_id
    val source: DataSource[_, _] = f.source match {
      case c: ClassSource => construct(c, conf, layerId, isTraining)
      case _: LmdbDataSource => new LMDB(conf, layerId, isTraining)
      case i: ImageSource if i.sourceClass == ImageSource.SequenceClass =>
        new SeqImageDataSource(conf, layerId, isTraining)
      case d if d.sourceClass == ImageSource.DataFrameClass =>
        new ImageDataFrame(conf, layerId, isTraining)
      case _ => new DataFrameSource(conf, layerId, isTraining)
    }
    source.use(f)
    initialise(source)
    source
  }

  /**
   * Runs `source.init()` (in the driver from getSource, in each partition from the queue):
   * a false result, or an exception other than Cortado's own, fails with
   * CortadoConfigException naming the feed layer and the class.
   */
  private[caffeonspark] def initialise(source: DataSource[_, _]): Unit = {
    def fail(what: String, cause: Throwable = null): Nothing =
      throw new CortadoConfigException(
        s"${source.resolved.feed.owner}: ${source.getClass.getName}.init() $what", cause)
    val initialised =
      try source.init()
      catch {
        case e: CortadoException => throw e
        case e: Exception => fail(s"failed: $e", e)
      }
    if (!initialised) fail("returned false")
  }

  /**
   * The data of the phase's source for the main class (io.cortado.spark.CortadoOnSpark), when
   * its feed layer names a class of the application's: [[getSource]] with CaffeOnSpark's
   * Config from the same command line.
   */
  private[cortado] def applicationData(spark: SparkSession, args: Seq[String],
      isTraining: Boolean): DataFrame =
    getSource(new Config(spark.sparkContext, args.toArray), isTraining).load(spark)

  /** The application's class `c` names, made with CaffeOnSpark's constructor. */
  private def construct(c: ClassSource, conf: Config, layerId: Int,
      isTraining: Boolean): DataSource[_, _] = {
    val loader = Option(Thread.currentThread.getContextClassLoader)
      .getOrElse(getClass.getClassLoader)
    val cls = Class.forName(c.sourceClass, true, loader)
    val constructor =
      try cls.getConstructor(classOf[Config], Integer.TYPE, java.lang.Boolean.TYPE)
      catch {
        case _: NoSuchMethodException => throw new CortadoConfigException(
          s"${c.owner}: source_class ${c.sourceClass} has no public constructor (conf: " +
            s"${classOf[Config].getName}, layerId: Int, isTrain: Boolean)")
      }
    try {
      constructor.newInstance(conf, Int.box(layerId), Boolean.box(isTraining))
        .asInstanceOf[DataSource[_, _]]
    } catch {
      case e: InvocationTargetException => throw new CortadoConfigException(
        s"${c.owner}: making source_class ${c.sourceClass} failed: ${e.getCause}", e.getCause)
      case e: InstantiationException => throw new CortadoConfigException(
        s"${c.owner}: source_class ${c.sourceClass} is abstract", e)
    }
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
    val source = CortadoSource.of(solver, name, hadoopConf)
    val layer = layers.filter(_.feed).find(_.name == source.layer)
      .getOrElse(throw new IllegalStateException(s"$netSource: no feed layer ${source.layer}"))
    Found(source, netSource, layer.batchSize, feed(layer, netSource))
  }

  private def feed(l: DataLayerInfo, netSource: String): Feed =
    Feed(l.name, l.`type`, l.source, l.dataframeFormat, l.columns.toSeq, l.topTypes.toSeq,
      l.sampleShapes.map(_.toSeq).toSeq, l.imageEncoded, l.cropSize,
      s"$netSource: layer '${l.name}' (${l.`type`})")

  /** An empty holder: one array per top of `feed`, `batch` samples each. */
  private[caffeonspark] def holder(feed: Feed, batch: Int): Array[Array[Float]] =
    feed.shapes.map(shape => new Array[Float](batch * shape.product)).toArray

  /**
   * How the image sources decode a sample into `feed`'s data top (channels x height x width),
   * as CaffeOnSpark's image sources did: resized when `resize`, cropped with crop_size (random
   * in TRAIN, centre in TEST), a corrupt image left out.
   */
  private[caffeonspark] def images(feed: Feed, resize: Boolean, isTrain: Boolean)
      : ImageSource = {
    val shape = feed.shapes.headOption.getOrElse(Seq.empty)
    if (shape.size != 3 || feed.columns.size > 2) {
      throw new CortadoConfigException(
        s"${feed.owner}: an image source needs channels, height and width (memory_data_param) " +
          "and one or two tops (data, then label)")
    }
    val crop =
      if (feed.cropSize <= 0) NativeImage.NO_CROP
      else if (isTrain) NativeImage.RANDOM_CROP
      else NativeImage.CENTRE_CROP
    ImageSource(feed.name, feed.source, ImageSource.DataFrameClass, feed.dataframeFormat,
      Seq.empty, feed.imageEncoded, feed.columns.head, feed.columns.lift(1), shape, feed.owner,
      ImageOptions(resize = resize, skipCorrupt = true), crop)
  }

  /** The records of a built-in image source, as CaffeOnSpark's image samples. */
  private[caffeonspark] def imageRecords(source: ImageDataSource, sc: SparkContext)
      : RDD[(String, String, Int, Int, Int, Boolean, Array[Byte])] = {
    val found = source.resolved
    found.source match {
      case i: ImageSource =>
        val encodedByDefault = i.encodedByDefault
        i.records(session(sc)).map { r =>
          (r.id, r.label, r.channels, r.height, r.width, r.encoded.getOrElse(encodedByDefault),
            r.data)
        }
      case _ => throw new CortadoConfigException(
        s"${found.feed.owner}: ${source.getClass.getSimpleName}.makeRDD reads the images of a " +
          "MemoryData layer; a CoSData layer's DataFrame is read as a DataFrameSource's")
    }
  }

  /** A built-in image class's data: natively when it is exactly `builtIn`, else the queue's. */
  private[caffeonspark] def loadBuiltIn(source: ImageDataSource, builtIn: Class[_],
      spark: SparkSession): DataFrame = source.resolved.source match {
    case i: ImageSource if source.isExactly(builtIn) =>
      i.copy(images = ImageOptions(resize = source.conf.resize)).load(spark)
    case other if source.isExactly(builtIn) => other.load(spark)
    case _ => SourceQueue.load(source, spark)
  }

  /** The SparkSession of `sc`: the active or default one on it, else a new one. */
  private[caffeonspark] def session(sc: SparkContext): SparkSession =
    SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
      .filter(_.sparkContext eq sc)
      .getOrElse(SparkSession.builder().config(sc.getConf).getOrCreate())
}
