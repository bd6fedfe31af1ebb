// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.File
import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.StandardCharsets

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path
import org.apache.spark.{SparkContext, SparkFiles, TaskContext}
import org.apache.spark.sql.{DataFrame, Encoders, SparkSession}
import org.slf4j.LoggerFactory

import io.cortado.{CortadoConfigException, CortadoIOException}
import io.cortado.jni.NativeLmdb

/**
 * An LMDB database of Caffe Datum records: its local path, record count and record shape.
 *
 * @param source the path as given (`file:/data/mnist_train_lmdb`, `/data/mnist_train_lmdb`,
 *               `hdfs:///data/mnist_train_lmdb`)
 * @param path   the local path every executor opens; for a database that Spark copied to
 *               every node (see [[LmdbSource.localPath]]), the name SparkFiles knows it by
 * @param copied whether `path` is a SparkFiles name rather than a path
 */
final case class LmdbInfo(source: String, path: String, count: Long, channels: Int, height: Int,
    width: Int, copied: Boolean = false) {

  def shape: Seq[Int] = Seq(channels, height, width)

  /** Where this node finds the database. */
  def localPath: String = if (copied) SparkFiles.get(path) else path

  /** Values per record: channels x height x width. */
  def sampleSize: Int = channels * height * width
}

/** One record as a row: its key, its values (C x H x W) and its label. */
final case class LmdbRecord(id: String, data: Array[Float], label: Int)

/**
 * LMDB databases of Caffe Datum records (what Caffe's `convert_imageset`, `convert_mnist_data`
 * and `cortado convert_idx` write) read as DataFrames, as CaffeOnSpark's
 * `com.yahoo.ml.caffe.LMDB` source reads them:
 *
 * {{{
 * val df = LmdbSource.load(spark, "file:/data/mnist_train_lmdb")
 * // id: string (the record's key), data: array<float> (C x H x W), label: int
 * }}}
 *
 * Values are the records' uint8 bytes as floats 0..255 (or their float_data as stored):
 * transforms such as `scale` are the net's business ([[Cortado]] applies the layer's
 * transform_param). Every record must have the shape of the first; encoded (JPEG/PNG) datums
 * are decoded natively (into the channels they hold).
 *
 * Reading is distributed: the records are split into `partitions` ranges in key order, and each
 * task opens the database itself (through [[io.cortado.jni.NativeLmdb]]) and decodes its range
 * in chunks of up to 16 MiB. LMDB is memory-mapped from a local file system, so, as in
 * CaffeOnSpark, a `file:` URI or a plain path must hold the database at the same path on the
 * driver and on every executor, and a database on another file system (`hdfs:`, `s3a:`) is
 * copied by Spark to every node once per application (`SparkContext.addFile`, recursive).
 */
object LmdbSource {

  /** CaffeOnSpark's source class for LMDB databases. */
  val SourceClass = "com.yahoo.ml.caffe.LMDB"

  private val ChunkBytes = 16 << 20

  /** The sources copied to every node by this JVM's SparkContexts, each once. */
  private val copies = new java.util.concurrent.ConcurrentHashMap[(Int, String), String]()

  /**
   * Where the driver and the executors find `source`, and whether Spark copied it there: a
   * `file:` URI's path or a plain path, made absolute against the driver's working directory
   * (`file:relative/path`, which CaffeOnSpark took as relative, too); for a path on any other
   * Hadoop file system, the database is copied to every node with `SparkContext.addFile`
   * (once per SparkContext) and the result is the name SparkFiles knows it by. Throws
   * CortadoConfigException starting with `owner` for an empty or malformed path, or when a
   * copy is needed and there is no active SparkSession.
   */
  def localPath(source: String, owner: String = ""): (String, Boolean) = {
    val prefix = if (owner.isEmpty) "" else s"$owner: "
    if (source.isEmpty) throw new CortadoConfigException(s"${prefix}the LMDB path is empty")
    // Hadoop's Path refuses a scheme with a relative path ("file:data/lmdb").
    if (source.startsWith("file:") && !source.startsWith("file:/")) {
      return (new File(source.stripPrefix("file:")).getAbsolutePath, false)
    }
    val uri =
      try new Path(source).toUri
      catch {
        case e: IllegalArgumentException =>
          throw new CortadoConfigException(s"${prefix}LMDB source '$source' is not a path: $e")
      }
    Option(uri.getScheme).map(_.toLowerCase) match {
      case None | Some("file") => (new File(uri.getPath).getAbsolutePath, false)
      case Some(_) =>
        val sc = activeContext(source, prefix)
        val name = new Path(uri.getPath).getName
        val key = (System.identityHashCode(sc), source)
        copies.computeIfAbsent(key, _ => {
          log.info(s"Copying LMDB database $source to every node (SparkContext.addFile)")
          try sc.addFile(source, recursive = true)
          catch {
            case NonFatal(e) => throw new CortadoIOException(
              s"${describe(source, owner)}: cannot copy LMDB database '$source' to the " +
                s"executors: $e", e)
          }
          name
        })
        (name, true)
    }
  }

  private def activeContext(source: String, prefix: String): SparkContext =
    SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
      .map(_.sparkContext)
      .getOrElse(throw new CortadoConfigException(
        s"${prefix}LMDB source '$source' is not on a local file system: it is copied to " +
          "every node through Spark, and there is no active SparkSession"))

