// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni

import java.nio.{ByteBuffer, ByteOrder}
import java.util.concurrent.TimeoutException

import scala.concurrent.{Await, Future}
import scala.concurrent.ExecutionContext.Implicits.global
import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoCommException, CortadoConfigException, CortadoException,
  CortadoIOException}

object NativeFeedSuite {

  val BatchSize = 8

  /** A CoSData layer (data [8, 4], label [8]) into one InnerProduct and a softmax loss. */
  val FeedNet: String =
    s"""name: "feed"
      |layer { name: "data" type: "CoSData" top: "data" top: "label"
      |        source_class: "com.yahoo.ml.caffe.DataFrameSource"
      |        cos_data_param { batch_size: $BatchSize
      |          top { name: "data" type: FLOAT_ARRAY channels: 4 sample_num_axes: 1 }
      |          top { name: "label" type: INT channels: 1 sample_num_axes: 0 } } }
      |layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      |        inner_product_param { num_output: 2
      |          weight_filler { type: "gaussian" std: 0.01 } } }
      |layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
      |""".stripMargin

  val Solver: String =
    """base_lr: 0.1
      |lr_policy: "fixed"
      |momentum: 0.9
      |max_iter: 1000
      |display: 0
      |random_seed: 1701
      |type: "SGD"
      |""".stripMargin

  def withSolver[T](body: Long => T): T = {
    val handle = NativeSolver.create(Solver, "solver.prototxt", FeedNet, "feed.prototxt", -1)
    try body(handle)
    finally NativeSolver.dispose(handle)
  }

  def floats(n: Int, value: Float = 0f): ByteBuffer = {
    val buffer = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.nativeOrder())
    (0 until n).foreach(i => buffer.putFloat(4 * i, value))
    buffer
  }

  /** A whole batch for FeedNet, every value `value` and every label 0. */
  def batch(value: Float = 0f): Array[ByteBuffer] =
    Array(floats(BatchSize * 4, value), floats(BatchSize))
}

class NativeFeedSuite extends AnyFunSuite {
  import NativeFeedSuite._

  test("a solver lists its feed layers and their tops") {
    withSolver { solver =>
      assert(NativeFeed.layers(solver).toSeq === Seq("TRAIN/data"))
      assert(NativeFeed.topNames(solver, "data").toSeq === Seq("data", "label"))
      assert(NativeFeed.topShape(solver, "data", 0).toSeq === Seq(BatchSize, 4))
      assert(NativeFeed.topShape(solver, "TRAIN/data", 1).toSeq === Seq(BatchSize))
    }
  }

  test("pushed batches are what the net sees") {
    val handle = NativeNet.create(FeedNet, "feed.prototxt", 1, -1, 1701L)
    try {
      NativeFeed.push(handle, "data", batch(0.25f))
      NativeNet.forward(handle)
      val out = ByteBuffer.allocateDirect(4 * BatchSize * 4).order(ByteOrder.nativeOrder())
      assert(NativeNet.copyBlobData(handle, "data", out) === BatchSize * 4)
      assert((0 until BatchSize * 4).forall(i => out.getFloat(4 * i) == 0.25f))
    } finally NativeNet.dispose(handle)
  }

  test("a wrongly sized batch throws with the native message") {
    withSolver { solver =>
      val e = intercept[CortadoConfigException] {
        NativeFeed.push(solver, "data", Array(floats((BatchSize - 1) * 4), floats(BatchSize)))
      }
      assert(e.getMessage ===
        "layer 'data' (CoSData): top 'data' needs a batch of shape 8 4 (32), got 7 4 (28)")
      val tops = intercept[CortadoConfigException] {
        NativeFeed.push(solver, "data", Array(floats(BatchSize * 4)))
      }
      assert(tops.getMessage.contains("needs 2 tops (data, label), got 1"))
      val heap = intercept[CortadoConfigException] {
        NativeFeed.push(solver, "data", Array(ByteBuffer.allocate(4 * BatchSize * 4),
          floats(BatchSize)))
      }
      assert(heap.getMessage.contains("tops[0]"))
      intercept[CortadoConfigException](NativeFeed.push(solver, "data", null))
      val unknown = intercept[CortadoIOException](NativeFeed.push(solver, "images", batch()))
      assert(unknown.getMessage.contains("no feed layer 'images'"))
      assert(unknown.getMessage.contains("feed layers: TRAIN/data"))
    }
  }

  test("a zero or disposed handle throws") {
    intercept[CortadoConfigException](NativeFeed.push(0L, "data", batch()))
    val handle = NativeSolver.create(Solver, "solver.prototxt", FeedNet, "feed.prototxt", -1)
    NativeSolver.dispose(handle)
    val e = intercept[CortadoConfigException](NativeFeed.layers(handle))
    assert(e.getMessage.contains("not a live NativeNet or NativeSolver handle"))
  }

  test("close unblocks a waiting solver after the queued batches") {
    withSolver { solver =>
      NativeFeed.push(solver, "data", batch())
      assert(!NativeSolver.step(solver, 1).isNaN)
      val step = Future(NativeSolver.step(solver, 1))
      // The step waits for data ...
      intercept[TimeoutException](Await.ready(step, 200.millis))
      NativeFeed.close(solver, "data")
      // ... and fails once the feed is closed.
      val e = intercept[CortadoIOException](Await.result(step, 30.seconds))
      assert(e.getMessage.contains("layer 'data' (CoSData): end of data"))
      intercept[CortadoCommException](NativeFeed.push(solver, "data", batch()))
    }
  }

  test("abort unblocks a waiting solver with the reason") {
    withSolver { solver =>
      val step = Future(NativeSolver.step(solver, 1))
      intercept[TimeoutException](Await.ready(step, 200.millis))
      NativeFeed.abort(solver, "data", "task 3 was killed")
      val e = intercept[CortadoCommException](Await.result(step, 30.seconds))
      assert(e.getMessage.contains("task 3 was killed"))
    }
  }

  test("a full feed blocks the pusher until the solver is disposed") {
    val handle = NativeSolver.create(Solver, "solver.prototxt", FeedNet, "feed.prototxt", -1)
    val pusher = Future {
      while (true) NativeFeed.push(handle, "data", batch())
    }
    intercept[TimeoutException](Await.ready(pusher, 200.millis))
    NativeSolver.dispose(handle)
    intercept[CortadoException](Await.result(pusher, 30.seconds))
  }
}
