// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import io.cortado.cli.Options

/**
 * What [[Cortado]] needs besides the data, as CaffeOnSpark's Config carries it. Paths are
 * Hadoop paths (`file:`, `hdfs:`, or plain paths on the default file system).
 *
 * @param solverFile the solver prototxt (-conf); its `net` names the net prototxt, read from
 *                   that path, or from the solver's directory when relative and absent there
 * @param model      where train() writes the trained .caffemodel, and what test() and
 *                   features() read (-model)
 * @param weights    a .caffemodel to start training from (-weights): fine-tuning, or with
 *                   `snapshot` the model of the snapshot to resume
 * @param snapshot   a .solverstate to resume training from (-snapshot; needs `weights`)
 * @param snapshotPrefix   where train() writes its snapshots: Caffe's
 *                   `<prefix>_iter_<N>.caffemodel` and `.solverstate`. Empty: the solver's
 *                   `snapshot_prefix`. Either is upgraded as Caffe upgrades it (the solver
 *                   file's path without extension when unset, the solver file's name appended
 *                   when it ends in `/` or names a directory), a Hadoop path on the default
 *                   file system when not a URI
 * @param snapshotInterval train() snapshots every this many iterations; negative: the
 *                   solver's `snapshot` (0 when unset); 0: no snapshots (nor the closing one
 *                   of `snapshot_after_train`)
 * @param resumeLatest     train() resumes from the newest complete snapshot under the
 *                   snapshot prefix, and starts from scratch when there is none; excludes
 *                   `weights` and `snapshot`
 * @param devices    devices per worker (-devices): without Spark's GPU scheduling, the first
 *                   this many GPUs of the executor when the solver asks for a GPU and the
 *                   executor has one, else this many CPU replicas; they train as replicas of
 *                   one worker below the allreduce between workers
 * @param clusterSize workers (-clusterSize): Spark tasks that train together, one barrier stage
 *                   of this many tasks, each on its own partition of the data; 0: the number
 *                   of executors when Spark's configuration fixes it (`spark.executor.instances`,
 *                   not with dynamic allocation), else 1
 * @param backend    how workers exchange gradients: "tcp" (our ring), "ucx" (UCX: RDMA where
 *                   the hosts have it, else TCP or shared memory), "mpi" (OpenMPI joined
 *                   through ompi-server) or "nccl" (GPUs); empty: from `connection`
 * @param connection CaffeOnSpark's -connection: "ethernet" (or empty) selects tcp,
 *                   "infiniband" ucx over RDMA, which every host must have (checked by the
 *                   workers before training; see `connectionFallback`); `backend` overrides it,
 *                   and then nothing is checked
 * @param connectionFallback -connectionFallback: "ethernet" lets `connection` "infiniband" run
 *                   on hosts without an RDMA device, ucx carrying the gradients over TCP (or
 *                   shared memory within a host), with a warning in the training log; empty:
 *                   such hosts fail the run before training
 * @param startTimeoutSeconds with several workers, how long the driver waits for the cluster
 *                   to offer that many task slots at once before failing, and how long the
 *                   workers try to connect to each other
 * @param commTimeoutSeconds a gradient exchange fails when no byte moved for this long (a
 *                   worker lost or hung)
 * @param maxAttempts training jobs the driver runs before giving up (-maxAttempts): after a
 *                   failure (an executor lost, a worker failed, a collective timed out) the next
 *                   attempt resumes from the newest readable snapshot; bad input or settings,
 *                   and the same failure at the same iteration twice, end the run at once
 * @param idColumn   the column features() copies into its output as the row id; when the
 *                   DataFrame lacks it, the id is the row's number (a long) in the data
 * @param resizeImages images (encoded, or raw of another size) are resized to the feed top's
 *                   height and width (-resize); else an image of another size fails its row
 * @param skipCorruptImages rows whose JPEG or PNG image cannot be decoded are left out, each
 *                   named in the executor's log (-skipCorrupt); else such a row fails the job,
 *                   naming it
 * @param solverOverrides solver prototxt text whose fields replace the solver file's own
 *                   (`"base_lr: 0.01 max_iter: 500"`; a repeated field such as `stepvalue`
 *                   replaces the whole list); empty: the solver file as it is
 * @param exchangePrecision what the gradients travel as between workers (-exchangePrecision):
 *                   "float32", "bfloat16" or "float16" (half the bytes, each partial sum
 *                   rounded on the way; the tcp backend, others keep float32), or "auto": the
 *                   compute precision (a half type on GPUs training in one, else float32)
 * @param minWorkers elastic training (-minWorkers): when an attempt fails, or the cluster
 *                   offers fewer task slots than workers after `startTimeoutSeconds`, the run
 *                   goes on with the slots there are if at least this many (waiting up to
 *                   `elasticTimeoutSeconds` after a failure), resuming from the newest snapshot,
 *                   and grows back to `clusterSize` workers once the cluster has the slots again
 *                   (see docs/spark.md, "Elastic training"); 0 (the default): every worker,
 *                   always (no elastic training)
 * @param elasticScaling what a run on fewer workers changes (-elasticScaling):
 *                   "keepGlobalBatch" keeps workers x batch x iter_size (through iter_size, or
 *                   the batch where iter_size cannot divide evenly): the same optimisation,
 *                   slower; "linearLr" keeps each worker's batch and scales base_lr by the worker
 *                   ratio
 * @param elasticTimeoutSeconds after a failure, how long an elastic run waits for all its
 *                   workers' slots before going on with fewer
 * @param elasticGrowSeconds while an elastic run is short of workers and the slots are back,
 *                   it stops at its next snapshot to grow, or at once with a snapshot of its own
 *                   when the next is further away than this
 * @param cpuThreads CPU threads of each worker's training on the CPU (-cpuThreads); 0 (the
 *                   default): spark.executorEnv.OMP_NUM_THREADS where the user sets it, else
 *                   the executor's cores when it runs one training task, else spark.task.cpus
 *                   (see docs/spark.md, "CPU threads")
 * @param allreduce  how the tcp and ucx backends sum the gradients between workers (-allreduce), as
 *                   `cortado train --allreduce`: "ring", "doubling" (recursive doubling: log2 N
 *                   steps of the whole buffer), "halving" (recursive halving then doubling:
 *                   2 log2 N steps moving the ring's bytes) or "auto": the one the cost model
 *                   says is fastest for each buffer and the number of workers; the training log's
 *                   `Connection:` line names it. Other backends ignore it
 * @param latencyKb  with `allreduce` "auto", a step's fixed cost in KB of the link's rate
 *                   (-latencyKb; its latency times its rate: about 3 on 1 Gbit/s, 32 on
 *                   10 Gbit/s), at least 1; tcp only
 * @param hierarchical where workers share hosts and there are two hosts or more, the tcp
 *                   backend sums within each host first, then between one worker per host
 *                   (-hierarchical); false: one ring of every worker
 */
