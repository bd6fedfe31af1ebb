// SPDX-License-Identifier: Apache-2.0
package io.cortado.data

import java.io.{BufferedInputStream, DataInputStream, EOFException, FileNotFoundException,
  IOException, InputStream}
import java.util.zip.GZIPInputStream

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.SerializableWritable
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.types._

import io.cortado.CortadoIOException

/**
 * IDX files (the format of MNIST and Fashion-MNIST) of unsigned bytes, gzipped or not, on any
 * Hadoop path: a header with the dimensions, the first being the number of items, then the
 * values in row-major order.
 */
object Idx {

  /** The dimensions of an IDX file, from its header alone (gzipped or not). */
  def readDims(path: String, conf: Configuration): Seq[Int] = withData(path, conf) { (dims, _) =>
    dims
  }

  /**
   * Items [first, first + count) of an IDX file (gzipped or not), read as a stream: the header,
   * then only the bytes up to the last item wanted, so a task reads its slice of a large file.
   */
  def readItems(path: String, conf: Configuration, first: Long, count: Int): Array[Byte] =
    withData(path, conf) { (dims, in) =>
      val size = dims.tail.map(_.toLong).product
      if (first < 0 || count < 0 || first + count > dims.head) {
        throw new CortadoIOException(
          s"$path: items $first to ${first + count} asked, the file has ${dims.head}")
      }
      if (count.toLong * size > Int.MaxValue - 8) {
        throw new CortadoIOException(s"$path: $count items of $size bytes do not fit one array")
      }
      skipFully(in, first * size, path)
      val bytes = new Array[Byte]((count * size).toInt)
      try new DataInputStream(in).readFully(bytes)
      catch { case _: EOFException => throw new CortadoIOException(s"$path: truncated") }
      bytes
    }

  /** Opens `path`, reads the header, and hands `f` the dimensions and the stream at the data. */
  private def withData[T](path: String, conf: Configuration)(f: (Seq[Int], InputStream) => T): T = {
    def fail(what: String) = throw new CortadoIOException(s"$path: not an IDX file: $what")
    val p = new Path(path)
    val raw = try new BufferedInputStream(p.getFileSystem(conf).open(p), 1 << 16)
    catch {
      case e: FileNotFoundException => throw new CortadoIOException(s"$path does not exist", e)
      case e: IOException => throw new CortadoIOException(s"cannot read $path: $e", e)
    }
    try {
      raw.mark(2)
      val gzipped = raw.read() == 0x1f && raw.read() == 0x8b
      raw.reset()
      val in = new DataInputStream(if (gzipped) new GZIPInputStream(raw, 1 << 16) else raw)
      val magic = try in.readInt() catch { case _: EOFException => fail("bad magic number") }
      if ((magic >>> 16) != 0) fail("bad magic number")
      if (((magic >> 8) & 0xff) != 0x08) {
        fail(f"data type 0x${(magic >> 8) & 0xff}%02x; only unsigned bytes (0x08) are read")
      }
      val rank = magic & 0xff
      if (rank < 1) fail(s"$rank dimensions")
      val dims = try Seq.fill(rank)(in.readInt())
      catch { case _: EOFException => fail(s"$rank dimensions") }
      if (dims.exists(_ < 0)) fail(s"dimensions ${dims.mkString(" x ")}")
      f(dims, in)
    } catch {
      case e: IOException => throw new CortadoIOException(s"cannot read $path: $e", e)
    } finally raw.close()
  }

  private def skipFully(in: InputStream, bytes: Long, path: String): Unit = {
    var left = bytes
    while (left > 0) {
      val n = in.skip(left)
      if (n > 0) left -= n
      else if (in.read() < 0) throw new CortadoIOException(s"$path: truncated")
      else left -= 1
    }
  }
}

/**
 * Converts MNIST-style IDX image and label files (gzipped or not; any Hadoop path) into the
 * DataFrame a CoSData net reads: `id` (long, the item's index), `label` (int) and `data`
 * (binary: the item's raw uint8 pixels, row-major, e.g. 784 bytes for 28 x 28), written as
 * Parquet. A CoSData top of type RAW_IMAGE (channels 1, height 28, width 28) reads `data`, and
 * one of type INT reads `label`. The executors read the files (any Hadoop path they can reach),
 * each its own slice; the driver reads only their headers.
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

  /**
   * The DataFrame of the IDX files at `images` and `labels`, read in the tasks: the driver reads
   * the two headers only, and each of the `partitions` tasks (default: one per 10,000 items, at
   * least the default parallelism) reads its own slice of both files, so no data travels
   * through the driver and files larger than its memory convert.
   */
  def readDataFrame(spark: SparkSession, images: String, labels: String,
      partitions: Int = 0): DataFrame = read(spark, images, labels, partitions)._1

  /** readDataFrame's DataFrame and its row count, from the headers the driver reads. */
  private def read(spark: SparkSession, images: String, labels: String,
      partitions: Int): (DataFrame, Long) = {
    val sc = spark.sparkContext
    val imageDims = Idx.readDims(images, sc.hadoopConfiguration)
    val labelDims = Idx.readDims(labels, sc.hadoopConfiguration)
    if (imageDims.head != labelDims.head) {
      throw new CortadoIOException(s"$images has ${imageDims.head} images but $labels has " +
        s"${labelDims.head} labels: the files do not belong together")
    }
    if (labelDims.tail.product != 1) {
      throw new CortadoIOException(
        s"$labels: labels have ${labelDims.tail.product} values each, not 1")
    }
    val count = imageDims.head
    val size = imageDims.tail.product
    val slices = math.max(1, math.min(count,
      if (partitions > 0) partitions else math.max(sc.defaultParallelism, (count + 9999) / 10000)))
    val conf = new SerializableWritable(sc.hadoopConfiguration)
    val rows = sc.parallelize(0 until slices, slices).flatMap { s =>
      val first = count.toLong * s / slices
      val n = (count.toLong * (s + 1) / slices - first).toInt
      val pixels = Idx.readItems(images, conf.value, first, n)
      val classes = Idx.readItems(labels, conf.value, first, n)
      Iterator.tabulate(n) { i =>
        Row(first + i, classes(i) & 0xff, java.util.Arrays.copyOfRange(pixels, i * size,
          (i + 1) * size))
      }
    }
    (spark.createDataFrame(rows, Schema), count.toLong)
  }

  /** Converts the two IDX files, in the tasks, to Parquet at `output`; returns the row count. */
  def convert(spark: SparkSession, images: String, labels: String, output: String): Long = {
    val (df, count) = read(spark, images, labels, partitions = 0)
    df.write.parquet(output)
    count
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
