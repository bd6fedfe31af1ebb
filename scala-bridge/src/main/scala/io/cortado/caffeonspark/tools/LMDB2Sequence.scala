// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.tools

import org.apache.hadoop.io.BytesWritable
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession

import io.cortado.caffeonspark.Config

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.tools.LMDB2Sequence`: an LMDB database of Caffe Datum
 * records as a Hadoop sequence file of BytesWritable pairs, the key a Java-serialised Scala
 * tuple `(id, label, channels, height, width, encoded)`, the value the image's pixels
 * interleaved (height x width x channels); what a MemoryData layer with
 * `source_class: "com.yahoo.ml.caffe.SeqImageDataSource"` reads.
 *
 * {{{
 * spark-submit --class io.cortado.caffeonspark.tools.LMDB2Sequence cortado.jar \
 *   -imageRoot file:/data/mnist_train_lmdb -output hdfs:///mnist_train.seq -lmdb_partitions 4
 * }}}
 *
 * `-imageRoot` names the database, read by [[io.cortado.caffeonspark.LmdbRDD]] in
 * `-lmdb_partitions` partitions (see there for the paths it takes and for encoded datums, which
 * come out decoded). A missing database fails naming its path. The output is written under a
 * temporary name and renamed into place; an existing one fails.
 */
object LMDB2Sequence {

  val Usage: String =
    "Usage: LMDB2Sequence -imageRoot LMDB_DIR -output PATH [-lmdb_partitions N]"

  /** `-imageRoot LMDB_DIR -output PATH [-lmdb_partitions N]`. */
  def main(args: Array[String]): Unit = Tool.main("LMDB2Sequence", Usage, args)(convert)

  /** [[main]] with the session `spark` gives, messages on `err`; returns the exit status. */
  def run(args: Seq[String], spark: () => SparkSession, err: java.io.PrintStream): Int =
    Tool.run("LMDB2Sequence", Usage, args, spark, err)(convert)

  private def convert(sc: SparkContext, conf: Config): Unit = {
    val rdd = Tool.lmdbRecords(sc, conf)
    val pairs = rdd.map { case (id, label, channels, height, width, encoded, data) =>
      val key = Binary2Sequence.serialize((id, label, channels, height, width, encoded))
      (new BytesWritable(key), new BytesWritable(data))
    }
    Tool.writeOutput(sc, conf.outputPath)(path => pairs.saveAsSequenceFile(path))
  }
}
