// SPDX-License-Identifier: Apache-2.0
package com.example.sources

import java.util.concurrent.atomic.AtomicInteger

import org.apache.spark.SparkContext
import org.apache.spark.rdd.RDD

import io.cortado.caffeonspark.{Config, DataFrameSource, DataSource, ImageDataSource}

/**
 * Source classes as an application writes them for CaffeOnSpark, outside Cortado's package
 * (so they see only what a subclass may), named by the prototxts of SourceClassSuite.
 */
object Samples {

  /**
   * Sample `i` of the synthetic two-class set: label i % 2, four features near (1, 1, 0, 0)
   * for label 1 and near (0, 0, 1, 1) for label 0, the offsets fixed by `i`.
   */
  def features(i: Int): Array[Float] = {
    val label = i % 2
    val centre = if (label == 1) Array(1f, 1f, 0f, 0f) else Array(0f, 0f, 1f, 1f)
    centre.indices.map(k => centre(k) + 0.05f * (((i * 7 + k * 3) % 9) - 4)).toArray
  }

  /** `source` of the form `synthetic:N`: samples 0 .. N-1 in 3 partitions. */
  def count(source: String): Int = source.stripPrefix("synthetic:").toInt

  /** How many times the sources' init() ran in this JVM (driver and local executors). */
  val inits = new AtomicInteger
}

/**
 * A source straight on DataSource, with its own queue handling: samples (id, label, features)
 * made in the executors, batched into the holder (features, then label).
 */
class SyntheticSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends DataSource[(String, Float, Array[Float]), Array[Array[Float]]](conf, layerId,
      isTrain, ("", 0f, null)) {

  override def init(): Boolean = {
    Samples.inits.incrementAndGet()
    super.init() && layerParameter != null && layerParameter.hasMemoryDataParam
  }

  def makeRDD(sc: SparkContext): RDD[(String, Float, Array[Float])] =
    sc.parallelize(0 until Samples.count(sourceFilePath), 3)
      .map(i => (f"s$i%04d", (i % 2).toFloat, Samples.features(i)))

  def dummyDataHolder(): Array[Array[Float]] =
    Array(new Array[Float](batchSize() * 4), new Array[Float](batchSize()))

  def nextBatch(sampleIds: Array[String], data: Array[Array[Float]]): Boolean = {
    var count = 0
    while (count < batchSize()) {
      val sample = sourceQueue.take()
      if (sample == STOP_MARK) return false
      sampleIds(count) = sample._1
      System.arraycopy(sample._3, 0, data(0), count * 4, 4)
      data(1)(count) = sample._2
      count += 1
    }
    true
  }
}

/**
 * An image source as CaffeOnSpark's users wrote them: only makeRDD, from a text file of lines
 * `id,label,p0,p1,...` (raw gray pixels of the layer's height x width).
 */
class CsvImageSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends ImageDataSource(conf, layerId, isTrain) {

  def makeRDD(sc: SparkContext): RDD[(String, String, Int, Int, Int, Boolean, Array[Byte])] = {
    val param = layerParameter.getMemoryDataParam
    val (height, width) = (param.getHeight, param.getWidth)
    sc.textFile(sourceFilePath, 2).map { line =>
      val fields = line.split(",")
      (fields(0), fields(1), 1, height, width, false, fields.drop(2).map(_.toInt.toByte))
    }
  }
}

/** A DataFrame source whose samples come from a CSV file of `id,label,f0,f1,f2,f3`. */
class CsvRowSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends DataFrameSource(conf, layerId, isTrain) {

  override def makeRDD(sc: SparkContext): RDD[(String, Array[Any])] =
    sc.textFile(sourceFilePath, 2).map { line =>
      val fields = line.split(",")
      // The tops: features (FLOAT_ARRAY), then label (INT).
      (fields(0), Array[Any](fields.drop(2).map(_.toFloat).toSeq, fields(1).toInt))
    }
}

/** A source whose init() fails. */
class RefusingSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends SyntheticSource(conf, layerId, isTrain) {
  override def init(): Boolean = false
}

/** A source whose holder is not Cortado's. */
class WrongHolderSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends DataSource[(String, Float, Array[Float]), Array[Float]](conf, layerId, isTrain,
      ("", 0f, null)) {
  def makeRDD(sc: SparkContext): RDD[(String, Float, Array[Float])] =
    sc.parallelize(Seq(("a", 0f, Array(0f, 0f, 0f, 0f))), 1)
  def dummyDataHolder(): Array[Float] = new Array[Float](4)
  def nextBatch(sampleIds: Array[String], data: Array[Float]): Boolean = false
}

/** A source whose nextBatch never returns false. */
class EndlessSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends SyntheticSource(conf, layerId, isTrain) {
  override def nextBatch(sampleIds: Array[String], data: Array[Array[Float]]): Boolean = {
    super.nextBatch(sampleIds, data)
    true
  }
}

/** A source whose nextBatch throws on sample s0007. */
class FailingSource(conf: Config, layerId: Int, isTrain: Boolean)
    extends SyntheticSource(conf, layerId, isTrain) {
  override def nextBatch(sampleIds: Array[String], data: Array[Array[Float]]): Boolean = {
    val more = super.nextBatch(sampleIds, data)
    if (sampleIds.contains("s0007")) throw new IllegalStateException("sample s0007 is bad")
    more
  }
}

/** Not a source at all. */
class NotASource(conf: Config, layerId: Int, isTrain: Boolean)

/** A source without CaffeOnSpark's constructor. */
class NoConstructorSource(conf: Config) extends SyntheticSource(conf, 0, true)

/** The built-in LMDB source, subclassed: read through the queue rather than natively. */
class QueuedLmdb(conf: Config, layerId: Int, isTrain: Boolean)
    extends io.cortado.caffeonspark.LMDB(conf, layerId, isTrain)
