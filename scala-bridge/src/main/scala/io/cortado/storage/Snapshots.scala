// SPDX-License-Identifier: Apache-2.0
package io.cortado.storage

import java.nio.charset.StandardCharsets
import java.nio.file.{FileAlreadyExistsException, Files, Paths}
import java.security.MessageDigest

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.slf4j.LoggerFactory

import io.cortado.CortadoIOException
import io.cortado.api.{Solver, SolverSnapshot}
import io.cortado.jni.NativeLib

/**
 * A snapshot's two files: Caffe's `<prefix>_iter_<iter>.caffemodel` and `.solverstate`, or with
 * `hdf5` (the solver's `snapshot_format: HDF5`) `.caffemodel.h5` and `.solverstate.h5`.
 */
final case class SnapshotFiles(iter: Int, model: String, state: String, hdf5: Boolean = false)

/**
 * Solver snapshots on any Hadoop path, named as Caffe names them, so that `cortado train
 * --snapshot=<prefix>_iter_N.solverstate` and Caffe resume from them too. Three files are
 * written, each atomically (a temporary name renamed into place): the model, then the two
 * files' SHA-256 digests in `<prefix>_iter_N.sha256` (hex, one line per file: digest, two
 * spaces, file name, as sha256sum writes them), then the state, read back like the model to
 * check it. The state's rename commits the snapshot: a writer killed before it leaves a model
 * (and digests) without a state, which [[latest]] does not count, so the newest state file
 * marks the newest complete snapshot, and every complete snapshot written here has its
 * digests, which [[read]] checks: a snapshot damaged after it was written is refused rather
 * than resumed from. An elastic run writes a fourth, `<prefix>_iter_N.run`, before the state:
 * one line naming the workers and the scaling that trained it. Writing over a snapshot of the same iteration removes its state first.
 * (Caffe's own snapshots have no digests and are read as they are.) In HDF5 format the files
 * hold Caffe's HDF5 layout (converted natively from the session's binary protos, and back when
 * read, so [[read]] always gives binary protos).
 */
object Snapshots {

  /** The digests' file of a snapshot. */
  def checksums(files: SnapshotFiles): String =
    files.state.stripSuffix(".h5").stripSuffix(".solverstate") + ".sha256"

  def files(prefix: String, iter: Int, hdf5: Boolean = false): SnapshotFiles = {
    val ext = if (hdf5) ".h5" else ""
    SnapshotFiles(iter, s"${prefix}_iter_$iter.caffemodel$ext",
      s"${prefix}_iter_$iter.solverstate$ext", hdf5)
  }

  /** Snapshots `solver` under `prefix` (a path without extension: "hdfs:///models/lenet"). */
  def write(solver: Solver, prefix: String, conf: Configuration): SnapshotFiles =
    write(solver.iter, prefix, conf)(solver.snapshot)

  /**
   * Writes the snapshot `take` gives for iteration `iter` under `prefix`; `take` gets the
   * model's file name for the state to name (a solver reached through its raw handle).
   */
  def write(iter: Int, prefix: String, conf: Configuration, hdf5: Boolean = false,
      about: String = "")(take: String => SolverSnapshot): SnapshotFiles = {
    val f = files(prefix, iter, hdf5)
    val taken = take(new Path(f.model).getName)
    val snapshot =
      if (!hdf5) taken
      else SolverSnapshot(NativeLib.snapshotToHdf5(taken.model, false, null, f.model),
        // As Caffe names it in an HDF5 state: the model file beside it.
        NativeLib.snapshotToHdf5(taken.state, true, new Path(f.model).getName, f.state))
    // A snapshot of this iteration from an earlier run is uncommitted before its files change.
    HadoopFiles.delete(f.state, conf)
    val modelDigest = writeChecked(f.model, snapshot.model, conf)
    val lines = Seq(modelDigest -> f.model, sha256(snapshot.state) -> f.state)
      .map { case (d, path) => s"$d  ${new Path(path).getName}\n" }.mkString
    HadoopFiles.writeBytesAtomic(checksums(f), lines.getBytes(StandardCharsets.UTF_8), conf)
    if (about.nonEmpty) {
      HadoopFiles.writeBytesAtomic(runFile(f), (about + "\n").getBytes(StandardCharsets.UTF_8),
        conf)
    }
    TestPause.beforeCommit(iter)
    writeChecked(f.state, snapshot.state, conf)
    f
  }

  /**
   * The run file of a snapshot: one line on the run that wrote it (the workers and the elastic
   * scaling in effect), written before the state by an elastic run.
   */
  def runFile(files: SnapshotFiles): String =
    files.state.stripSuffix(".h5").stripSuffix(".solverstate") + ".run"

