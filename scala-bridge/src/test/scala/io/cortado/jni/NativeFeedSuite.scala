// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni

import java.nio.{ByteBuffer, ByteOrder}
import java.util.concurrent.TimeoutException

import scala.concurrent.{Await, Future}
import scala.concurrent.ExecutionContext.Implicits.global
import scala.concurrent.duration._

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoCommException, CortadoConfigException, CortadoIOException}

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

  /** A session of FeedNet on the CPU and the feed of its TRAIN layer; both freed after. */
  def withFeed[T](body: (Long, Long) => T): T = {
    val handle = NativeTrainer.create(Solver, "solver.prototxt", FeedNet, "feed.prototxt",
      Array(-1), -1, -1, null, false, 0L)
    try {
      val feed = NativeTrainer.feed(handle, 0, "data")
      try body(handle, feed)
      finally NativeFeed.dispose(feed)
    } finally NativeTrainer.dispose(handle)
  }

  /** Runs `iterations` iterations, reporting nothing; returns the smoothed loss. */
  def step(handle: Long, iterations: Int): Float =
    NativeTrainerSuite.step(handle, iterations)

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

  test("a session lists its feed layers; a feed gives its tops") {
    withFeed { (handle, feed) =>
      assert(NativeTrainer.feedLayers(handle, 0).toSeq === Seq("TRAIN/data"))
      assert(NativeFeed.topNames(feed).toSeq === Seq("data", "label"))
      assert(NativeFeed.topShape(feed, 0).toSeq === Seq(BatchSize, 4))
      assert(NativeFeed.topShape(feed, 1).toSeq === Seq(BatchSize))
      assert(NativeFeed.pushed(feed) === 0L)
      // A phase-qualified name gives the same queue.
      val same = NativeTrainer.feed(handle, 0, "TRAIN/data")
      try {
        NativeFeed.push(same, batch())
        assert(NativeFeed.pushed(feed) === 1L)
      } finally NativeFeed.dispose(same)
    }
  }

  test("pushed batches are what the net sees") {
    val handle = NativeNet.create(FeedNet, "feed.prototxt", 1, -1, 1701L)
    try {
      assert(NativeNet.feedLayers(handle).toSeq === Seq("TEST/data"))
      val feed = NativeNet.feed(handle, "data")
      try NativeFeed.push(feed, batch(0.25f))
      finally NativeFeed.dispose(feed)
      NativeNet.forward(handle)
      val out = ByteBuffer.allocateDirect(4 * BatchSize * 4).order(ByteOrder.nativeOrder())
      assert(NativeNet.copyBlobData(handle, "data", out) === BatchSize * 4)
      assert((0 until BatchSize * 4).forall(i => out.getFloat(4 * i) == 0.25f))
    } finally NativeNet.dispose(handle)
  }

  test("a wrongly sized batch throws with the native message") {
    withFeed { (_, feed) =>
      val e = intercept[CortadoConfigException] {
        NativeFeed.push(feed, Array(floats((BatchSize - 1) * 4), floats(BatchSize)))
      }
      assert(e.getMessage ===
        "layer 'data' (CoSData): top 'data' needs a batch of shape 8 4 (32), got 7 4 (28)")
      val tops = intercept[CortadoConfigException] {
        NativeFeed.push(feed, Array(floats(BatchSize * 4)))
      }
      assert(tops.getMessage.contains("needs 2 tops (data, label), got 1"))
      val heap = intercept[CortadoConfigException] {
        NativeFeed.push(feed, Array(ByteBuffer.allocate(4 * BatchSize * 4), floats(BatchSize)))
      }
      assert(heap.getMessage.contains("tops[0]"))
      intercept[CortadoConfigException](NativeFeed.push(feed, null))
      assert(NativeFeed.pushed(feed) === 0L)
    }
  }

  test("an unknown layer or a zero handle throws") {
    intercept[CortadoConfigException](NativeFeed.push(0L, batch()))
    val handle = NativeNet.create(FeedNet, "feed.prototxt", 1, -1, 1701L)
    try {
      val unknown = intercept[CortadoIOException](NativeNet.feed(handle, "images"))
      assert(unknown.getMessage.contains("no feed layer 'images'"), unknown.getMessage)
      assert(unknown.getMessage.contains("TEST/data"), unknown.getMessage)
    } finally NativeNet.dispose(handle)
    val e = intercept[CortadoConfigException](NativeTrainer.feed(0L, 0, "data"))
    assert(e.getMessage.contains("null handle"), e.getMessage)
  }

  test("close unblocks a waiting session after the queued batches") {
    withFeed { (handle, feed) =>
      NativeFeed.push(feed, batch())
      assert(!step(handle, 1).isNaN)
      val next = Future(step(handle, 1))
      // The step waits for data ...
      intercept[TimeoutException](Await.ready(next, 200.millis))
      NativeFeed.close(feed)
      // ... and fails once the feed is closed.
      val e = intercept[CortadoIOException](Await.result(next, 30.seconds))
      assert(e.getMessage.contains("layer 'data' (CoSData): end of data"))
      intercept[CortadoCommException](NativeFeed.push(feed, batch()))
    }
  }

  test("abort unblocks a waiting session with the reason") {
    withFeed { (handle, feed) =>
      val next = Future(step(handle, 1))
      intercept[TimeoutException](Await.ready(next, 200.millis))
      NativeFeed.abort(feed, "task 3 was killed")
      val e = intercept[CortadoCommException](Await.result(next, 30.seconds))
      assert(e.getMessage.contains("task 3 was killed"))
    }
  }

  test("a full feed blocks the pusher until the session is disposed; the handle outlives it") {
    val handle = NativeTrainer.create(Solver, "solver.prototxt", FeedNet, "feed.prototxt",
      Array(-1), -1, -1, null, false, 0L)
    val feed = NativeTrainer.feed(handle, 0, "data")
    try {
      val pusher = Future {
        while (true) NativeFeed.push(feed, batch())
      }
      intercept[TimeoutException](Await.ready(pusher, 200.millis))
      NativeTrainer.dispose(handle)
      intercept[CortadoCommException](Await.result(pusher, 30.seconds))
      // The feed handle stays usable: pushes throw, the count remains.
      intercept[CortadoCommException](NativeFeed.push(feed, batch()))
      assert(NativeFeed.pushed(feed) > 0L)
    } finally NativeFeed.dispose(feed)
  }
}
