// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.tools

import org.apache.spark.SparkContext
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.sql.types._

import io.cortado.caffeonspark.Config

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.tools.LMDB2DataFrame`: an LMDB database of Caffe Datum
 * records as a DataFrame of [[schema]]'s columns `id` (the record's key), `label` (a string),
 * `channels`, `height`, `width`, `encoded` and `data` (the image's pixels interleaved, height x
 * width x channels), written in `-outputFormat` (default json, as CaffeOnSpark's); what a
 * MemoryData layer with `source_class: "com.yahoo.ml.caffe.ImageDataFrame"` reads (with
 * `dataframe_format` matching `-outputFormat`).
 *
 * {{{
 * spark-submit --class io.cortado.caffeonspark.tools.LMDB2DataFrame cortado.jar \
 *   -imageRoot file:/data/mnist_train_lmdb -output hdfs:///mnist_train.parquet \
 *   -outputFormat parquet -lmdb_partitions 4
 * }}}
 *
 * `-imageRoot` names the database, read by [[io.cortado.caffeonspark.LmdbRDD]] in
 * `-lmdb_partitions` partitions (see there for the paths it takes and for encoded datums, which
 * come out decoded). A missing database fails naming its path. The output is written under a
 * temporary name and renamed into place; an existing one fails. JSON holds `data` as base64
 * text, which an ImageDataFrame layer does not decode: for training, write parquet.
 */
object LMDB2DataFrame {

  /** The columns, as CaffeOnSpark's. */
  val schema: StructType = StructType(Seq(StructField("id", StringType, nullable = true),
    StructField("label", StringType, nullable = false),
    StructField("channels", IntegerType, nullable = true),
    StructField("height", IntegerType, nullable = true),
    StructField("width", IntegerType, nullable = true),
    StructField("encoded", BooleanType, nullable = true),
    StructField("data", BinaryType, nullable = false)))

  val Usage: String = "Usage: LMDB2DataFrame -imageRoot LMDB_DIR -output PATH " +
    "[-outputFormat json|parquet] [-lmdb_partitions N]"

  /** `-imageRoot LMDB_DIR -output PATH [-outputFormat json|parquet] [-lmdb_partitions N]`. */
  def main(args: Array[String]): Unit = Tool.main("LMDB2DataFrame", Usage, args)(convert)

  /** [[main]] with the session `spark` gives, messages on `err`; returns the exit status. */
  def run(args: Seq[String], spark: () => SparkSession, err: java.io.PrintStream): Int =
    Tool.run("LMDB2DataFrame", Usage, args, spark, err)(convert)

  private def convert(sc: SparkContext, conf: Config): Unit = {
    val rdd = Tool.lmdbRecords(sc, conf)
    val rows = rdd.map { case (id, label, channels, height, width, encoded, data) =>
      Row(id, label, channels, height, width, encoded, data)
    }
    val df = Tool.session(sc).createDataFrame(rows, schema)
    Tool.writeOutput(sc, conf.outputPath)(path => df.write.format(conf.outputFormat).save(path))
  }
}