  /**
   * Opens `source` in the driver and returns its count and shape (for a database Spark
   * copies, in a task of one small job: the driver leaves Spark's copy as it was fetched, so
   * that an executor sharing the driver's directory, as in local mode, finds it unchanged). Throws CortadoIOException
   * naming the path when it does not exist or is not an LMDB database, CortadoConfigException
   * for a refused scheme or an empty database. Messages start with `owner`.
   */
  def info(source: String, owner: String = ""): LmdbInfo = {
    val (path, copied) = localPath(source, owner)
    val what = describe(source, owner)
    def countAndShape(local: String): (Long, Array[Int]) = {
      val handle = NativeLmdb.open(local, what)
      try { (NativeLmdb.count(handle), NativeLmdb.shape(handle)) }
      finally NativeLmdb.dispose(handle)
    }
    val (count, Array(c, h, w)) =
      if (!copied) countAndShape(path)
      else {
        val sc = activeContext(source, if (owner.isEmpty) "" else s"$owner: ")
        try sc.parallelize(Seq(path), 1).map(name => countAndShape(SparkFiles.get(name)))
          .collect().head
        catch {
          case NonFatal(e) => throw Iterator.iterate(e)(_.getCause).takeWhile(_ != null)
              .collectFirst { case c: io.cortado.CortadoException => c }.getOrElse(e)
        }
      }
    LmdbInfo(source, path, count, c, h, w, copied)
  }

  /**
   * The records of the LMDB database at `source` as a DataFrame of `idColumn` (string: the
   * record's key), `dataColumn` (array<float>: its C x H x W values) and, when given,
   * `labelColumn` (int), in key order over `partitions` partitions (0: Spark's default
   * parallelism, at most one per record). The database is opened in the driver first, so a
   * missing one fails here, naming it, before any job (see [[info]]); a bad record fails in the
   * task that reads it, naming its key (the driver sees a SparkException carrying the Cortado
   * exception).
   */
  def load(spark: SparkSession, source: String, dataColumn: String = "data",
      labelColumn: Option[String] = Some("label"), idColumn: String = "id", partitions: Int = 0,
      owner: String = ""): DataFrame = {
    val columns = Seq(idColumn, dataColumn) ++ labelColumn
    if (columns.distinct.size != columns.size) {
      throw new CortadoConfigException(
        s"${describe(source, owner)}: the id, data and label columns need distinct names, not " +
          columns.mkString(", "))
    }
    val db = info(source, owner)
    val p = if (partitions > 0) partitions else spark.sparkContext.defaultParallelism
    val n = math.max(1L, math.min(p.toLong, db.count)).toInt
    val ranges = (0 until n).map(i => (db.count * i / n, db.count * (i + 1) / n))
    val what = describe(source, owner)
    val records = spark.sparkContext.parallelize(ranges, n).mapPartitions { it =>
      it.flatMap { case (start, end) => read(db, what, start, end) }
    }
    val unused = "_cortado_no_label"
    val df = spark.createDataset(records)(Encoders.product[LmdbRecord])
      .toDF(idColumn, dataColumn, labelColumn.getOrElse(unused))
    if (labelColumn.isDefined) df else df.drop(unused)
  }

  private val log = LoggerFactory.getLogger(getClass)

  private def describe(source: String, owner: String): String =
    if (owner.nonEmpty) owner else s"LMDB source $source"

  /**
   * Records [start, end) of the database, read in chunks of up to `chunkBytes` of values as the
   * iterator is consumed (at least one record per chunk). The
   * database is opened on the first record and closed after the last one, or when the task
   * ends (a `limit` may stop early).
   */
  private[cortado] def read(db: LmdbInfo, owner: String, start: Long, end: Long,
      chunkBytes: Int = ChunkBytes): Iterator[LmdbRecord] = {
    if (start >= end) return Iterator.empty
    val sample = db.sampleSize
    val chunk = math.max(1L, math.min(end - start, chunkBytes / (4L * math.max(1, sample)))).toInt
    new Iterator[LmdbRecord] {
      private var handle = 0L
      private var position = start  // index of the next record to read
      private var pending: Iterator[LmdbRecord] = Iterator.empty
      private lazy val data =
        ByteBuffer.allocateDirect(4 * chunk * sample).order(ByteOrder.nativeOrder())
      private lazy val labels = ByteBuffer.allocateDirect(4 * chunk).order(ByteOrder.nativeOrder())

      private def close(): Unit = if (handle != 0) {
        NativeLmdb.dispose(handle)
        handle = 0
      }

      override def hasNext: Boolean = pending.hasNext || position < end

      override def next(): LmdbRecord = {
        if (!pending.hasNext) {
          if (position >= end) throw new NoSuchElementException("no more LMDB records")
          pending = readChunk()
        }
        pending.next()
      }

      private def readChunk(): Iterator[LmdbRecord] = {
        if (handle == 0) {
          handle = NativeLmdb.open(db.localPath, owner)
          Option(TaskContext.get()).foreach(_.addTaskCompletionListener[Unit](_ => close()))
        }
        val n = math.min(chunk.toLong, end - position).toInt
        val keys = ByteBuffer.wrap(NativeLmdb.read(handle, position, n, data, labels))
        position += n
        if (position >= end) close()
        val values = data.asFloatBuffer()
        val ints = labels.asIntBuffer()
        Array.tabulate(n) { i =>
          val key = new Array[Byte](keys.getInt())
          keys.get(key)
          val v = new Array[Float](sample)
          values.get(v)
          LmdbRecord(new String(key, StandardCharsets.UTF_8), v, ints.get(i))
        }.iterator
      }
    }
  }
}
