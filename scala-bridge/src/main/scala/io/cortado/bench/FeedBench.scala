// SPDX-License-Identifier: Apache-2.0
package io.cortado.bench

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}

import scala.util.Random

import org.apache.spark.sql.Row
import org.apache.spark.sql.types._

import io.cortado.CortadoCommException
import io.cortado.data.{BatchFeeder, RowConverter, TopSpec}
import io.cortado.jni.{NativeFeed, NativeNet, NativeTrainer, TrainerListener}

/**
 * How fast the JVM fills a native feed layer, against how fast LeNet consumes data, in one run
 * on one machine (bench/spark/run.sh runs it; bench/RESULTS.md has the figures).
 *
 *  - feed: a net of one CoSData layer shaped as LeNet's (batch 64 of 1x28x28 floats, scaled
 *    by its transform_param, and a label); a feeder thread pushes whole batches of already converted samples through
 *    [[BatchFeeder]] (what a training task does after its first pass) while the main thread
 *    runs the net's forward pass, which takes each batch off the queue.
 *  - rows: the same, with the feeder converting Spark rows (784 uint8 pixels as binary, an int
 *    label) with [[RowConverter]] first (what a training task does once per row).
 *  - LeNet: Caffe's LeNet (the given CoSData net, e.g. examples/spark-fashion-mnist's) trained
 *    by a NativeTrainer (one CPU replica, no test nets) fed the same way; its data
 *    consumption is iterations/s times the bytes of a batch.
 *
 * Usage: FeedBench LENET_COS_NET [SECONDS] (seconds per measurement, default 5).
 */
object FeedBench {

  private val Batch = 64
  private val Pixels = 784

  private val FeedNet =
    s"""name: "feed"
       |layer { name: "data" type: "CoSData" top: "data" top: "label"
       |  cos_data_param { batch_size: $Batch
       |    top { name: "data" type: RAW_IMAGE channels: 1 height: 28 width: 28
       |      transform_param { scale: 0.00390625 } }
       |    top { name: "label" type: INT channels: 1 sample_num_axes: 0 } } }
       |""".stripMargin

  private val Solver =
    """base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 lr_policy: "inv" gamma: 0.0001
      |power: 0.75 max_iter: 1000000 display: 0 random_seed: 1701 solver_mode: CPU
      |""".stripMargin

  /** The bench reads nothing the session reports. */
  private val Silent: TrainerListener = new TrainerListener {
    override def onIteration(iter: Int, loss: Float, learningRate: Float, iterations: Int,
        seconds: Double): Unit = ()
    override def onTest(iter: Int, names: Array[String], values: Array[Float]): Unit = ()
    override def onSnapshot(iter: Int, model: Array[Byte], state: Array[Byte]): Unit = ()
  }

  /** Bytes of one batch as it crosses JNI: float32 pixels and labels. */
  private val BatchBytes = 4.0 * Batch * (Pixels + 1)

  def main(args: Array[String]): Unit = {
    if (args.isEmpty || args.length > 2) {
      System.err.println("usage: FeedBench LENET_COS_NET [SECONDS]")
      sys.exit(2)
    }
    val netFile = args(0)
    val seconds = if (args.length > 1) args(1).toDouble else 5.0
    val random = new Random(1)
    val rows = Array.fill(60 * Batch) {
      val pixels = new Array[Byte](Pixels)
      random.nextBytes(pixels)
      Row(pixels, random.nextInt(10))
    }
    val schema = StructType(Seq(StructField("data", BinaryType), StructField("label", IntegerType)))
    val specs = Seq(TopSpec("data", "data", "data", Seq(1, 28, 28)),
      TopSpec("data", "label", "label", Seq.empty))
    val converter = RowConverter(schema, specs)
    val samples = rows.zipWithIndex.map { case (r, i) => converter(r, i.toLong) }

    val feed = measureFeed(seconds, handle => {
      val feeder = new BatchFeeder(handle, "TEST/data")
      feeder.feed(Iterator.continually(samples.iterator).flatten)
    })
    val fromRows = measureFeed(seconds, handle => {
      val feeder = new BatchFeeder(handle, "TEST/data")
      var i = -1L
      feeder.feed(Iterator.continually(rows.iterator).flatten.map { r =>
        i += 1
        converter(r, i)
      })
    })
    val lenet = measureLenet(netFile, seconds, samples)

    val consumption = lenet * BatchBytes / 1e6
    println(f"feed (converted samples into the native queue): ${feed * BatchBytes / 1e6}%.1f MB/s " +
      f"(${feed * Batch}%.0f samples/s)")
    println(f"feed from Spark rows (RowConverter + queue):   ${fromRows * BatchBytes / 1e6}%.1f " +
      f"MB/s (${fromRows * Batch}%.0f samples/s)")
    println(f"LeNet training consumes:                       $consumption%.2f MB/s " +
      f"($lenet%.1f iter/s, batch $Batch)")
    println(f"ratio feed / LeNet consumption: ${feed * BatchBytes / 1e6 / consumption}%.1fx; " +
      f"from rows: ${fromRows * BatchBytes / 1e6 / consumption}%.1fx (target: at least 10x)")
  }

  /**
   * Batches per second through a one-layer CoSData net: `push` fills the feed (given its feed
   * handle) on a thread while this thread runs forward passes for `seconds` (after a warm-up of
   * 50 batches).
   */
  private def measureFeed(seconds: Double, push: Long => Unit): Double = {
    val handle = NativeNet.create(FeedNet, "feed.prototxt", NativeNet.TEST, -1, 1L)
    try {
      whileFeeding(NativeNet.feed(handle, "TEST/data"), push) {
        rate(seconds, 50, 1)(() => NativeNet.forward(handle))
      }
    } finally NativeNet.dispose(handle)
  }

  /** LeNet training iterations per second, fed from `samples` (after 20 warm-up iterations). */
  private def measureLenet(netFile: String, seconds: Double,
      samples: Array[Array[Array[Float]]]): Double = {
    val net = new String(Files.readAllBytes(Paths.get(netFile)), StandardCharsets.UTF_8)
    val handle = NativeTrainer.create(Solver, "bench_solver.prototxt", net, netFile, Array(-1),
      -1, 0, null, false, 0L)
    try {
      val push: Long => Unit = feed =>
        new BatchFeeder(feed, "TRAIN/data").feed(Iterator.continually(samples.iterator).flatten)
      whileFeeding(NativeTrainer.feed(handle, 0, "TRAIN/data"), push) {
        rate(seconds, 2, 10)(() => NativeTrainer.step(handle, 10, Silent))
      }
    } finally NativeTrainer.dispose(handle)
  }

  /**
   * Runs `body` while `push` fills the feed `feed` on its own thread; then aborts the feed,
   * joins the thread and frees the feed handle.
   */
  private def whileFeeding[T](feed: Long, push: Long => Unit)(body: => T): T = {
    val pusher = new Thread(() =>
      try push(feed)
      catch { case _: CortadoCommException => }, "bench-feeder")
    pusher.setDaemon(true)
    pusher.start()
    try body
    finally {
      NativeFeed.abort(feed, "measured")
      pusher.join()
      NativeFeed.dispose(feed)
    }
  }

  /** `units` per second of `work` (each call doing `units`) over `seconds`, after `warmUp` calls. */
  private def rate(seconds: Double, warmUp: Int, units: Int)(work: () => Unit): Double = {
    (0 until warmUp).foreach(_ => work())
    val start = System.nanoTime()
    var done = 0L
    while (System.nanoTime() - start < seconds * 1e9) {
      work()
      done += units
    }
    done / ((System.nanoTime() - start) / 1e9)
  }
}
