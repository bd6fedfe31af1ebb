// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni

import java.nio.charset.StandardCharsets
import java.util.concurrent.{CountDownLatch, TimeUnit, TimeoutException}

import scala.collection.mutable.ArrayBuffer
import scala.concurrent.{Await, Future}
import scala.concurrent.ExecutionContext.Implicits.global
import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoCommException, CortadoConfigException, CortadoException,
  CortadoIOException}

object NativeTrainerSuite {

  /** Constant inputs (all 1) regressed onto constant targets (all 2) through one InnerProduct. */
  val RegressionNet: String =
    """name: "regression"
      |layer { name: "data" type: "DummyData" top: "data" top: "target"
      |        dummy_data_param {
      |          shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
      |          data_filler { type: "constant" value: 1 }
      |          data_filler { type: "constant" value: 2 } } }
      |layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      |        inner_product_param { num_output: 2
      |          weight_filler { type: "gaussian" std: 0.1 } } }
      |layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "target" top: "loss" }
      |""".stripMargin

  val Solver: String =
    """base_lr: 0.05
      |lr_policy: "fixed"
      |momentum: 0.9
      |max_iter: 100
      |display: 0
      |test_iter: 1
      |test_interval: 1000
      |test_initialization: false
      |random_seed: 1701
      |type: "SGD"
      |solver_mode: CPU
      |""".stripMargin

  /** A session on one CPU replica; the solver's own settings unless overridden. */
  def create(solver: String = Solver, net: String = RegressionNet, devices: Array[Int] = Array(-1),
      maxIter: Int = -1, snapshotInterval: Int = -1, snapshotPrefix: String = null,
      tests: Boolean = true): Long =
    NativeTrainer.create(solver, "solver.prototxt", net, "regression.prototxt", devices, maxIter,
      snapshotInterval, snapshotPrefix, tests, 0L)

  def withTrainer[T](handle: Long)(body: Long => T): T =
    try body(handle)
    finally NativeTrainer.dispose(handle)

  /** Everything a session reports, in order. */
  class Recorder extends TrainerListener {
    val iterations = ArrayBuffer.empty[(Int, Float, Float, Int, Double)]
    val tests = ArrayBuffer.empty[(Int, Seq[String], Seq[Float])]
    val snapshots = ArrayBuffer.empty[(Int, Array[Byte], Array[Byte])]
    val order = ArrayBuffer.empty[(String, Int)]

    override def onIteration(iter: Int, loss: Float, learningRate: Float, iterations: Int,
        seconds: Double): Unit = {
      this.iterations += ((iter, loss, learningRate, iterations, seconds))
      order += "display" -> iter
    }

    override def onTest(iter: Int, names: Array[String], values: Array[Float]): Unit = {
      tests += ((iter, names.toSeq, values.toSeq))
      order += "test" -> iter
    }

    override def onSnapshot(iter: Int, model: Array[Byte], state: Array[Byte]): Unit = {
      snapshots += ((iter, model, state))
      order += "snapshot" -> iter
    }
  }

  /** A listener that hears nothing. */
  def silent: TrainerListener = new Recorder

  def step(handle: Long, iterations: Int): Float = {
    NativeTrainer.step(handle, iterations, silent)
    NativeTrainer.smoothedLoss(handle)
  }

  def contains(bytes: Array[Byte], text: String): Boolean =
    new String(bytes, StandardCharsets.ISO_8859_1).contains(text)
}

class NativeTrainerSuite extends AnyFunSuite {
  import NativeTrainerSuite._

  test("a tiny net trains and its loss falls") {
    withTrainer(create()) { h =>
      assert(NativeTrainer.numReplicas(h) === 1)
      val first = step(h, 1)
      assert(first > 0.5f, s"initial loss $first") // 0.5 * 2^2 * 2 outputs / 2 = about 4
      val later = step(h, 30)
      assert(NativeTrainer.iter(h) === 31)
      assert(later < first / 10, s"loss $first -> $later")
      assert(NativeTrainer.learningRate(h) === 0.05f)
    }
  }

