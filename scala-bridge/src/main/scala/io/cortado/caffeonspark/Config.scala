// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import scala.util.Try

import org.apache.hadoop.conf.Configuration
import org.apache.spark.SparkContext
import org.slf4j.{Logger, LoggerFactory}

import io.cortado.cli.Options
import io.cortado.spark.CortadoOnSpark

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.Config`, for programs ported by changing their imports:
 * the settings of a job, read from CaffeOnSpark's command line (`new Config(sc, args)`) or set
 * one by one, with CaffeOnSpark's property names and rules. [[CaffeOnSpark]] turns it into an
 * [[io.cortado.spark.Config]] (the native API's, which new code should use).
 *
 * Differences from CaffeOnSpark:
 *  - `solverParameter` and `netParam`, which returned Caffe's Java protobuf classes, are left
 *    out: Cortado has no Java protobuf classes (prototxts are read natively). Neither are
 *    `train_data_layer_id` and `test_data_layer_id`: Cortado finds each phase's feed layer.
 *  - [[connection]] defaults to [[Config.SOCKET]] (ethernet, Cortado's tcp ring) where
 *    CaffeOnSpark defaulted to [[Config.RDMA]] without `-connection`: RDMA needs InfiniBand or
 *    RoCE hardware that most clusters lack. `-connection infiniband` selects RDMA (UCX), which
 *    every host must then have.
 *  - [[clusterSize]] is `-clusterSize`, or 0 without it: the number of executors when Spark's
 *    configuration fixes it (`spark.executor.instances`), else 1, as
 *    [[io.cortado.spark.Config]]'s 0. CaffeOnSpark read it from YARN's or dynamic allocation's
 *    settings itself.
 *  - [[lmdb_partitions]] is 0 without `-lmdb_partitions`: Spark's default parallelism
 *    (CaffeOnSpark: the cluster size).
 *  - The command line is parsed by [[io.cortado.cli.Options]]: an unknown flag or a bad value
 *    throws IllegalArgumentException naming it (CaffeOnSpark's parser ignored some), and
 *    Cortado's own flags (-comm, -connectionFallback, -maxAttempts, -minWorkers,
 *    -elasticScaling) are taken too.
 *  - A Config made without arguments has the settings of an empty command line (no label,
 *    output "output", 1 device, SOCKET), not CaffeOnSpark's bare defaults (label "label",
 *    0 devices, RDMA).
 *  - [[isRddPersistent]], [[transform_thread_per_device]] and the flags of
 *    CaffeOnSpark's conversion tools ([[imageRoot]], [[labelFile]], [[captionFile]],
 *    [[captionLength]], [[vocabSize]], [[imageCaptionDFDir]], [[vocabDir]], [[embeddingDFDir]])
 *    are kept for programs that read them; training does not use them.
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
  private var _clusterSize = 0
  private var _transformThreadPerDevice = 1
  private var _features: Array[String] = null
  private var _outputFormat = "json"
  private var _imageRoot: String = null
  private var _labelFile: String = null
  private var _lmdbPartitions = 0
  private var _captionFile = ""
  private var _captionLength = 20
  private var _vocabSize = -1
  private var _imageCaptionDFDir = ""
  private var _vocabDir = ""
  private var _embeddingDFDir = ""
  // Cortado's own flags (-comm, -connectionFallback, -maxAttempts, -minWorkers,
  // -elasticScaling), passed on by toCortado.
  private var backend = ""
  private var connectionFallback = ""
  private var maxAttempts = 3
  private var minWorkers = 0
  private var elasticScaling = "keepGlobalBatch"

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
    clusterSize = o.clusterSize
    features = if (o.features.isEmpty) null else o.features.toArray
    outputFormat = o.outputFormat
    lmdb_partitions = o.lmdbPartitions
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
    maxAttempts = o.maxAttempts
    minWorkers = o.minWorkers
    elasticScaling = o.elasticScaling
  }

  /** The solver prototxt (-conf), a Hadoop path. */
  def protoFile: String = _protoFile

  def protoFile_=(value: String): Unit = {
    if (value == null || value.isEmpty) log.warn("solver protofile isn't given")
    _protoFile = value
  }

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
   * Workers training together, one Spark task each (-clusterSize); 0: the number of executors
   * when Spark's configuration fixes it, else 1.
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

  /** Partitions an LMDB source is read in (-lmdb_partitions); 0: Spark's default parallelism. */
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
   * connection ("infiniband" for RDMA, else "ethernet") of this one, and Cortado's -comm,
   * -connectionFallback, -maxAttempts, -minWorkers and -elasticScaling when given; snapshots go beside the model, as
   * CortadoOnSpark's main class puts them (see CortadoOnSpark.snapshotsBesideModel).
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
      connectionFallback = connectionFallback, maxAttempts = maxAttempts,
      minWorkers = minWorkers, elasticScaling = elasticScaling,
      snapshotPrefix = snapshotPrefix, resizeImages = resize)
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

  /** No connection between workers (taken as SOCKET). */
  val NONE: Int = 0

  /** RDMA (InfiniBand or RoCE): -connection infiniband. */
  val RDMA: Int = 1

  /** Sockets over ethernet: -connection ethernet, and the default here. */
  val SOCKET: Int = 2
}
