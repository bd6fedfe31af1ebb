// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.{HashPartitioner, NarrowDependency}
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

  /**
   * The rows of a training job with `workers` workers, tagged 0 (training) or 1 (validation):
   * `workers` partitions of training rows (as they are when `train` has that many, else
   * repartitioned: a shuffle), the validation rows all in partition 0, where worker 0 tests.
   */
  def trainingPartitions(train: RDD[Row], validation: Option[RDD[Row]],
      workers: Int): RDD[(Int, Row)] = {
    val partitioned =
      if (workers == 1) onePartition(train)
      else if (fitsBarrierStage(train, workers)) train
      else train.repartition(workers)
    validation match {
      case None => partitioned.map(r => (0, r))
      case Some(rows) if workers == 1 =>
        onePartition(train.map(r => (0, r)).union(rows.map(r => (1, r))))
      case Some(rows) =>
        // Key 0 lands in partition 0 of every HashPartitioner.
        val toFirst = rows.map(r => (0, r)).partitionBy(new HashPartitioner(workers)).values
        partitioned.zipPartitions(toFirst) { (t, v) => t.map(r => (0, r)) ++ v.map(r => (1, r)) }
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
   * Converts the rows of a training task: those tagged 0 are training rows (`converter`), the
   * others validation rows (`validation`'s converter). Throws when either set is empty, naming
   * the training rows `what`.
   */
  def cacheTraining(converter: RowConverter, validation: Option[RowConverter],
      rows: Iterator[(Int, Row)], what: String = "the DataFrame")
      : (Array[Sample], Array[Sample]) = {
    val trainRows = ArrayBuffer.empty[Sample]
    val testRows = ArrayBuffer.empty[Sample]
    var (trainIndex, testIndex) = (-1L, -1L)
    // A row the converter skips (a corrupt image) is left out.
    rows.foreach {
      case (0, row) =>
        trainIndex += 1
        Option(converter(row, trainIndex)).foreach(trainRows += _)
      case (_, row) =>
        testIndex += 1
        Option(validation.get(row, testIndex)).foreach(testRows += _)
    }
    if (trainRows.isEmpty) throw new CortadoConfigException(s"$what has no rows")
    if (validation.isDefined && testRows.isEmpty) {
      throw new CortadoConfigException("the validation DataFrame has no rows")
    }
    (trainRows.toArray, testRows.toArray)
  }
}
