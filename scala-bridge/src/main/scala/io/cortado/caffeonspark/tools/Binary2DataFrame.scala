// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.tools

import org.apache.spark.SparkContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.types.StructType

import io.cortado.caffeonspark.Config
import io.cortado.data.ImageFolder
import io.cortado.storage.HadoopFiles

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.tools.Binary2DataFrame`: a folder of image files and a
 * label file as a DataFrame of `SampleID` (string), `label` (int) and `data` (binary: the image
 * file's bytes), written in `-outputFormat` (default json, as CaffeOnSpark's); what a
 * MemoryData layer with `source_class: "com.yahoo.ml.caffe.ImageDataFrame"` reads (with
 * `image_encoded: true`, and `dataframe_format` matching `-outputFormat`).
 *
 * {{{
 * spark-submit --class io.cortado.caffeonspark.tools.Binary2DataFrame cortado.jar \
 *   -imageRoot hdfs:///images -labelFile hdfs:///images/labels.txt \
 *   -output hdfs:///images.parquet -outputFormat parquet
 * }}}
 *
 * The conversion is [[io.cortado.data.ImageFolder]]'s: lines `file label id` as CaffeOnSpark's,
 * and also `file label` (the id is then the file's name); blank lines are skipped. Differences
 * from CaffeOnSpark, which logged a bad line or an unreadable image and wrote a row of nulls: a
 * malformed line fails naming the label file and the line, and a missing or unreadable image
 * fails naming that line and the image's path. The output is written under a temporary name and
 * renamed into place; an existing one fails. JSON holds `data` as base64 text, which an
 * ImageDataFrame layer does not decode: for training, write parquet.
 *
 * @param sc   the application's SparkContext
 * @param conf its `imageRoot` and `labelFile` name the images
 */
class Binary2DataFrame(@transient sc: SparkContext, conf: Config) extends Serializable {

  /**
   * The rows (`SampleID`, `label`, `data`; see [[Binary2DataFrame.schema]]), one per image, in
   * the label file's order. Throws UsageException (an IllegalArgumentException) when
   * -imageRoot or -labelFile is missing, CortadoIOException when either path does not exist; a
   * bad line or image fails the job that reads it.
   */
  def makeRDD(): RDD[Row] = dataFrame().rdd

  private[tools] def dataFrame(): DataFrame = {
    Tool.checkImageFolder(sc, conf)
    ImageFolder.load(Tool.session(sc), HadoopFiles.absoluteLocal(conf.imageRoot),
      HadoopFiles.absoluteLocal(conf.labelFile))
  }
}

object Binary2DataFrame {

  /** The rows' schema: `SampleID` (string), `label` (int), `data` (binary). */
  val schema: StructType = ImageFolder.Schema

  val Usage: String = "Usage: Binary2DataFrame -imageRoot DIR -labelFile FILE -output PATH " +
    "[-outputFormat json|parquet]"

  /** `-imageRoot DIR -labelFile FILE -output PATH [-outputFormat json|parquet]`. */
  def main(args: Array[String]): Unit = Tool.main("Binary2DataFrame", Usage, args)(convert)

  /** [[main]] with the session `spark` gives, messages on `err`; returns the exit status. */
  def run(args: Seq[String], spark: () => SparkSession, err: java.io.PrintStream): Int =
    Tool.run("Binary2DataFrame", Usage, args, spark, err)(convert)

  private def convert(sc: SparkContext, conf: Config): Unit = {
    val df = new Binary2DataFrame(sc, conf).dataFrame()
    Tool.checkLabels(sc, conf.labelFile)
    Tool.writeOutput(sc, conf.outputPath)(path => df.write.format(conf.outputFormat).save(path))
  }
}
