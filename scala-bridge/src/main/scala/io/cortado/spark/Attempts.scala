// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.IOException
import java.util.concurrent.atomic.AtomicInteger

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.spark.TaskKilledException
import org.slf4j.LoggerFactory

import io.cortado.{CortadoConfigException, CortadoException}
import io.cortado.storage.{SnapshotFiles, Snapshots}

/**
 * Thrown by an attempt that stopped at `iteration` (its snapshot written) so that the next one
 * runs on `workers` workers: an elastic run growing back.
 */
private[spark] final class StoppedToResize(val iteration: Int, val workers: Int)
    extends RuntimeException(s"stopped at iteration $iteration to go on with $workers workers")

/**
 * Fewer task slots than workers after a failure: retried as long as attempts are left (the
 * cluster may be replacing the executors lost), unlike a failure repeated at one iteration.
 */
private[spark] final class SlotShortage(message: String) extends CortadoException(message)

/**
 * How a training run survives a lost executor: the driver runs the training job up to
 * Config.maxAttempts times, each attempt after a failure resuming from the newest snapshot that
 * can be read under the snapshot prefix (so at most the snapshot interval is trained again), and
 * gives up early on failures that another attempt cannot cure: bad input or configuration
 * (CortadoConfigException), a cancelled job, or the same failure at the same iteration twice.
 */
private[cortado] object Attempts {

  private val log = LoggerFactory.getLogger(classOf[Cortado])

  /**
   * Runs `attempt(number, from, lastIteration)` (numbers from 1; `lastIteration` to be raised to
   * each iteration the attempt reports) until one returns or no attempt is left; rethrows the
   * last failure. Each failure is logged and told to `tell` (the progress listeners).
   */
  def run[R](max: Int, initial: Resume, snapshots: SnapshotPlan, tell: String => Unit)(
      attempt: (Int, Resume, AtomicInteger) => R): R = {
    var number = 1
    // Attempts that ended to change the number of workers are not failures: each raises the
    // limit by one.
    var limit = max
    var from = initial
    var previous: Option[(String, Int)] = None
    def latest = snapshots.prefix.flatMap(p => readLatest(p, snapshots.hadoopConf.value))
    while (true) {
      val reached = new AtomicInteger(-1)
      try {
        return attempt(number, from, reached)
      } catch {
        case stopped: StoppedToResize =>
          val found = latest
          from = found.map(_._2).getOrElse(from)
          val text = s"Training attempt $number stopped at iteration ${stopped.iteration} to go " +
            s"on with ${stopped.workers} workers. Attempt ${number + 1} " +
            found.map { case (files, _) =>
              s"resumes from ${files.state} (iteration ${files.iter})"
            }
              .getOrElse("starts again (no snapshot found)")
          log.info(text)
          tell(text)
          number += 1
          limit += 1
        case NonFatal(e) if retriable(e) =>
          val cause = describe(e)
          val at = reached.get
          val where = if (at >= 0) s" (last reported iteration $at)" else ""
          if (number >= limit) {
            val text = s"Training attempt $number of $limit failed$where: $cause; no attempt " +
              s"left. ${howToResume(latest.map(_._1), snapshots)}"
            log.error(text)
            tell(text)
            throw e
          }
          // A shortage of task slots may end when executors return: it is always tried again.
          val key = (normalise(cause), at)
          if (previous.contains(key) && !e.isInstanceOf[SlotShortage]) {
            val text = s"Training attempt $number of $limit failed$where the same way as the " +
              s"one before: $cause; not trying again. " +
              howToResume(latest.map(_._1), snapshots)
            log.error(text)
            tell(text)
            throw e
          }
          previous = Some(key)
          val found = latest
          from = found.map(_._2).getOrElse(initial)
          val resumes = found.map { case (files, _) =>
            s"resumes from ${files.state} (iteration ${files.iter})"
          }.getOrElse(if (initial.weights.isDefined) "starts again from the given weights"
          else "starts again from scratch (no snapshot yet)")
          val text = s"Training attempt $number of $limit failed$where: $cause. Attempt " +
            s"${number + 1} $resumes"
          log.warn(text)
          tell(text)
          number += 1
      }
    }
    throw new IllegalStateException("unreachable")
  }

  /** Where a run that gave up can be resumed from, and how. */
  def howToResume(newest: Option[SnapshotFiles], snapshots: SnapshotPlan): String =
    newest match {
      case Some(files) =>
        s"The newest snapshot is ${files.state} (iteration ${files.iter}): resume with " +
          s"-weights ${files.model} -snapshot ${files.state} (Config.weights and " +
          "Config.snapshot, or Config.resumeLatest)"
      case None => snapshots.prefix match {
        case Some(p) => s"No snapshot was written under $p: a new run starts from the beginning"
        case None => "The run keeps no snapshots: a new run starts from the beginning"
      }
    }

  /**
   * The newest snapshot under `prefix` whose two files can be read, with its bytes; a newer one
   * that cannot (a file lost or damaged) is skipped with a warning.
   */
  def readLatest(prefix: String, conf: Configuration): Option[(SnapshotFiles, Resume)] = {
    var skipped = Set.empty[Int]
    var found: Option[(SnapshotFiles, Resume)] = None
    while (found.isEmpty) {
      Snapshots.latestBelow(prefix, conf, skipped) match {
        case None => return None
        case Some(files) =>
          try {
            val s = Snapshots.read(files, conf)
            if (s.model.isEmpty || s.state.isEmpty) throw new IOException("an empty file")
            found = Some(files -> Resume(Some(s.model), Some(s.state), files.iter))
          } catch {
            case NonFatal(e) =>
              log.warn(s"Snapshot ${files.state} cannot be read ($e): trying an older one")
              skipped += files.iter
          }
      }
    }
    found
  }

  /**
   * Failures another attempt cannot cure: bad input or settings, a cancelled job. A task's
   * exception reaches the driver as the cause of the job's SparkException, except from a barrier
   * stage (several workers), whose SparkException only quotes the task's stack trace in its
   * message: the exception's class name is looked for there too.
   */
  private def retriable(e: Throwable): Boolean = !chain(e).exists {
    case _: CortadoConfigException | _: TaskKilledException | _: InterruptedException => true
    case c => Option(c.getMessage).exists(m =>
      isCancellationText(m) || m.contains(ConfigExceptionQuoted))
  }

  /** Spark's word that a job was cancelled (by its caller, or by [[ClusterWatch]]). */
  def isCancellation(e: Throwable): Boolean = Option(e.getMessage).exists(isCancellationText)

  private def isCancellationText(m: String): Boolean = m.contains("cancelled") && m.contains("Job")

  /** How a stack trace quoted in a message names a CortadoConfigException. */
  private val ConfigExceptionQuoted = classOf[CortadoConfigException].getName + ": "

  private def chain(e: Throwable): Seq[Throwable] =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).take(16).toSeq

  /**
   * The Cortado message in the chain; else, for a Spark job that lost an executor, Spark's line
   * saying so; else the first line of the outermost message.
   */
  def describe(e: Throwable): String =
    chain(e).collectFirst { case c: CortadoException => c.getMessage }.getOrElse {
      val lines = Option(e.getMessage).map(_.linesIterator.toSeq).getOrElse(Seq(e.toString))
      lines.collectFirst {
        case line if line.contains("ExecutorLostFailure") =>
          line.substring(line.indexOf("ExecutorLostFailure")).trim
      }.getOrElse(lines.headOption.getOrElse(e.toString))
    }

  /** A cause without the numbers that differ between attempts (stage, task and executor ids). */
  private def normalise(cause: String): String = cause.replaceAll("[0-9]+", "#")
}
