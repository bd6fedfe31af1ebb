// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.{HashPartitioner, NarrowDependency, Partitioner}
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.functions.col

import io.cortado.CortadoConfigException
import io.cortado.data.{RowConverter, TopSpec}

/**
 * How a DataFrame reaches a task and becomes samples: the feed's columns selected in top
 * order, one partition per worker, and every row converted into memory
 * before any native work starts, so that a bad row fails first, naming the column.
 */
private[spark] object TaskData {

  /** One sample per top, as [[io.cortado.data.BatchFeeder]] takes them. */
  type Sample = Array[Array[Float]]

  /** The specs' columns in order, then the id column: the rows the converter reads. */
  def selectColumns(df: DataFrame, specs: Seq[TopSpec], id: Option[String]): DataFrame =
    df.select((specs.map(_.column) ++ id).map(c => col(s"`$c`")): _*)

  def onePartition(df: DataFrame): RDD[Row] = onePartition(df.rdd)

  def onePartition[T](rdd: RDD[T]): RDD[T] =
    if (rdd.getNumPartitions == 1) rdd else rdd.repartition(1)

  /** The tag of validation rows in a training task's partition. */
  val ValidationTag = 1

  /** The tag of training rows of stream `stream` (0, 2, 3, ...; see [[trainingPartitions]]). */
  def trainTag(stream: Int): Int = if (stream == 0) 0 else stream + 1

  /** The stream of a training row's tag. */
  def streamOf(tag: Int): Int = if (tag == 0) 0 else tag - 1

  /**
   * The rows of a training job with `workers` of `full` workers, tagged: training rows with
   * [[trainTag]] of their stream, validation rows with [[ValidationTag]], all in partition 0,
   * where worker 0 tests.
   *
   * With every worker (or a number that does not divide `full`), one stream per worker: its
   * partition as it is when `train` has `workers` partitions, else repartitioned (a shuffle).
   * With `full / workers` = s > 1, each worker takes s of the full run's partitions, each a
   * stream of its own in its order: the worker's iter_size passes read from them in turn what
   * the full run's workers read (see TrainingTask), so that the run is the same optimisation
   * on the same samples where those partitions are the full run's (see docs/spark.md).
   */
  def trainingPartitions(train: RDD[Row], validation: Option[RDD[Row]], workers: Int,
      full: Int): RDD[(Int, Row)] = {
    val streams = if (workers < full && full % workers == 0) full / workers else 1
    val partitioned =
      if (streams > 1) {
        val base = if (fitsBarrierStage(train, full)) train else train.repartition(full)
        base.mapPartitionsWithIndex { (p, rows) =>
          rows.zipWithIndex.map { case (r, i) => ((p / streams, p % streams, i.toLong), r) }
        }.repartitionAndSortWithinPartitions(new WorkerPartitioner(workers))
          .map { case ((_, stream, _), r) => (trainTag(stream), r) }
      } else {
        val rows =
          if (workers == 1 && validation.isEmpty) onePartition(train)
          else if (workers == 1 || fitsBarrierStage(train, workers)) train
          else train.repartition(workers)
        rows.map(r => (0, r))
      }
    validation match {
      case None => partitioned
      case Some(rows) if workers == 1 && streams == 1 =>
        onePartition(partitioned.union(rows.map(r => (ValidationTag, r))))
      case Some(rows) =>
        // Key 0 lands in partition 0 of every HashPartitioner.
        val toFirst = rows.map(r => (0, r)).partitionBy(new HashPartitioner(workers)).values
        partitioned.zipPartitions(toFirst) { (t, v) => t ++ v.map(r => (ValidationTag, r)) }
    }
  }

  /** Keys (worker, stream, row) to partition `worker`. */
  private final class WorkerPartitioner(workers: Int) extends Partitioner {
    override def numPartitions: Int = workers
    override def getPartition(key: Any): Int = key.asInstanceOf[(Int, Int, Long)]._1
  }

  /**
   * A training task's samples in feed order: each stream cycled from row `offset` (mod its
   * length), `block` samples of each stream in turn.
   */
  def feedOrder(streams: Seq[Array[Sample]], block: Int, offset: Long): Iterator[Sample] = {
    val cycles = streams.map { s =>
      Iterator.continually(s.iterator).flatten.drop((offset % s.length).toInt)
    }
    if (cycles.size == 1) cycles.head
    else {
      val blocks = cycles.map(_.grouped(block))
      Iterator.continually(blocks.iterator.flatMap(_.next())).flatten
    }
  }

  /**
   * Whether `rdd` can feed a barrier stage of `tasks` tasks as it is: Spark runs one only when
   * every RDD of the stage (back to the last shuffle) has that many partitions, so a union of
   * two data sets, or a coalesce, needs a shuffle first even with the right count at the end.
   */
  def fitsBarrierStage(rdd: RDD[_], tasks: Int): Boolean =
    rdd.getNumPartitions == tasks && rdd.dependencies.forall {
      case narrow: NarrowDependency[_] => fitsBarrierStage(narrow.rdd, tasks)
      case _ => true
    }

  /**
   * Converts every row (numbered from 0 in messages), leaving out those the converter skips (a
   * corrupt image); throws when none is left.
   */
  def cache(converter: RowConverter, rows: Iterator[Row]): Array[Sample] = {
    var index = -1L
    val samples = rows.map { row => index += 1; converter(row, index) }.filter(_ != null).toArray
    if (samples.isEmpty) {
      throw new CortadoConfigException(
        if (index < 0) "the DataFrame has no rows"
        else s"none of the DataFrame's ${index + 1} rows is usable (each holds a corrupt image)")
    }
    samples
  }

  /**
   * Converts the rows of a training task: training rows (`converter`) by stream (their tags,
   * see [[trainingPartitions]]), the others validation rows (`validation`'s converter). Throws
   * when either set is empty, naming the training rows `what`.
   */
  def cacheTraining(converter: RowConverter, validation: Option[RowConverter],
      rows: Iterator[(Int, Row)], what: String = "the DataFrame")
      : (Seq[Array[Sample]], Array[Sample]) = {
    val streams = ArrayBuffer.empty[ArrayBuffer[Sample]]
    val testRows = ArrayBuffer.empty[Sample]
    var (trainIndex, testIndex) = (-1L, -1L)
    // A row the converter skips (a corrupt image) is left out.
    rows.foreach {
      case (ValidationTag, row) =>
        testIndex += 1
        Option(validation.get(row, testIndex)).foreach(testRows += _)
      case (tag, row) =>
        trainIndex += 1
        val stream = streamOf(tag)
        while (streams.size <= stream) streams += ArrayBuffer.empty[Sample]
        Option(converter(row, trainIndex)).foreach(streams(stream) += _)
    }
    // A stream without rows (an empty partition of the full run) is left out.
    if (streams.forall(_.isEmpty)) throw new CortadoConfigException(s"$what has no rows")
    if (validation.isDefined && testRows.isEmpty) {
      throw new CortadoConfigException("the validation DataFrame has no rows")
    }
    (streams.filter(_.nonEmpty).map(_.toArray).toSeq, testRows.toArray)
  }
}
