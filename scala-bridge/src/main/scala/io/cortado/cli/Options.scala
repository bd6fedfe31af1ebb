// SPDX-License-Identifier: Apache-2.0
package io.cortado.cli

import scala.annotation.tailrec
import scala.util.Try

/**
 * The command line of CaffeOnSpark's main class, so that its users' `spark-submit` lines keep
 * working: single-dash flags (`-conf solver.prototxt -train -model hdfs:///m`), a double dash
 * accepted too. Defaults follow CaffeOnSpark's Config (output "output", outputFormat "json",
 * devices 1) except two: clusterSize defaults to the number of executors when Spark's
 * configuration fixes it (else 1), and without -connection the workers use the tcp backend.
 *
 * @param conf          the solver prototxt (-conf), required
 * @param train         -train: train a model
 * @param test          -test: test the model and write the metrics
 * @param features      -features b1,b2: extract these blobs (the label blob is added if given)
 * @param label         -label: the label blob to include with the features
 * @param outputFormat  -outputFormat json|parquet: for features and test results
 * @param model         -model: where the trained model goes (training) or comes from, required
 * @param output        -output: where test results and features go
 * @param weights       -weights: a .caffemodel to start from, or that of the -snapshot
 * @param snapshot      -snapshot: a .solverstate to resume from (needs -weights, as CaffeOnSpark)
 * @param devices       -devices: devices (GPUs, or CPU replicas) per worker
 * @param connection    -connection ethernet|infiniband: tcp, or ucx over RDMA (InfiniBand or
 *                      RoCE), which every host must then have
 * @param connectionFallback -connectionFallback ethernet: with -connection infiniband, hosts
 *                      without an RDMA device are accepted and ucx runs over TCP; empty: they
 *                      fail the run before training
 * @param clusterSize   -clusterSize: workers (Spark tasks, one per executor) training together;
 *                      0: the number of executors when known, else 1
 * @param comm          -comm tcp|ucx|mpi|nccl: the backend, overriding -connection
 * @param maxAttempts   -maxAttempts: training jobs before giving up (each resumes from the newest
 *                      snapshot)
 * @param minWorkers    -minWorkers: elastic training, going on with at least this many workers
 *                      after a loss and growing back (0: every worker, always)
 * @param elasticScaling -elasticScaling keepGlobalBatch|linearLr: what a run on fewer workers
 *                      changes
 * @param cpuThreads    -cpuThreads: CPU threads per worker (0: from the executor's share)
 * @param allreduce     -allreduce auto|ring|doubling|halving: how the tcp and ucx backends sum the
 *                      gradients, as `cortado train --allreduce`
 * @param latencyKb     -latencyKb: with -allreduce auto, a step's fixed cost in KB (as
 *                      `cortado train --latency_kb`)
 * @param hierarchical  -hierarchical true|false: workers sharing hosts sum within each host
 *                      first (as `cortado train --hierarchical`)
 * @param persistent    -persistent: accepted for CaffeOnSpark's command lines; no effect (the
 *                      tasks keep their data in memory)
 * @param resize        -resize: resize input images to the data layer's shape
 * @param skipCorrupt   -skipCorrupt: leave out rows whose image cannot be decoded (each named in
 *                      the executor's log) rather than fail
 * @param lmdbPartitions -lmdb_partitions: partitions an LMDB source is read in (0: Spark's
 *                      default parallelism; CaffeOnSpark's default was the cluster size)
 * @param toolFlags     CaffeOnSpark's flags of its conversion tools, given here (accepted, as
 *                      its main class accepted them, and said to be unused): name -> value
 * @param testDataFrame -testDataFrame: -test writes its results to -output as a DataFrame
 *                      (metric, value) in -outputFormat instead of CaffeOnSpark's text file
 * @param exportOnnx    -exportOnnx: where the ONNX model of -model goes (after -train when
 *                      given); not CaffeOnSpark's
 * @param warnings      what the command line had that CaffeOnSpark's parser let through and
 *                      this one leaves out, one message each: a flag given again (the first
 *                      value counts, as in CaffeOnSpark) and arguments that are not flags
 */