final case class Config(
    solverFile: String,
    model: String = "",
    weights: String = "",
    snapshot: String = "",
    devices: Int = 1,
    idColumn: String = "id",
    snapshotPrefix: String = "",
    snapshotInterval: Int = -1,
    resumeLatest: Boolean = false,
    clusterSize: Int = 0,
    backend: String = "",
    connection: String = "",
    connectionFallback: String = "",
    startTimeoutSeconds: Double = 120,
    commTimeoutSeconds: Double = 120,
    maxAttempts: Int = 3,
    resizeImages: Boolean = false,
    skipCorruptImages: Boolean = false,
    solverOverrides: String = "",
    exchangePrecision: String = "auto",
    minWorkers: Int = 0,
    elasticScaling: String = "keepGlobalBatch",
    elasticTimeoutSeconds: Double = 60,
    elasticGrowSeconds: Double = 120,
    cpuThreads: Int = 0,
    allreduce: String = "auto",
    latencyKb: Int = 32,
    hierarchical: Boolean = true) {

  /**
   * Every field up to `cpuThreads`, in order: the constructor Java code called before the
   * allreduce fields (allreduce "auto", latencyKb 32, hierarchical true) were added.
   */
  def this(solverFile: String, model: String, weights: String, snapshot: String, devices: Int,
      idColumn: String, snapshotPrefix: String, snapshotInterval: Int, resumeLatest: Boolean,
      clusterSize: Int, backend: String, connection: String, connectionFallback: String,
      startTimeoutSeconds: Double, commTimeoutSeconds: Double, maxAttempts: Int,
      resizeImages: Boolean, skipCorruptImages: Boolean, solverOverrides: String,
      exchangePrecision: String, minWorkers: Int, elasticScaling: String,
      elasticTimeoutSeconds: Double, elasticGrowSeconds: Double, cpuThreads: Int) =
    this(solverFile, model, weights, snapshot, devices, idColumn, snapshotPrefix,
      snapshotInterval, resumeLatest, clusterSize, backend, connection, connectionFallback,
      startTimeoutSeconds, commTimeoutSeconds, maxAttempts, resizeImages, skipCorruptImages,
      solverOverrides, exchangePrecision, minWorkers, elasticScaling, elasticTimeoutSeconds,
      elasticGrowSeconds, cpuThreads, "auto", 32, true)

  /** The image settings as the row converters and image sources take them. */
  def imageOptions: io.cortado.data.ImageOptions =
    io.cortado.data.ImageOptions(resizeImages, skipCorruptImages)
}

object Config {

  /** The values of `exchangePrecision`. */
  val ExchangePrecisions: Set[String] = Set("auto", "float32", "bfloat16", "float16")

  /** The values of `allreduce`, as `cortado train --allreduce` takes them. */
  val AllreduceAlgorithms: Seq[String] = Seq("auto", "ring", "doubling", "halving")

