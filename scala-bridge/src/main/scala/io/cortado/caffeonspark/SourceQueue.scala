// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import java.util.concurrent.{LinkedBlockingQueue, TimeUnit}

import org.apache.spark.TaskContext
import org.apache.spark.ml.linalg.{Vector => MLVector}
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.types.{ArrayType, DataType, FloatType, StringType, StructField,
  StructType}

import io.cortado.{CortadoConfigException, CortadoException}
import io.cortado.jni.NativeImage

/**
 * CaffeOnSpark's queue, as its processor drove a DataSource: the samples of [[DataSource.makeRDD]]
 * offered in each partition while a transformer thread turns them into batches with
 * [[DataSource.nextBatch]], each batch's samples becoming rows of the training DataFrame.
 */
private[caffeonspark] object SourceQueue {

  /** How long the transformer may sit waiting on an empty queue after STOP_MARK. */
  private val StallMillis = 2000L

  /**
   * `source`'s data: column `id` (the sample's id) then one column per top of the feed layer,
   * named as the native API reads it: float for a top of one value, else array<float>.
   */
  def load[T1, T2](source: DataSource[T1, T2], spark: SparkSession): DataFrame = {
    val feed = source.resolved.feed
    val className = source.getClass.getName
    if (feed.columns.contains("id")) {
      throw new CortadoConfigException(
        s"${feed.owner}: a top's column is named 'id', the column of the samples' ids")
    }
    val samples = source.makeRDD(spark.sparkContext)
    if (samples == null) {
      throw new CortadoConfigException(s"${feed.owner}: $className.makeRDD returned null")
    }
    val sizes = feed.shapes.map(_.product).toArray
    val rows = samples.mapPartitions(part => new Batches(source, part, sizes))
    val columns = feed.columns.zip(sizes).map { case (name, size) =>
      val kind: DataType =
        if (size == 1) FloatType else ArrayType(FloatType, containsNull = false)
      StructField(name, kind, nullable = false)
    }
    spark.createDataFrame(rows, StructType(StructField("id", StringType) +: columns))
  }

  /**
   * A value of a DataFrameSource sample as top `t` of `feed` takes it (its sample size):
   * numbers, strings holding a number, arrays of numbers, Spark ML vectors, and bytes (an
   * encoded image decoded into the top's shape; a RAW_IMAGE top's interleaved pixels
   * rearranged; else one value per byte). `what` names the sample in messages.
   */
  def floats(value: Any, feed: DataSource.Feed, t: Int, resize: Boolean,
      what: String): Array[Float] = {
    val shape = feed.shapes(t)
    val size = shape.product
    val top = s"${feed.owner}: top '${feed.columns(t)}' of $what"
    def check(length: Int): Unit = if (length != size) {
      throw new CortadoConfigException(
        s"$top has $length values; the top takes ${shape.mkString(" x ")} ($size)")
    }
    def sized(values: Array[Float]): Array[Float] = { check(values.length); values }
    def number(x: Any): Float = x match {
      case n: Number => n.floatValue
      case s: String =>
        try s.trim.toFloat
        catch {
          case _: NumberFormatException =>
            throw new CortadoConfigException(s"$top holds '$s', not a number")
        }
      case b: Boolean => if (b) 1f else 0f
      case other => throw new CortadoConfigException(
        s"$top holds a ${Option(other).map(_.getClass.getName).getOrElse("null")}, not a number")
    }
    value match {
      case null => throw new CortadoConfigException(s"$top is null")
      case bytes: Array[Byte] =>
        val image = shape.size == 3
        if (image && (feed.topTypes(t).startsWith("ENCODED_IMAGE") ||
          (bytes.length != size && NativeImage.looksEncoded(bytes)))) {
          NativeImage.decode(bytes, shape(0), shape(1), shape(2), resize, NativeImage.NO_CROP,
            0L, false, top)
        } else if (image && feed.topTypes(t) == "RAW_IMAGE") {
          // CaffeOnSpark's raw images: the top's size, pixels interleaved.
          check(bytes.length)
          NativeImage.fromInterleaved(bytes, shape(0), shape(1), shape(2), shape(1), shape(2),
            resize, NativeImage.NO_CROP, 0L, top)
        } else sized(bytes.map(b => (b & 0xff).toFloat))
      case v: MLVector => sized(v.toArray.map(_.toFloat))
      case a: Array[Float] => sized(a.clone())
      case a: Array[Double] => sized(a.map(_.toFloat))
      case a: Array[Int] => sized(a.map(_.toFloat))
      case a: Array[Long] => sized(a.map(_.toFloat))
      case a: Array[_] => sized(a.map(number))
      case s: scala.collection.Seq[_] => sized(s.map(number).toArray)
      case x => sized(Array(number(x)))
    }
  }

  private sealed trait Out
  private final case class Batch(rows: Seq[Row]) extends Out
  private case object End extends Out
  private final case class Failed(error: Throwable) extends Out

  /**
   * The rows of one partition: the task thread offers the samples (then STOP_MARK) as the
   * queue takes them, without blocking, and hands on the batches the transformer thread makes.
   */
  private final class Batches[T1, T2](source: DataSource[T1, T2], samples: Iterator[T1],
      sizes: Array[Int]) extends Iterator[Row] {

    private val feed = source.resolved.feed
    private val className = source.getClass.getName

    private def fail(message: String, cause: Throwable = null): Nothing =
      throw new CortadoConfigException(s"${feed.owner}: $className$message", cause)

    DataSource.initialise(source)
    source.resetQueue()

    private val batch = source.batchSize()
    if (batch <= 0) fail(s": the batch size is $batch")

    private val arrays: Array[Array[Float]] = source.dummyDataHolder().asInstanceOf[AnyRef] match {
      case a: Array[Array[Float]] if a.length == sizes.length &&
          a.indices.forall(t => a(t) != null && a(t).length >= batch * sizes(t)) => a
      case a: Array[Array[Float]] => fail(s".dummyDataHolder() gave ${a.length} arrays of " +
        s"${a.map(x => if (x == null) "null" else x.length.toString).mkString(", ")} floats; " +
        s"the layer's ${sizes.length} tops take ${sizes.map(_ * batch).mkString(", ")} " +
        s"(batch $batch)")
      case other => fail(s".dummyDataHolder() gave " +
        s"${Option(other).map(_.getClass.getSimpleName).getOrElse("null")}; the queue takes " +
        "Array[Array[Float]], one array per top of the feed layer")
    }

    // A few batches ahead at most: the transformer then waits, and so does the queue.
    private val out = new LinkedBlockingQueue[Out](4)

    private val transformer = new Thread(s"cortado-source-transformer") {
      override def run(): Unit =
        try {
          var more = true
          while (more) {
            val ids = new Array[String](batch)
            more = source.nextBatch(ids, arrays.asInstanceOf[T2])
            val n = ids.indexWhere(_ == null) match {
              case -1 => batch
              case k => k
            }
            out.put(Batch((0 until n).map { i =>
              Row.fromSeq(ids(i) +: sizes.indices.map { t =>
                val size = sizes(t)
                if (size == 1) arrays(t)(i)
                else java.util.Arrays.copyOfRange(arrays(t), i * size, (i + 1) * size)
              })
            }))
          }
          out.put(End)
        } catch {
          case _: InterruptedException =>
          case e: Throwable => out.put(Failed(e))
        }
    }
    transformer.setDaemon(true)
    transformer.start()
    Option(TaskContext.get()).foreach(_.addTaskCompletionListener[Unit] { _ =>
      transformer.interrupt()
    })

    private var rows: Iterator[Row] = Iterator.empty
    private var finished = false
    private var pending: Option[T1] = None
    private var stopOffered = false
    private var stalledSince = 0L

    def hasNext: Boolean = {
      while (!rows.hasNext && !finished) step()
      rows.hasNext
    }

    def next(): Row = {
      if (!hasNext) throw new NoSuchElementException("no more rows")
      rows.next()
    }

    /** Offers what the queue takes, then waits a little for a batch. */
    private def step(): Unit = {
      var taken = true
      while (taken && !stopOffered) {
        if (pending.isEmpty && samples.hasNext) pending = Some(samples.next())
        pending match {
          case Some(sample) => if (source.offer(sample)) pending = None else taken = false
          case None => if (source.offer(source.STOP_MARK)) stopOffered = true else taken = false
        }
      }
      out.poll(10, TimeUnit.MILLISECONDS) match {
        case null =>
          val waiting = transformer.getState == Thread.State.WAITING
          if (stopOffered && waiting && source.queued == 0) {
            val now = System.currentTimeMillis
            if (stalledSince == 0) stalledSince = now
            else if (now - stalledSince > StallMillis) {
              transformer.interrupt()
              fail(".nextBatch took every sample and STOP_MARK but did not return false; it " +
                "must return false once it has taken STOP_MARK")
            }
          } else stalledSince = 0
        case Batch(batchRows) => rows = batchRows.iterator; stalledSince = 0
        case End => finished = true
        case Failed(e: CortadoException) => throw e
        case Failed(e) => fail(s".nextBatch failed: $e", e)
      }
    }
  }
}
