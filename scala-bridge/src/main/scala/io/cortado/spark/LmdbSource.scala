// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.File
import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.StandardCharsets

import org.apache.hadoop.fs.Path
import org.apache.spark.TaskContext
import org.apache.spark.sql.{DataFrame, Encoders, SparkSession}

import io.cortado.CortadoConfigException
import io.cortado.jni.NativeLmdb

/**
 * An LMDB database of Caffe Datum records: its local path, record count and record shape.
 *
 * @param source the path as given (`file:/data/mnist_train_lmdb` or `/data/mnist_train_lmdb`)
 * @param path   the local path every executor opens
 */
final case class LmdbInfo(source: String, path: String, count: Long, channels: Int, height: Int,
    width: Int) {

  def shape: Seq[Int] = Seq(channels, height, width)

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
 * are not supported.
 *
 * Reading is distributed: the records are split into `partitions` ranges in key order, and each
 * task opens the database itself (through [[io.cortado.jni.NativeLmdb]]) and decodes its range
 * in chunks of up to 16 MiB. LMDB is memory-mapped, so the database must be on a local file
 * system at the same path on the driver and on every executor: a `file:` URI or a plain path, as
 * in CaffeOnSpark. Other file systems (`hdfs:`, `s3a:`) are refused.
 */
object LmdbSource {

  /** CaffeOnSpark's source class for LMDB databases. */
  val SourceClass = "com.yahoo.ml.caffe.LMDB"

  private val ChunkBytes = 16 << 20

  /**
   * The local path of `source`: a `file:` URI's path, or a plain path made absolute (against
   * the driver's working directory). Throws CortadoConfigException for another scheme,
   * starting with `owner`.
   */
  def localPath(source: String, owner: String = ""): String = {
    val prefix = if (owner.isEmpty) "" else s"$owner: "
    if (source.isEmpty) throw new CortadoConfigException(s"${prefix}the LMDB path is empty")
    val uri =
      try new Path(source).toUri
      catch {
        case e: IllegalArgumentException =>
          throw new CortadoConfigException(s"${prefix}LMDB source '$source' is not a path: $e")
      }
    Option(uri.getScheme).map(_.toLowerCase) match {
      case None | Some("file") => new File(uri.getPath).getAbsolutePath
      case Some(other) =>
        throw new CortadoConfigException(
          s"${prefix}LMDB source '$source' is on '$other:': LMDB databases are memory-mapped " +
            "from a local file system, so Cortado reads them only from a path that every " +
            "executor has locally (file:/... or a plain path, as in CaffeOnSpark); copy the " +
            "database to the same local path on every executor, or convert it to Parquet for " +
            "a CoSData layer")
    }
  }

  /**
   * Opens `source` in the driver and returns its count and shape. Throws CortadoIOException
   * naming the path when it does not exist or is not an LMDB database, CortadoConfigException
   * for a refused scheme or an empty database. Messages start with `owner`.
   */
  def info(source: String, owner: String = ""): LmdbInfo = {
    val path = localPath(source, owner)
    val handle = NativeLmdb.open(path, describe(source, owner))
    try {
      val Array(c, h, w) = NativeLmdb.shape(handle)
      LmdbInfo(source, path, NativeLmdb.count(handle), c, h, w)
    } finally NativeLmdb.dispose(handle)
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

  private def describe(source: String, owner: String): String =
    if (owner.nonEmpty) owner else s"LMDB source $source"

  /**
   * Records [start, end) of the database, read in chunks of up to `chunkBytes` of values as the
   * iterator is consumed (at least one record per chunk). The
   * database is opened on the first record and closed after the last one, or when the task
   * ends (a `limit` may stop early).
   */
  private[spark] def read(db: LmdbInfo, owner: String, start: Long, end: Long,
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
          handle = NativeLmdb.open(db.path, owner)
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
