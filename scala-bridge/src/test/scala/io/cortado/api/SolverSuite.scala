// SPDX-License-Identifier: Apache-2.0
package io.cortado.api

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.Arm.withResource
import io.cortado.jni.NativeTrainerSuite

class SolverSuite extends AnyFunSuite {

  test("Solver: trains, tests, snapshots and restores") {
    val solverText = NativeTrainerSuite.Solver
    val netText = Some(NativeTrainerSuite.RegressionNet)
    val (snapshot, loss) = withResource(Solver(solverText, "solver.prototxt", netText)) { s =>
      val first = s.step(1)
      val later = s.step(20)
      assert(later < first, s"loss $first -> $later")
      assert(s.test().map(_._1) === Seq("0/loss"))
      (s.snapshot("regression_iter_21.caffemodel"), s.step(1))
    }
    withResource(Solver(solverText, "solver.prototxt", netText)) { s =>
      s.restore(snapshot)
      assert(s.iter === 21)
      assert(s.step(1) === loss)
    }
  }

  test("Solver: weights alone for fine-tuning, the learning rate; close is idempotent") {
    val solverText = NativeTrainerSuite.Solver
    val netText = Some(NativeTrainerSuite.RegressionNet)
    val model = withResource(Solver(solverText, "solver.prototxt", netText)) { s =>
      s.step(3)
      s.snapshot("regression_iter_3.caffemodel").model
    }
    val s = Solver(solverText, "solver.prototxt", netText)
    s.loadWeights(model)
    assert(s.iter === 0)
    assert(s.snapshot("w.caffemodel").model === model)
    assert(s.learningRate === 0.05f)
    s.close()
    s.close()
  }
}