  test("train reports displays, tests and snapshots at the solver's cadence") {
    val solver = Solver.replace("max_iter: 100", "max_iter: 20")
      .replace("display: 0", "display: 5")
      .replace("test_interval: 1000", "test_interval: 10") +
      "snapshot: 10\nsnapshot_prefix: \"/models/regression\"\n"
    val recorder = new Recorder
    val expected = withTrainer(create(solver)) { h =>
      NativeTrainer.train(h, recorder)
      assert(NativeTrainer.iter(h) === 20)
      NativeTrainer.snapshot(h, "final.caffemodel")(0)
    }
    // Caffe's cadence: a display at 0 and every 5 iterations, the closing one at max_iter.
    assert(recorder.iterations.map(_._1) === Seq(0, 5, 10, 15, 20))
    recorder.iterations.slice(1, 4).foreach { case (iter, loss, rate, n, seconds) =>
      assert(n === 5, s"iteration $iter")
      assert(seconds >= 0.0 && rate === 0.05f && loss > 0f, s"iteration $iter")
    }
    assert(recorder.iterations.map(_._2).last < recorder.iterations.head._2 / 2)
    // The closing display counts no iterations and says so with a negative time.
    assert(recorder.iterations.last._4 === 0 && recorder.iterations.last._5 < 0.0)
    assert(recorder.iterations.head._5 >= 0.0)
    // Tests every 10 (not at 0: test_initialization false), and the closing pass at 20.
    assert(recorder.tests.map(_._1) === Seq(10, 20))
    assert(recorder.tests.forall(_._2 === Seq("0/loss")))
    // Snapshots every 10; 20 is one, so snapshot_after_train adds none.
    assert(recorder.snapshots.map(_._1) === Seq(10, 20))
    val (_, model10, state10) = recorder.snapshots.head
    assert(contains(state10, "regression_iter_10.caffemodel"), "the state names its model")
    assert(recorder.snapshots.last._2 === expected)

    // The snapshot's bytes restore into a new session, which then trains as the first did.
    withTrainer(create(solver)) { h =>
      NativeTrainer.restore(h, model10, state10)
      assert(NativeTrainer.iter(h) === 10)
      NativeTrainer.step(h, 10, silent)
      assert(NativeTrainer.snapshot(h, "final.caffemodel")(0) === expected)
    }
  }

  test("create's overrides: max_iter, snapshot interval and prefix, no test nets") {
    val recorder = new Recorder
    val solver = Solver.replace("test_interval: 1000", "test_interval: 2")
      .replace("display: 0", "display: 2")
    withTrainer(create(solver, maxIter = 7, snapshotInterval = 3,
      snapshotPrefix = "hdfs://nn/models/run", tests = false)) { h =>
      assert(NativeTrainer.testOutputNames(h).isEmpty)
      NativeTrainer.train(h, recorder)
      assert(NativeTrainer.iter(h) === 7)
    }
    assert(recorder.tests.isEmpty)
    // Every 3 iterations, and snapshot_after_train's closing one.
    assert(recorder.snapshots.map(_._1) === Seq(3, 6, 7))
    assert(contains(recorder.snapshots.head._3, "run_iter_3.caffemodel"))
    assert(recorder.iterations.map(_._1) === Seq(0, 2, 4, 6))
  }

  test("test outputs are named and computed") {
    withTrainer(create()) { h =>
      assert(NativeTrainer.testOutputNames(h).toSeq === Seq("0/loss"))
      val before = NativeTrainer.test(h)
      step(h, 30)
      val after = NativeTrainer.test(h)
      assert(before.length === 1 && after.length === 1)
      assert(after(0) < before(0) / 10, s"test loss ${before(0)} -> ${after(0)}")
    }
  }