  /**
   * Every field but `exchangePrecision` ("auto"), in order: the positional call py4j makes
   * (docs/pyspark.md), as it was before that field was added.
   */
  def apply(solverFile: String, model: String, weights: String, snapshot: String, devices: Int,
      idColumn: String, snapshotPrefix: String, snapshotInterval: Int, resumeLatest: Boolean,
      clusterSize: Int, backend: String, connection: String, connectionFallback: String,
      startTimeoutSeconds: Double, commTimeoutSeconds: Double, maxAttempts: Int,
      resizeImages: Boolean, skipCorruptImages: Boolean, solverOverrides: String): Config =
    new Config(solverFile, model, weights, snapshot, devices, idColumn, snapshotPrefix,
      snapshotInterval, resumeLatest, clusterSize, backend, connection, connectionFallback,
      startTimeoutSeconds, commTimeoutSeconds, maxAttempts, resizeImages, skipCorruptImages,
      solverOverrides, "auto")

  /**
   * Every field up to `exchangePrecision`, in order: the positional call py4j makes, as it was
   * before the elastic fields (minWorkers, elasticScaling, elasticTimeoutSeconds,
   * elasticGrowSeconds: their defaults) were added.
   */
  def apply(solverFile: String, model: String, weights: String, snapshot: String, devices: Int,
      idColumn: String, snapshotPrefix: String, snapshotInterval: Int, resumeLatest: Boolean,
      clusterSize: Int, backend: String, connection: String, connectionFallback: String,
      startTimeoutSeconds: Double, commTimeoutSeconds: Double, maxAttempts: Int,
      resizeImages: Boolean, skipCorruptImages: Boolean, solverOverrides: String,
      exchangePrecision: String): Config =
    new Config(solverFile, model, weights, snapshot, devices, idColumn, snapshotPrefix,
      snapshotInterval, resumeLatest, clusterSize, backend, connection, connectionFallback,
      startTimeoutSeconds, commTimeoutSeconds, maxAttempts, resizeImages, skipCorruptImages,
      solverOverrides, exchangePrecision)

  /**
   * Every field up to `elasticGrowSeconds`, in order: the positional call py4j makes, as it was
   * before `cpuThreads` (0: from the executor's share) was added.
   */
  def apply(solverFile: String, model: String, weights: String, snapshot: String, devices: Int,
      idColumn: String, snapshotPrefix: String, snapshotInterval: Int, resumeLatest: Boolean,
      clusterSize: Int, backend: String, connection: String, connectionFallback: String,
      startTimeoutSeconds: Double, commTimeoutSeconds: Double, maxAttempts: Int,
      resizeImages: Boolean, skipCorruptImages: Boolean, solverOverrides: String,
      exchangePrecision: String, minWorkers: Int, elasticScaling: String,
      elasticTimeoutSeconds: Double, elasticGrowSeconds: Double): Config =
    new Config(solverFile, model, weights, snapshot, devices, idColumn, snapshotPrefix,
      snapshotInterval, resumeLatest, clusterSize, backend, connection, connectionFallback,
      startTimeoutSeconds, commTimeoutSeconds, maxAttempts, resizeImages, skipCorruptImages,
      solverOverrides, exchangePrecision, minWorkers, elasticScaling, elasticTimeoutSeconds,
      elasticGrowSeconds, 0)

  /**
   * Every field up to `cpuThreads`, in order: the positional call py4j makes, as it was before
   * the allreduce fields (allreduce "auto", latencyKb 32, hierarchical true) were added.
   */
  def apply(solverFile: String, model: String, weights: String, snapshot: String, devices: Int,
      idColumn: String, snapshotPrefix: String, snapshotInterval: Int, resumeLatest: Boolean,
      clusterSize: Int, backend: String, connection: String, connectionFallback: String,
      startTimeoutSeconds: Double, commTimeoutSeconds: Double, maxAttempts: Int,
      resizeImages: Boolean, skipCorruptImages: Boolean, solverOverrides: String,
      exchangePrecision: String, minWorkers: Int, elasticScaling: String,
      elasticTimeoutSeconds: Double, elasticGrowSeconds: Double, cpuThreads: Int): Config =
    new Config(solverFile, model, weights, snapshot, devices, idColumn, snapshotPrefix,
      snapshotInterval, resumeLatest, clusterSize, backend, connection, connectionFallback,
      startTimeoutSeconds, commTimeoutSeconds, maxAttempts, resizeImages, skipCorruptImages,
      solverOverrides, exchangePrecision, minWorkers, elasticScaling, elasticTimeoutSeconds,
      elasticGrowSeconds, cpuThreads, "auto", 32, true)

  /** The Config of CaffeOnSpark's command line flags. */
  def fromOptions(o: Options): Config =
    Config(o.conf, model = o.model, weights = o.weights, snapshot = o.snapshot,
      devices = o.devices, clusterSize = o.clusterSize, backend = o.comm,
      connection = o.connection, connectionFallback = o.connectionFallback,
      exchangePrecision = o.exchangePrecision, minWorkers = o.minWorkers,
      elasticScaling = o.elasticScaling, cpuThreads = o.cpuThreads,
      maxAttempts = o.maxAttempts, resizeImages = o.resize, skipCorruptImages = o.skipCorrupt,
      allreduce = o.allreduce, latencyKb = o.latencyKb, hierarchical = o.hierarchical)
}
