// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.security.SecureRandom

import scala.util.Try

import org.apache.spark.{CortadoSlots, SparkContext}
import org.slf4j.LoggerFactory

import io.cortado.CortadoConfigException
import io.cortado.jni.NativeComm

/**
 * How many workers train one job and how they meet, decided by the driver (see [[Workers.plan]])
 * and shipped to every training task.
 *
 * @param count     workers: tasks of one barrier stage, rank = partition id; 1: one plain task
 * @param backend   "tcp", "ucx", "mpi" or "nccl"
 * @param token     the job's secret, fresh for every training run; with the stage attempt it
 *                  makes every connection between workers prove it belongs to this run
 * @param devices   devices per worker (Config.devices)
 * @param connectTimeoutSeconds how long the workers try to reach each other
 * @param timeoutSeconds a collective fails when no byte moved for this long
 * @param requireRdma the backend came from `-connection infiniband` (not from an explicit
 *                  backend): the workers send their RDMA ports through the rendezvous and
 *                  check that every host has one (see [[Rendezvous.check]])
 * @param rdmaFallback -connectionFallback ethernet: a host without an RDMA port is accepted,
 *                  with a warning in the training log, rather than failing the run
 * @param network   the interface and ports the workers listen on (spark.cortado.interface,
 *                  spark.cortado.portRange)
 * @param cpuThreads Config.cpuThreads: each worker's CPU threads (0: from its share, see
 *                  [[CpuThreads]])
 * @param allreduce Config.allreduce: how the tcp and ucx backends sum ("auto", "ring", "doubling",
 *                  "halving")
 * @param latencyKb Config.latencyKb: with "auto", a step's fixed cost in KB
 * @param hierarchical Config.hierarchical: workers sharing hosts sum within each host first
 */
private[spark] final case class WorkerPlan(
    count: Int,
    backend: String,
    token: String,
    devices: Int,
    connectTimeoutSeconds: Double,
    timeoutSeconds: Double,
    requireRdma: Boolean = false,
    rdmaFallback: Boolean = false,
    exchangePrecision: String = "auto",
    network: NetworkSettings = NetworkSettings(),
    cpuThreads: Int = 0,
    allreduce: String = "auto",
    latencyKb: Int = 32,
    hierarchical: Boolean = true)

