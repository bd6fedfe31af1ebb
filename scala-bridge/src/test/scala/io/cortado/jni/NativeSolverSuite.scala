// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException

object NativeSolverSuite {

  /** Constant inputs (all 1) regressed onto constant targets (all 2) through one InnerProduct. */
  val RegressionNet: String =
    """name: "regression"
      |layer { name: "data" type: "DummyData" top: "data" top: "target"
      |        dummy_data_param {
      |          shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
      |          data_filler { type: "constant" value: 1 }
      |          data_filler { type: "constant" value: 2 } } }
      |layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      |        inner_product_param { num_output: 2
      |          weight_filler { type: "gaussian" std: 0.1 } } }
      |layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "target" top: "loss" }
      |""".stripMargin

  val Solver: String =
    """base_lr: 0.05
      |lr_policy: "fixed"
      |momentum: 0.9
      |max_iter: 100
      |display: 0
      |test_iter: 1
      |test_interval: 1000
      |test_initialization: false
      |random_seed: 1701
      |type: "SGD"
      |""".stripMargin

  def withSolver[T](solver: String = Solver)(body: Long => T): T = {
    val handle = NativeSolver.create(solver, "solver.prototxt", RegressionNet,
      "regression.prototxt", -1)
    try body(handle)
    finally NativeSolver.dispose(handle)
  }
}

class NativeSolverSuite extends AnyFunSuite {
  import NativeSolverSuite._

  test("a tiny net trains and its loss falls") {
    withSolver() { solver =>
      val first = NativeSolver.step(solver, 1)
      assert(first > 0.5f, s"initial loss $first") // 0.5 * 2^2 * 2 outputs / 2 = about 4
      val later = NativeSolver.step(solver, 30)
      assert(NativeSolver.iter(solver) === 31)
      assert(later < first / 10, s"loss $first -> $later")
    }
  }

  test("test outputs are named and computed") {
    withSolver() { solver =>
      assert(NativeSolver.testOutputNames(solver).toSeq === Seq("0/loss"))
      val before = NativeSolver.testAll(solver)
      NativeSolver.step(solver, 30)
      val after = NativeSolver.testAll(solver)
      assert(before.length === 1 && after.length === 1)
      assert(after(0) < before(0) / 10, s"test loss ${before(0)} -> ${after(0)}")
    }
  }

  test("snapshot bytes restore into a new solver, which then trains as the first one does") {
    val (model, state, expected) = withSolver() { solver =>
      NativeSolver.step(solver, 5)
      val Array(model, state) = NativeSolver.snapshot(solver, "x_iter_5.caffemodel")
      (model, state, Seq.fill(3)(NativeSolver.step(solver, 1)))
    }
    assert(model.nonEmpty && state.nonEmpty)
    withSolver() { solver =>
      NativeSolver.restore(solver, model, state)
      assert(NativeSolver.iter(solver) === 5)
      assert(Seq.fill(3)(NativeSolver.step(solver, 1)) === expected)
    }
  }

  test("a bad solver prototxt names file:line") {
    val e = intercept[CortadoConfigException] {
      NativeSolver.create("base_lr: 0.1\nlr_policy: 7\n", "bad_solver.prototxt", RegressionNet,
        "regression.prototxt", -1)
    }
    assert(e.getMessage.startsWith("bad_solver.prototxt:2:"), e.getMessage)
  }

  test("state bytes of another net are rejected and the solver is unchanged") {
    val wide = RegressionNet.replace("dim: 4 dim: 3", "dim: 4 dim: 5")
    val handle = NativeSolver.create(Solver, "solver.prototxt", wide, "wide.prototxt", -1)
    val Array(model, state) =
      try NativeSolver.snapshot(handle, "wide.caffemodel")
      finally NativeSolver.dispose(handle)
    withSolver() { solver =>
      NativeSolver.step(solver, 2)
      val e = intercept[CortadoConfigException](NativeSolver.restore(solver, model, state))
      assert(e.getMessage.contains("ip"), e.getMessage)
      assert(NativeSolver.iter(solver) === 2)
    }
  }
}
