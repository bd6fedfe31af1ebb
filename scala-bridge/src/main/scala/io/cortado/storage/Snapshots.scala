// SPDX-License-Identifier: Apache-2.0
package io.cortado.storage

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import io.cortado.api.{Solver, SolverSnapshot}

/** A snapshot's two files: Caffe's `<prefix>_iter_<iter>.caffemodel` and `.solverstate`. */
final case class SnapshotFiles(iter: Int, model: String, state: String)

/**
 * Solver snapshots on any Hadoop path, named as Caffe names them, so that `cortado train
 * --snapshot=<prefix>_iter_N.solverstate` and Caffe resume from them too. The model is written
 * first and the state last, each atomically: a state file therefore always has its model, and
 * the newest state file marks the newest complete snapshot.
 */
object Snapshots {

  def files(prefix: String, iter: Int): SnapshotFiles =
    SnapshotFiles(iter, s"${prefix}_iter_$iter.caffemodel", s"${prefix}_iter_$iter.solverstate")

  /** Snapshots `solver` under `prefix` (a path without extension: "hdfs:///models/lenet"). */
  def write(solver: Solver, prefix: String, conf: Configuration): SnapshotFiles =
    write(solver.iter, prefix, conf)(solver.snapshot)

  /**
   * Writes the snapshot `take` gives for iteration `iter` under `prefix`; `take` gets the
   * model's file name for the state to name (a solver reached through its raw handle).
   */
  def write(iter: Int, prefix: String, conf: Configuration)(
      take: String => SolverSnapshot): SnapshotFiles = {
    val f = files(prefix, iter)
    val snapshot = take(new Path(f.model).getName)
    HadoopFiles.writeBytesAtomic(f.model, snapshot.model, conf)
    HadoopFiles.writeBytesAtomic(f.state, snapshot.state, conf)
    f
  }

  def read(files: SnapshotFiles, conf: Configuration): SolverSnapshot =
    SolverSnapshot(
      HadoopFiles.readBytes(files.model, conf),
      HadoopFiles.readBytes(files.state, conf))

  /** The complete snapshot with the highest iteration under `prefix`, if any. */
  def latest(prefix: String, conf: Configuration): Option[SnapshotFiles] =
    latestBelow(prefix, conf, Set.empty)

  /** [[latest]], leaving out the iterations in `skip`. */
  def latestBelow(prefix: String, conf: Configuration, skip: Set[Int]): Option[SnapshotFiles] = {
    val p = new Path(prefix)
    val pattern = (java.util.regex.Pattern.quote(p.getName) + """_iter_(\d+)\.solverstate""").r
    val iters = HadoopFiles.listNames(p.getParent.toString, conf).collect {
      case pattern(iter) if !skip(iter.toInt) => iter.toInt
    }
    iters.sorted.reverseIterator.map(files(prefix, _)).find(f => HadoopFiles.exists(f.model, conf))
  }
}