  test("snapshot bytes restore into a new session, which then trains as the first one does") {
    val (model, state, expected) = withTrainer(create()) { h =>
      step(h, 5)
      val Array(model, state) = NativeTrainer.snapshot(h, "x_iter_5.caffemodel")
      (model, state, Seq.fill(3)(step(h, 1)))
    }
    assert(model.nonEmpty && state.nonEmpty)
    withTrainer(create()) { h =>
      NativeTrainer.restore(h, model, state)
      assert(NativeTrainer.iter(h) === 5)
      assert(Seq.fill(3)(step(h, 1)) === expected)
    }
    // Weights alone (fine-tuning): the iteration stays 0, the weights are the model's.
    withTrainer(create()) { h =>
      NativeTrainer.restore(h, model, null)
      assert(NativeTrainer.iter(h) === 0)
      assert(NativeTrainer.snapshot(h, "w.caffemodel")(0) === model)
    }
  }

  test("abort from another thread makes train throw CortadoCommException with the reason") {
    val displayed = new CountDownLatch(1)
    val listener = new Recorder {
      override def onIteration(iter: Int, loss: Float, learningRate: Float, iterations: Int,
          seconds: Double): Unit = displayed.countDown()
    }
    val solver = Solver.replace("max_iter: 100", "max_iter: 100000000")
      .replace("display: 0", "display: 10")
    withTrainer(create(solver)) { h =>
      val training = Future(NativeTrainer.train(h, listener))
      assert(displayed.await(30, TimeUnit.SECONDS))
      NativeTrainer.abort(h, "the task was killed")
      NativeTrainer.abort(h, "a second abort changes nothing")
      val e = intercept[CortadoCommException](Await.result(training, 30.seconds))
      assert(e.getMessage.contains("the task was killed"), e.getMessage)
      assert(NativeTrainer.iter(h) < 100000000)
      intercept[CortadoCommException](NativeTrainer.step(h, 1, silent))
    }
  }

  test("abort stops a session waiting for data, and its feeds") {
    withTrainer(create(NativeFeedSuite.Solver, NativeFeedSuite.FeedNet)) { h =>
      val feed = NativeTrainer.feed(h, 0, "data")
      try {
        val training = Future(NativeTrainer.train(h, silent))
        intercept[TimeoutException](Await.ready(training, 200.millis))
        NativeTrainer.abort(h, "stop now")
        val e = intercept[CortadoCommException](Await.result(training, 30.seconds))
        assert(e.getMessage.contains("stop now"), e.getMessage)
        intercept[CortadoCommException](NativeFeed.push(feed, NativeFeedSuite.batch()))
      } finally NativeFeed.dispose(feed)
    }
  }

  test("a listener's exception stops training and is rethrown") {
    val failing = new Recorder {
      override def onIteration(iter: Int, loss: Float, learningRate: Float, iterations: Int,
          seconds: Double): Unit = if (iter >= 4) throw new IllegalStateException("enough")
    }
    withTrainer(create(Solver.replace("display: 0", "display: 2"))) { h =>
      val e = intercept[IllegalStateException](NativeTrainer.train(h, failing))
      assert(e.getMessage === "enough")
      assert(NativeTrainer.iter(h) < 100)
    }
  }

  test("a bad solver prototxt names file:line") {
    val e = intercept[CortadoConfigException] {
      NativeTrainer.create("base_lr: 0.1\nlr_policy: 7\n", "bad_solver.prototxt", RegressionNet,
        "regression.prototxt", null, -1, -1, null, true, 0L)
    }
    assert(e.getMessage.startsWith("bad_solver.prototxt:2:"), e.getMessage)
  }

  test("state bytes of another net are rejected and the session is unchanged") {
    val wide = RegressionNet.replace("dim: 4 dim: 3", "dim: 4 dim: 5")
    val Array(model, state) =
      withTrainer(create(net = wide))(h => NativeTrainer.snapshot(h, "wide.caffemodel"))
    withTrainer(create()) { h =>
      step(h, 2)
      val e = intercept[CortadoConfigException](NativeTrainer.restore(h, model, state))
      assert(e.getMessage.contains("ip"), e.getMessage)
      assert(NativeTrainer.iter(h) === 2)
    }
  }

  test("feeds: the layers of each net, and an unknown layer lists them") {
    val solver = NativeFeedSuite.Solver + "test_iter: 1\ntest_interval: 100\n"
    withTrainer(create(solver, NativeFeedSuite.FeedNet)) { h =>
      assert(NativeTrainer.feedLayers(h, 0).toSeq === Seq("TEST/data", "TRAIN/data"))
      val e = intercept[CortadoException](NativeTrainer.feed(h, 0, "images"))
      assert(e.getMessage.contains("images") && e.getMessage.contains("TRAIN/data"),
        e.getMessage)
    }
  }