  /** The line of a snapshot's run file, when it has one. */
  def about(files: SnapshotFiles, conf: Configuration): Option[String] = {
    val path = runFile(files)
    if (!HadoopFiles.exists(path, conf)) None
    else Some(new String(HadoopFiles.readBytes(path, conf), StandardCharsets.UTF_8).trim)
  }

  /**
   * Both files; when the snapshot has its digests' file, a file whose SHA-256 differs from the
   * one recorded is a CortadoIOException naming it.
   */
  def read(files: SnapshotFiles, conf: Configuration): SolverSnapshot = {
    val snapshot = SolverSnapshot(
      HadoopFiles.readBytes(files.model, conf),
      HadoopFiles.readBytes(files.state, conf))
    val sums = checksums(files)
    if (HadoopFiles.exists(sums, conf)) {
      val recorded = new String(HadoopFiles.readBytes(sums, conf), StandardCharsets.UTF_8)
        .linesIterator.map(_.split("  ", 2)).collect { case Array(d, name) => name -> d }.toMap
      Seq(files.model -> snapshot.model, files.state -> snapshot.state).foreach {
        case (path, bytes) =>
          val name = new Path(path).getName
          if (!recorded.get(name).contains(sha256(bytes))) {
            throw new CortadoIOException(s"$path does not match the SHA-256 recorded in $sums: " +
              "the snapshot was damaged after it was written")
          }
      }
    }
    if (!files.hdf5) snapshot
    else SolverSnapshot(NativeLib.snapshotFromHdf5(snapshot.model, false, files.model),
      NativeLib.snapshotFromHdf5(snapshot.state, true, files.state))
  }

  /** Writes `bytes` atomically, reads them back and checks them; returns their SHA-256 (hex). */
  private def writeChecked(path: String, bytes: Array[Byte], conf: Configuration): String = {
    HadoopFiles.writeBytesAtomic(path, bytes, conf)
    val digest = sha256(bytes)
    if (sha256(HadoopFiles.readBytes(path, conf)) != digest) {
      throw new CortadoIOException(s"$path reads back other bytes than were written")
    }
    digest
  }

  private def sha256(bytes: Array[Byte]): String =
    MessageDigest.getInstance("SHA-256").digest(bytes).map(b => f"${b & 0xff}%02x").mkString

  /** The complete snapshot with the highest iteration under `prefix`, if any. */
  def latest(prefix: String, conf: Configuration): Option[SnapshotFiles] =
    latestBelow(prefix, conf, Set.empty)

  /** [[latest]], leaving out the iterations in `skip`. */
  def latestBelow(prefix: String, conf: Configuration, skip: Set[Int]): Option[SnapshotFiles] = {
    val p = new Path(prefix)
    val pattern =
      (java.util.regex.Pattern.quote(p.getName) + """_iter_(\d+)\.solverstate(\.h5)?""").r
    val found = HadoopFiles.listNames(p.getParent.toString, conf).collect {
      case pattern(iter, h5) if !skip(iter.toInt) => (iter.toInt, h5 != null)
    }
    // Newest first; of two formats of one iteration, the binary proto.
    found.sortBy { case (iter, h5) => (-iter, h5) }.iterator
      .map { case (iter, h5) => files(prefix, iter, h5) }
      .find(f => HadoopFiles.exists(f.model, conf))
  }
}

/**
 * Test-only: holds a snapshot writer after its model and digests and before its state (the
 * commit), so that a test can kill the process in that window (SnapshotWriteLossSuite). Off
 * unless the JVM has the system property `cortado.test.snapshotPauseMarker`, a local file path:
 * then the writer of iteration `cortado.test.snapshotPauseIter` creates that file, holding its
 * process id, and sleeps `cortado.test.snapshotPauseMs` (default 60000) ms. Only the writer that
 * creates the file pauses, so a run resumed afterwards passes through.
 */
private[storage] object TestPause {

  private val log = LoggerFactory.getLogger(getClass)

  def beforeCommit(iter: Int): Unit = {
    val marker = System.getProperty("cortado.test.snapshotPauseMarker")
    if (marker != null && iter.toString == System.getProperty("cortado.test.snapshotPauseIter")) {
      val target = Paths.get(marker)
      val temp = Paths.get(marker + ".tmp")
      // Written whole before the marker appears under its name.
      val pid = ProcessHandle.current().pid().toString
      Files.write(temp, pid.getBytes(StandardCharsets.UTF_8))
      val created =
        try {
          Files.move(temp, target)
          true
        } catch {
          case _: FileAlreadyExistsException =>
            Files.delete(temp)
            false
        }
      if (created) {
        val ms = System.getProperty("cortado.test.snapshotPauseMs", "60000").toLong
        log.warn(s"Pausing $ms ms before committing the snapshot of iteration $iter (test hook)")
        Thread.sleep(ms)
      }
    }
  }
}
