// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.{ByteBuffer, ByteOrder}

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.TaskContext
import org.apache.spark.sql.Row

import io.cortado.CortadoConfigException
import io.cortado.data.{BatchFeeder, RowConverter}
import io.cortado.jni.{NativeFeed, NativeLib, NativeNet}
import io.cortado.spark.TaskData.Sample

/**
 * The tasks that run the TEST net forward with trained weights: [[test]] (the mean of each
 * output over whole batches) and [[features]] (blob values per row). The net is built on the
 * device the solver asks for, decided on the executor (NativeLib.solverInfo), and fed through
 * its feed layer's queue.
 */
private[spark] object ForwardTasks {

  /** The mean of each output blob over the whole batches of `rows` ("name[i]" per element). */
  def test(conf: NetConf, converter: RowConverter, model: Array[Byte], modelName: String,
      outputs: Seq[String], rows: Iterator[Row]): Seq[(String, Double)] = {
    val samples = TaskData.cache(converter, rows)
    val batchSize = conf.batchSize
    val whole = samples.length / batchSize
    if (whole == 0) {
      throw new CortadoConfigException(
        s"test: the DataFrame has ${samples.length} rows, fewer than one batch ($batchSize)")
    }
    val sums = scala.collection.mutable.LinkedHashMap.empty[String, Double]
    val batches = samples.grouped(batchSize).take(whole).map(_.iterator)
    forEachBatch(conf, model, modelName, outputs, batches) { handle =>
      outputs.foreach { blob =>
        val values = blobValues(handle, blob)
        values.indices.foreach { i =>
          val name = if (values.length == 1) blob else s"$blob[$i]"
          sums(name) = sums.getOrElse(name, 0.0) + values(i)
        }
      }
    }
    sums.toSeq.map { case (k, v) => k -> v / whole }
  }

  /**
   * One row per input row: its id (the column after the converter's, or the row's number)
   * and each blob's values for it: the row's sample of a blob whose first axis is the batch,
   * and the whole blob, repeated on every row of the batch, for one that is not (an
   * aggregate such as `accuracy` or `loss`, as CaffeOnSpark gives them). The last batch is
   * padded with copies of its last row.
   */
  def features(conf: NetConf, converter: RowConverter, model: Array[Byte], modelName: String,
      blobs: Seq[String], hasId: Boolean, rows: Iterator[Row]): Iterator[Row] = {
    val idColumn = converter.width
    val ids = ArrayBuffer.empty[Any]
    var index = -1L
    // A row the converter skips (a corrupt image) is left out, with its id.
    val samples = rows.flatMap { row =>
      index += 1
      val sample = converter(row, index)
      if (sample != null) ids += (if (hasId) row.get(idColumn) else index)
      Option(sample)
    }.toArray
    val batchSize = conf.batchSize
    val out = ArrayBuffer.empty[Row]
    val batches = samples.grouped(batchSize).map(b => b ++ Array.fill(batchSize - b.length)(b.last))
    var done = 0
    forEachBatch(conf, model, modelName, blobs, batches.map(_.iterator)) { handle =>
      val values = blobs.map { b =>
        val perRow = NativeNet.blobShape(handle, b).headOption.contains(batchSize)
        (perRow, blobValues(handle, b))
      }
      val n = math.min(batchSize, samples.length - done)
      (0 until n).foreach { i =>
        val columns = values.map { case (perRow, v) =>
          if (perRow) {
            val size = v.length / batchSize
            java.util.Arrays.copyOfRange(v, i * size, (i + 1) * size).toSeq
          } else v.toSeq
        }
        out += Row.fromSeq(ids(done + i) +: columns)
      }
      done += n
    }
    out.iterator
  }

  /**
   * Builds the TEST net with `model` (named `modelName` in errors), forward only, keeping the data of the blobs `use` reads
   * (`keep`); then for each batch of samples: push into the feed layer, forward, `use`.
   */
  private def forEachBatch(conf: NetConf, model: Array[Byte], modelName: String, keep: Seq[String],
      batches: Iterator[Iterator[Sample]])(use: Long => Unit): Unit = {
    val device = NativeLib.solverInfo(conf.solverText, conf.solverSource).device
    val handle = NativeNet.create(conf.netText, conf.netSource, NativeNet.TEST, device, 1L)
    try {
      NativeNet.loadWeights(handle, model, modelName)
      NativeNet.forwardOnly(handle, keep.toArray)
      val feed = NativeNet.feed(handle, conf.feedLayer)
      try {
        val feeder = new BatchFeeder(feed, conf.feedLayer)
        val context = Option(TaskContext.get())
        batches.foreach { batch =>
          // A killed task (a cancelled job) stops between batches.
          context.foreach(Watchdog.killIfInterrupted)
          feeder.feed(batch)
          NativeNet.forward(handle)
          use(handle)
        }
      } finally NativeFeed.dispose(feed)
    } finally NativeNet.dispose(handle)
  }

  private def blobValues(handle: Long, blob: String): Array[Float] = {
    val count = NativeNet.blobShape(handle, blob).product
    val buffer = ByteBuffer.allocateDirect(4 * count).order(ByteOrder.nativeOrder())
    NativeNet.copyBlobData(handle, blob, buffer)
    val values = new Array[Float](count)
    buffer.asFloatBuffer().get(values)
    values
  }
}
