// SPDX-License-Identifier: Apache-2.0
package io.cortado.storage

import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.Arm.withResource
import io.cortado.TestDirs.withTempDir
import io.cortado.api.Solver
import io.cortado.jni.NativeTrainerSuite

class SnapshotsSuite extends AnyFunSuite {

  private val conf = new Configuration()

  private def newSolver(): Solver =
    Solver(NativeTrainerSuite.Solver, "solver.prototxt", Some(NativeTrainerSuite.RegressionNet))

  test("snapshots are written with Caffe's names, the latest is found, and a run resumes") {
    withTempDir("cortado-snapshots") { dir =>
      val prefix = dir.toUri.toString + "regression"
      assert(Snapshots.latest(prefix, conf) === None)
      val expected = withResource(newSolver()) { solver =>
        solver.step(4)
        assert(Snapshots.write(solver, prefix, conf) === Snapshots.files(prefix, 4))
        solver.step(6)
        Snapshots.write(solver, prefix, conf)
        solver.step(3)
      }
      // A state without its model (an interrupted write elsewhere) is not complete.
      HadoopFiles.writeBytesAtomic(prefix + "_iter_20.solverstate", Array[Byte](0), conf)
      val latest = Snapshots.latest(prefix, conf)
      assert(latest === Some(Snapshots.files(prefix, 10)))
      withResource(newSolver()) { solver =>
        solver.restore(Snapshots.read(latest.get, conf))
        assert(solver.iter === 10)
        assert(solver.step(3) === expected)
      }
    }
  }

  test("each file is checked after writing; a snapshot damaged later is refused, and skipped") {
    withTempDir("cortado-snapshots") { dir =>
      val prefix = dir.toUri.toString + "regression"
      withResource(newSolver()) { solver =>
        solver.step(2)
        Snapshots.write(solver, prefix, conf)
        solver.step(2)
        Snapshots.write(solver, prefix, conf)
      }
      val newest = Snapshots.files(prefix, 4)
      val sums = new String(HadoopFiles.readBytes(Snapshots.checksums(newest), conf), "UTF-8")
      assert(sums.linesIterator.map(_.replaceAll("^[0-9a-f]{64}  ", "")).toSeq ===
        Seq("regression_iter_4.caffemodel", "regression_iter_4.solverstate"), sums)
      Snapshots.read(newest, conf)
      // Damaged after the fact: the same length, one byte changed.
      val model = HadoopFiles.readBytes(newest.model, conf)
      model(model.length / 2) = (model(model.length / 2) ^ 0x40).toByte
      HadoopFiles.writeBytesAtomic(newest.model, model, conf)
      val e = intercept[io.cortado.CortadoIOException](Snapshots.read(newest, conf))
      assert(e.getMessage === s"${newest.model} does not match the SHA-256 recorded in " +
        s"${Snapshots.checksums(newest)}: the snapshot was damaged after it was written")
      // Resuming after a failure takes the older one.
      assert(io.cortado.spark.Attempts.readLatest(prefix, conf).map(_._1.iter) === Some(2))
    }
  }

  test("a writer stopped before the state leaves a snapshot that is not counted") {
    withTempDir("cortado-snapshots") { dir =>
      val prefix = dir.toUri.toString + "regression"
      withResource(newSolver()) { solver =>
        solver.step(2)
        Snapshots.write(solver, prefix, conf)
        solver.step(2)
        Snapshots.write(solver, prefix, conf)
      }
      // What a writer killed before its last rename leaves: the model and the digests.
      val stopped = Snapshots.files(prefix, 4)
      new java.io.File(new java.net.URI(stopped.state)).delete()
      assert(HadoopFiles.exists(stopped.model, conf))
      assert(HadoopFiles.exists(Snapshots.checksums(stopped), conf))
      assert(Snapshots.latest(prefix, conf) === Some(Snapshots.files(prefix, 2)))
      assert(io.cortado.spark.Attempts.readLatest(prefix, conf).map(_._1.iter) === Some(2))
      // Resumed from 2, the run writes 4 again, whole.
      withResource(newSolver()) { solver =>
        solver.restore(Snapshots.read(Snapshots.files(prefix, 2), conf))
        solver.step(2)
        Snapshots.write(solver, prefix, conf)
      }
      assert(Snapshots.latest(prefix, conf) === Some(stopped))
      Snapshots.read(stopped, conf)
    }
  }
}