  test("two CPU replicas each train on their own feed's batches") {
    // w (one weight, no bias, from 0) regressed by Euclidean loss from x = 1 onto targets y:
    // the loss of a replica's batch is 0.5 * (w - y)^2, its gradient w - y. Replica 0's k-th
    // batch has y = 1 + k / 10, replica 1's y = 3 + k / 20: every batch differs.
    val net =
      """name: "replicas"
        |layer { name: "data" type: "CoSData" top: "x" top: "y"
        |  source_class: "com.yahoo.ml.caffe.DataFrameSource"
        |  cos_data_param { batch_size: 2
        |    top { name: "x" type: FLOAT_ARRAY channels: 1 sample_num_axes: 1 }
        |    top { name: "y" type: FLOAT_ARRAY channels: 1 sample_num_axes: 1 } } }
        |layer { name: "w" type: "InnerProduct" bottom: "x" top: "wx"
        |  inner_product_param { num_output: 1 bias_term: false
        |    weight_filler { type: "constant" value: 0 } } }
        |layer { name: "loss" type: "EuclideanLoss" bottom: "wx" bottom: "y" top: "loss" }
        |""".stripMargin
    val solver =
      """base_lr: 0.5 lr_policy: "fixed" momentum: 0 max_iter: 1000 display: 1
        |random_seed: 1701 type: "SGD" solver_mode: CPU
        |""".stripMargin
    val iterations = 12
    def target(replica: Int, k: Int): Float = if (replica == 0) 1f + k / 10f else 3f + k / 20f
    val recorder = new Recorder
    withTrainer(create(solver, net, devices = Array(-1, -1))) { h =>
      assert(NativeTrainer.numReplicas(h) === 2)
      assert(NativeTrainer.feedLayers(h, 1).toSeq === Seq("TRAIN/data"))
      val feeds = Seq(NativeTrainer.feed(h, 0, "data"), NativeTrainer.feed(h, 1, "TRAIN/data"))
      try {
        // Each replica's feeder thread pushes exactly `iterations` batches, then closes.
        val pushers = feeds.zipWithIndex.map { case (feed, replica) =>
          Future {
            (0 until iterations).foreach { k =>
              val y = target(replica, k)
              NativeFeed.push(feed, Array(NativeFeedSuite.floats(2, 1f),
                NativeFeedSuite.floats(2, y)))
            }
            NativeFeed.close(feed)
          }
        }
        NativeTrainer.step(h, iterations, recorder)
        pushers.foreach(p => Await.result(p, 30.seconds))
        assert(feeds.map(NativeFeed.pushed) === Seq(iterations.toLong, iterations.toLong))
        // Both feeds are used up: one more iteration finds the end of the data.
        val e = intercept[CortadoIOException](NativeTrainer.step(h, 1, silent))
        assert(e.getMessage.contains("end of data"), e.getMessage)
      } finally feeds.foreach(NativeFeed.dispose)
    }
    // The root displays the mean of both replicas' losses (the loss of the whole batch); both
    // replicas' gradients are averaged into every update, so w follows both feeds.
    var w = 0.0
    val expected = (0 until iterations).map { k =>
      val (y0, y1) = (target(0, k).toDouble, target(1, k).toDouble)
      val loss = (0.5 * (w - y0) * (w - y0) + 0.5 * (w - y1) * (w - y1)) / 2
      w -= 0.5 * ((w - y0) + (w - y1)) / 2
      loss
    }
    assert(recorder.iterations.map(_._1) === (0 until iterations))
    recorder.iterations.map(_._2.toDouble).zip(expected).zipWithIndex.foreach {
      case ((got, want), k) =>
        assert(math.abs(got - want) <= 1e-4 * math.max(1.0, want), s"iteration $k: " +
          s"displayed loss $got, expected $want (losses ${recorder.iterations.map(_._2)})")
    }
  }
}
