// SPDX-License-Identifier: Apache-2.0
package io.cortado.bench

import java.nio.file.Files

import scala.util.Random

import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.types.{BinaryType, IntegerType, LongType, StructField, StructType}

import io.cortado.jni.NativeNet
import io.cortado.ml.CortadoClassificationModel

/**
 * Rows per second of [[CortadoClassificationModel]]'s transform (bench/spark/transform.sh runs
 * it beside `cortado test` on the same net and data; bench/RESULTS.md has the figures). The
 * data is cached in memory first, in the session's default parallelism of partitions; one
 * transform warms up (each task slot builds its net once), then each of the timed ones computes
 * the prediction of every row.
 *
 * Usage: TransformBench NET WEIGHTS DATA ROWS [REPEATS]
 *   NET      a net prototxt (a feed layer or an Input in its TEST phase)
 *   WEIGHTS  a .caffemodel, or "-" for the weights of the net's fillers
 *   DATA     a Parquet path (column `data`: the samples, `label`), or random:C,H,W for ROWS rows
 *            of random uint8 pixels of that shape
 *   ROWS     rows to use (the first ROWS of a Parquet file)
 *   REPEATS  timed transforms (default 3); the best is reported
 * or: TransformBench --fillers NET OUT: writes the weights of NET's fillers to OUT (for
 * `cortado test`, which needs a .caffemodel) and exits.
 */
object TransformBench {

  def main(args: Array[String]): Unit = {
    if (args.length == 3 && args(0) == "--fillers") {
      Files.write(java.nio.file.Paths.get(args(2)), fillers(args(1)))
      return
    }
    if (args.length < 4) {
      System.err.println("usage: TransformBench NET WEIGHTS DATA ROWS [REPEATS]")
      sys.exit(2)
    }
    val Array(net, weights, data, rowsText) = args.take(4)
    val rows = rowsText.toInt
    val repeats = if (args.length > 4) args(4).toInt else 3
    val spark = SparkSession.builder().appName("TransformBench").getOrCreate()
    try {
      val df = input(spark, data, rows).repartition(spark.sparkContext.defaultParallelism).cache()
      val count = df.count()
      val model = CortadoClassificationModel.fromCaffe(net, weightsFile(net, weights))
        .setFeaturesCol("data")
      def pass(): Double = {
        val start = System.nanoTime()
        model.transform(df).select("prediction").rdd.foreach(_ => ())
        (System.nanoTime() - start) / 1e9
      }
      val warmup = pass()
      val best = Seq.fill(repeats)(pass()).min
      println(f"transform: $count rows in ${df.rdd.getNumPartitions} partitions, " +
        f"${spark.sparkContext.master}: warm-up $warmup%.3f s, best of $repeats $best%.3f s: " +
        f"${count / best}%.1f rows/s")
    } finally spark.stop()
  }

  private def input(spark: SparkSession, data: String, rows: Int): DataFrame =
    if (data.startsWith("random:")) {
      val size = data.stripPrefix("random:").split(",").map(_.trim.toInt).product
      val schema = StructType(Seq(StructField("id", LongType), StructField("data", BinaryType),
        StructField("label", IntegerType)))
      val generated = spark.sparkContext.parallelize(0 until rows, 4).mapPartitionsWithIndex {
        (part, ids) =>
          val random = new Random(part)
          ids.map { i =>
            val pixels = new Array[Byte](size)
            random.nextBytes(pixels)
            Row(i.toLong, pixels, i % 10)
          }
      }
      spark.createDataFrame(generated, schema)
    } else spark.read.parquet(data).limit(rows)

  /** `weights`, or "-": the net's fillers' weights, in a temporary file. */
  private def weightsFile(net: String, weights: String): String =
    if (weights != "-") weights
    else {
      val file = Files.createTempFile("transform-bench", ".caffemodel")
      file.toFile.deleteOnExit()
      Files.write(file, fillers(net))
      file.toString
    }

  /** The weights NET's TEST net starts with (its fillers), as .caffemodel bytes. */
  private def fillers(net: String): Array[Byte] = {
    val text = new String(Files.readAllBytes(java.nio.file.Paths.get(net)), "UTF-8")
    val handle = NativeNet.create(text, net, NativeNet.TEST, -1, 1L)
    try NativeNet.saveWeights(handle)
    finally NativeNet.dispose(handle)
  }
}
