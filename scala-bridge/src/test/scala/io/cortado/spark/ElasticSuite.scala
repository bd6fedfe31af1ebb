// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.file.{Files, Path}
import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._

import org.apache.spark.SparkEnv
import org.apache.spark.sql.{DataFrame, Row}
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.TestDirs.withTempDir
import io.cortado.spark.CortadoSuite.{separable, write}

/**
 * Elastic training on three executor JVMs (local-cluster[3,1,1024]): the cluster is held to
 * fewer executors with Spark's own request for a total (requestTotalExecutors), so that a killed
 * executor is not replaced until the test lets it be.
 */
class ElasticSuite extends AnyFunSuite with LocalCluster {
  import WorkersSuite._

  override protected val numWorkers: Int = 3

  /** Holds the application to `n` executors (the master replaces none beyond them). */
  private def holdExecutorsAt(n: Int): Unit =
    assert(ss.sparkContext.requestTotalExecutors(n, 0, Map.empty[String, Int]))

  /** Executor id -> process id of every executor, as their tasks see them. */
  private def executors(): Map[String, Long] =
    ss.sparkContext.parallelize(0 until 12, 12).map { _ =>
      Thread.sleep(200)
      SparkEnv.get.executorId -> ProcessHandle.current().pid()
    }.collect().toMap

  private def awaitSlots(n: Int): Unit = {
    val deadline = System.nanoTime() + 60L * 1000 * 1000 * 1000
    while (org.apache.spark.CortadoSlots.available(ss.sparkContext) != n &&
      System.nanoTime() < deadline) Thread.sleep(200)
    assert(org.apache.spark.CortadoSlots.available(ss.sparkContext) === n)
  }

