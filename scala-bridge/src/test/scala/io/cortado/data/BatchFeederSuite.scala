// SPDX-License-Identifier: Apache-2.0
package io.cortado.data

import scala.concurrent.{Await, Future}
import scala.concurrent.ExecutionContext.Implicits.global
import scala.concurrent.duration._
import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoIOException
import io.cortado.jni.NativeFeedSuite

class BatchFeederSuite extends AnyFunSuite {
  import NativeFeedSuite._

  /** Two separable classes: label 1 near (1, 1, 0, 0), label 0 near (0, 0, 1, 1). */
  def rows(n: Int, seed: Int = 7): Iterator[Array[Array[Float]]] = {
    val random = new Random(seed)
    Iterator.tabulate(n) { i =>
      val label = i % 2
      val center = if (label == 1) Array(1f, 1f, 0f, 0f) else Array(0f, 0f, 1f, 1f)
      Array(center.map(_ + 0.2f * random.nextGaussian().toFloat), Array(label.toFloat))
    }
  }

  test("a net trains from a feeder thread and its loss falls") {
    withFeed { (solver, feed) =>
      val feeder = new BatchFeeder(feed, "TRAIN/data")
      assert(feeder.layer === "TRAIN/data")
      assert(feeder.batchSize === BatchSize)
      assert(feeder.sampleSizes === Seq(4, 1))
      // 41 whole batches and a partial one, which is not pushed.
      val pushed = Future {
        val n = feeder.feed(rows(41 * BatchSize + 3))
        feeder.close()
        n
      }
      val first = step(solver, 1)
      val later = step(solver, 40)
      assert(Await.result(pushed, 60.seconds) === 41)
      assert(feeder.pushed === 41L)
      assert(later < first / 3, s"loss $first -> $later")
      // Every whole batch was used: the next step finds the end of the data.
      val e = intercept[CortadoIOException](step(solver, 1))
      assert(e.getMessage.contains("end of data"))
    }
  }

  test("rows of the wrong shape are rejected before anything is pushed") {
    withFeed { (_, feed) =>
      val feeder = new BatchFeeder(feed, "TRAIN/data")
      val e = intercept[IllegalArgumentException] {
        feeder.feed(Iterator(Array(Array(1f, 2f, 3f), Array(0f))))
      }
      assert(e.getMessage.contains(
        "feed layer 'TRAIN/data': top 'data' needs 4 floats per sample, got 3"), e.getMessage)
      val unnamed = intercept[IllegalArgumentException] {
        new BatchFeeder(feed).feed(Iterator(Array(Array(1f, 2f, 3f, 4f))))
      }
      assert(unnamed.getMessage.contains("feed: a row needs 2 tops (data, label), got 1"),
        unnamed.getMessage)
      assert(feeder.pushed === 0L)
    }
  }
}
