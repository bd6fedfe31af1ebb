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
        "same way as the one before: stage 2: loss is NaN; not trying again. No snapshot was " +
        s"written under $prefix: a new run starts from the beginning", told)
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
          s"no attempt left. No snapshot was written under ${dir.resolve("n")}: a new run " +
          "starts from the beginning"))
    }
  }

  test("a stop to resize is no failure; a slot shortage is tried again; the last word says " +
    "where to resume from") {
    withTempDir("cortado-attempts") { dir =>
      val prefix = dir.resolve("snap/net").toString
      val told = ArrayBuffer.empty[String]
      val seen = ArrayBuffer.empty[(Int, Int)]
      val e = intercept[SlotShortage] {
        Attempts.run(3, Resume(None, None), plan(prefix), told += _) { (number, from, reached) =>
          seen += number -> from.iteration
          number match {
            case 1 =>
              snapshot(prefix, 300, "m300", "s300")
              throw new StoppedToResize(300, 3)
            case 2 =>
              reached.set(350)
              snapshot(prefix, 400, "m400", "s400")
              throw new CortadoCommException("rank 2 (h:3) closed the connection")
            case _ =>
              // The same shortage twice, before any iteration: tried again until no attempt
              // is left.
              throw new SlotShortage("training with 3 workers needs at least 2 of 3 task slots")
          }
        }
      }
      assert(e.getMessage.startsWith("training with 3 workers"))
      assert(seen === Seq(1 -> -1, 2 -> 300, 3 -> 400, 4 -> 400))
      assert(told.head === "Training attempt 1 stopped at iteration 300 to go on with 3 " +
        s"workers. Attempt 2 resumes from ${prefix}_iter_300.solverstate (iteration 300)")
      assert(told(1).startsWith("Training attempt 2 of 4 failed (last reported iteration 350)"))
      assert(told.last === "Training attempt 4 of 4 failed: training with 3 workers needs at " +
        "least 2 of 3 task slots; no attempt left. The newest snapshot is " +
        s"${prefix}_iter_400.solverstate (iteration 400): resume with -weights " +
        s"${prefix}_iter_400.caffemodel -snapshot ${prefix}_iter_400.solverstate " +
        "(Config.weights and Config.snapshot, or Config.resumeLatest)", told)
    }
  }

  test("keepGlobalBatch scales iter_size or the batch where it divides evenly; linearLr the " +
    "learning rate") {
    def s(mode: String, full: Int, workers: Int, batch: Int, iterSize: Int) =
      Elastic.scaling(mode, full, workers, batch, iterSize, 0.03f)
    val k = Elastic.KeepGlobalBatch
    assert(s(k, 4, 4, 32, 1).how === "as asked")
    val four = s(k, 4, 2, 32, 1)
    assert((four.batch, four.iterSize, four.exact) === ((32, 2, true)))
    assert(four.how === "iter_size 1 -> 2 per worker, global batch 128 kept")
    val three = s(k, 3, 2, 64, 1)
    assert((three.batch, three.iterSize, three.exact) === ((96, 1, true)))
    assert(three.how === "batch 64 -> 96 per device, global batch 192 kept")
    val odd = s(k, 3, 2, 5, 1)
    assert((odd.batch, odd.iterSize, odd.exact) === ((8, 1, false)))
    assert(odd.how === "batch 5 -> 8 per device, global batch 15 -> 16 (neither iter_size nor " +
      "the batch divides evenly)")
    val lr = s(Elastic.LinearLr, 3, 2, 64, 2)
    assert((lr.batch, lr.iterSize, lr.baseLr) === ((64, 2, 0.02f)))
    assert(lr.describe === "2 of 3 workers, linearLr: base_lr 0.03 -> 0.02 (x 2/3), global " +
      "batch 384 -> 256; batch 64 per device, iter_size 2, base_lr 0.02")
    val config = Config("s.prototxt")
    assert(Elastic.minWorkers(config, 3) === 3)
    assert(Elastic.minWorkers(config.copy(minWorkers = 2), 3) === 2)
    assert(intercept[CortadoConfigException](Elastic.minWorkers(config.copy(minWorkers = 4), 3))
      .getMessage === "Config.minWorkers must be between 1 and the 3 workers asked for (or 0: " +
      "all of them), not 4")
    assert(intercept[CortadoConfigException](Elastic.minWorkers(
      config.copy(elasticScaling = "linear"), 3)).getMessage ===
      "Config.elasticScaling must be keepGlobalBatch or linearLr, not 'linear'")
  }
}