  test("a killed executor not replaced: the run goes on with 2 of 3 workers, grows back to 3 " +
    "when an executor returns, and finishes by itself") {
    withTempDir("cortado-elastic") { dir =>
      write(dir, "net.prototxt", tinyNet(4))
      // Long enough that two workers at 10,000 iterations/s are still training when the
      // returned executor's JVM has started (several seconds on two busy cores).
      val maxIter = 100000
      val solver = snapshottingSolver(dir, maxIter)
      val config = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 3, minWorkers = 2, elasticTimeoutSeconds = 5, startTimeoutSeconds = 60,
        commTimeoutSeconds = 20)
      awaitSlots(3)
      val pids = executors()
      assert(pids.size === 3, pids)
      val events = new ConcurrentLinkedQueue[TrainingEvent]()
      @volatile var killedAt = -1
      @volatile var returnedAt = -1
      val cortado = new Cortado(ss)
      cortado.addProgressListener { e =>
        events.add(e)
        e match {
          case i: IterationEvent if i.iteration >= 4000 && killedAt < 0 =>
            killedAt = i.iteration
            // The master replaces none: the application is held to two executors.
            holdExecutorsAt(2)
            ProcessHandle.of(pids.values.max).ifPresent(p => p.destroyForcibly())
          case r: ResizeEvent if r.workers == 2 && returnedAt < 0 =>
            // Two workers train for a while, then an executor may come back.
            new Thread(() => {
              Thread.sleep(1000)
              returnedAt = r.iteration
              holdExecutorsAt(3)
            }).start()
          case _ =>
        }
      }
      cortado.train(separable(ss, 240, 5).repartition(3), config)
      assert(killedAt >= 4000)
      val all = events.asScala.toSeq
      val texts = all.collect { case LogEvent(t) => t }
      val resizes = all.collect { case r: ResizeEvent => r }
      assert(resizes.map(r => (r.before, r.workers, r.full)) === Seq((3, 2, 3), (2, 3, 3)), all)
      val Seq(shrink, regrow) = resizes
      // The first resumes from the newest snapshot before the kill: at most an interval lost.
      assert(shrink.iteration % 2000 == 0 && shrink.iteration > killedAt - 4000 &&
        shrink.iteration <= killedAt, (shrink, killedAt))
      // keepGlobalBatch: 3 x 4 rows per update through a batch of 6 on each of 2 workers.
      assert((shrink.mode, shrink.batch, shrink.iterSize) === ((Elastic.KeepGlobalBatch, 6, 1)))
      assert(shrink.how === "batch 4 -> 6 per device, global batch 12 kept")
      assert(regrow.iteration > shrink.iteration && regrow.batch === 4, regrow)
      val failed = texts.filter(_.startsWith("Training attempt 1 of 3 failed"))
      assert(failed.size === 1, texts)
      assert("worker \\d \\(executor \\d+ on [^)]+\\) failed: ExecutorLostFailure".r
        .findFirstIn(failed.head).isDefined, failed.head)
      val stop = texts.filter(_.startsWith("Elastic training: the cluster offers 3 task slots"))
      assert(stop.size === 1, texts)
      // Where the workers were asked to stop, unless they had passed it when the word came (the
      // driver knows the iteration from the displays, every 1000): then at the next one.
      val at = "stop at iteration (\\d+)".r.findFirstMatchIn(stop.head).map(_.group(1).toInt)
      assert(at.exists(a => regrow.iteration >= a && regrow.iteration < a + 2000), (stop, regrow))
      assert(texts.exists(_.startsWith(s"Training attempt 2 stopped at iteration " +
        s"${regrow.iteration} to go on with 3 workers")), texts)
      // A snapshot written by the two workers says so.
      val run = io.cortado.storage.Snapshots.about(io.cortado.storage.Snapshots.files(
        dir.resolve("snap/tiny").toString, regrow.iteration),
        new org.apache.hadoop.conf.Configuration())
      assert(run.exists(_.startsWith("2 of 3 workers, keepGlobalBatch: batch 4 -> 6")), run)
      val displays = all.collect { case i: IterationEvent => i.iteration }
      assert(displays.last === maxIter, displays)
      assert(texts.count(_ == "Optimization Done.") === 1, texts)
      assert(Files.size(dir.resolve("m.caffemodel")) > 0)
    }
  }

  test("without minWorkers a loss the cluster does not make good ends the run after " +
    "maxAttempts, naming the worker lost, the newest snapshot and how to resume") {
    withTempDir("cortado-elastic-short") { dir =>
      write(dir, "net.prototxt", tinyNet(4))
      val config = Config(snapshottingSolver(dir, 200000),
        model = dir.resolve("m.caffemodel").toUri.toString, clusterSize = 3, maxAttempts = 3,
        startTimeoutSeconds = 3, commTimeoutSeconds = 20)
      awaitSlots(3)
      val pids = executors()
      val told = new ConcurrentLinkedQueue[String]()
      @volatile var killedAt = -1
      val cortado = new Cortado(ss)
      cortado.addProgressListener {
        case i: IterationEvent if i.iteration >= 4000 && killedAt < 0 =>
          killedAt = i.iteration
          holdExecutorsAt(2)
          ProcessHandle.of(pids.values.max).ifPresent(p => p.destroyForcibly())
        case LogEvent(t) if t.startsWith("Training attempt") => told.add(t)
        case _ =>
      }
      val t0 = System.nanoTime()
      intercept[SlotShortage](cortado.train(separable(ss, 240, 5).repartition(3), config))
      val seconds = (System.nanoTime() - t0) / 1e9
      val texts = told.asScala.toSeq
      // The loss, then two attempts that found 2 of 3 slots: the shortage is tried again.
      assert(texts.size === 3, texts)
      assert(texts(1).startsWith("Training attempt 2 of 3 failed: training with 3 workers " +
        "needs 3 task slots at once (one barrier stage), but after "), texts)
      val last = texts(2)
      assert(last.startsWith("Training attempt 3 of 3 failed: training with 3 workers needs 3 " +
        "task slots at once"), last)
      val named = ("offers 2 \\(2 executors registered, spark.task.cpus 1\\), after worker \\d " +
        "\\(executor \\d+ on [^)]+\\) failed: ExecutorLostFailure").r
      assert(named.findFirstIn(last).isDefined, last)
      val snapshot = "The newest snapshot is (\\S+)_iter_(\\d+)\\.solverstate \\(iteration \\d+\\): " +
        "resume with -weights \\S+_iter_\\d+\\.caffemodel -snapshot \\S+_iter_\\d+\\.solverstate"
      val found = snapshot.r.findFirstMatchIn(last)
      assert(found.exists(_.group(2).toInt == killedAt - killedAt % 2000), (last, killedAt))
      assert(seconds < 120, s"$seconds s")
    }
  }

  /** 12 rows, 4 per worker of 3 (each its whole partition every iteration), in one partition. */
  private def twelve(): DataFrame = {
    val rows = separable(ss, 12, 3).collect().toSeq
    partitioned(ss, rows.map(r => Row(r.getLong(0), r.getSeq[Float](1), r.getInt(2))), 1)
  }

  private def lossesOf(config: Config): (Seq[(Int, Float)], Seq[TrainingEvent]) = {
    val (_, events) = trainRecording(ss, twelve(), config)
    (losses(events), events)
  }

  test("keepGlobalBatch after 3 -> 2 workers repeats the 3-worker run's losses; linearLr " +
    "scales the learning rate") {
    withTempDir("cortado-elastic-batch") { dir =>
      write(dir, "net.prototxt", tinyNet(4))
      val solver = write(dir, "solver.prototxt", EverySolver + "snapshot: 10\n" +
        s"""snapshot_prefix: "${dir.resolve("first/tiny")}"\n""")
      val base = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 3, minWorkers = 2, startTimeoutSeconds = 4, commTimeoutSeconds = 20,
        solverOverrides = "max_iter: 10")
      awaitSlots(3)
      lossesOf(base)
      val model = dir.resolve("first/tiny_iter_10.caffemodel").toUri.toString
      val state = dir.resolve("first/tiny_iter_10.solverstate").toUri.toString
      def from(prefix: String) = base.copy(weights = model, snapshot = state,
        solverOverrides = "max_iter: 30", snapshotPrefix = dir.resolve(prefix).toUri.toString)
      val (three, _) = lossesOf(from("three/tiny"))
      assert(three.map(_._1) === (10 until 30))

      // Two executors: the first attempt waits startTimeoutSeconds for 3, then goes on with 2.
      holdExecutorsAt(2)
      ProcessHandle.of(executors().values.max).ifPresent(p => p.destroyForcibly())
      awaitSlots(2)
      val (two, events) = lossesOf(from("two/tiny"))
      val resize = events.collect { case r: ResizeEvent => r }
      assert(resize.map(r => (r.attempt, r.before, r.workers, r.iteration, r.batch)) ===
        Seq((1, 3, 2, 10, 6)), resize)
      assert(two.map(_._1) === three.map(_._1))
      two.zip(three).foreach { case ((i, a), (_, b)) =>
        assert(math.abs(a - b) <= 1e-5 * math.max(math.abs(b), 1e-3), s"iteration $i: $a vs $b")
      }
      // linearLr: 2 workers of batch 4, base_lr x 2/3; other updates, other losses.
      val (linear, linearEvents) = lossesOf(from("linear/tiny").copy(
        elasticScaling = Elastic.LinearLr))
      assert(linear.zip(three).exists { case ((_, a), (_, b)) => math.abs(a - b) > 1e-3 },
        (linear, three))
      val rates = linearEvents.collect { case i: IterationEvent if !i.closing => i.learningRate }
      assert(rates.nonEmpty && rates.forall(r => math.abs(r - 0.05f * 2 / 3) < 1e-7), rates)
      assert(linearEvents.collect { case r: ResizeEvent => r.batch } === Seq(4))
    }
  }

  test("keepGlobalBatch after 2 -> 1 worker reads the 2-worker run's samples in its order: the " +
    "same losses, resumed mid-epoch") {
    withTempDir("cortado-elastic-order") { dir =>
      // Two partitions of 6 batches each: an iteration's samples depend on where each worker
      // is in its partition, and the snapshot at 10 is in the middle of the second epoch.
      val rows = separable(ss, 48, 11).collect().toSeq
        .map(r => Row(r.getLong(0), r.getSeq[Float](1), r.getInt(2)))
      def data() = partitioned(ss, rows, 2)
      write(dir, "net.prototxt", tinyNet(4))
      val solver = write(dir, "solver.prototxt", EverySolver + "snapshot: 10\n" +
        s"""snapshot_prefix: "${dir.resolve("first/tiny")}"\n""")
      val base = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 2, minWorkers = 1, startTimeoutSeconds = 4, commTimeoutSeconds = 20,
        solverOverrides = "max_iter: 30")
      holdExecutorsAt(3)
      awaitSlots(3)
      val straight = losses(trainRecording(ss, data(), base)._2)
      assert(straight.map(_._1) === (0 until 30))
      def from(prefix: String) = base.copy(
        weights = dir.resolve("first/tiny_iter_10.caffemodel").toUri.toString,
        snapshot = dir.resolve("first/tiny_iter_10.solverstate").toUri.toString,
        snapshotPrefix = dir.resolve(prefix).toUri.toString)
      def same(resumed: Seq[(Int, Float)]): Unit = {
        assert(resumed.map(_._1) === (10 until 30))
        resumed.zip(straight.drop(10)).foreach { case ((i, a), (_, b)) =>
          assert(math.abs(a - b) <= 1e-5 * math.max(math.abs(b), 1e-3), s"iteration $i: $a vs $b")
        }
      }
      // Resumed on 2 workers: each goes on where it was in its partition.
      same(losses(trainRecording(ss, data(), from("two/tiny"))._2))

      // One executor left: 1 worker, iter_size 2, its passes reading the two partitions in turn.
      holdExecutorsAt(1)
      executors().values.toSeq.sorted.drop(1).foreach(p =>
        ProcessHandle.of(p).ifPresent(h => h.destroyForcibly()))
      awaitSlots(1)
      val (_, events) = trainRecording(ss, data(), from("one/tiny"))
      val resize = events.collect { case r: ResizeEvent => r }
      assert(resize.map(r => (r.before, r.workers, r.iteration, r.batch, r.iterSize)) ===
        Seq((2, 1, 10, 4, 2)), resize)
      same(losses(events))
    }
  }
}
