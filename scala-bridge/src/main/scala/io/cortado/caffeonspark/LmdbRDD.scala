// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import org.apache.spark.{Partition, SparkContext, TaskContext}
import org.apache.spark.rdd.RDD

import io.cortado.CortadoConfigException
import io.cortado.spark.{LmdbInfo, LmdbSource}

/** Records `[start, end)` of the database `db`, in key order. */
private[caffeonspark] final class LmdbPartition(override val index: Int, val db: LmdbInfo,
    val start: Long, val end: Long) extends Partition

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.LmdbRDD`: the records of an LMDB database of Caffe Datum
 * records as tuples `(id, label, channels, height, width, encoded, data)`, the id being the
 * record's key, the label the Datum's label as a string and `data` the image's pixels
 * interleaved as OpenCV holds them (height x width x channels), the layout CaffeOnSpark's image
 * sources (ImageDataFrame, SeqImageDataSource) and Cortado's [[io.cortado.spark.ImageSource]]
 * read.
 *
 * {{{
 * val rdd = new LmdbRDD(sc, "file:/data/mnist_train_lmdb", 4)
 * rdd.map { case (id, label, c, h, w, encoded, data) => ... }
 * }}}
 *
 * The database is read natively, as [[io.cortado.spark.LmdbSource]] reads it (same paths: a
 * `file:` URI or plain path must hold the database on every node; one on HDFS or any other
 * Hadoop file system is copied to every node once). It is opened in the driver when the
 * partitions are first asked for, so a missing database fails there, naming its path; the
 * records are split into `numPartitions` ranges in key order (0 or less: Spark's default
 * parallelism; at most one per record), each task decoding its own range.
 *
 * Differences from CaffeOnSpark:
 *  - Encoded (JPEG/PNG) datums are decoded natively: `data` holds their pixels (BGR, or gray
 *    for one channel) and `encoded` is false, where CaffeOnSpark passed the encoded bytes on.
 *    Every record must have the first record's shape.
 *  - Datums whose `float_data` holds values other than whole numbers 0..255 fail, naming the
 *    record's key: the tuple carries bytes (CaffeOnSpark gave such datums' empty `data`).
 *  - Partitions are ranges of record indices, all of one size give or take one; CaffeOnSpark's
 *    started each at a key found by walking the database in the driver.
 *
 * @param sc            the application's SparkContext
 * @param lmdb_path     the database's directory, a Hadoop path (`file:/...`, `hdfs:///...`)
 * @param numPartitions partitions wanted
 */
class LmdbRDD(@transient val sc: SparkContext, val lmdb_path: String, val numPartitions: Int)
    extends RDD[(String, String, Int, Int, Int, Boolean, Array[Byte])](sc, Nil) {

  override protected def getPartitions: Array[Partition] = {
    // A database on another file system is copied through the session's SparkContext.
    DataSource.session(sc)
    val db = LmdbSource.info(lmdb_path)
    val wanted = if (numPartitions > 0) numPartitions else sc.defaultParallelism
    val n = math.max(1L, math.min(wanted.toLong, db.count)).toInt
    logInfo(s"LMDB database $lmdb_path: ${db.count} records of " +
      s"${db.shape.mkString(" x ")} in $n partitions")
    Array.tabulate[Partition](n) { i =>
      new LmdbPartition(i, db, db.count * i / n, db.count * (i + 1) / n)
    }
  }

  override def compute(split: Partition, context: TaskContext)
      : Iterator[(String, String, Int, Int, Int, Boolean, Array[Byte])] = {
    val part = split.asInstanceOf[LmdbPartition]
    val db = part.db
    LmdbSource.read(db, s"LMDB source $lmdb_path", part.start, part.end).map { record =>
      val data = LmdbRDD.interleave(record.data, db.channels, db.height * db.width,
        s"LMDB source $lmdb_path: record '${record.id}'")
      (record.id, record.label.toString, db.channels, db.height, db.width, false, data)
    }
  }
}

private[caffeonspark] object LmdbRDD {

  /**
   * `values` (planar: `channels` planes of `pixels` values, each a whole number 0..255) as
   * bytes interleaved pixel by pixel (pixel p's channels at p * channels ...). Throws
   * CortadoConfigException starting with `what` for a value that is not a byte.
   */
  def interleave(values: Array[Float], channels: Int, pixels: Int, what: String): Array[Byte] = {
    require(values.length == channels * pixels,
      s"$what: ${values.length} values, not $channels x $pixels")
    val out = new Array[Byte](values.length)
    var c = 0
    while (c < channels) {
      var p = 0
      while (p < pixels) {
        val v = values(c * pixels + p)
        if (!(v >= 0 && v <= 255 && v == v.toInt)) {
          throw new CortadoConfigException(s"$what holds the value $v (channel $c, pixel $p), " +
            "not a byte 0..255: only uint8 datums convert to image bytes")
        }
        out(p * channels + c) = v.toInt.toByte
        p += 1
      }
      c += 1
    }
    out
  }
}
