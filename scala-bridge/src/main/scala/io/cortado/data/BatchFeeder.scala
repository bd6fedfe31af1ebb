// SPDX-License-Identifier: Apache-2.0
package io.cortado.data

import java.nio.{ByteBuffer, ByteOrder, FloatBuffer}

import io.cortado.jni.NativeFeed

/**
 * Turns rows into whole batches in direct buffers and pushes them into one feed (see
 * [[io.cortado.jni.NativeFeed]]): `handle` is a feed handle from NativeTrainer.feed or
 * NativeNet.feed, which the caller owns and disposes after this feeder's last call. A row holds
 * one `Array[Float]` per top, in the layer's top order, each one sample of that top (its batch
 * shape without the batch axis). Each batch crosses JNI as one buffer per top (one memcpy
 * each); the buffers are reused.
 *
 * Meant for the feeder thread of a Spark task. Once the net behind the feed is gone (its
 * session or net disposed, or the session aborted), a push throws CortadoCommException. Not
 * thread-safe: one feeder per instance. Transposed CoSData tops (batch axis last) are not
 * supported yet.
 *
 * @param layer the feed layer's name, for messages ("TRAIN/data"); empty when unknown
 */
final class BatchFeeder(handle: Long, val layer: String) {

  /** A feeder whose messages name no layer. */
  def this(handle: Long) = this(handle, "")

  private val what = if (layer.isEmpty) "feed" else s"feed layer '$layer'"

  /** The layer's top names and batch shapes, as the native layer reports them. */
  val topNames: IndexedSeq[String] = NativeFeed.topNames(handle).toIndexedSeq
  val shapes: IndexedSeq[IndexedSeq[Int]] =
    topNames.indices.map(i => NativeFeed.topShape(handle, i).toIndexedSeq)

  /** Samples per batch: the leading axis of every top. */
  val batchSize: Int = shapes.head.head

  /** Floats per sample, for each top. */
  val sampleSizes: IndexedSeq[Int] = shapes.map(_.tail.product)

  private val buffers: Array[ByteBuffer] = shapes.map { shape =>
    ByteBuffer.allocateDirect(4 * shape.product).order(ByteOrder.nativeOrder())
  }.toArray
  private val floats: Array[FloatBuffer] = buffers.map(_.asFloatBuffer())

  /**
   * Pushes every whole batch of `rows` (blocking while the feed is full) and returns the number
   * of batches pushed. A trailing partial batch is not pushed: every rank runs the same number
   * of whole batches. A row of the wrong arity or sample size is an IllegalArgumentException.
   */
  def feed(rows: Iterator[Array[Array[Float]]]): Long = {
    var filled = 0
    var batches = 0L
    rows.foreach { row =>
      require(row.length == topNames.length,
        s"$what: a row needs ${topNames.length} tops (${topNames.mkString(", ")}), got " +
          row.length)
      var i = 0
      while (i < row.length) {
        require(row(i).length == sampleSizes(i),
          s"$what: top '${topNames(i)}' needs ${sampleSizes(i)} floats per sample, got " +
            row(i).length)
        floats(i).position(filled * sampleSizes(i))
        floats(i).put(row(i))
        i += 1
      }
      filled += 1
      if (filled == batchSize) {
        NativeFeed.push(handle, buffers)
        batches += 1
        filled = 0
      }
    }
    batches
  }

  /**
   * The batch buffers, one per top, for a caller that writes samples in place (sample `s` of
   * top `i` at float `s * sampleSizes(i)` of buffer `i`, as [[RowConverter.into]] writes them)
   * and then calls [[pushFilled]]. Not to be mixed with [[feed]] within a batch.
   */
  def batchBuffers: Array[FloatBuffer] = floats

  /**
   * Pushes the batch written in place in [[batchBuffers]]: its first `count` samples (1 to
   * batchSize), then copies of the last of them up to batchSize (blocking while the feed is
   * full).
   */
  def pushFilled(count: Int): Unit = {
    require(count >= 1 && count <= batchSize, s"$what: $count samples in a batch of $batchSize")
    var i = 0
    while (i < floats.length) {
      val size = sampleSizes(i)
      if (count < batchSize && size > 0) {
        val last = new Array[Float](size)
        floats(i).get((count - 1) * size, last)
        var s = count
        while (s < batchSize) { floats(i).put(s * size, last); s += 1 }
      }
      i += 1
    }
    NativeFeed.push(handle, buffers)
  }

  /** Batches pushed into the feed so far (by any feeder). */
  def pushed: Long = NativeFeed.pushed(handle)

  /** End of data: queued batches are still used, then the net's forward pass fails. */
  def close(): Unit = NativeFeed.close(handle)

  /** Stops the feed at once (a killed task); the waiting forward pass fails with `reason`. */
  def abort(reason: String): Unit = NativeFeed.abort(handle, reason)
}
