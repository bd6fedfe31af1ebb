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
 *   ROWS     rows to use (the first ROWS of a Parquet file), or N1,N2: both, timed in turn, and
 *            the rate of the N2 - N1 more rows (each pass's fixed cost cancels out)
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
    val sizes = rowsText.split(",").map(_.trim.toInt).toSeq
    require(sizes.length <= 2, s"ROWS: one or two row counts, got $rowsText")
    val repeats = if (args.length > 4) args(4).toInt else 3
    val spark = SparkSession.builder().appName("TransformBench").getOrCreate()
    try {
      val model = CortadoClassificationModel.fromCaffe(net, weightsFile(net, weights))
        .setFeaturesCol("data")
      val frames = sizes.map { rows =>
        val df = input(spark, data, rows).repartition(spark.sparkContext.defaultParallelism)
          .cache()
        (df, df.count())
      }
      def pass(df: DataFrame): Double = {
        val start = System.nanoTime()
        model.transform(df).select("prediction").rdd.foreach(_ => ())
        (System.nanoTime() - start) / 1e9
      }
      val warmups = frames.map { case (df, _) => pass(df) }
      // The sizes in turn, so that both see the same JIT and machine state.
      val times = Seq.fill(repeats)(frames.map { case (df, _) => pass(df) }).transpose
      val best = times.map(_.min)
      frames.indices.foreach { i =>
        val (df, count) = frames(i)
        println(f"transform: $count rows in ${df.rdd.getNumPartitions} partitions, " +
          f"${spark.sparkContext.master}: warm-up ${warmups(i)}%.3f s, best of $repeats " +
          f"${best(i)}%.3f s: ${count / best(i)}%.1f rows/s")
      }
      if (frames.length == 2) {
        // Each pass's fixed cost (planning, scheduling the job) cancels out, as start-up does in
        // the difference of two `cortado test` runs.
        val rows = frames(1)._2 - frames(0)._2
        println(f"transform, marginal: $rows more rows in ${best(1) - best(0)}%.3f s more, " +
          f"${spark.sparkContext.master}: ${rows / (best(1) - best(0))}%.1f rows/s")
      }
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
