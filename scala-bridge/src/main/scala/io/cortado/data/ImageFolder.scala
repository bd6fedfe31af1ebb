// SPDX-License-Identifier: Apache-2.0
package io.cortado.data

import java.io.IOException

import org.apache.hadoop.fs.Path
import org.apache.hadoop.io.IOUtils
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.types._
import org.slf4j.LoggerFactory

import io.cortado.{CortadoConfigException, CortadoIOException}
import io.cortado.storage.SerializableConfiguration

/**
 * A folder of image files and a label file as a DataFrame, as CaffeOnSpark's Binary2DataFrame
 * tool made one: `SampleID` (string), `label` (int) and `data` (binary: the file's bytes, a JPEG
 * or PNG image that the net's data layer decodes). Each line of the label file is
 * `file label` or `file label id` (the id defaults to the file's name), the file relative to
 * the image root; blank lines are skipped. Any Hadoop paths.
 *
 * {{{
 * spark-submit --class io.cortado.data.ImageFolder cortado.jar \
 *   -imageRoot hdfs:///images -labelFile hdfs:///images/labels.txt -output hdfs:///images.parquet
 * }}}
 *
 * A MemoryData layer with `source_class: "com.yahoo.ml.caffe.ImageDataFrame"` reads the result
 * (with `dataframe_column_select: "SampleID as id"` to keep the ids), as does a CoSData layer.
 */
object ImageFolder {

  private val log = LoggerFactory.getLogger(getClass)

  val Schema: StructType = StructType(Seq(StructField("SampleID", StringType, nullable = false),
    StructField("label", IntegerType, nullable = false),
    StructField("data", BinaryType, nullable = false)))

  /**
   * The images named by `labelFile` under `imageRoot`. A malformed line fails naming the label
   * file and the line; a missing or unreadable image fails naming its path.
   */
  def load(spark: SparkSession, imageRoot: String, labelFile: String): DataFrame = {
    val conf = new SerializableConfiguration(spark.sparkContext.hadoopConfiguration)
    val root = imageRoot.stripSuffix("/")
    val lines = spark.sparkContext.textFile(labelFile).zipWithIndex.filter(_._1.trim.nonEmpty)
    val rows = lines.mapPartitions { it =>
      it.map { case (line, n) =>
        val fields = line.trim.split("\\s+")
        if (fields.length < 2 || fields.length > 3 || !fields(1).matches("-?\\d+")) {
          throw new CortadoConfigException(s"$labelFile:${n + 1}: '$line' is not 'file label' " +
            "or 'file label id' (label an integer)")
        }
        val path = new Path(s"$root/${fields(0)}")
        val bytes =
          try {
            val fs = path.getFileSystem(conf.value)
            val length = fs.getFileStatus(path).getLen
            if (length > Int.MaxValue) {
              throw new CortadoConfigException(s"$path is $length bytes, too large for an image")
            }
            val buffer = new Array[Byte](length.toInt)
            val in = fs.open(path)
            try IOUtils.readFully(in, buffer, 0, buffer.length) finally in.close()
            buffer
          } catch {
            case e: IOException => throw new CortadoIOException(
              s"$labelFile:${n + 1}: cannot read the image $path: $e", e)
          }
        Row(if (fields.length == 3) fields(2) else fields(0), fields(1).toInt, bytes)
      }
    }
    spark.createDataFrame(rows, Schema)
  }

  /** `-imageRoot R -labelFile L -output O [-outputFormat parquet|json|...]`. */
  def main(args: Array[String]): Unit = {
    val flags = args.grouped(2).collect { case Array(k, v) if k.startsWith("-") =>
      k.stripPrefix("-").stripPrefix("-") -> v
    }.toMap
    val known = Set("imageRoot", "labelFile", "output", "outputFormat")
    val unknown = flags.keySet -- known
    val missing = Seq("imageRoot", "labelFile", "output").filterNot(flags.contains)
    if (args.length % 2 != 0 || unknown.nonEmpty || missing.nonEmpty) {
      System.err.println("Usage: ImageFolder -imageRoot DIR -labelFile FILE -output PATH " +
        "[-outputFormat parquet]" +
        (if (unknown.nonEmpty) s"\nunknown: ${unknown.mkString(", ")}" else "") +
        (if (missing.nonEmpty) s"\nmissing: ${missing.mkString(", ")}" else ""))
      sys.exit(2)
    }
    val spark = SparkSession.builder().appName("ImageFolder").getOrCreate()
    try {
      load(spark, flags("imageRoot"), flags("labelFile"))
        .write.format(flags.getOrElse("outputFormat", "parquet")).save(flags("output"))
      log.info(s"Images of ${flags("labelFile")} written to ${flags("output")}")
    } finally spark.stop()
  }
}