final case class Options(
    conf: String = "",
    train: Boolean = false,
    test: Boolean = false,
    features: Seq[String] = Seq.empty,
    label: String = "",
    outputFormat: String = "json",
    model: String = "",
    output: String = "output",
    weights: String = "",
    snapshot: String = "",
    devices: Int = 1,
    connection: String = "",
    connectionFallback: String = "",
    clusterSize: Int = 0,
    comm: String = "",
    exchangePrecision: String = "auto",
    maxAttempts: Int = 3,
    minWorkers: Int = 0,
    elasticScaling: String = "keepGlobalBatch",
    cpuThreads: Int = 0,
    allreduce: String = "auto",
    latencyKb: Int = 32,
    hierarchical: Boolean = true,
    persistent: Boolean = false,
    resize: Boolean = false,
    skipCorrupt: Boolean = false,
    lmdbPartitions: Int = 0,
    toolFlags: Seq[(String, String)] = Seq.empty,
    testDataFrame: Boolean = false,
    exportOnnx: String = "",
    warnings: Seq[String] = Seq.empty) {

  /** Features requested (CaffeOnSpark: with both -test and -features, only features run). */
  def extractFeatures: Boolean = features.nonEmpty

  /** -test without -features. */
  def runTest: Boolean = test && features.isEmpty

  /** The blobs to extract: the features, then the label if it is not among them. */
  def featureBlobs: Seq[String] =
    if (label.nonEmpty && !features.contains(label)) features :+ label else features
}

object Options {

  val Usage: String =
    """Usage: spark-submit [spark options] cortado.jar FLAGS (CaffeOnSpark's flags)
      |  -conf FILE           solver prototxt (required)
      |  -model PATH          model to write (with -train) or to read (required)
      |  -train               train the model
      |  -test                test the model; results go to -output, a text file of
      |                       "name: value" lines as CaffeOnSpark wrote
      |  -testDataFrame       with -test: write the results as a DataFrame (metric, value)
      |                       in -outputFormat instead
      |  -features B1,B2      extract these blobs to -output (replaces -test)
      |  -label BLOB          label blob to add to the extracted features
      |  -exportOnnx PATH     write -model (after -train, when given) as an ONNX model to
      |                       PATH, which must not exist (docs/onnx.md)
      |  -outputFormat F      json (default) or parquet
      |  -output PATH         where test results and features go (default: output)
      |  -weights FILE        .caffemodel to start from (the -snapshot's model when resuming)
      |  -snapshot FILE       .solverstate to resume training from (needs -weights)
      |  -devices N           devices (GPUs, or CPU replicas) per worker (default 1)
      |  -clusterSize N       workers training together, one Spark task each (default: the
      |                       number of executors when spark.executor.instances is set, else 1)
      |  -connection C        ethernet (tcp, the default) or infiniband (ucx over RDMA, which
      |                       every host must have)
      |  -connectionFallback ethernet
      |                       with -connection infiniband, run over TCP where a host has no
      |                       RDMA device instead of failing
      |  -comm B              the workers' backend: tcp, ucx (UCX: RDMA where present, no
      |                       device check), mpi (OpenMPI) or nccl (overrides -connection)
      |  -exchangePrecision P gradients travel between workers as float32, bfloat16 or float16
      |                       (half the bytes; tcp), or auto: the compute precision (default)
      |  -allreduce A         how tcp and ucx sum the gradients: ring, doubling
      |                       (recursive doubling), halving (recursive halving then
      |                       doubling) or auto (default: the one modelled fastest)
      |  -latencyKb N         with -allreduce auto, a step's fixed cost in KB of the link's
      |                       rate (default 32, for 10 Gbit/s; about 3 on 1 Gbit/s)
      |  -hierarchical B      true (default) or false: workers sharing hosts sum within each
      |                       host first, then between one worker per host (tcp)
      |  -maxAttempts N       training jobs before giving up, each after a failure resuming
      |                       from the newest snapshot (default 3)
      |  -minWorkers N        elastic training: after a lost executor, go on with at least
      |                       N workers and grow back when the slots return (default: all)
      |  -elasticScaling S    keepGlobalBatch (default: the same global batch through
      |                       iter_size or the batch) or linearLr (lr scaled by the workers)
      |  -cpuThreads N        CPU threads per worker (default: spark.executorEnv.
      |                       OMP_NUM_THREADS, else the executor's cores with one worker
      |                       on it, else spark.task.cpus)
      |  -persistent          accepted, no effect: the tasks keep their data in memory
      |  -resize              resize input images to the data layer's height and width
      |  -skipCorrupt         leave out rows whose image cannot be decoded (logged) rather
      |                       than fail
      |  -lmdb_partitions N   partitions an LMDB source is read in (default: Spark's default
      |                       parallelism)
      |  -imageRoot, -labelFile, -captionFile, -captionLength, -vocabSize, -imageCaptionDFDir,
      |  -vocabDir, -embeddingDFDir
      |                       flags of CaffeOnSpark's conversion tools (Binary2DataFrame,
      |                       Binary2Sequence, CocoDataSetConverter); accepted and unused here""".stripMargin

