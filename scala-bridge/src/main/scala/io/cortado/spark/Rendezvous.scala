// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.charset.StandardCharsets.UTF_8
import java.util.Base64

import org.apache.spark.{BarrierTaskContext, SparkEnv, TaskContext}

import io.cortado.CortadoConfigException
import io.cortado.jni.{NativeComm, NativeLib}

/**
 * How the workers of a training job find each other inside their barrier stage: each task
 * opens its listening socket, then one `BarrierTaskContext.allGather` carries every worker's
 * [[Peer]] (host, port, executor, GPUs, samples, with -connection infiniband its host's active
 * RDMA ports, and rank 0's backend rendezvous: the MPI port or NCCL id), the workers check what
 * must hold between them, and each joins the communicator (NativeComm.connect) with the
 * driver's token, the stage attempt and the plan's allreduce settings (every backend is handed
 * them; tcp's and ucx's allreduce follow them).
 */
private[spark] object Rendezvous {

  /**
   * What a worker tells the others.
   *
   * @param executor   Spark's executor id (workers of one executor share its process)
   * @param gpus       the CUDA devices it trains on (empty: the CPU)
   * @param samples    rows in its partition
   * @param rendezvous rank 0's NativeComm.rootRendezvous; empty for the others
   * @param rdma       the active RDMA ports of its host (NativeLib.rdmaDevices), sent only when
   *                   the plan requires RDMA; empty otherwise
   */
  final case class Peer(
      rank: Int,
      host: String,
      port: Int,
      executor: String,
      gpus: Seq[Int],
      samples: Long,
      rendezvous: Array[Byte],
      rdma: Seq[String] = Nil) {

    /** host:port; the host alone for a worker that listens on no port (mpi). */
    def address: String = if (port > 0) s"$host:$port" else host

    /**
     * One line of tab-separated fields; the free text (rendezvous bytes, RDMA lines) in Base64,
     * so that no tab, comma or newline of it can shift a field.
     */
    def encode: String = Seq(rank.toString, host, port.toString, executor, gpus.mkString(","),
      samples.toString, base64(rendezvous),
      rdma.map(line => base64(line.getBytes(UTF_8))).mkString(",")).mkString("\t")
  }

  object Peer {

    /** What [[Peer.encode]] wrote; an IllegalStateException quoting `text` when malformed. */
    def decode(text: String): Peer = {
      def malformed = new IllegalStateException(s"a worker sent a malformed rendezvous record: " +
        s"'$text'")
      def list(field: String): Seq[String] = if (field.isEmpty) Nil else field.split(",", -1).toSeq
      text.split("\t", -1) match {
        case Array(rank, host, port, executor, gpus, samples, rendezvous, rdma) =>
          // NumberFormatException and Base64's errors are IllegalArgumentExceptions.
          try {
            Peer(rank.toInt, host, port.toInt, executor, list(gpus).map(_.toInt), samples.toLong,
              Base64.getDecoder.decode(rendezvous),
              list(rdma).map(line => new String(Base64.getDecoder.decode(line), UTF_8)))
          } catch {
            case _: IllegalArgumentException => throw malformed
          }
        case _ => throw malformed
      }
    }
  }

  private def base64(bytes: Array[Byte]): String = Base64.getEncoder.encodeToString(bytes)

  /** What joining gave: the communicator's handle (NativeComm) and every worker, by rank. */
  /** `wire`: what the gradients travel as (NativeComm.setExchangePrecision's answer). */
  final case class Joined(comm: Long, peers: Seq[Peer], wire: String = "auto")

  /**
   * Joins the other workers of `plan` as rank `context.partitionId()`; `gpus` are this worker's
   * devices (negative ids, the CPU, are left out) and `samples` its rows. Throws, on every
   * worker alike, what [[check]] throws; what NativeComm.connect throws otherwise.
   */
  def join(plan: WorkerPlan, context: BarrierTaskContext, gpus: Seq[Int], samples: Long): Joined = {
    val rank = context.partitionId()
    val host = plan.network.listenAddress(SparkEnv.get.blockManager.blockManagerId.host)
    var listener =
      if (plan.backend == "mpi") 0L
      else NativeComm.listen(host, plan.network.firstPort, plan.network.lastPort)
    try {
      val port = if (listener == 0) 0 else NativeComm.port(listener)
      val root = if (rank == 0) NativeComm.rootRendezvous(plan.backend) else Array.emptyByteArray
      val rdma =
        if (plan.requireRdma) NativeLib.rdmaDevices().toSeq.map(_.trim).filter(_.nonEmpty)
        else Nil
      val mine = Peer(rank, host, port, SparkEnv.get.executorId, gpus.filter(_ >= 0), samples,
        root, rdma)
      val peers = context.allGather(mine.encode).map(Peer.decode).toSeq.sortBy(_.rank)
      check(plan, peers)
      val taken = listener
      listener = 0
      // mpi meets through rank 0's port, not the peers' addresses.
      val addresses =
        if (plan.backend == "mpi") Array.empty[String] else peers.map(_.address).toArray
      val comm = NativeComm.connect(taken, plan.backend, rank, plan.count, addresses, plan.token,
        context.stageAttemptNumber(), peers.head.rendezvous, gpus.headOption.getOrElse(-1),
        plan.connectTimeoutSeconds, plan.timeoutSeconds, plan.network.firstPort,
        plan.network.lastPort, plan.allreduce, plan.latencyKb, plan.hierarchical)
      val wire =
        try NativeComm.setExchangePrecision(comm, plan.exchangePrecision)
        catch {
          case e: Throwable =>
            NativeComm.dispose(comm)
            throw e
        }
      Joined(comm, peers, wire)
    } finally {
      if (listener != 0) NativeComm.closeListener(listener)
    }
  }

  /**
   * The checks every worker makes on the same list, so that all fail alike, each with a
   * CortadoConfigException: two workers on one GPU of a host; two workers in one process with
   * the mpi backend; a host without an RDMA port when the plan requires RDMA and allows no
   * fallback.
   */
  def check(plan: WorkerPlan, peers: Seq[Peer]): Unit = {
    if (peers.map(_.rank) != (0 until plan.count)) {
      throw new IllegalStateException(
        s"the rendezvous gave ranks ${peers.map(_.rank).mkString(", ")} for ${plan.count} workers")
    }
    for {
      (host, onHost) <- peers.groupBy(_.host).toSeq.sortBy(_._1)
      (gpu, users) <- onHost.flatMap(p => p.gpus.map(_ -> p.rank)).groupBy(_._1).toSeq.sortBy(_._1)
      if users.size > 1
    } {
      val ranks = users.map(_._2).sorted
      throw new CortadoConfigException(
        s"workers ${ranks(0)} and ${ranks(1)} both train on GPU $gpu of host $host: give each " +
          "executor its own GPUs (spark.executor.resource.gpu.amount with a discovery script, " +
          "and spark.task.resource.gpu.amount), or run one worker per host")
    }
    if (plan.backend == "mpi") {
      peers.groupBy(_.executor).values.map(_.map(_.rank).sorted).filter(_.size > 1).toSeq
        .sortBy(_.head).headOption.foreach { ranks =>
          throw new CortadoConfigException(
            s"the mpi backend takes one worker per process, but workers ${ranks(0)} and " +
              s"${ranks(1)} run in one executor: give each executor as many cores as " +
              "spark.task.cpus, or use the tcp backend")
        }
    }
    if (plan.requireRdma && !plan.rdmaFallback) {
      val missing = withoutRdma(peers)
      if (missing.nonEmpty) {
        throw new CortadoConfigException(
          "-connection infiniband needs an RDMA device (InfiniBand or RoCE) on every host, but " +
            s"${hosts(missing)} none (libibverbs lists no active port): use -connection " +
            "ethernet, or add -connectionFallback ethernet to run over TCP")
      }
    }
  }

  /**
   * What worker 0 logs when -connectionFallback let hosts without an RDMA port join a plan
   * that asked for RDMA; None when every host has one, or when the plan asked for none.
   */
  def rdmaWarning(plan: WorkerPlan, peers: Seq[Peer]): Option[String] =
    if (!plan.requireRdma || !plan.rdmaFallback) None
    else Some(withoutRdma(peers)).filter(_.nonEmpty).map { missing =>
      s"Warning: -connection infiniband, but ${hosts(missing)} no RDMA device (libibverbs " +
        "lists no active port): as -connectionFallback ethernet allows, UCX carries the " +
        "gradients to and from them over TCP (or shared memory within a host) instead"
    }

  /** The hosts whose workers sent no RDMA port, each with those workers' ranks, by first rank. */
  private def withoutRdma(peers: Seq[Peer]): Seq[(String, Seq[Int])] =
    peers.filter(_.rdma.isEmpty).groupBy(_.host).toSeq
      .map { case (host, onHost) => host -> onHost.map(_.rank).sorted }
      .sortBy(_._2.head)

  /** "host a (worker 0) has", "hosts a (workers 0, 1), b (worker 2) have". */
  private def hosts(missing: Seq[(String, Seq[Int])]): String = {
    val listed = missing.map { case (host, ranks) =>
      s"$host (worker${if (ranks.size == 1) "" else "s"} ${ranks.mkString(", ")})"
    }.mkString(", ")
    if (missing.size == 1) s"host $listed has" else s"hosts $listed have"
  }

  /**
   * This worker's devices: the GPUs Spark assigned the task (resource scheduling), else, when
   * the solver asks for a GPU and this executor has one, the solver's device_id (one device)
   * or the first `devices` GPUs, else `devices` CPU replicas (-1 each).
   */
  def devices(conf: NetConf, devices: Int): Array[Int] = {
    val assigned = Option(TaskContext.get()).flatMap(_.resources().get("gpu"))
      .map(_.addresses.toSeq).getOrElse(Seq.empty)
    if (assigned.nonEmpty) {
      assigned.map { a =>
        try a.trim.toInt
        catch {
          case _: NumberFormatException =>
            throw new CortadoConfigException(
              s"Spark assigned this task the GPU address '$a', which is not a CUDA device " +
                "ordinal: the GPU discovery script should list ordinals (0, 1, ...)")
        }
      }.toArray
    } else {
      val device = NativeLib.solverInfo(conf.solverText, conf.solverSource).device
      if (device < 0) Array.fill(devices)(-1)
      else if (devices == 1) Array(device)
      else Array.range(0, devices)
    }
  }
}
