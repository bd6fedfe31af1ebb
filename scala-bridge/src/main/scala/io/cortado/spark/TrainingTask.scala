// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.util.concurrent.atomic.AtomicBoolean

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.{BarrierTaskContext, TaskContext}
import org.apache.spark.sql.Row

import io.cortado.{CortadoCommException, CortadoConfigException}
import io.cortado.api.SolverSnapshot
import io.cortado.data.{BatchFeeder, RowConverter}
import io.cortado.jni.{NativeComm, NativeFeed, NativeLib, NativeTrainer, TrainerListener}
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
      resume: Resume, snapshots: SnapshotPlan, progress: Progress.Address, workers: WorkerPlan,
      rows: Iterator[(Int, Row)]): Result = {
    val rank = if (workers.count > 1) TaskContext.get().partitionId() else 0
    // Validation rows reach rank 0 alone, which alone tests.
    val testing = validation.filter(_ => rank == 0)
    // Every row is converted first, so that a bad row fails before any native work starts.
    val (trainRows, testRows) = TaskData.cacheTraining(converter, testing.map(_.converter), rows,
      if (workers.count > 1) s"partition $rank of the training data (worker $rank of " +
        s"${workers.count})" else "the DataFrame")
    val devices = Rendezvous.devices(conf, workers.devices)
    val joined =
      if (workers.count > 1) {
        Some(Rendezvous.join(workers, BarrierTaskContext.get(), devices, trainRows.length))
      } else None
    try {
      val handle = NativeTrainer.create(conf.solverText, conf.solverSource, conf.netText,
        conf.netSource, devices, -1, snapshots.interval, snapshots.prefix.orNull,
        testing.isDefined, joined.map(_.comm).getOrElse(0L))
      // Rank 0 speaks for the job; the others keep their events to themselves.
      val channel = new Progress.Client(if (rank == 0) Some(progress) else None)
      try {
        if (rank == 0) {
          if (devices.forall(_ < 0) &&
            NativeLib.solverInfo(conf.solverText, conf.solverSource).gpuRequested) {
            channel.send(LogEvent("solver_mode is GPU (Caffe's default when unset), but the " +
              "executor on " +
              s"${java.net.InetAddress.getLocalHost.getHostName} has no CUDA device (or this " +
              "build has no CUDA): training on the CPU"))
          }
          joined.foreach { j =>
            channel.send(LogEvent(describe(workers, j)))
            // What the backend chose: for ucx, the transport of each connection (RDMA or TCP).
            channel.send(LogEvent(s"Connection: ${NativeComm.describe(j.comm)}"))
            if (j.wire != "auto") {
              channel.send(LogEvent(s"Gradients travel between the workers as ${j.wire}" +
                (if (j.wire != workers.exchangePrecision) {
                  s" (the ${workers.backend} backend carries float32 only)"
                } else "")))
            }
            Rendezvous.rdmaWarning(workers, j.peers).foreach(w => channel.send(LogEvent(w)))
          }
        }
        def retriedResume(plan: SnapshotPlan): Option[Resume] = {
          // Spark runs a failed task (or barrier stage) again with the same arguments: resume
          // from the newest snapshot rather than from where the first attempt started.
          val ctx = TaskContext.get()
          if (ctx == null || (ctx.attemptNumber() == 0 && ctx.stageAttemptNumber() == 0)) None
          else plan.prefix.flatMap(p => Attempts.readLatest(p, plan.hadoopConf.value)).map {
            case (files, from) =>
              channel.send(LogEvent(s"Spark runs this training again (task attempt " +
                s"${ctx.attemptNumber()}, stage attempt ${ctx.stageAttemptNumber()}): resuming " +
                s"from ${files.state} (iteration ${files.iter})"))
              from
          }
        }
        retriedResume(snapshots).getOrElse(resume) match {
          case Resume(Some(model), state) => NativeTrainer.restore(handle, model, state.orNull)
          case _ =>
        }
        val replicas = NativeTrainer.numReplicas(handle)
        val imagesPerIteration = conf.batchSize.toLong * replicas * workers.count
        val feeders = ArrayBuffer.empty[CyclingFeeder]
        try {
          // Replica r takes every replicas-th row from row r.
          for (r <- 0 until replicas) {
            val share = if (replicas == 1) trainRows else slice(trainRows, r, replicas)
            feeders += new CyclingFeeder(handle, r, conf.feedLayer, share)
          }
          testing.foreach(v => feeders += new CyclingFeeder(handle, 0, v.feedLayer, testRows))
          val listener = new Listener(channel, imagesPerIteration, snapshots)
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
              f"${iterations * imagesPerIteration / seconds}%.1f images/s" +
              (if (workers.count > 1) s" over ${workers.count} workers" else "")))
          }
          channel.send(LogEvent("Optimization Done."))
          if (rank != 0) Result(Array.emptyByteArray, Nil, Nil)
          else {
            Result(NativeTrainer.snapshot(handle, "model.caffemodel")(0), listener.tests.toList,
              channel.unsent)
          }
        } finally feeders.foreach(_.stop())
      } finally {
        channel.close()
        NativeTrainer.dispose(handle)
      }
    } finally joined.foreach(j => NativeComm.dispose(j.comm))
  }

  /** Every `step`-th sample from `first`; throws when there is none. */
  private def slice(samples: Array[Sample], first: Int, step: Int): Array[Sample] = {
    val share = samples.indices.drop(first).by(step).map(samples).toArray
    if (share.isEmpty) {
      throw new CortadoConfigException(s"replica $first of $step has no rows: the worker's " +
        s"partition has ${samples.length}")
    }
    share
  }

  private def describe(workers: WorkerPlan, joined: Rendezvous.Joined): String = {
    val samples = joined.peers.map(_.samples)
    s"${workers.count} workers joined through ${workers.backend}: " +
      joined.peers.map { p =>
        s"worker ${p.rank} at ${p.address} on executor ${p.executor} " +
          (if (p.gpus.isEmpty) "(CPU)" else s"(GPU ${p.gpus.mkString(",")})")
      }.mkString(", ") +
      s"; ${samples.sum} training rows, ${samples.min} to ${samples.max} per worker"
  }

  /**
   * What the session reports, on the training thread: display iterations and test passes go
   * to the driver as events; snapshots are written under the plan's prefix (model, digests,
   * then state, each atomically), or dropped when the run keeps none.
   */
  private final class Listener(channel: Progress.Client, imagesPerIteration: Long,
      snapshots: SnapshotPlan) extends TrainerListener {

    val tests = ArrayBuffer.empty[TestEvent]

    /** Time spent writing snapshots, not counted as training time. */
    var storingNanos = 0L

    override def onIteration(iter: Int, loss: Float, learningRate: Float, iterations: Int,
        seconds: Double): Unit = {
      val perSecond = if (seconds > 0) iterations / seconds else 0.0
      channel.send(IterationEvent(iter, loss, learningRate, perSecond,
        perSecond * imagesPerIteration,
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
        val files =
          Snapshots.write(iter, prefix, snapshots.hadoopConf.value, snapshots.hdf5) { _ =>
            SolverSnapshot(model, state)
          }
        storingNanos += System.nanoTime() - t0
        // Caffe's lines for each format.
        val kind = if (snapshots.hdf5) "HDF5" else "binary proto"
        channel.send(LogEvent(s"Snapshotting to $kind file ${files.model}"))
        channel.send(LogEvent(s"Snapshotting solver state to $kind file ${files.state}"))
      }
  }

  /**
   * Feeds `samples` (cycling through them) into feed layer `layer` of replica `replica` of the
   * session `trainer` on a daemon thread until training is over (`stop`) or the feed is aborted; a
   * failure aborts the feed with a reason, so the waiting forward pass fails, and is kept in
   * `failure`. Owns its feed handle, disposed by `stop`.
   */
  private final class CyclingFeeder(trainer: Long, replica: Int, layer: String,
      samples: Array[Sample]) {
    private val feed = NativeTrainer.feed(trainer, replica, layer)
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