  /** CaffeOnSpark's flags that only its conversion tools read. */
  val ToolFlags: Seq[String] = Seq("imageRoot", "labelFile", "captionFile", "captionLength",
    "vocabSize", "imageCaptionDFDir", "vocabDir", "embeddingDFDir")

  private val valued =
    Set("conf", "features", "label", "outputFormat", "model", "output", "weights", "snapshot",
      "devices", "connection", "connectionFallback", "clusterSize", "comm", "maxAttempts",
      "exchangePrecision", "minWorkers", "elasticScaling",
      "cpuThreads", "allreduce", "latencyKb", "hierarchical", "lmdb_partitions",
      "exportOnnx") ++ ToolFlags
  private val switches =
    Set("train", "test", "persistent", "resize", "skipCorrupt", "testDataFrame")

  /** The options, or an error message (followed by Usage when shown to a user). */
  def parse(args: Seq[String]): Either[String, Options] = parseFlags(args).flatMap(check)

  /**
   * [[parse]] without its checks of the whole command line (-conf and -model given, something
   * to do, -snapshot with -weights and -train, -label with -features): each flag is known and
   * its value valid. CaffeOnSpark's Config takes any such command line
   * (io.cortado.caffeonspark.Config).
   */
  private[cortado] def parseFlags(args: Seq[String]): Either[String, Options] = {
    // seen: each flag given so far, with its value ("" for a switch).
    @tailrec
    def loop(rest: List[String], seen: Map[String, String], o: Options): Either[String, Options] =
      rest match {
        case Nil => Right(o)
        case flag :: tail =>
          val name = flag.stripPrefix("-").stripPrefix("-")
          def warn(message: String) = o.copy(warnings = o.warnings :+ message)
          if (!flag.startsWith("-") || name.isEmpty) {
            // CaffeOnSpark's parser kept such arguments aside and went on.
            loop(tail, seen, warn(s"argument '$flag' is not a flag: ignored"))
          } else if (switches(name)) {
            if (seen.contains(name)) loop(tail, seen, warn(s"-$name given twice"))
            else loop(tail, seen + (name -> ""), set(o, name, ""))
          } else if (!valued(name)) {
            Left(s"unknown flag '$flag'")
          } else {
            tail match {
              case value :: more if !value.startsWith("-") || Try(value.toDouble).isSuccess =>
                seen.get(name) match {
                  case Some(first) =>
                    // As CaffeOnSpark's parser: the first value counts.
                    val message =
                      if (first == value) s"-$name given twice"
                      else s"-$name given twice: '$first' is used, '$value' ignored"
                    loop(more, seen, warn(message))
                  case None =>
                    setValue(o, name, value) match {
                      case Left(error) => Left(error)
                      case Right(next) => loop(more, seen + (name -> value), next)
                    }
                }
              case _ => Left(s"-$name needs a value")
            }
          }
      }
    loop(args.toList, Map.empty, Options())
  }

  private def set(o: Options, name: String, value: String): Options = name match {
    case "train" => o.copy(train = true)
    case "test" => o.copy(test = true)
    case "persistent" => o.copy(persistent = true)
    case "resize" => o.copy(resize = true)
    case "skipCorrupt" => o.copy(skipCorrupt = true)
    case "testDataFrame" => o.copy(testDataFrame = true)
    case "conf" => o.copy(conf = value)
    case "label" => o.copy(label = value)
    case "model" => o.copy(model = value)
    case "output" => o.copy(output = value)
    case "weights" => o.copy(weights = value)
    case "snapshot" => o.copy(snapshot = value)
    case "exportOnnx" => o.copy(exportOnnx = value)
    case _ => o
  }

