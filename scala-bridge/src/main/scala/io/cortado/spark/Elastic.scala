// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import io.cortado.CortadoConfigException
import io.cortado.jni.{NativeLib, NativeNet}

/**
 * How an attempt on fewer workers than asked for trains (Config.elasticScaling), and the texts
 * that make it so.
 *
 * @param workers   the attempt's workers
 * @param full      the workers asked for (Config.clusterSize)
 * @param mode      "keepGlobalBatch" or "linearLr"
 * @param batch     each device's batch (the feed layer's batch_size)
 * @param iterSize  the solver's iter_size
 * @param baseLr    the solver's base_lr
 * @param how       what was changed and how, for the log: "batch 64 -> 96 per worker"
 * @param exact     whether the global batch (workers x batch x iter_size) is the full run's
 */
private[spark] final case class Scaling(
    workers: Int,
    full: Int,
    mode: String,
    batch: Int,
    iterSize: Int,
    baseLr: Float,
    how: String,
    exact: Boolean) {

  /** The line for the log and the snapshots' run files. */
  def describe: String =
    s"$workers of $full workers, $mode: $how; batch $batch per device, iter_size $iterSize, " +
      s"base_lr ${CortadoOnSpark.caffeFormat(baseLr.toDouble)}"
}

private[spark] object Elastic {

  val KeepGlobalBatch = "keepGlobalBatch"
  val LinearLr = "linearLr"
  val Modes: Seq[String] = Seq(KeepGlobalBatch, LinearLr)

  /** Config.minWorkers made concrete (0: every worker) and checked against `full`. */
  def minWorkers(config: Config, full: Int): Int = {
    if (config.minWorkers < 0 || config.minWorkers > full) {
      throw new CortadoConfigException(s"Config.minWorkers must be between 1 and the " +
        s"$full workers asked for (or 0: all of them), not ${config.minWorkers}")
    }
    if (!Modes.contains(config.elasticScaling)) {
      throw new CortadoConfigException(s"Config.elasticScaling must be ${Modes.mkString(" or ")}" +
        s", not '${config.elasticScaling}'")
    }
    if (config.minWorkers == 0) full else config.minWorkers
  }

  /**
   * The scaling of an attempt on `workers` of `full` workers whose devices have batch `batch`,
   * iter_size `iterSize` and base_lr `baseLr`:
   *  - keepGlobalBatch keeps full x batch x iterSize images per update: through iter_size when
   *    it divides evenly (same memory per pass), else through the batch when that divides
   *    evenly, else the nearest batch (the global batch then differs, and says so);
   *  - linearLr keeps the batch and scales base_lr by workers / full (Goyal et al.).
   */
  def scaling(mode: String, full: Int, workers: Int, batch: Int, iterSize: Int,
      baseLr: Float): Scaling = {
    if (workers == full) {
      Scaling(workers, full, mode, batch, iterSize, baseLr, "as asked", exact = true)
    } else if (mode == LinearLr) {
      val lr = (baseLr.toDouble * workers / full).toFloat
      Scaling(workers, full, mode, batch, iterSize, lr,
        s"base_lr ${CortadoOnSpark.caffeFormat(baseLr.toDouble)} -> " +
          s"${CortadoOnSpark.caffeFormat(lr.toDouble)} (x $workers/$full), global batch " +
          s"${full.toLong * batch * iterSize} -> ${workers.toLong * batch * iterSize}",
        exact = true)
    } else {
      val total = full.toLong * batch * iterSize
      val global = s"global batch $total kept"
      if (total % (workers.toLong * batch) == 0) {
        val s = (total / (workers.toLong * batch)).toInt
        Scaling(workers, full, mode, batch, s, baseLr,
          s"iter_size $iterSize -> $s per worker, $global", exact = true)
      } else if (total % (workers.toLong * iterSize) == 0) {
        val b = (total / (workers.toLong * iterSize)).toInt
        Scaling(workers, full, mode, b, iterSize, baseLr,
          s"batch $batch -> $b per device, $global", exact = true)
      } else {
        val b = math.max(1, math.round(total.toDouble / (workers.toLong * iterSize)).toInt)
        Scaling(workers, full, mode, b, iterSize, baseLr,
          s"batch $batch -> $b per device, global batch $total -> " +
            s"${workers.toLong * b * iterSize} (neither iter_size nor the batch divides evenly)",
          exact = false)
      }
    }
  }

  /** `conf` with `scaling`'s batch, iter_size and base_lr in its texts. */
  def apply(conf: NetConf, scaling: Scaling): NetConf = {
    if (scaling.workers == scaling.full) conf
    else {
      val solver = NativeLib.mergeSolver(conf.solverText, conf.solverSource,
        s"iter_size: ${scaling.iterSize} base_lr: ${scaling.baseLr}",
        s"the elastic scaling of ${conf.solverSource}")
      val layer = conf.feedLayer.substring(conf.feedLayer.indexOf('/') + 1)
      val net =
        if (scaling.batch == conf.batchSize) conf.netText
        else NativeLib.withFeedBatchSize(conf.netText, conf.netSource, layer, NativeNet.TRAIN,
          scaling.batch)
      if (net ne conf.netText) NativeLib.validateNet(net, conf.netSource)
      conf.copy(solverText = solver, netText = net, batchSize = scaling.batch)
    }
  }
}

