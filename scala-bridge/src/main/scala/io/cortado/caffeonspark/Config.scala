// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import scala.util.Try

import org.apache.hadoop.conf.Configuration
import org.apache.spark.{SparkConf, SparkContext}
import org.slf4j.{Logger, LoggerFactory}

import caffe.Caffe.{NetParameter, Phase, SolverParameter}

import io.cortado.CortadoConfigException
import io.cortado.cli.Options
import io.cortado.jni.NativeLib
import io.cortado.spark.{CortadoOnSpark, JobPlan}

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.Config`, for programs ported by changing their imports:
 * the settings of a job, read from CaffeOnSpark's command line (`new Config(sc, args)`) or set
 * one by one, with CaffeOnSpark's property names and rules. [[CaffeOnSpark]] turns it into an
 * [[io.cortado.spark.Config]] (the native API's, which new code should use).
 *
 * Differences from CaffeOnSpark:
 *  - [[solverParameter]] and [[netParam]] are Caffe's protobuf classes as CaffeOnSpark's
 *    (`caffe.Caffe.SolverParameter`, `caffe.Caffe.NetParameter`, generated from the same
 *    caffe.proto the native side reads), parsed and upgraded natively (V1 layers come back as
 *    current ones), read when first asked for rather than when [[protoFile]] is set; the net is
 *    the solver's `net` (found as training finds it: as written, else beside the solver) or its
 *    embedded `net_param`. [[train_data_layer_id]] and [[test_data_layer_id]] are computed from
 *    it as CaffeOnSpark computed them; a phase without a layer of its own is -1 (CaffeOnSpark
 *    failed with an index out of bounds). Training does not use them: Cortado finds each phase's
 *    feed layer itself.
 *  - [[connection]] defaults to [[Config.SOCKET]] (ethernet, Cortado's tcp ring) where
 *    CaffeOnSpark defaulted to [[Config.RDMA]] without `-connection`: RDMA needs InfiniBand or
 *    RoCE hardware that most clusters lack. `-connection infiniband` selects RDMA (UCX), which
 *    every host must then have.
 *  - [[clusterSize]] without `-clusterSize` is, as CaffeOnSpark's, `spark.executor.instances`
 *    when set, else `spark.dynamicAllocation.minExecutors` when dynamic allocation is on (when
 *    training, min and max must then be equal), else 1. `-clusterSize` wins over both where
 *    CaffeOnSpark, on YARN, let `spark.executor.instances` win.
 *  - [[lmdb_partitions]] without `-lmdb_partitions` is [[clusterSize]], as CaffeOnSpark's; 0
 *    (set here) means Spark's default parallelism.
 *  - The command line is parsed by [[io.cortado.cli.Options]]: an unknown flag or a bad value
 *    throws IllegalArgumentException naming it; a flag given twice (the first value counts, as
 *    in CaffeOnSpark) and an argument that is not a flag are logged as warnings; and
 *    Cortado's own flags (-comm, -connectionFallback, -exchangePrecision, -maxAttempts,
 *    -minWorkers, -elasticScaling, -cpuThreads, -allreduce, -latencyKb, -hierarchical) are
 *    taken too.
 *  - A Config made without arguments has the settings of an empty command line (no label,
 *    output "output", 1 device, SOCKET), not CaffeOnSpark's bare defaults (label "label",
 *    0 devices, RDMA).
 *  - [[isRddPersistent]], [[transform_thread_per_device]] and the flags of
 *    CaffeOnSpark's conversion tools ([[imageRoot]], [[labelFile]], [[captionFile]],
 *    [[captionLength]], [[vocabSize]], [[imageCaptionDFDir]], [[vocabDir]], [[embeddingDFDir]])
 *    are kept for programs that read them and for the conversion tools
 *    (`io.cortado.caffeonspark.tools`); training does not use them.
 *
 * Not thread-safe, as CaffeOnSpark's. Serializable; the SparkContext is not kept in the copies.
 *
 * @param sc the application's SparkContext: its Hadoop configuration reads the prototxts (null:
 *           Hadoop's defaults)
 */
class Config(sc: SparkContext) extends Serializable {
  import Config._

  @transient private val context: SparkContext = sc
  @transient private lazy val log: Logger = LoggerFactory.getLogger(classOf[Config])

  private var _protoFile = ""
  private var _isTraining = false
  private var _isTest = false
  private var _isFeature = false
  private var _label = ""
  private var _modelPath = ""
  private var _outputPath = "output"
  private var _devices = 1
  private var _isRddPersistent = false
  private var _snapshotStateFile = ""
  private var _snapshotModelFile = ""
  private var _resize = false
  private var _connection = SOCKET
  private var _clusterSize =
    Config.defaultClusterSize(Option(sc).map(_.getConf).orNull, training = false)
  private var _transformThreadPerDevice = 1
  private var _features: Array[String] = null
  private var _outputFormat = "json"
  private var _imageRoot: String = null
  private var _labelFile: String = null
  private var _lmdbPartitions = _clusterSize
  private var _captionFile = ""
  private var _captionLength = 20
  private var _vocabSize = -1
  private var _imageCaptionDFDir = ""
  private var _vocabDir = ""
  private var _embeddingDFDir = ""
  // Cortado's own flags (-comm, -connectionFallback, -exchangePrecision, -maxAttempts,
  // -minWorkers, -elasticScaling, -cpuThreads, -allreduce, -latencyKb, -hierarchical), passed
  // on by toCortado.
  private var backend = ""
  private var connectionFallback = ""
  private var exchangePrecision = "auto"
  private var maxAttempts = 3
  private var minWorkers = 0
  private var elasticScaling = "keepGlobalBatch"
  private var cpuThreads = 0
  private var allreduce = "auto"
  private var latencyKb = 32
  private var hierarchical = true

  /**
   * CaffeOnSpark's command line (`-conf solver.prototxt -train -model hdfs:///m ...`, see
   * [[io.cortado.cli.Options]]). Unlike CortadoOnSpark's main class it needs no flag in
   * particular: `-conf` and `-model` may be set later, and without `-train`, `-test` or
   * `-features` the Config serves programs that call [[CaffeOnSpark]]'s methods themselves.
   *
   * @throws IllegalArgumentException for an unknown flag or a bad value, naming it
   */
  def this(sc: SparkContext, args: Array[String]) = {
    this(sc)
    val o = Options.parseFlags(args.toSeq) match {
      case Left(message) => throw new IllegalArgumentException(message)
      case Right(parsed) => parsed
    }
    o.warnings.foreach(w => log.warn(s"command line: $w"))
    val tools = o.toolFlags.toMap
    def int(flag: String, default: Int): Int = tools.get(flag).map { value =>
      Try(value.toInt).getOrElse(
        throw new IllegalArgumentException(s"-$flag must be an integer, not '$value'"))
    }.getOrElse(default)
    // In CaffeOnSpark's order: the later of isTest and isFeature wins, label before features.
    protoFile = o.conf
    isTraining = o.train
    isTest = o.test
    isFeature = o.features.nonEmpty
    label = o.label
    modelPath = o.model
    outputPath = o.output
    devices = o.devices
    isRddPersistent = o.persistent
    snapshotModelFile = o.weights
    snapshotStateFile = o.snapshot
    resize = o.resize
    connection = if (o.connection == "infiniband") RDMA else SOCKET
    clusterSize =
      if (o.clusterSize > 0) o.clusterSize
      else defaultClusterSize(Option(sc).map(_.getConf).orNull, isTraining)
    features = if (o.features.isEmpty) null else o.features.toArray
    outputFormat = o.outputFormat
    lmdb_partitions = if (o.lmdbPartitions > 0) o.lmdbPartitions else clusterSize
    imageRoot = tools.getOrElse("imageRoot", null)
    labelFile = tools.getOrElse("labelFile", null)
    imageCaptionDFDir = tools.getOrElse("imageCaptionDFDir", "")
    vocabDir = tools.getOrElse("vocabDir", "")
    embeddingDFDir = tools.getOrElse("embeddingDFDir", "")
    captionFile = tools.getOrElse("captionFile", "")
    captionLength = int("captionLength", 20)
    vocabSize = int("vocabSize", -1)
    backend = o.comm
    connectionFallback = o.connectionFallback
    exchangePrecision = o.exchangePrecision
    maxAttempts = o.maxAttempts
    minWorkers = o.minWorkers
    elasticScaling = o.elasticScaling
    cpuThreads = o.cpuThreads
    allreduce = o.allreduce
    latencyKb = o.latencyKb
    hierarchical = o.hierarchical
  }

  /** The solver prototxt (-conf), a Hadoop path. */
  def protoFile: String = _protoFile

  def protoFile_=(value: String): Unit = {
    if (value == null || value.isEmpty) log.warn("solver protofile isn't given")
    _protoFile = value
    parsed = null
  }

  @transient private var parsed: Parsed = _

  /** The solver and its net, read once per [[protoFile]] (see [[solverParameter]]). */
  private def parsedProto: Parsed = {
    if (parsed == null) {
      val file = Option(protoFile).getOrElse("")
      if (file.isEmpty) {
        throw new CortadoConfigException(
          "Config.protoFile (-conf, the solver prototxt) is not set: the solver and net " +
            "parameters come from it")
      }
      val solverFile = CortadoOnSpark.shippedFile(file)
      val conf = hadoopConf
      val text = JobPlan.readText(solverFile, conf)
      val solver = SolverParameter.parseFrom(NativeLib.solverParameter(text, solverFile))
      val (netText, netSource) =
        JobPlan.netOf(solverFile, NativeLib.solverInfo(text, solverFile), conf)
      val net = NetParameter.parseFrom(NativeLib.netParameter(netText, netSource))
      parsed = Parsed(solver, net, dataLayerId(net, Phase.TRAIN), dataLayerId(net, Phase.TEST))
    }
    parsed
  }

  /**
   * The solver prototxt ([[protoFile]], a Hadoop path) as Caffe's SolverParameter, parsed and
   * upgraded natively. Read when first asked for (and again after [[protoFile]] changes);
   * throws CortadoConfigException when protoFile is not set or the file is not a valid solver,
   * naming the file, line and field.
   */
  def solverParameter: SolverParameter = parsedProto.solver

  /**
   * The solver's net as Caffe's NetParameter (every phase's layers, upgraded): its `net` file,
   * found as training finds it, or its embedded `net_param`. Read as [[solverParameter]].
   */
  def netParam: NetParameter = parsedProto.net

  /**
   * CaffeOnSpark's index (in [[netParam]]'s layers) of the TRAIN phase's data layer: going
   * through the layers from the first until both phases have one, the last that includes the
   * TRAIN phase; -1 when none does. Read as [[solverParameter]], so a Config without protoFile
   * throws.
   */
  def train_data_layer_id: Int = parsedProto.trainDataLayerId

  /** As [[train_data_layer_id]], for the TEST phase. */
  def test_data_layer_id: Int = parsedProto.testDataLayerId

  /** Whether the job trains a model (-train). */
  def isTraining: Boolean = _isTraining

  def isTraining_=(value: Boolean): Unit = _isTraining = value

  /** Whether the job tests the model (-test); setting it true clears [[isFeature]]. */
  def isTest: Boolean = _isTest

  def isTest_=(value: Boolean): Unit = {
    if (value && _isFeature) {
      log.warn("both test and features are set: the later, test, wins; features is cleared")
      _isFeature = false
    }
    _isTest = value
  }

  /** Whether the job extracts features (-features); setting it true clears [[isTest]]. */
  def isFeature: Boolean = _isFeature

  def isFeature_=(value: Boolean): Unit = {
    if (value && _isTest) {
      log.warn("both test and features are set: the later, features, wins; test is cleared")
      _isTest = false
    }
    _isFeature = value
  }

  /**
   * The label blob to include in the features (-label); setting it appends it to
   * [[features]] when they are set and lack it.
   */
  def label: String = _label

  def label_=(value: String): Unit = {
    if (_features != null && value != null && value.nonEmpty && !_features.contains(value)) {
      _features = _features :+ value
    }
    _label = value
  }

  /** Where the trained model goes, and what testing and features read (-model). */
  def modelPath: String = _modelPath

  def modelPath_=(value: String): Unit = {
    if (value == null || value.isEmpty) log.warn("modelPath is not specified")
    _modelPath = value
  }

  /** Where test results and features go (-output; default "output"). */
  def outputPath: String = _outputPath

  def outputPath_=(value: String): Unit = _outputPath = value

  /** Devices (GPUs, or CPU replicas) per worker (-devices; default 1). */
  def devices: Int = _devices

  def devices_=(value: Int): Unit = _devices = value

  /** -persistent: CaffeOnSpark cached the training RDD on disk; Cortado ignores it. */
  def isRddPersistent: Boolean = _isRddPersistent

  def isRddPersistent_=(value: Boolean): Unit = _isRddPersistent = value

  /** The .solverstate to resume training from (-snapshot; needs [[snapshotModelFile]]). */
  def snapshotStateFile: String = _snapshotStateFile

  def snapshotStateFile_=(value: String): Unit = _snapshotStateFile = value

  /** The .caffemodel to start training from, or that of the -snapshot (-weights). */
  def snapshotModelFile: String = _snapshotModelFile

  def snapshotModelFile_=(value: String): Unit = _snapshotModelFile = value

  /** -resize: images of another size are resized to the data layer's height and width. */
  def resize: Boolean = _resize

  def resize_=(value: Boolean): Unit = _resize = value

  /**
   * How workers exchange gradients: [[Config.SOCKET]] (the default here: ethernet, Cortado's
   * tcp ring), [[Config.RDMA]] (-connection infiniband: UCX over RDMA, which every host must
   * have) or [[Config.NONE]] (taken as SOCKET). CaffeOnSpark defaulted to RDMA.
   */
  def connection: Int = _connection

  def connection_=(value: Int): Unit = _connection = value

  /**
   * Workers training together, one Spark task each (-clusterSize; without it, as CaffeOnSpark
   * found it: spark.executor.instances, else dynamic allocation's minExecutors, else 1). 0 (set
   * here): the number of executors when Spark's configuration fixes it, else 1.
   */
  def clusterSize: Int = _clusterSize

  def clusterSize_=(value: Int): Unit = _clusterSize = value

  /** CaffeOnSpark's transformer threads per device (default 1); unused here. */
  def transform_thread_per_device: Int = _transformThreadPerDevice

  def transform_thread_per_device_=(value: Int): Unit = _transformThreadPerDevice = value

  /**
   * The blobs to extract (-features), with [[label]] appended when set and missing; null when
   * not given, as in CaffeOnSpark.
   */
  def features: Array[String] = _features

  def features_=(value: Array[String]): Unit =
    _features =
      if (value != null && _label != null && _label.nonEmpty && !value.contains(_label)) {
        value :+ _label
      } else {
        value
      }

  /** The format features and test results are written in (-outputFormat; default "json"). */
  def outputFormat: String = _outputFormat

  def outputFormat_=(value: String): Unit = _outputFormat = value

  /** -imageRoot, a flag of CaffeOnSpark's conversion tools; null when not given. */
  def imageRoot: String = _imageRoot

  def imageRoot_=(value: String): Unit = _imageRoot = value

  /** -labelFile, a flag of CaffeOnSpark's conversion tools; null when not given. */
  def labelFile: String = _labelFile

  def labelFile_=(value: String): Unit = _labelFile = value

  /**
   * Partitions an LMDB source is read in (-lmdb_partitions; without it, [[clusterSize]]); 0:
   * Spark's default parallelism.
   */
  def lmdb_partitions: Int = _lmdbPartitions

  def lmdb_partitions_=(value: Int): Unit = _lmdbPartitions = value

  /** -captionFile, a flag of CaffeOnSpark's conversion tools. */
  def captionFile: String = _captionFile

  def captionFile_=(value: String): Unit = _captionFile = value

  /** -captionLength, a flag of CaffeOnSpark's conversion tools (default 20). */
  def captionLength: Int = _captionLength

  def captionLength_=(value: Int): Unit = _captionLength = value

  /** -vocabSize, a flag of CaffeOnSpark's conversion tools (default -1). */
  def vocabSize: Int = _vocabSize

  def vocabSize_=(value: Int): Unit = _vocabSize = value

  /** -imageCaptionDFDir, a flag of CaffeOnSpark's conversion tools. */
  def imageCaptionDFDir: String = _imageCaptionDFDir

  def imageCaptionDFDir_=(value: String): Unit = _imageCaptionDFDir = value

  /** -vocabDir, a flag of CaffeOnSpark's conversion tools. */
  def vocabDir: String = _vocabDir

  def vocabDir_=(value: String): Unit = _vocabDir = value

  /** -embeddingDFDir, a flag of CaffeOnSpark's conversion tools. */
  def embeddingDFDir: String = _embeddingDFDir

  def embeddingDFDir_=(value: String): Unit = _embeddingDFDir = value

  /** The Hadoop configuration prototxts and models are read with. */
  private[cortado] def hadoopConf: Configuration =
    if (context != null) context.hadoopConfiguration else new Configuration()

  /**
   * The native API's Config: the solver, model, weights and snapshot, devices, cluster size and
   * connection ("infiniband" for RDMA, else "ethernet") of this one, and Cortado's own flags
   * when given (-comm, -connectionFallback, -exchangePrecision, -maxAttempts, -minWorkers,
   * -elasticScaling, -cpuThreads, -allreduce, -latencyKb, -hierarchical); snapshots go beside
   * the model, as CortadoOnSpark's main class puts them (see
   * CortadoOnSpark.snapshotsBesideModel).
   */
  private[cortado] def toCortado: io.cortado.spark.Config = {
    // A bare name shipped with --files, as CaffeOnSpark's jobs on YARN name it.
    val solver = CortadoOnSpark.shippedFile(Option(protoFile).getOrElse(""))
    val model = Option(modelPath).getOrElse("")
    val snapshotPrefix =
      if (solver.isEmpty || model.isEmpty) ""
      else CortadoOnSpark.snapshotsBesideModel(solver, model, hadoopConf)
    io.cortado.spark.Config(solver, model = model,
      weights = Option(snapshotModelFile).getOrElse(""),
      snapshot = Option(snapshotStateFile).getOrElse(""), devices = devices,
      clusterSize = clusterSize, backend = backend,
      connection = if (connection == RDMA) "infiniband" else "ethernet",
      connectionFallback = connectionFallback, exchangePrecision = exchangePrecision,
      maxAttempts = maxAttempts, minWorkers = minWorkers, elasticScaling = elasticScaling,
      cpuThreads = cpuThreads, allreduce = allreduce, latencyKb = latencyKb,
      hierarchical = hierarchical, snapshotPrefix = snapshotPrefix, resizeImages = resize)
  }

  /** The settings, one `name:value` per line, as CaffeOnSpark lists them. */
  override def toString: String = {
    val lines = Seq("protoFile" -> protoFile, "train" -> isTraining, "test" -> isTest) ++
      Option(features).map(f => "features" -> f.mkString(",")) ++
      Seq("label" -> label, "outputFormat" -> outputFormat, "model" -> modelPath,
        "output" -> outputPath, "devices" -> devices, "persistent" -> isRddPersistent,
        "snapshot" -> snapshotStateFile, "weights" -> snapshotModelFile,
        "clusterSize" -> clusterSize, "lmdb_partitions" -> lmdb_partitions,
        "transform_thread_per_device" -> transform_thread_per_device,
        "captionFile" -> captionFile, "captionLength" -> captionLength,
        "vocabSize" -> vocabSize, "imageCaptionDFDir" -> imageCaptionDFDir,
        "vocabDir" -> vocabDir, "embeddingDFDir" -> embeddingDFDir)
    lines.map { case (name, value) => s"$name:$value\n" }.mkString
  }
}

