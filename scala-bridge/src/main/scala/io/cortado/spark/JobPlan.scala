// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.IOException
import java.nio.charset.StandardCharsets

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.types.StructType
import org.slf4j.LoggerFactory

import io.cortado.{CortadoConfigException, CortadoIOException}
import io.cortado.data.{ImageOptions, RowConverter, TopSpec}
import io.cortado.jni.{DataLayerInfo, NativeLib, NativeNet, SolverInfo}
import io.cortado.storage.{HadoopFiles, SerializableConfiguration, Snapshots}

/**
 * The texts a task builds its training session or net from, and the phase's feed layer.
 *
 * @param feedLayer the feed layer qualified by phase ("TRAIN/data")
 * @param batchSize the feed layer's batch size
 */
private[cortado] final case class NetConf(
    solverText: String,
    solverSource: String,
    netText: String,
    netSource: String,
    feedLayer: String,
    batchSize: Int)

/** The TEST net's feed layer during training ("TEST/data") and how validation rows fill it. */
private[cortado] final case class Validation(
    feedLayer: String,
    specs: Seq[TopSpec],
    converter: RowConverter)

/**
 * What the driver found out before a job: the texts, the phase's feed layer and the columns
 * it reads, the TEST net's outputs and blobs (for test and features), the solver's settings.
 * Only `netConf`, the converters and the validation travel to the task (SolverInfo does not
 * serialise).
 */
private[cortado] final case class Plan(
    netConf: NetConf,
    specs: Seq[TopSpec],
    converter: RowConverter,
    outputs: Seq[String],
    blobNames: Seq[String],
    info: SolverInfo,
    validation: Option[Validation])

/**
 * The snapshot a training run starts from: weights alone (fine-tuning), or weights and state;
 * `iteration` is the snapshot's when known from its name (-1 otherwise).
 */
private[cortado] final case class Resume(weights: Option[Array[Byte]], state: Option[Array[Byte]],
    iteration: Int = -1)

/**
 * Where the training task stores the snapshots the session takes, and with which Hadoop
 * settings.
 *
 * @param prefix   the qualified snapshot prefix; None: the run keeps no snapshots (its
 *                 interval is 0), so the closing one of snapshot_after_train is dropped too
 * @param interval Config.snapshotInterval: the session's snapshot interval when >= 0; negative
 *                 keeps the solver's
 * @param hdf5     the solver's snapshot_format: HDF5 (Caffe's HDF5 files), else binary protos
 * @param about    what each snapshot's run file (`<prefix>_iter_N.run`) says of the run that
 *                 wrote it: the workers and the elastic scaling in effect; empty: no such file
 */
private[cortado] final case class SnapshotPlan(
    prefix: Option[String],
    interval: Int,
    hadoopConf: SerializableConfiguration,
    hdf5: Boolean = false,
    about: String = "")

/**
 * The driver's side of a job: reads and validates the solver and its net natively (a bad
 * prototxt throws CortadoConfigException naming file:line before any Spark job starts), finds
 * the phase's feed layer and checks the DataFrame's columns against its tops. Every fact about
 * the prototxt comes from [[io.cortado.jni.NativeLib]]; what stays here is path handling on
 * Hadoop file systems (the net file next to the solver, the snapshot prefix, resuming).
 */
