// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.util.concurrent.atomic.AtomicReference

import scala.collection.concurrent.TrieMap

import org.apache.spark.{CortadoSlots, ExceptionFailure, ExecutorLostFailure, SparkContext,
  TaskFailedReason, TaskKilled}
import org.apache.spark.scheduler.{SparkListener, SparkListenerExecutorAdded,
  SparkListenerJobStart, SparkListenerTaskEnd}

/**
 * What the driver of a training run sees of the cluster while it runs (a SparkListener, added
 * for the run and removed after it): the first worker the current attempt lost (by rank,
 * executor and host), when an executor last registered, and, on an
 * executor added, a call to `onExecutorAdded` (the elastic run's check whether it can grow back).
 *
 * The training job of an attempt is known by the local property [[AttemptProperty]]. Its first
 * failed task ends the attempt at once (the job is cancelled), rather than Spark running the
 * barrier stage again: a retried stage would wait for as many task slots as before, for good
 * when an executor is not replaced, and the driver's next attempt resumes from a snapshot on
 * the workers there are instead.
 */
private[spark] final class ClusterWatch(sc: SparkContext) extends SparkListener {
  import ClusterWatch._

  /** Called on the listener thread when an executor registers. */
  @volatile var onExecutorAdded: () => Unit = () => ()

  @volatile private var attempt: String = ""
  @volatile private var jobId: Int = -1
  private val stages = TrieMap.empty[Int, Unit]
  private val lost = new AtomicReference[Option[Lost]](None)
  @volatile private var lastAddedNanos = Long.MinValue

  sc.addSparkListener(this)

  @volatile private var barrier = false

  /**
   * Starts watching the training job of attempt `id` (set as [[AttemptProperty]]); with
   * `barrier` (several workers) its first failed task cancels it.
   */
  def startAttempt(id: String, barrier: Boolean): Unit = {
    stages.clear()
    lost.set(None)
    jobId = -1
    this.barrier = barrier
    attempt = id
  }


  /** The first worker the current attempt lost, if any. */
  def lostWorker: Option[Lost] = lost.get

  /** Seconds since an executor last registered (infinite before the first this watch saw). */
  def secondsSinceAdded: Double =
    if (lastAddedNanos == Long.MinValue) Double.PositiveInfinity
    else (System.nanoTime() - lastAddedNanos) / 1e9

  /** The task slots the cluster offers now, as Spark's barrier check counts them. */
  def slots: Int = CortadoSlots.available(sc)

  /** Waits up to `millis` for the listener to have seen every event posted so far. */
  def catchUp(millis: Long): Unit = CortadoSlots.drainListeners(sc, millis)

  def close(): Unit = sc.removeSparkListener(this)

  override def onJobStart(e: SparkListenerJobStart): Unit =
    if (attempt.nonEmpty && Option(e.properties).exists(p =>
        p.getProperty(AttemptProperty) == attempt)) {
      jobId = e.jobId
      e.stageIds.foreach(stages.put(_, ()))
    }

  override def onTaskEnd(e: SparkListenerTaskEnd): Unit = e.reason match {
    case failed: TaskFailedReason
        if stages.contains(e.stageId) && !failed.isInstanceOf[TaskKilled] =>
      val worker = Worker(e.taskInfo.index, e.taskInfo.executorId, e.taskInfo.host)
      val what = failed match {
        case f: ExceptionFailure => s"${f.className}: ${f.description}"
        case l: ExecutorLostFailure => l.toErrorString.linesIterator.next()
        case other => other.toErrorString.linesIterator.next()
      }
      val executorLost = failed.isInstanceOf[ExecutorLostFailure]
      // The first failure ends the attempt; a lost executor reported after a survivor's failed
      // exchange is the cause, and is kept instead.
      val before = lost.getAndUpdate(current => current match {
        case None => Some(Lost(worker, what, executorLost))
        case Some(l) if executorLost && !l.executorLost => Some(Lost(worker, what, executorLost))
        case same => same
      })
      if (before.isEmpty && barrier && jobId >= 0) {
        // Spark would run the barrier stage again on as many slots; the driver decides instead.
        sc.cancelJob(jobId)
      }
    case _ =>
  }

  override def onExecutorAdded(e: SparkListenerExecutorAdded): Unit = {
    lastAddedNanos = System.nanoTime()
    onExecutorAdded()
  }
}

private[spark] object ClusterWatch {

  /** The local property that marks an attempt's training job. */
  val AttemptProperty = "cortado.training.attempt"

  /** A worker of an attempt: its rank (the partition), executor and host. */
  final case class Worker(rank: Int, executor: String, host: String) {
    override def toString: String = s"worker $rank (executor $executor on $host)"
  }

  /** The first failure of an attempt's workers. */
  final case class Lost(worker: Worker, reason: String, executorLost: Boolean) {
    override def toString: String = s"$worker failed: $reason"
  }
}
