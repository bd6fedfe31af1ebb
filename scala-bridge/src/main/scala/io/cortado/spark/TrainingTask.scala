// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.util.concurrent.atomic.AtomicBoolean

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.{BarrierTaskContext, SparkEnv, TaskContext}
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

  /**
   * What worker 0 hands back: the model, the test passes, the events not delivered, and, when
   * the driver asked the run to stop before max_iter (to change the number of workers), the
   * iteration it stopped at, whose snapshot is written.
   */
  final case class Result(model: Array[Byte], tests: Seq[TestEvent], unsent: Seq[TrainingEvent],
      stoppedAt: Option[Int] = None)

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
    val (streams, testRows) = TaskData.cacheTraining(converter, testing.map(_.converter), rows,
      if (workers.count > 1) s"partition $rank of the training data (worker $rank of " +
        s"${workers.count})" else "the DataFrame")
    val devices = Rendezvous.devices(conf, workers.devices)
    val joined =
      if (workers.count > 1) {
        Some(Rendezvous.join(workers, BarrierTaskContext.get(), devices,
          streams.map(_.length.toLong).sum))
      } else None
    try {
      val handle = NativeTrainer.create(conf.solverText, conf.solverSource, conf.netText,
        conf.netSource, devices, -1, snapshots.interval, snapshots.prefix.orNull,
        testing.isDefined, joined.map(_.comm).getOrElse(0L))
      // Rank 0 speaks for the job; the others keep their events to themselves. The driver may
      // ask it to stop at an iteration (to grow an elastic run): every rank stops there.
      val stops = new StopRequests(handle)
      val channel = new Progress.Client(if (rank == 0) Some(progress) else None,
        onStop = stops.request)
      try {
        val solver = NativeLib.solverInfo(conf.solverText, conf.solverSource)
        // The worker's share of the executor's cores, not every core of the host.
        val cpu = CpuThreads.choose(workers.cpuThreads, CpuThreads.userOmpThreads(
            sys.env.get("OMP_NUM_THREADS"), SparkEnv.get.conf, SparkEnv.get.executorId),
          TaskContext.get().cpus(), CpuThreads.executorCores(SparkEnv.get.conf,
            Runtime.getRuntime.availableProcessors()),
          joined.map(_.peers.count(_.executor == SparkEnv.get.executorId)).getOrElse(1))
        val perReplica = NativeTrainer.useCpuThreads(handle, cpu.threads)
        if (rank == 0 && devices.forall(_ < 0)) {
          // The count the OpenMP runtime reports in the session's threads.
          channel.send(LogEvent(
            if (devices.length == 1) s"CPU threads: $perReplica per worker (${cpu.why})"
            else s"CPU threads: ${cpu.threads} per worker (${cpu.why}), $perReplica for each " +
              s"of its ${devices.length} replicas"))
        }
        if (rank == 0) {
          if (devices.forall(_ < 0) && solver.gpuRequested) {
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
        // Worker 0 tells the driver when the exchange stalls, and on whom it waits.
        val stalls = joined.filter(_ => rank == 0).map(j =>
          new StallReport(j.comm, math.min(30.0, workers.timeoutSeconds / 4),
            workers.timeoutSeconds, channel))
        try {
          retriedResume(snapshots).getOrElse(resume) match {
            case Resume(Some(model), state, _) => NativeTrainer.restore(handle, model, state.orNull)
            case _ =>
          }
          val replicas = NativeTrainer.numReplicas(handle)
          // Each update takes iter_size batches on every replica of every worker.
          val imagesPerIteration =
            conf.batchSize.toLong * replicas * workers.count * math.max(1, solver.iterSize)
          val feeders = ArrayBuffer.empty[CyclingFeeder]
          try {
            // Each stream gives `block` rows an iteration (a worker of fewer than the full run's
            // reads one stream per full-run worker, in turn); a resumed run goes on where an
            // uninterrupted one would be in each.
            val start = NativeTrainer.iter(handle)
            val passes = math.max(1, solver.iterSize)
            val block = conf.batchSize *
              (if (passes % streams.size == 0) passes / streams.size else 1)
            // Replica r takes every replicas-th row from row r.
            for (r <- 0 until replicas) {
              val shares = if (replicas == 1) streams else streams.map(slice(_, r, replicas))
              feeders += new CyclingFeeder(handle, r, conf.feedLayer,
                TaskData.feedOrder(shares, block, start.toLong * block))
            }
            testing.foreach(v => feeders += new CyclingFeeder(handle, 0, v.feedLayer,
              TaskData.feedOrder(Seq(testRows), 1, 0)))
            val listener = new Listener(channel, imagesPerIteration, snapshots)
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
            val reachedIter = NativeTrainer.iter(handle)
            val iterations = reachedIter - start
            if (iterations > 0) {
              val seconds = (System.nanoTime() - t0 - listener.storingNanos) / 1e9
              channel.send(LogEvent(f"Trained $iterations iterations in $seconds%.2f s of " +
                f"training: ${1000 * seconds / iterations}%.3f ms/iter, " +
                f"${iterations * imagesPerIteration / seconds}%.1f images/s" +
                (if (workers.count > 1) s" over ${workers.count} workers" else "")))
            }
            val maxIter = solver.maxIter
            val stoppedAt =
              if (stops.requested && reachedIter < maxIter) Some(reachedIter) else None
            stoppedAt match {
              case Some(at) =>
                // The next attempt resumes from this iteration: its snapshot must exist (without
                // snapshot_after_train the session took none).
                if (rank == 0 && listener.lastSnapshot != at) {
                  val Array(model, state) = NativeTrainer.snapshot(handle,
                    Snapshots.files(snapshots.prefix.getOrElse(""), at, snapshots.hdf5).model
                      .split('/').last)
                  listener.onSnapshot(at, model, state)
                }
                channel.send(LogEvent(s"Stopped at iteration $at, as the driver asked, to go on " +
                  "with another number of workers"))
              case None => channel.send(LogEvent("Optimization Done."))
            }
            if (rank != 0) Result(Array.emptyByteArray, Nil, Nil, stoppedAt)
            else {
              Result(NativeTrainer.snapshot(handle, "model.caffemodel")(0), listener.tests.toList,
                channel.unsent, stoppedAt)
            }
          } finally feeders.foreach(_.stop())
        } finally stalls.foreach(_.close())
      } finally {
        channel.close()
        stops.close()
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

    /** The iteration of the last snapshot written; -1 before the first. */
    var lastSnapshot = -1

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
        val files = Snapshots.write(iter, prefix, snapshots.hadoopConf.value, snapshots.hdf5,
          snapshots.about) { _ => SolverSnapshot(model, state) }
        lastSnapshot = iter
        storingNanos += System.nanoTime() - t0
        // Caffe's lines for each format.
        val kind = if (snapshots.hdf5) "HDF5" else "binary proto"
        channel.send(LogEvent(s"Snapshotting to $kind file ${files.model}"))
        channel.send(LogEvent(s"Snapshotting solver state to $kind file ${files.state}"))
      }
  }

  /**
   * Worker 0's word to the driver when the gradient exchange stalls: once no byte has moved for
   * `after` seconds, what it waits for (the peer by rank and address), once per stall, and how
   * long the stall lasted when bytes move again. Polls once a second on a thread of its own.
   */
  private final class StallReport(comm: Long, after: Double, timeout: Double,
      channel: Progress.Client) {
    @volatile private var open = true
    private val thread = new Thread(() => {
      var since = 0L
      while (open) {
        try Thread.sleep(1000)
        catch { case _: InterruptedException => }
        val waiting = if (open) NativeComm.waitingOn(comm, after) else ""
        if (waiting.nonEmpty && since == 0L) {
          since = System.nanoTime() - (after * 1e9).toLong
          channel.send(LogEvent(s"Training stalls: worker 0 has waited $waiting (the exchange " +
            f"fails once nothing moves for $timeout%.0f s)"))
        } else if (waiting.isEmpty && since != 0L && open) {
          channel.send(LogEvent(f"Training moves again after a stall of " +
            f"${(System.nanoTime() - since) / 1e9}%.0f s"))
          since = 0L
        }
      }
    }, "cortado-stall-report")
    thread.setDaemon(true)
    thread.start()

    def close(): Unit = {
      open = false
      thread.interrupt()
      thread.join()
    }
  }

  /**
   * The driver's requests to stop at an iteration, passed on to the session while it exists
   * (they come on the progress channel's thread, and may race the end of training).
   */
  private final class StopRequests(handle: Long) {
    private var open = true
    @volatile var requested = false

    def request(iteration: Int): Unit = synchronized {
      if (open) {
        requested = true
        NativeTrainer.stopAt(handle, iteration)
      }
    }

    def close(): Unit = synchronized { open = false }
  }

  /**
   * Feeds `samples` (endless: see TaskData.feedOrder) into feed layer `layer` of replica
   * `replica` of the session `trainer` on a daemon thread until training is over (`stop`) or
   * the feed is aborted; a failure aborts the feed with a reason, so the waiting forward pass
   * fails, and is kept in `failure`. Owns its feed handle, disposed by `stop`.
   */
  private final class CyclingFeeder(trainer: Long, replica: Int, layer: String,
      samples: Iterator[Sample]) {
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
      try feeder.feed(samples)
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
