// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.util.concurrent.atomic.AtomicBoolean

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.Row

import io.cortado.CortadoCommException
import io.cortado.api.SolverSnapshot
import io.cortado.data.{BatchFeeder, RowConverter}
import io.cortado.jni.{NativeFeed, NativeTrainer, TrainerListener}
import io.cortado.spark.TaskData.Sample
import io.cortado.storage.Snapshots

/**
 * The training task: converts its rows, builds the native training session (the Trainer that
 * `cortado train` runs) and trains it to max_iter with NativeTrainer.train while feeder threads
 * cycle through the rows. The session keeps Caffe's cadence (display, test_interval, snapshot,
 * snapshot_after_train); this task turns what it reports into [[TrainingEvent]]s for the
 * driver and stores its snapshots on the Hadoop path of the [[SnapshotPlan]].
 */
private[spark] object TrainingTask {

  final case class Result(model: Array[Byte], tests: Seq[TestEvent], unsent: Seq[TrainingEvent])

  /**
   * Trains on `rows` (tag 0: training rows; 1: validation rows, fed to the TEST net's feed
   * layer, which exists only with `validation`) and returns the final model's bytes, the test
   * passes and the events the progress channel could not deliver.
   */
  def run(conf: NetConf, converter: RowConverter, validation: Option[Validation],
      resume: Resume, snapshots: SnapshotPlan, progress: Progress.Address,
      rows: Iterator[(Int, Row)]): Result = {
    // Every row is converted first, so that a bad row fails before any native work starts.
    val (trainRows, testRows) =
      TaskData.cacheTraining(converter, validation.map(_.converter), rows)
    // devices null: one replica on the solver's device (solver_mode, device_id).
    val handle = NativeTrainer.create(conf.solverText, conf.solverSource, conf.netText,
      conf.netSource, null, -1, snapshots.interval, snapshots.prefix.orNull,
      validation.isDefined)
    val channel = new Progress.Client(Some(progress))
    try {
      resume match {
        case Resume(Some(model), state) => NativeTrainer.restore(handle, model, state.orNull)
        case _ =>
      }
      val feeders = ArrayBuffer.empty[CyclingFeeder]
      try {
        feeders += new CyclingFeeder(handle, conf.feedLayer, trainRows)
        validation.foreach(v => feeders += new CyclingFeeder(handle, v.feedLayer, testRows))
        val listener = new Listener(channel, conf.batchSize, snapshots)
        val start = NativeTrainer.iter(handle)
        val t0 = System.nanoTime()
        val watchdog = new Watchdog(reason => NativeTrainer.abort(handle, reason))
        try NativeTrainer.train(handle, listener)
        catch {
          case t: Throwable if watchdog.fired =>
            watchdog.rethrowKill()
            throw t
          case t: Throwable if feeders.exists(_.failure != null) =>
            feeders.flatMap(f => Option(f.failure)).foreach(t.addSuppressed)
            throw t
        } finally watchdog.close()
        val iterations = NativeTrainer.iter(handle) - start
        if (iterations > 0) {
          val seconds = (System.nanoTime() - t0 - listener.storingNanos) / 1e9
          channel.send(LogEvent(f"Trained $iterations iterations in $seconds%.2f s of " +
            f"training: ${1000 * seconds / iterations}%.3f ms/iter, " +
            f"${iterations.toLong * conf.batchSize / seconds}%.1f images/s"))
        }
        channel.send(LogEvent("Optimization Done."))
        Result(NativeTrainer.snapshot(handle, "model.caffemodel")(0), listener.tests.toList,
          channel.unsent)
      } finally feeders.foreach(_.stop())
    } finally {
      channel.close()
      NativeTrainer.dispose(handle)
    }
  }

  /**
   * What the session reports, on the training thread: display iterations and test passes go
   * to the driver as events; snapshots are written under the plan's prefix (model, then
   * state, each atomically), or dropped when the run keeps none.
   */
  private final class Listener(channel: Progress.Client, batchSize: Int,
      snapshots: SnapshotPlan) extends TrainerListener {

    val tests = ArrayBuffer.empty[TestEvent]

    /** Time spent writing snapshots, not counted as training time. */
    var storingNanos = 0L

    override def onIteration(iter: Int, loss: Float, learningRate: Float, iterations: Int,
        seconds: Double): Unit = {
      val perSecond = if (seconds > 0) iterations / seconds else 0.0
      channel.send(IterationEvent(iter, loss, learningRate, perSecond, perSecond * batchSize,
        iterations, closing = seconds < 0))
    }

    override def onTest(iter: Int, names: Array[String], values: Array[Float]): Unit = {
      // One test net (the TEST phase of the net): its outputs by blob name.
      val event = TestEvent(iter, names.map(_.stripPrefix("0/")).toSeq.zip(values.map(_.toDouble)))
      tests += event
      channel.send(event)
    }

    override def onSnapshot(iter: Int, model: Array[Byte], state: Array[Byte]): Unit =
      snapshots.prefix.foreach { prefix =>
        val t0 = System.nanoTime()
        // The state already names the model by the file name Snapshots gives it.
        val files = Snapshots.write(iter, prefix, snapshots.hadoopConf.value) { _ =>
          SolverSnapshot(model, state)
        }
        storingNanos += System.nanoTime() - t0
        channel.send(LogEvent(s"Snapshotting to binary proto file ${files.model}"))
        channel.send(LogEvent(s"Snapshotting solver state to binary proto file ${files.state}"))
      }
  }

  /**
   * Feeds `samples` (cycling through them) into feed layer `layer` of replica 0 of the session
   * `trainer` on a daemon thread until training is over (`stop`) or the feed is aborted; a
   * failure aborts the feed with a reason, so the waiting forward pass fails, and is kept in
   * `failure`. Owns its feed handle, disposed by `stop`.
   */
  private final class CyclingFeeder(trainer: Long, layer: String, samples: Array[Sample]) {
    private val feed = NativeTrainer.feed(trainer, 0, layer)
    private val feeder =
      try new BatchFeeder(feed, layer)
      catch {
        case t: Throwable =>
          NativeFeed.dispose(feed)
          throw t
      }
    private val finished = new AtomicBoolean(false)
    @volatile var failure: Throwable = null
    private val thread = new Thread(() =>
      try feeder.feed(Iterator.continually(samples.iterator).flatten)
      catch {
        case _: CortadoCommException if finished.get =>
        case t: Throwable =>
          failure = t
          feeder.abort(s"the feeder thread of '$layer' failed: $t")
      }, "cortado-feeder")
    thread.setDaemon(true)
    thread.start()

    /** Stops the feed, waits for the thread and frees the feed handle. */
    def stop(): Unit = {
      finished.set(true)
      try {
        feeder.abort("training finished")
        thread.join()
      } finally NativeFeed.dispose(feed)
    }
  }
}