  private def setValue(o: Options, name: String, value: String): Either[String, Options] = {
    def positive(what: String): Either[String, Int] =
      Try(value.toInt).toOption
        .filter(_ > 0)
        .toRight(s"-$what must be a positive integer, not '$value'")
    name match {
      case "devices" => positive(name).map(n => o.copy(devices = n))
      case "clusterSize" => positive(name).map(n => o.copy(clusterSize = n))
      case "maxAttempts" => positive(name).map(n => o.copy(maxAttempts = n))
      case "minWorkers" => positive(name).map(n => o.copy(minWorkers = n))
      case "cpuThreads" => positive(name).map(n => o.copy(cpuThreads = n))
      case "elasticScaling" =>
        if (Set("keepGlobalBatch", "linearLr")(value)) Right(o.copy(elasticScaling = value))
        else Left(s"-elasticScaling must be keepGlobalBatch or linearLr, not '$value'")
      case "allreduce" =>
        if (Set("auto", "ring", "doubling", "halving")(value)) Right(o.copy(allreduce = value))
        else Left(s"-allreduce must be auto, ring, doubling or halving, not '$value'")
      case "latencyKb" =>
        Try(value.toInt).toOption.filter(_ > 0).map(n => o.copy(latencyKb = n))
          .toRight(s"-latencyKb must be a positive number of KB, not '$value'")
      case "hierarchical" =>
        value.toLowerCase match {
          case "true" => Right(o.copy(hierarchical = true))
          case "false" => Right(o.copy(hierarchical = false))
          case _ => Left(s"-hierarchical must be true or false, not '$value'")
        }
      case "lmdb_partitions" => positive(name).map(n => o.copy(lmdbPartitions = n))
      case tool if ToolFlags.contains(tool) => Right(o.copy(toolFlags = o.toolFlags :+ (tool -> value)))
      case "features" =>
        val blobs = value.split(",").map(_.trim).toSeq
        if (blobs.exists(_.isEmpty)) Left(s"-features has an empty blob name: '$value'")
        else Right(o.copy(features = blobs))
      case "outputFormat" =>
        if (Set("json", "parquet")(value)) Right(o.copy(outputFormat = value))
        else Left(s"-outputFormat must be json or parquet, not '$value'")
      case "connection" =>
        val c = value.toLowerCase
        if (Set("ethernet", "infiniband")(c)) Right(o.copy(connection = c))
        else Left(s"-connection must be ethernet or infiniband, not '$value'")
      case "connectionFallback" =>
        val c = value.toLowerCase
        if (Set("", "ethernet")(c)) Right(o.copy(connectionFallback = c))
        else Left(s"-connectionFallback must be ethernet (or left out), not '$value'")
      case "comm" =>
        if (Set("tcp", "ucx", "mpi", "nccl")(value)) Right(o.copy(comm = value))
        else Left(s"-comm must be tcp, ucx, mpi or nccl, not '$value'")
      case "exchangePrecision" =>
        if (Set("auto", "float32", "bfloat16", "float16")(value)) {
          Right(o.copy(exchangePrecision = value))
        } else {
          Left(s"-exchangePrecision must be auto, float32, bfloat16 or float16, not '$value'")
        }
      case _ => Right(set(o, name, value))
    }
  }

  private def check(o: Options): Either[String, Options] =
    if (o.conf.isEmpty) Left("-conf (the solver prototxt) is required")
    else if (o.model.isEmpty) Left("-model is required")
    else if (!o.train && !o.test && o.features.isEmpty && o.exportOnnx.isEmpty) {
      Left("nothing to do: give -train, -test, -features or -exportOnnx")
    } else if (o.snapshot.nonEmpty && o.weights.isEmpty) {
      Left("-snapshot needs -weights (the snapshot's model file), as in CaffeOnSpark")
    } else if (o.snapshot.nonEmpty && !o.train) {
      Left("-snapshot resumes training: it needs -train")
    } else if (o.label.nonEmpty && o.features.isEmpty) {
      Left("-label adds a blob to -features: it needs -features")
    } else {
      Right(o)
    }
}
