// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.tools

import java.io.{ByteArrayOutputStream, ObjectOutputStream}

import org.apache.hadoop.io.BytesWritable
import org.apache.spark.SparkContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.SparkSession

import io.cortado.caffeonspark.Config
import io.cortado.data.ImageFolder
import io.cortado.storage.HadoopFiles

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.tools.Binary2Sequence`: a folder of image files and a
 * label file as a Hadoop sequence file of BytesWritable pairs, the key a Java-serialised Scala
 * tuple `(id, label)` (both strings), the value the image file's bytes; what a MemoryData layer
 * with `source_class: "com.yahoo.ml.caffe.SeqImageDataSource"` reads.
 *
 * {{{
 * spark-submit --class io.cortado.caffeonspark.tools.Binary2Sequence cortado.jar \
 *   -imageRoot hdfs:///images -labelFile hdfs:///images/labels.txt -output hdfs:///images.seq
 * }}}
 *
 * The label file is read by [[io.cortado.data.ImageFolder]]: lines `file label` (the id is the
 * file's name, as in CaffeOnSpark) or `file label id`, the file relative to `-imageRoot`, the
 * label an integer; blank lines are skipped. Differences from CaffeOnSpark, which logged a bad
 * line or an unreadable image and went on: a malformed line fails naming the label file and the
 * line, and a missing or unreadable image fails naming that line and the image's path. The
 * output is written under a temporary name and renamed into place; an existing one fails.
 *
 * @param sc   the application's SparkContext
 * @param conf its `imageRoot` and `labelFile` name the images
 */
class Binary2Sequence(@transient sc: SparkContext, conf: Config) extends Serializable {

  /**
   * The pairs, one per image, in the label file's order. Throws UsageException (an
   * IllegalArgumentException) when -imageRoot or -labelFile is missing, CortadoIOException
   * when either path does not exist; a bad line or image fails the job that reads it.
   */
  def makeRDD(): RDD[(BytesWritable, BytesWritable)] = {
    Tool.checkImageFolder(sc, conf)
    ImageFolder.load(Tool.session(sc), HadoopFiles.absoluteLocal(conf.imageRoot),
      HadoopFiles.absoluteLocal(conf.labelFile)).rdd.map { row =>
      val key = Binary2Sequence.serialize((row.getString(0), row.getInt(1).toString))
      (new BytesWritable(key), new BytesWritable(row.getAs[Array[Byte]](2)))
    }
  }
}

object Binary2Sequence {

  val Usage: String = "Usage: Binary2Sequence -imageRoot DIR -labelFile FILE -output PATH"

  /** `-imageRoot DIR -labelFile FILE -output PATH` (default output: `output`). */
  def main(args: Array[String]): Unit = Tool.main("Binary2Sequence", Usage, args)(convert)

  /** [[main]] with the session `spark` gives, messages on `err`; returns the exit status. */
  def run(args: Seq[String], spark: () => SparkSession, err: java.io.PrintStream): Int =
    Tool.run("Binary2Sequence", Usage, args, spark, err)(convert)

  private def convert(sc: SparkContext, conf: Config): Unit = {
    val rdd = new Binary2Sequence(sc, conf).makeRDD()
    Tool.checkLabels(sc, conf.labelFile)
    Tool.writeOutput(sc, conf.outputPath)(path => rdd.saveAsSequenceFile(path))
  }

  /** `value` as Java serialisation writes it. */
  private[tools] def serialize(value: AnyRef): Array[Byte] = {
    val bytes = new ByteArrayOutputStream
    val out = new ObjectOutputStream(bytes)
    try out.writeObject(value) finally out.close()
    bytes.toByteArray
  }
}
