// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.util.concurrent.atomic.AtomicInteger

import scala.collection.mutable.ArrayBuffer

import org.apache.hadoop.conf.Configuration
import org.apache.spark.SparkException
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoCommException, CortadoConfigException}
import io.cortado.TestDirs.withTempDir
import io.cortado.storage.{HadoopFiles, SerializableConfiguration}

/** The driver's attempts at a training run, without Spark: what is retried, from where. */
class AttemptsSuite extends AnyFunSuite {

  private val conf = new Configuration()

  private def snapshot(prefix: String, iter: Int, model: String, state: String): Unit = {
    HadoopFiles.writeBytesAtomic(s"${prefix}_iter_$iter.caffemodel", model.getBytes, conf)
    HadoopFiles.writeBytesAtomic(s"${prefix}_iter_$iter.solverstate", state.getBytes, conf)
  }

  private def plan(prefix: String) =
    SnapshotPlan(Some(prefix), -1, new SerializableConfiguration(conf))

  test("a failed attempt is followed by one resuming from the newest readable snapshot") {
    withTempDir("cortado-attempts") { dir =>
      val prefix = dir.resolve("snap/net").toString
      snapshot(prefix, 100, "m100", "s100")
      snapshot(prefix, 200, "m200", "s200")
      // The newest is damaged: its model is empty.
      snapshot(prefix, 300, "", "s300")
      assert(io.cortado.storage.Snapshots.latest(prefix, conf).map(_.iter) === Some(300))
      assert(Attempts.readLatest(prefix, conf).map(_._1.iter) === Some(200))
      val told = ArrayBuffer.empty[String]
      val seen = ArrayBuffer.empty[Option[String]]
      val result = Attempts.run(3, Resume(None, None), plan(prefix), told += _) {
        (number: Int, from: Resume, reached: AtomicInteger) =>
          seen += from.weights.map(new String(_))
          if (number == 1) {
            reached.set(250)
            throw new CortadoCommException("rank 1 (h:1) closed the connection during allreduce")
          }
          s"done at attempt $number"
      }
      assert(result === "done at attempt 2")
      assert(seen === Seq(None, Some("m200")))
      assert(told === Seq("Training attempt 1 of 3 failed (last reported iteration 250): rank " +
        "1 (h:1) closed the connection during allreduce. Attempt 2 resumes from " +
        s"${prefix}_iter_200.solverstate (iteration 200)"))
    }
  }

  test("bad input is not retried; the same failure at the same iteration twice stops") {
    withTempDir("cortado-attempts") { dir =>
      val prefix = dir.resolve("net").toString
      var calls = 0
      intercept[CortadoConfigException] {
        Attempts.run(3, Resume(None, None), plan(prefix), _ => ()) { (_, _, _) =>
          calls += 1
          throw new CortadoConfigException("column 'label': row 7 is null")
        }
      }
      assert(calls === 1)

      // A barrier stage's failure quotes the worker's exception in Spark's message, with no
      // cause: still bad settings, not retried.
      calls = 0
      intercept[SparkException] {
        Attempts.run(3, Resume(None, None), plan(prefix), _ => ()) { (_, _, _) =>
          calls += 1
          throw new SparkException("Job aborted due to stage failure: Could not recover from a " +
            "failed barrier ResultStage. Most recent failure reason: Stage failed because " +
            "barrier task ResultTask(1, 0) finished unsuccessfully.\n" +
            "io.cortado.CortadoConfigException: -connection infiniband needs an RDMA device\n" +
            "\tat io.cortado.spark.Rendezvous$.check(Rendezvous.scala:150)")
        }
      }
      assert(calls === 1)

      val told = ArrayBuffer.empty[String]
      calls = 0
      val e = intercept[IllegalStateException] {
        Attempts.run(5, Resume(None, None), plan(prefix), told += _) { (number, _, reached) =>
          calls += 1
          reached.set(40)
          // Stage numbers differ between attempts; the failure is the same.
          throw new IllegalStateException(s"stage $number: loss is NaN")
        }
      }
      assert(calls === 2 && e.getMessage === "stage 2: loss is NaN")
      assert(told.last === "Training attempt 2 of 5 failed (last reported iteration 40) the " +
        "same way as the one before: stage 2: loss is NaN; not trying again", told)
      assert(told.head.endsWith("Attempt 2 starts again from scratch (no snapshot yet)"), told)
    }
  }

  test("the attempts end after Config.maxAttempts, with the last failure") {
    withTempDir("cortado-attempts") { dir =>
      val told = ArrayBuffer.empty[String]
      val e = intercept[RuntimeException] {
        Attempts.run(2, Resume(Some(Array[Byte](1)), None), plan(dir.resolve("n").toString),
          told += _) { (number, from, reached) =>
          assert(from.weights.map(_.toSeq) === Some(Seq[Byte](1)))
          reached.set(number * 10)
          throw new RuntimeException(s"executor lost at ${number * 10}")
        }
      }
      assert(e.getMessage === "executor lost at 20")
      assert(told === Seq(
        "Training attempt 1 of 2 failed (last reported iteration 10): executor lost at 10. " +
          "Attempt 2 starts again from the given weights",
        "Training attempt 2 of 2 failed (last reported iteration 20): executor lost at 20; " +
          "no attempt left"))
    }
  }
}