private[cortado] object JobPlan {

  private val log = LoggerFactory.getLogger(classOf[Cortado])

  /**
   * Reads and validates solver and net, and checks `schema` against the `phase` net's feed
   * layer; with `validationSchema`, also the validation data's columns against the TEST net's
   * feed layer, and that the solver tests (test_interval and test_iter greater than 0).
   */
  def make(config: Config, phase: Int, schema: StructType, validationSchema: Option[StructType],
      hadoopConf: Configuration): Plan = {
    val solverText = solverTextOf(config, hadoopConf)
    val info = NativeLib.solverInfo(solverText, config.solverFile)
    val (netText, netSource) = netOf(config.solverFile, info, hadoopConf)
    NativeLib.validateNet(netText, netSource)
    val feed = feedLayer(netText, netSource, phase)
    val specs = topSpecs(feed, netSource)
    val images = ImageOptions(config.resizeImages, config.skipCorruptImages)
    val validation = validationSchema.map { valSchema =>
      val interval = info.testInterval
      val testIter = info.testIter.headOption.getOrElse(0)
      if (interval <= 0 || testIter <= 0) {
        throw new CortadoConfigException(
          s"${config.solverFile}: validation needs test_interval and test_iter greater than 0 " +
            s"(test_interval is $interval, test_iter $testIter)")
      }
      val testFeed = feedLayer(netText, netSource, NativeNet.TEST)
      val testSpecs = topSpecs(testFeed, netSource)
      Validation(s"${phaseName(NativeNet.TEST)}/${testFeed.name}", testSpecs,
        RowConverter(valSchema, testSpecs, images))
    }
    val (outputs, blobNames) =
      if (phase == NativeNet.TEST) {
        (NativeLib.outputBlobs(netText, netSource, phase).toSeq,
          NativeLib.blobNames(netText, netSource, phase).toSeq)
      } else (Seq.empty[String], Seq.empty[String])
    val conf = NetConf(solverText, config.solverFile, netText, netSource,
      s"${phaseName(phase)}/${feed.name}", feed.batchSize)
    Plan(conf, specs, RowConverter(schema, specs, images), outputs, blobNames, info, validation)
  }

  /** The solver file's text with Config.solverOverrides applied (see [[Config]]). */
  def solverTextOf(config: Config, hadoopConf: Configuration): String = {
    val text = readText(config.solverFile, hadoopConf)
    if (config.solverOverrides.trim.isEmpty) text
    else NativeLib.mergeSolver(text, config.solverFile, config.solverOverrides,
      s"the solver overrides of ${config.solverFile}")
  }

  def phaseName(phase: Int): String = if (phase == NativeNet.TRAIN) "TRAIN" else "TEST"

  /**
   * The net text and the name it goes by in messages: the solver's net file (as written when
   * it exists or is absolute, else relative to the solver's directory), or its embedded net.
   */
  def netOf(solverFile: String, info: SolverInfo, conf: Configuration): (String, String) =
    if (info.netFile.nonEmpty) {
      val resolved = resolveNet(info.netFile, solverFile, conf)
      (readText(resolved, conf), resolved)
    } else if (info.netText.nonEmpty) {
      (info.netText, solverFile)
    } else {
      throw new CortadoConfigException(s"$solverFile: the solver names no net")
    }

  /**
   * A prototxt file's text, for the native parser (the JVM side does not parse prototxt).
   * A file over [[MaxPrototxtBytes]] is refused before it is read, naming it: a net or solver
   * is kilobytes, and the driver would otherwise hold any file it is pointed at twice over.
   */
  def readText(path: String, conf: Configuration): String = {
    val length = HadoopFiles.length(path, conf)
    if (length > MaxPrototxtBytes) {
      throw new CortadoConfigException(s"$path is $length bytes, more than a prototxt may be " +
        s"(${MaxPrototxtBytes >> 20} MiB): is it the right file?")
    }
    new String(HadoopFiles.readBytes(path, conf), StandardCharsets.UTF_8)
  }

  /** The largest prototxt file [[readText]] reads. */
  val MaxPrototxtBytes: Long = 64L << 20

  private def resolveNet(path: String, solverFile: String, conf: Configuration): String = {
    val p = new Path(path)
    if (p.isAbsolute || HadoopFiles.exists(path, conf)) path
    else new Path(new Path(solverFile).getParent, p).toString
  }

  /** The one feed layer of the `phase` net (CoSData, or MemoryData with source_class). */
  def feedLayer(netText: String, netSource: String, phase: Int): DataLayerInfo = {
    val name = phaseName(phase)
    val feeds = NativeLib.dataLayers(netText, netSource, phase).toSeq.filter(_.feed)
    if (feeds.size != 1) {
      throw new CortadoConfigException(
        s"$netSource: the $name net needs exactly one CoSData (or MemoryData with " +
          s"source_class) layer to read a DataFrame, found ${feeds.size}: " +
          feeds.map(l => s"$name/${l.name}").mkString(", "))
    }
    feeds.head
  }

  /** Column and sample shape (as pushed, before the layer's transform) of each top of `feed`. */
  private def topSpecs(feed: DataLayerInfo, source: String): Seq[TopSpec] =
    feed.tops.indices.map { i =>
      if (feed.transposed(i)) {
        throw new CortadoConfigException(
          s"$source: layer '${feed.name}' top '${feed.tops(i)}': transposed tops cannot be fed " +
            "from a DataFrame yet")
      }
      // transform_param is applied by the native layer: the rows hold raw samples.
      TopSpec(feed.name, feed.tops(i), feed.columns(i), feed.sampleShapes(i).toSeq)
    }

  /**
   * Config.snapshotPrefix, else the solver's snapshot_prefix, upgraded by Caffe's rule
   * (NativeLib.snapshotPrefix: unset, the solver file's path without extension; a directory,
   * the solver file's name in it), made fully qualified so that the executor resolves it as
   * the driver does.
   */
  def snapshotPrefix(config: Config, info: SolverInfo, conf: Configuration): String = {
    val given = if (config.snapshotPrefix.nonEmpty) config.snapshotPrefix else info.snapshotPrefix
    val upgraded = NativeLib.snapshotPrefix(config.solverFile, given,
      given.nonEmpty && isDirectory(given, conf))
    val p = new Path(upgraded)
    try p.getFileSystem(conf).makeQualified(p).toString
    catch {
      case e: IOException => throw new CortadoIOException(s"snapshot prefix $upgraded: $e", e)
    }
  }

  private def isDirectory(path: String, conf: Configuration): Boolean =
    try {
      val p = new Path(path)
      p.getFileSystem(conf).getFileStatus(p).isDirectory
    } catch {
      case _: IOException | _: IllegalArgumentException => false
    }

  /**
   * What a training run starts from: Config.weights (and Config.snapshot), or with
   * Config.resumeLatest the newest complete snapshot under `prefix`.
   */
  def resumeFrom(config: Config, prefix: => String, conf: Configuration): Resume = {
    if (config.resumeLatest && (config.weights.nonEmpty || config.snapshot.nonEmpty)) {
      throw new CortadoConfigException(
        "Config.resumeLatest excludes Config.weights and Config.snapshot")
    }
    if (config.snapshot.nonEmpty && config.weights.isEmpty) {
      throw new CortadoConfigException(
        s"Config.snapshot ${config.snapshot} needs Config.weights: the snapshot's .caffemodel")
    }
    if (config.resumeLatest) {
      Snapshots.latest(prefix, conf) match {
        case Some(files) =>
          log.info(s"Resuming from ${files.state} (iteration ${files.iter})")
          val snapshot = Snapshots.read(files, conf)
          Resume(Some(snapshot.model), Some(snapshot.state), files.iter)
        case None =>
          log.info(s"No snapshot under $prefix: training from scratch")
          Resume(None, None)
      }
    } else {
      def read(path: String, state: Boolean) =
        protoBytes(HadoopFiles.readBytes(path, conf), state, path)
      // Caffe names a state <prefix>_iter_<N>.solverstate: its iteration, for the log.
      val iteration = """_iter_(\d+)\.solverstate(\.h5)?$""".r
        .findFirstMatchIn(config.snapshot).map(_.group(1).toInt).getOrElse(-1)
      Resume(
        if (config.weights.isEmpty) None else Some(read(config.weights, state = false)),
        if (config.snapshot.isEmpty) None else Some(read(config.snapshot, state = true)),
        iteration)
    }
  }

  private val Hdf5Signature = Array[Byte](0x89.toByte, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n')

  /**
   * A model's (or with `state`, a solver state's) bytes as binary proto: an HDF5 file (Caffe's
   * snapshot_format HDF5, whatever its name) is converted natively; others are as they are.
   */
  def protoBytes(bytes: Array[Byte], state: Boolean, name: String): Array[Byte] =
    if (bytes.length >= 8 && bytes.take(8).sameElements(Hdf5Signature)) {
      NativeLib.snapshotFromHdf5(bytes, state, name)
    } else bytes
}
