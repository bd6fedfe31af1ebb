// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import scala.collection.mutable

/**
 * The training runs of one SparkContext as the Spark UI's "Cortado" tab shows them (see
 * [[CortadoUi]]): the newest `keep` runs, each fed by the events of its training job.
 * Thread-safe: events arrive on the progress channel's threads while the UI's threads read.
 */
final class TrainingRuns(keep: Int = 5) {
  require(keep > 0, s"keep must be positive, not $keep")

  private val runs = mutable.ArrayBuffer.empty[TrainingRun]
  private var nextId = 1

  /** A new run, shown first from now on; the oldest beyond `keep` are forgotten. */
  def start(solver: String, maxIter: Int): TrainingRun = synchronized {
    val run = new TrainingRun(nextId, solver, maxIter)
    nextId += 1
    runs += run
    if (runs.size > keep) runs.remove(0, runs.size - keep)
    run
  }

  /** The runs, newest first, as they stand now. */
  def snapshot(): Seq[TrainingRun.View] = synchronized(runs.toList).reverse.map(_.view())
}

/**
 * One training run: a [[ProgressListener]] that keeps the latest state of the run. Thread-safe.
 * The smoothed loss is the mean of the losses of the last `recent` display iterations (each of
 * them already Caffe's display loss, smoothed over the solver's `average_loss`).
 */
final class TrainingRun private[spark] (val id: Int, solver: String, maxIter: Int,
    recent: Int = 10) extends ProgressListener {
  import TrainingRun._

  private val startMillis = System.currentTimeMillis()
  private var endMillis: Option[Long] = None
  private var state: State = Running
  private var workers = 0
  private var attempt = 0
  private val iterations = mutable.Queue.empty[IterationEvent]
  private var speed: Option[IterationEvent] = None
  private var test: Option[TestEvent] = None
  private var snapshots = Vector.empty[String]
  private var snapshotCount = 0

  /** An attempt of the run started, with this many workers. */
  def attemptStarted(number: Int, workerCount: Int): Unit = synchronized {
    attempt = number
    workers = workerCount
  }

  def finished(): Unit = synchronized {
    state = Finished
    endMillis = Some(System.currentTimeMillis())
  }

  def failed(reason: String): Unit = synchronized {
    state = Failed(reason)
    endMillis = Some(System.currentTimeMillis())
  }

  override def onProgress(event: TrainingEvent): Unit = synchronized {
    event match {
      case i: IterationEvent =>
        iterations.enqueue(i)
        while (iterations.size > recent) iterations.dequeue()
        // The closing display has no speed and no learning rate of its own.
        if (!i.closing) speed = Some(i)
      case t: TestEvent => test = Some(t)
      case LogEvent(text) if text.startsWith(SnapshotPrefix) =>
        snapshots = (snapshots :+ text.stripPrefix(SnapshotPrefix).split(" file ", 2).last)
          .takeRight(KeptSnapshots)
        snapshotCount += 1
      case _: LogEvent =>
      case r: ResizeEvent => workers = r.workers
    }
  }

  def view(): View = synchronized {
    val shown = iterations.toList
    View(id, solver, maxIter, workers, attempt, state,
      endMillis.getOrElse(System.currentTimeMillis()) - startMillis, shown.lastOption,
      if (shown.isEmpty) None else Some(shown.map(_.loss.toDouble).sum / shown.size),
      speed, test, snapshots, snapshotCount, shown.reverse)
  }
}

object TrainingRun {

  /** Caffe's line for the model of a snapshot ("Snapshotting to binary proto file PATH"). */
  private val SnapshotPrefix = "Snapshotting to "
  private val KeptSnapshots = 5

  sealed trait State
  case object Running extends State
  case object Finished extends State
  final case class Failed(reason: String) extends State

  /**
   * A run as it stood when viewed: `latest` the newest display iteration, `speed` the newest
   * one with a learning rate and speed, `snapshots` the last few model files written (of
   * `snapshotCount`), `recent` the last display iterations, newest first.
   */
  final case class View(
      id: Int,
      solver: String,
      maxIter: Int,
      workers: Int,
      attempt: Int,
      state: State,
      elapsedMillis: Long,
      latest: Option[IterationEvent],
      smoothedLoss: Option[Double],
      speed: Option[IterationEvent],
      test: Option[TestEvent],
      snapshots: Seq[String],
      snapshotCount: Int,
      recent: Seq[IterationEvent])
}
