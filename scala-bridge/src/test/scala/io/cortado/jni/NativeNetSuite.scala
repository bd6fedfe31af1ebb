// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni

import java.nio.{ByteBuffer, ByteOrder}

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoConfigException, CortadoException, CortadoIOException}

object NativeNetSuite {

  /** Input data [2 3] -> InnerProduct ip (2 outputs) with constant weights 0.5 and bias 1. */
  val TinyNet: String =
    """name: "tiny"
      |layer { name: "data" type: "Input" top: "data"
      |        input_param { shape { dim: 2 dim: 3 } } }
      |layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      |        inner_product_param { num_output: 2
      |          weight_filler { type: "constant" value: 0.5 }
      |          bias_filler { type: "constant" value: 1 } } }
      |""".stripMargin

  def floatBuffer(values: Seq[Float]): ByteBuffer = {
    val buffer = ByteBuffer.allocateDirect(4 * values.size).order(ByteOrder.nativeOrder())
    values.foreach(buffer.putFloat)
    buffer.clear()
    buffer
  }

  def floats(buffer: ByteBuffer, n: Int): Seq[Float] = {
    val view = buffer.duplicate().order(ByteOrder.nativeOrder())
    view.clear()
    Seq.fill(n)(view.getFloat)
  }

  /** Runs `body` on a new net and disposes it whatever happens. */
  def withNet[T](prototxt: String, phase: Int = NativeNet.TEST, seed: Long = 1701)(
      body: Long => T): T = {
    val handle = NativeNet.create(prototxt, "tiny.prototxt", phase, -1, seed)
    try body(handle)
    finally NativeNet.dispose(handle)
  }

  /** Sets `data` from `input` (shape [n 3]), runs forward, returns blob `ip`. */
  def forwardIp(handle: Long, input: Seq[Float]): Seq[Float] = {
    val n = input.size / 3
    NativeNet.setBlobData(handle, "data", Array(n, 3), floatBuffer(input))
    NativeNet.forward(handle)
    val out = ByteBuffer.allocateDirect(4 * 2 * n).order(ByteOrder.nativeOrder())
    assert(NativeNet.copyBlobData(handle, "ip", out) == 2 * n)
    floats(out, 2 * n)
  }
}

class NativeNetSuite extends AnyFunSuite {
  import NativeNetSuite._

  test("blob names and shapes") {
    withNet(TinyNet) { net =>
      assert(NativeNet.blobNames(net).toSeq === Seq("data", "ip"))
      assert(NativeNet.blobShape(net, "data").toSeq === Seq(2, 3))
      assert(NativeNet.blobShape(net, "ip").toSeq === Seq(2, 2))
    }
  }

  test("forward through direct buffers gives the hand-computed values") {
    withNet(TinyNet) { net =>
      // y[n][j] = 0.5 * (x[n][0] + x[n][1] + x[n][2]) + 1:
      // row 0: 0.5 * 6 + 1 = 4; row 1: 0.5 * 15 + 1 = 8.5
      assert(forwardIp(net, Seq(1f, 2f, 3f, 4f, 5f, 6f)) === Seq(4f, 4f, 8.5f, 8.5f))
      // A new batch size reshapes the net: row 2 = 0.5 * (-3) + 1 = -0.5
      assert(forwardIp(net, Seq(1f, 2f, 3f, 4f, 5f, 6f, -1f, -1f, -1f)) ===
        Seq(4f, 4f, 8.5f, 8.5f, -0.5f, -0.5f))
      assert(NativeNet.blobShape(net, "ip").toSeq === Seq(3, 2))
    }
  }

  test("forwardOnly shares the data of blobs nobody reads afterwards, except those kept") {
    // ip1 is dead once ip2 has run, so ip3 can take its buffer; kept, ip3 keeps its own.
    val chain =
      """name: "chain"
        |layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
        |""".stripMargin + (1 to 4).map { i =>
        val bottom = if (i == 1) "data" else s"ip${i - 1}"
        s"""layer { name: "ip$i" type: "InnerProduct" bottom: "$bottom" top: "ip$i"
           |  inner_product_param { num_output: ${if (i == 1) 4 else 2}
           |    weight_filler { type: "constant" value: 0.5 } } }
           |""".stripMargin
      }.mkString
    def run(keep: Array[String]): (Long, Seq[Float]) = withNet(chain) { h =>
      val saved = NativeNet.forwardOnly(h, keep)
      NativeNet.setBlobData(h, "data", null, floatBuffer(Seq(1f, 2f, 3f, 4f, 5f, 6f)))
      NativeNet.forward(h)
      val out = ByteBuffer.allocateDirect(4 * 4).order(ByteOrder.nativeOrder())
      NativeNet.copyBlobData(h, "ip3", out)
      (saved, floats(out, 4))
    }
    val (savedFree, _) = run(Array.empty)
    assert(savedFree === 16L, "ip3 (2 x 2 floats) takes ip1's buffer")
    val (savedKept, ip3) = run(Array("ip3"))
    assert(savedKept === 0L)
    // ip1 = 0.5 * row sum, each of 4; ip2 = 0.5 * 4 * ip1 = 2 * ip1; ip3 = 0.5 * 2 * ip2 = ip2.
    assert(ip3 === Seq(6f, 6f, 15f, 15f))
    withNet(chain) { h =>
      val e = intercept[CortadoException](NativeNet.forwardOnly(h, Array("nope")))
      assert(e.getMessage.contains("nope"), e.getMessage)
      assert(NativeNet.forward(h) === 0f, "the net still runs")
    }
  }

