// SPDX-License-Identifier: Apache-2.0
package io.cortado.ml

import java.nio.{ByteBuffer, ByteOrder, FloatBuffer}
import java.util.concurrent.atomic.AtomicInteger

import scala.collection.mutable.ArrayBuffer

import io.cortado.CortadoConfigException
import io.cortado.data.{BatchFeeder, TopSpec}
import io.cortado.jni.{NativeFeed, NativeNet}

/**
 * A TEST net built with a model's weights, forward only, ready to take batches: through its
 * feed layer (CoSData, MemoryData) or by setting its input blob (a net with Input layers, such
 * as a deploy prototxt). One task uses it at a time (see [[NetPool]]).
 *
 * @param batchSize samples per forward: the feed layer's batch size, or the input's first axis
 * @param specs     what each fed top (or the input) reads from the rows
 */
private[ml] final class LoadedNet private (handle: Long, feed: Long, val batchSize: Int,
    val specs: Seq[TopSpec], plan: InferencePlan) {

  private val feeder = if (feed != 0) Some(new BatchFeeder(feed, plan.feedLayer.get)) else None

  // Direct buffers kept for the net's life: the input batch, and each blob read.
  private lazy val input = ByteBuffer.allocateDirect(4 * specs.head.size * batchSize)
    .order(ByteOrder.nativeOrder())
  private val outputs = scala.collection.mutable.HashMap.empty[String, ByteBuffer]

  /**
   * Where the next batch's samples go, one buffer per spec: sample `s` of spec `i` at float
   * `s * specs(i).size` of buffer `i` (see [[io.cortado.data.RowConverter.into]]).
   */
  val batch: Array[FloatBuffer] = feeder match {
    case Some(f) => f.batchBuffers
    case None => Array(input.asFloatBuffer())
  }

  /**
   * Runs forward on the first `count` samples (1 to batchSize) of [[batch]]: a feed layer takes
   * a whole batch, so a smaller one is padded with copies of its last sample; an input blob is
   * reshaped to their number.
   */
  def forward(count: Int): Unit = {
    feeder match {
      case Some(f) => f.pushFilled(count)
      case None =>
        NativeNet.setBlobData(handle, plan.inputBlob, (count +: specs.head.shape).toArray, input)
    }
    NativeNet.forward(handle)
  }

  /** Blob `name` after a forward: its shape and values. */
  def blob(name: String): (Array[Int], Array[Float]) = {
    val shape = NativeNet.blobShape(handle, name)
    val count = shape.product
    var buffer = outputs.getOrElse(name, null)
    if (buffer == null || buffer.capacity < 4 * count) {
      buffer = ByteBuffer.allocateDirect(4 * count).order(ByteOrder.nativeOrder())
      outputs(name) = buffer
    }
    NativeNet.copyBlobData(handle, name, buffer)
    val values = new Array[Float](count)
    buffer.asFloatBuffer().get(values)
    (shape, values)
  }

  def dispose(): Unit = {
    if (feed != 0) NativeFeed.dispose(feed)
    NativeNet.dispose(handle)
  }
}

private[ml] object LoadedNet {

  /** Builds the TEST net of `model`, loads its weights and readies it for `plan`. */
  def apply(model: ModelData, plan: InferencePlan): LoadedNet = {
    val handle = NativeNet.create(model.netText, model.netSource, NativeNet.TEST, model.device, 1L)
    var feed = 0L
    try {
      NativeNet.loadWeights(handle, model.weights, model.weightsName)
      NativeNet.forwardOnly(handle, plan.keep.toArray)
      plan.feedLayer match {
        case Some(layer) =>
          feed = NativeNet.feed(handle, layer)
          new LoadedNet(handle, feed, plan.batchSize, plan.specs, plan)
        case None =>
          val shape = NativeNet.blobShape(handle, plan.inputBlob).toSeq
          if (shape.length < 2) {
            throw new CortadoConfigException(s"${model.netSource}: input '${plan.inputBlob}' " +
              s"has shape ${shape.mkString(" ")}: it needs a batch axis and a sample")
          }
          val spec = TopSpec("input", plan.inputBlob, plan.featuresColumn, shape.tail)
          new LoadedNet(handle, 0L, shape.head, Seq(spec), plan)
      }
    } catch {
      case e: Throwable =>
        if (feed != 0) NativeFeed.dispose(feed)
        NativeNet.dispose(handle)
        throw e
    }
  }
}

/**
 * The nets of this JVM (an executor, or the driver in local mode), kept between tasks: a task
 * borrows an idle net of its model and plan, or builds one when none is idle, and gives it back
 * when it ends, so a net is built once per concurrent task slot, not per partition or row. The
 * idle nets of the [[MaxModels]] models used last are kept; older ones are freed.
 */
private[ml] object NetPool {

  /** Models whose idle nets are kept. */
  val MaxModels = 4

  // Access-ordered: the eldest entry is the model used longest ago.
  private val idle = new java.util.LinkedHashMap[String, ArrayBuffer[LoadedNet]](8, 0.75f, true)
  private val builtCount = new AtomicInteger

  /** Nets built in this JVM so far. */
  def built: Int = builtCount.get

  /** An idle net of `key`, or a new one of `model` for `plan`. */
  def borrow(key: String, model: ModelData, plan: InferencePlan): LoadedNet = {
    val pooled = synchronized {
      Option(idle.get(key)).filter(_.nonEmpty).map(nets => nets.remove(nets.length - 1))
    }
    pooled.getOrElse {
      val net = LoadedNet(model, plan)
      builtCount.incrementAndGet()
      net
    }
  }

  /** Returns `net` to the idle nets of `key`, freeing those of models beyond [[MaxModels]]. */
  def giveBack(key: String, net: LoadedNet): Unit = {
    val freed = synchronized {
      var nets = idle.get(key)
      if (nets == null) {
        nets = ArrayBuffer.empty[LoadedNet]
        idle.put(key, nets)
      }
      nets += net
      val out = ArrayBuffer.empty[LoadedNet]
      while (idle.size > MaxModels) {
        val eldest = idle.keySet.iterator.next()
        out ++= idle.remove(eldest)
      }
      out
    }
    freed.foreach(_.dispose())
  }

  /** Frees every idle net (tests; a JVM that is done with its models). */
  def clear(): Unit = {
    val all = synchronized {
      val nets = ArrayBuffer.empty[LoadedNet]
      val values = idle.values.iterator
      while (values.hasNext) nets ++= values.next()
      idle.clear()
      nets
    }
    all.foreach(_.dispose())
  }
}
