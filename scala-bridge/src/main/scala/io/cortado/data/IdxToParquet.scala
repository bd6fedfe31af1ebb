// SPDX-License-Identifier: Apache-2.0
package io.cortado.data

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, DataInputStream}
import java.util.zip.GZIPInputStream

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.types._

import io.cortado.CortadoIOException
import io.cortado.storage.HadoopFiles

/**
 * An IDX file (the format of MNIST and Fashion-MNIST) of unsigned bytes: its dimensions, the
 * first being the number of items, and the values in row-major order.
 */
final case class Idx(dims: Seq[Int], data: Array[Byte]) {

  def count: Int = dims.head

  /** Values per item: 784 for 28 x 28 images, 1 for labels. */
  def itemSize: Int = dims.tail.product
}

object Idx {

  /** Parses IDX bytes, gzipped or not; only the unsigned-byte type (0x08) is supported. */
  def parse(bytes: Array[Byte], source: String): Idx = {
    val raw =
      if (bytes.length >= 2 && (bytes(0) & 0xff) == 0x1f && (bytes(1) & 0xff) == 0x8b) gunzip(bytes)
      else bytes
    def fail(what: String) = throw new CortadoIOException(s"$source: not an IDX file: $what")
    if (raw.length < 4 || raw(0) != 0 || raw(1) != 0) fail("bad magic number")
    if (raw(2) != 0x08) fail(f"data type 0x${raw(2)}%02x; only unsigned bytes (0x08) are read")
    val rank = raw(3).toInt
    if (rank < 1 || raw.length < 4 + 4 * rank) fail(s"$rank dimensions")
    val in = new DataInputStream(new ByteArrayInputStream(raw, 4, 4 * rank))
    val dims = Seq.fill(rank)(in.readInt())
    val size = dims.map(_.toLong).product
    val offset = 4 + 4 * rank
    if (dims.exists(_ < 0) || raw.length - offset != size) {
      fail(s"dimensions ${dims.mkString(" x ")} need $size bytes of data, the file has " +
        s"${raw.length - offset}")
    }
    Idx(dims, java.util.Arrays.copyOfRange(raw, offset, raw.length))
  }

  private def gunzip(bytes: Array[Byte]): Array[Byte] = {
    val in = new GZIPInputStream(new ByteArrayInputStream(bytes))
    val out = new ByteArrayOutputStream(bytes.length * 4)
    val buffer = new Array[Byte](1 << 16)
    var n = in.read(buffer)
    while (n >= 0) { out.write(buffer, 0, n); n = in.read(buffer) }
    in.close()
    out.toByteArray
  }

  def read(path: String, conf: Configuration): Idx = parse(HadoopFiles.readBytes(path, conf), path)
}

/**
 * Converts MNIST-style IDX image and label files (gzipped or not; any Hadoop path) into the
 * DataFrame a CoSData net reads: `id` (long, the item's index), `label` (int) and `data`
 * (binary: the item's raw uint8 pixels, row-major, e.g. 784 bytes for 28 x 28), written as
 * Parquet. A CoSData top of type RAW_IMAGE (channels 1, height 28, width 28) reads `data`, and
 * one of type INT reads `label`.
 *
 * {{{
 * spark-submit --class io.cortado.data.IdxToParquet cortado.jar \
 *   train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz file:/data/train.parquet [more triples]
 * }}}
 */
object IdxToParquet {

  val Schema: StructType = StructType(Seq(
    StructField("id", LongType, nullable = false),
    StructField("label", IntegerType, nullable = false),
    StructField("data", BinaryType, nullable = false)))

  val Usage: String =
    "Usage: IdxToParquet IMAGES LABELS OUTPUT [IMAGES LABELS OUTPUT]...\n" +
      "  IMAGES, LABELS: IDX files (gzipped or not); OUTPUT: the Parquet directory to write"

  /** The DataFrame of `images` and `labels` (as many items each), in `partitions` slices. */
  def toDataFrame(spark: SparkSession, images: Idx, labels: Idx, partitions: Int = 4)
      : DataFrame = {
    if (images.count != labels.count) {
      throw new CortadoIOException(
        s"${images.count} images but ${labels.count} labels: the files do not belong together")
    }
    if (labels.itemSize != 1) {
      throw new CortadoIOException(s"labels have ${labels.itemSize} values each, not 1")
    }
    val size = images.itemSize
    val rows = (0 until images.count).map { i =>
      Row(i.toLong, labels.data(i) & 0xff,
        java.util.Arrays.copyOfRange(images.data, i * size, (i + 1) * size))
    }
    spark.createDataFrame(spark.sparkContext.parallelize(rows, partitions), Schema)
  }

  /** Reads the two IDX files and writes their DataFrame to `output` as Parquet. */
  def convert(spark: SparkSession, images: String, labels: String, output: String): Long = {
    val conf = spark.sparkContext.hadoopConfiguration
    val imageIdx = Idx.read(images, conf)
    toDataFrame(spark, imageIdx, Idx.read(labels, conf)).write.parquet(output)
    imageIdx.count.toLong
  }

  def main(args: Array[String]): Unit = {
    if (args.isEmpty || args.length % 3 != 0) {
      System.err.println(Usage)
      sys.exit(2)
    }
    val spark = SparkSession.builder().appName("IdxToParquet").getOrCreate()
    try {
      args.grouped(3).foreach { case Array(images, labels, output) =>
        val n = convert(spark, images, labels, output)
        println(s"$output: $n rows (id, label, data) from $images and $labels")
      }
    } finally spark.stop()
  }
}