private[spark] object Workers {

  private val log = LoggerFactory.getLogger(classOf[Cortado])

  /**
   * The worker count and backend of `config`, checked before any task starts: several workers
   * need a backend this build has and no dynamic allocation (a barrier stage refuses it); else a
   * CortadoConfigException. The task slots are waited for by [[awaitSlots]]. Whether every host has an RDMA
   * device (-connection infiniband) only the workers can tell: see [[Rendezvous.check]].
   */
  def plan(config: Config, sc: SparkContext): WorkerPlan = {
    if (config.devices < 1) {
      throw new CortadoConfigException(s"Config.devices must be at least 1, not ${config.devices}")
    }
    if (config.cpuThreads < 0) {
      throw new CortadoConfigException(
        s"Config.cpuThreads must be 0 (from the executor's share) or more, not ${config.cpuThreads}")
    }
    if (config.clusterSize < 0) {
      throw new CortadoConfigException(
        s"Config.clusterSize must be 0 (automatic) or more, not ${config.clusterSize}")
    }
    val count = if (config.clusterSize > 0) config.clusterSize else automaticCount(sc)
    val backend = backendOf(config)
    val fallback = config.connectionFallback.toLowerCase match {
      case "" => false
      case "ethernet" => true
      case other =>
        throw new CortadoConfigException(
          s"Config.connectionFallback must be ethernet or empty, not '$other'")
    }
    if (!Config.ExchangePrecisions(config.exchangePrecision)) {
      throw new CortadoConfigException("Config.exchangePrecision must be auto, float32, " +
        s"bfloat16 or float16, not '${config.exchangePrecision}'")
    }
    if (!Config.AllreduceAlgorithms.contains(config.allreduce)) {
      throw new CortadoConfigException("Config.allreduce (-allreduce) must be auto, ring, " +
        s"doubling or halving, not '${config.allreduce}'")
    }
    if (config.latencyKb < 1) {
      throw new CortadoConfigException("Config.latencyKb (-latencyKb) must be a positive " +
        s"number of KB, not ${config.latencyKb}")
    }
    val network = NetworkSettings.of(sc.getConf)
    val known = NativeComm.backends().toSeq
    if (!known.contains(backend)) {
      val has = s"(it has: ${known.mkString(", ")})"
      throw new CortadoConfigException(
        if (requiresRdma(config)) {
          s"-connection infiniband runs on the '$backend' backend, which is not in this build " +
            s"of Cortado $has: use -connection ethernet" +
            (if (known.contains("mpi")) ", or -comm mpi for OpenMPI" else "")
        } else s"the '$backend' backend is not in this build of Cortado $has")
    }
    if (count > 1) {
      if (sc.getConf.getBoolean("spark.dynamicAllocation.enabled", defaultValue = false)) {
        throw new CortadoConfigException(
          s"training with $count workers runs as one gang-scheduled (barrier) Spark stage, " +
            "which Spark cannot run while executors come and go: set " +
            "spark.dynamicAllocation.enabled=false (and --num-executors " +
            s"$count) for this job")
      }
      if (backend == "mpi" && sc.master.startsWith("local[")) {
        throw new CortadoConfigException(
          s"the mpi backend takes one worker per process, and ${sc.master} runs every task " +
            "in one JVM: use the tcp backend (-connection ethernet), or a cluster")
      }
    }
    WorkerPlan(count, backend, newToken(), config.devices, config.startTimeoutSeconds,
      config.commTimeoutSeconds, requireRdma = requiresRdma(config), rdmaFallback = fallback,
      exchangePrecision = config.exchangePrecision, network = network,
      cpuThreads = config.cpuThreads, allreduce = config.allreduce,
      latencyKb = config.latencyKb, hierarchical = config.hierarchical)
  }

  /**
   * Config.backend, else what CaffeOnSpark's -connection selects: tcp for ethernet (or
   * nothing), ucx for infiniband.
   */
  def backendOf(config: Config): String =
    if (config.backend.nonEmpty) config.backend
    else config.connection.toLowerCase match {
      case "" | "ethernet" => "tcp"
      case "infiniband" => "ucx"
      case other =>
        throw new CortadoConfigException(
          s"Config.connection must be ethernet or infiniband, not '$other'")
    }

  /**
   * Whether the workers must find an RDMA device on every host: the backend comes from
   * -connection infiniband, not from Config.backend (which is taken as it is).
   */
  def requiresRdma(config: Config): Boolean =
    config.backend.isEmpty && config.connection.toLowerCase == "infiniband"

  /** spark.executor.instances when set and dynamic allocation is off, else 1. */
  private def automaticCount(sc: SparkContext): Int = {
    val conf = sc.getConf
    if (conf.getBoolean("spark.dynamicAllocation.enabled", defaultValue = false)) 1
    else conf.getOption("spark.executor.instances").flatMap(v => Try(v.trim.toInt).toOption)
      .filter(_ > 0).getOrElse(1)
  }

  /**
   * Waits up to `timeoutSeconds` for `count` task slots at once and returns how many workers to
   * run: `count`, or, when the time is up, the slots there are if at least `min`. While
   * executors are arriving after a loss (one registered in the last [[SettleSeconds]]) the wait
   * goes on, up to twice `timeoutSeconds`: a cluster that is making good its loss is given the
   * time to finish. (An executor still starting is not visible to the driver; a shortage after
   * a loss is one more failed attempt, and the next attempt waits again.) Too few slots throw: with `afterLoss` (an attempt after a failure, which
   * `watch` sees the cluster for) a [[SlotShortage]], which the driver tries again while it has
   * attempts left; else a CortadoConfigException, as for any setting the cluster cannot meet.
   */
  def awaitSlots(sc: SparkContext, count: Int, min: Int, timeoutSeconds: Double,
      afterLoss: Option[ClusterWatch]): Int = {
    val start = System.nanoTime()
    def elapsed = (System.nanoTime() - start) / 1e9
    def settling = afterLoss.exists(_.secondsSinceAdded < SettleSeconds)
    var slots = CortadoSlots.available(sc)
    var told = false
    while (slots < count &&
        (elapsed < timeoutSeconds || (settling && elapsed < 2 * timeoutSeconds))) {
      if (!told) {
        log.info(s"Waiting up to ${fmt(timeoutSeconds)} s for $count task slots (the cluster " +
          s"offers $slots so far" + (if (min < count) s"; $min at least will do" else "") + ")")
        told = true
      }
      Thread.sleep(200)
      slots = CortadoSlots.available(sc)
    }
    if (slots >= count) count
    else if (slots >= min) slots
    else {
      // The driver is listed too; in local mode it is the one executor.
      val executors =
        if (sc.isLocal) 1 else math.max(0, sc.statusTracker.getExecutorInfos.length - 1)
      val needs = if (min < count) s"at least $min of $count task slots at once" else
        s"$count task slots at once"
      // The timeout as given, unless the wait went on while executors were registering.
      val waited =
        if (elapsed < timeoutSeconds + 1) timeoutSeconds else math.round(elapsed).toDouble
      val text = s"training with $count workers needs $needs (one barrier stage), but after " +
        s"${fmt(waited)} s the cluster (${sc.master}) offers $slots ($executors " +
        s"executor${if (executors == 1) "" else "s"} registered, spark.task.cpus " +
        s"${sc.getConf.get("spark.task.cpus", "1")})"
      if (afterLoss.isDefined) throw new SlotShortage(text)
      throw new CortadoConfigException(text + ": ask for fewer workers (-clusterSize" +
        (if (min < count) ", -minWorkers" else "") + ") or more executors")
    }
  }

  /** How long after an executor registered the cluster is taken to be still recovering. */
  val SettleSeconds = 30.0

  private def fmt(seconds: Double): String =
    if (seconds == seconds.floor) seconds.toLong.toString else f"$seconds%.1f"

  private val random = new SecureRandom()

  private def newToken(): String = {
    val bytes = new Array[Byte](16)
    random.synchronized(random.nextBytes(bytes))
    bytes.map(b => f"${b & 0xff}%02x").mkString
  }
}