/** CaffeOnSpark's connection constants (com.yahoo.ml.jcaffe.CaffeNet's). */
object Config {

  private final case class Parsed(solver: SolverParameter, net: NetParameter,
      trainDataLayerId: Int, testDataLayerId: Int)

  /**
   * CaffeOnSpark's data layer index of `phase`: it went through the layers until both phases
   * had one, each layer including a phase becoming that phase's (so the TRAIN index is the last
   * TRAIN layer before the first TEST layer, and the other way round); -1 for a phase with none.
   */
  private[caffeonspark] def dataLayerId(net: NetParameter, phase: Phase): Int = {
    var train = -1
    var test = -1
    var i = 0
    while ((train < 0 || test < 0) && i < net.getLayerCount) {
      val layer = net.getLayer(i)
      for (j <- 0 until layer.getIncludeCount) {
        if (layer.getInclude(j).getPhase == Phase.TRAIN) train = i
        if (layer.getInclude(j).getPhase == Phase.TEST) test = i
      }
      i += 1
    }
    if (phase == Phase.TRAIN) train else test
  }

  /**
   * The cluster size without -clusterSize, as CaffeOnSpark's: spark.executor.instances when
   * set, else spark.dynamicAllocation.minExecutors when dynamic allocation is on (for
   * `training`, maxExecutors must equal it), else 1 (also without a configuration: null).
   */
  private[caffeonspark] def defaultClusterSize(conf: SparkConf, training: Boolean): Int = {
    if (conf == null) return 1
    def int(key: String, default: Int): Int = {
      val value = conf.get(key, default.toString)
      Try(value.trim.toInt).getOrElse(
        throw new IllegalArgumentException(s"$key must be an integer, not '$value'"))
    }
    if (conf.contains("spark.executor.instances")) {
      math.max(1, int("spark.executor.instances", 1))
    } else if (conf.getBoolean("spark.dynamicAllocation.enabled", false)) {
      val min = int("spark.dynamicAllocation.minExecutors", 1)
      val max = int("spark.dynamicAllocation.maxExecutors", min)
      if (training && min != max) {
        throw new IllegalArgumentException(
          s"training with dynamic allocation needs spark.dynamicAllocation.minExecutors ($min) " +
            s"and spark.dynamicAllocation.maxExecutors ($max) to be equal: the workers are " +
            "fixed for a training job (or give -clusterSize)")
      }
      math.max(1, min)
    } else 1
  }

  /** No connection between workers (taken as SOCKET). */
  val NONE: Int = 0

  /** RDMA (InfiniBand or RoCE): -connection infiniband. */
  val RDMA: Int = 1

  /** Sockets over ethernet: -connection ethernet, and the default here. */
  val SOCKET: Int = 2
}
