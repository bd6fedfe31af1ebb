// SPDX-License-Identifier: Apache-2.0
package io.cortado.api

import java.nio.{ByteBuffer, ByteOrder}

import io.cortado.jni.NativeNet

/**
 * A native net (see [[io.cortado.jni.NativeNet]] for the details of each call), closed exactly
 * once with `close()`; calls after `close()` throw CortadoConfigException ("null handle"). Use
 * with [[io.cortado.Arm.withResource]]. Not thread-safe: one thread at a time.
 */
final class Net private (private var handle: Long) extends AutoCloseable {

  private def live: Long = synchronized(handle)

  /** Runs forward; returns the total weighted loss. */
  def forward(): Float = NativeNet.forward(live)

  def blobNames: Seq[String] = NativeNet.blobNames(live).toSeq

  def blobShape(name: String): Seq[Int] = NativeNet.blobShape(live, name).toSeq

  /** Sets blob `name` from a direct native-order float buffer, reshaping to `shape` if given. */
  def setBlob(name: String, buffer: ByteBuffer, shape: Option[Seq[Int]] = None): Unit =
    NativeNet.setBlobData(live, name, shape.map(_.toArray).orNull, buffer)

  /** Copies blob `name` into a direct buffer; returns the number of floats written. */
  def copyBlob(name: String, buffer: ByteBuffer): Long = NativeNet.copyBlobData(live, name, buffer)

  /** A copy of blob `name` (allocates: for small blobs, tests and tools). */
  def blobData(name: String): Array[Float] = {
    val count = blobShape(name).product
    val buffer = ByteBuffer.allocateDirect(4 * count).order(ByteOrder.nativeOrder())
    copyBlob(name, buffer)
    val values = new Array[Float](count)
    buffer.asFloatBuffer().get(values)
    values
  }

  /** Copies weights by layer name from .caffemodel bytes; `source` names them in errors. */
  def loadWeights(caffemodel: Array[Byte], source: String): Unit =
    NativeNet.loadWeights(live, caffemodel, source)

  /** The weights as .caffemodel bytes. */
  def saveWeights(): Array[Byte] = NativeNet.saveWeights(live)

  override def close(): Unit = {
    val h = synchronized {
      val h = handle
      handle = 0
      h
    }
    if (h != 0) NativeNet.dispose(h)
  }
}

object Net {

  /**
   * Builds a net from prototxt text; `source` names it in errors. Phase: NativeNet.TRAIN or
   * NativeNet.TEST; device -1 is the CPU; a negative seed comes from the clock.
   */
  def apply(
      prototxt: String,
      source: String,
      phase: Int = NativeNet.TEST,
      device: Int = -1,
      seed: Long = -1): Net =
    new Net(NativeNet.create(prototxt, source, phase, device, seed))

  /** A direct native-order buffer holding `values`, ready for [[Net.setBlob]]. */
  def floatBuffer(values: Array[Float]): ByteBuffer = {
    val buffer = ByteBuffer.allocateDirect(4 * values.length).order(ByteOrder.nativeOrder())
    buffer.asFloatBuffer().put(values)
    buffer
  }
}
