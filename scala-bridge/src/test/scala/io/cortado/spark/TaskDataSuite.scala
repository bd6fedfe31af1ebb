// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import org.apache.spark.sql.Row
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.spark.TaskData.Sample

/**
 * The order in which a training task's rows reach its feed: streams of the full run's
 * partitions for a run on fewer workers, cycled from where a resumed run is.
 */
class TaskDataSuite extends AnyFunSuite with PerTest {

  private def stream(name: Float, n: Int): Array[Sample] =
    Array.tabulate(n)(i => Array(Array(name, i.toFloat)))

  /** (stream, row) of the first `n` samples. */
  private def names(samples: Iterator[Sample], n: Int): Seq[(Int, Int)] =
    samples.take(n).map(s => (s(0)(0).toInt, s(0)(1).toInt)).toSeq

  test("one stream cycles from the offset") {
    assert(names(TaskData.feedOrder(Seq(stream(0, 3)), 2, 4), 5) ===
      Seq((0, 1), (0, 2), (0, 0), (0, 1), (0, 2)))
  }

  test("several streams give a block each in turn, each from the offset, each cycling") {
    val order = names(TaskData.feedOrder(Seq(stream(0, 5), stream(1, 4)), 2, 6), 12)
    // Stream 0 from 6 mod 5 = 1, stream 1 from 6 mod 4 = 2.
    assert(order === Seq((0, 1), (0, 2), (1, 2), (1, 3), (0, 3), (0, 4), (1, 0), (1, 1),
      (0, 0), (0, 1), (1, 2), (1, 3)))
  }

  test("a run on fewer workers takes whole partitions of the full run's, each a stream") {
    val rows = (0 until 16).map(i => Row(i))
    val train = ss.sparkContext.parallelize(rows, 4)
    val two = TaskData.trainingPartitions(train, None, 2, 4)
    assert(two.getNumPartitions === 2)
    val byWorker = two.glom().collect().map(_.map { case (tag, r) =>
      (TaskData.streamOf(tag), r.getInt(0)) }.toSeq)
    assert(byWorker.toSeq === Seq(
      (0 until 4).map((0, _)) ++ (4 until 8).map((1, _)),
      (8 until 12).map((0, _)) ++ (12 until 16).map((1, _))))
    // One worker, with validation rows: four streams, then the validation rows.
    val validation = ss.sparkContext.parallelize(Seq(Row(-1), Row(-2)), 2)
    val one = TaskData.trainingPartitions(train, Some(validation), 1, 4).collect().toSeq
    assert(one.filter(_._1 != TaskData.ValidationTag).map { case (t, r) =>
      (TaskData.streamOf(t), r.getInt(0)) } === (0 until 16).map(i => (i / 4, i)))
    assert(one.filter(_._1 == TaskData.ValidationTag).map(_._2.getInt(0)).toSet === Set(-1, -2))
    // As many workers as the full run, or a count that does not divide it: one stream each.
    assert(TaskData.trainingPartitions(train, None, 3, 4).collect().forall(_._1 == 0))
  }
}