/**
 * The driver's side of growing back (see [[Cortado]]): while an attempt runs on fewer than
 * `full` workers (`active`), each executor added and each display iteration checks whether the
 * cluster offers `full` task slots again; the first time it does, worker 0 is asked (through
 * the progress channel) to stop at the next snapshot iteration, or, when that is more than
 * `growSeconds` away at the speed last reported, about a second from the last display. The
 * session writes a snapshot where it stops, and the next attempt resumes from it. Nothing is
 * asked when the run would reach max_iter first.
 */
private[spark] final class GrowBack(active: Boolean, full: Int, snapshotEvery: Int,
    maxIter: Int, growSeconds: Double, watch: ClusterWatch,
    lastIteration: java.util.concurrent.atomic.AtomicInteger) {

  private val log = org.slf4j.LoggerFactory.getLogger(classOf[Cortado])
  private var server: Option[Progress.Server] = None
  private var tell: String => Unit = (_: String) => ()
  private var speed = 0.0
  private var requested = false

  /** Starts watching, with the attempt's progress channel; `say` reaches the listeners. */
  def start(channel: Progress.Server, say: String => Unit): Unit = if (active) {
    synchronized {
      server = Some(channel)
      tell = say
    }
    watch.onExecutorAdded = () => check()
    check()
  }

  def onIteration(event: IterationEvent): Unit = if (active) {
    synchronized(if (event.iterationsPerSecond > 0) speed = event.iterationsPerSecond)
    check()
  }

  def stop(): Unit = if (active) {
    watch.onExecutorAdded = () => ()
    synchronized { server = None }
  }

  private def check(): Unit = synchronized {
    server.filter(_ => !requested && snapshotEvery > 0).foreach { channel =>
      val slots = watch.slots
      if (slots >= full) {
        val last = math.max(0, lastIteration.get)
        val next = (last / snapshotEvery + 1) * snapshotEvery
        val away = if (speed > 0) (next - last) / speed else 0.0
        val early = away > growSeconds
        val at = if (early) last + math.max(1, math.ceil(speed).toInt) else next
        if (at < maxIter && channel.requestStop(at) > 0) {
          requested = true
          val text = s"Elastic training: the cluster offers $slots task slots again; the " +
            s"workers stop at iteration $at (" +
            (if (early) f"the next snapshot, $next, is $away%.0f s away: a snapshot of its own)"
            else "the next snapshot)") + s" and go on with $full workers"
          log.info(text)
          tell(text)
        }
      }
    }
  }
}