  test("weights round-trip through .caffemodel bytes") {
    val gaussian = TinyNet.replace("type: \"constant\" value: 0.5", "type: \"gaussian\" std: 1")
    val input = Seq(1f, -2f, 3f, 0.5f, 0f, -1f)
    val (bytes, expected) = withNet(gaussian) { net =>
      (NativeNet.saveWeights(net), forwardIp(net, input))
    }
    assert(bytes.length > 4 * 8)
    withNet(TinyNet) { net =>
      assert(forwardIp(net, input) !== expected)
      NativeNet.loadWeights(net, bytes, "gaussian.caffemodel")
      assert(forwardIp(net, input) === expected)
    }
  }

  test("corrupt weight bytes name their source") {
    withNet(TinyNet) { net =>
      val e = intercept[CortadoConfigException] {
        NativeNet.loadWeights(net, Array[Byte](1, 2, 3), "broken.caffemodel")
      }
      assert(e.getMessage.contains("broken.caffemodel"), e.getMessage)
    }
  }

  test("weights of another shape name the layer and both shapes") {
    val wide = TinyNet.replace("num_output: 2", "num_output: 4")
    val bytes = withNet(wide)(NativeNet.saveWeights)
    withNet(TinyNet) { net =>
      val e = intercept[CortadoConfigException] {
        NativeNet.loadWeights(net, bytes, "wide.caffemodel")
      }
      assert(e.getMessage.contains("'ip'"), e.getMessage)
    }
  }

  test("a net whose shapes do not fit throws the native message, and the JVM goes on") {
    val misfit =
      """name: "misfit"
        |layer { name: "data" type: "Input" top: "a" top: "b"
        |        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 4 } } }
        |layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "sum" }
        |""".stripMargin
    val e = intercept[CortadoConfigException] {
      NativeNet.create(misfit, "misfit.prototxt", NativeNet.TEST, -1, 1)
    }
    assert(e.getMessage.startsWith("misfit.prototxt: "), e.getMessage)
    assert(e.getMessage.contains("'sum' (Eltwise)"), e.getMessage)
    assert(e.getMessage.contains("2 3 (6)") && e.getMessage.contains("2 4 (8)"), e.getMessage)
    // Still alive: the next net works.
    withNet(TinyNet)(net => assert(forwardIp(net, Seq(0f, 0f, 0f)) === Seq(1f, 1f)))
  }

  test("a net's feed layers, qualified by phase, and their feeds") {
    withNet(TinyNet)(net => assert(NativeNet.feedLayers(net).isEmpty))
    withNet(NativeFeedSuite.FeedNet, phase = NativeNet.TRAIN) { net =>
      assert(NativeNet.feedLayers(net).toSeq === Seq("TRAIN/data"))
      val feed = NativeNet.feed(net, "TRAIN/data")
      try assert(NativeFeed.topShape(feed, 0).toSeq === Seq(NativeFeedSuite.BatchSize, 4))
      finally NativeFeed.dispose(feed)
      intercept[CortadoIOException](NativeNet.feed(net, "TEST/data"))
    }
  }

  test("misuse of buffers, blobs and handles throws, never crashes") {
    withNet(TinyNet) { net =>
      val small = ByteBuffer.allocateDirect(8).order(ByteOrder.nativeOrder())
      val tooSmall = intercept[CortadoConfigException](NativeNet.copyBlobData(net, "ip", small))
      assert(tooSmall.getMessage.contains("blob 'ip' of shape 2 2 (4) needs 16 bytes"),
        tooSmall.getMessage)
      val heap = intercept[CortadoConfigException] {
        NativeNet.setBlobData(net, "data", null, ByteBuffer.allocate(24))
      }
      assert(heap.getMessage.contains("not a direct buffer"), heap.getMessage)
      intercept[CortadoIOException](NativeNet.blobShape(net, "nothing"))
    }
    val closed = intercept[CortadoConfigException](NativeNet.forward(0L))
    assert(closed.getMessage.contains("null handle"), closed.getMessage)
  }
}
