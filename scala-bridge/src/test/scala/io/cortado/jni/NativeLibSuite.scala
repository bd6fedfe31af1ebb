// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException

class NativeLibSuite extends AnyFunSuite {

  private val goodNet =
    """name: "tiny"
      |layer { name: "data" type: "Input" top: "data"
      |        input_param { shape { dim: 2 dim: 3 } } }
      |layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      |        inner_product_param { num_output: 2 } }
      |""".stripMargin

  test("a good net validates") {
    NativeLib.validateNet(goodNet, "tiny.prototxt")
  }

  test("a prototxt that does not parse names file:line") {
    val bad =
      """name: "tiny"
        |layer { name: "data" type: "Input" top: "data" }
        |layer { name: "ip" typo: "InnerProduct" }
        |""".stripMargin
    val e = intercept[CortadoConfigException] {
      NativeLib.validateNet(bad, "bad_net.prototxt")
    }
    assert(e.getMessage.startsWith("bad_net.prototxt:3:"), e.getMessage)
    assert(e.getMessage.contains("typo"), e.getMessage)
  }

  test("an unknown layer type names the layer and lists the known types") {
    val bad = goodNet.replace("\"InnerProduct\"", "\"Frobnicate\"")
    val e = intercept[CortadoConfigException] {
      NativeLib.validateNet(bad, "unknown.prototxt")
    }
    assert(e.getMessage.contains("unknown.prototxt: layer 'ip'"), e.getMessage)
    assert(e.getMessage.contains("Frobnicate"), e.getMessage)
    assert(e.getMessage.contains("InnerProduct"), e.getMessage)
  }

  test("a bad solver prototxt names file:line") {
    NativeLib.validateSolver("base_lr: 0.01\nmax_iter: 10\n", "solver.prototxt")
    val e = intercept[CortadoConfigException] {
      NativeLib.validateSolver("base_lr: 0.01\nmax_iter: ten\n", "solver.prototxt")
    }
    assert(e.getMessage.startsWith("solver.prototxt:2:"), e.getMessage)
  }

  test("null arguments are Java exceptions, not crashes") {
    val e = intercept[CortadoConfigException] {
      NativeLib.validateNet(null, "x.prototxt")
    }
    assert(e.getMessage.contains("prototxt is null"), e.getMessage)
  }

  test("mergeSolver: fields replace the solver's, lists whole, a net however given") {
    val solver = "base_lr: 0.1\nmomentum: 0.9\nstepvalue: 10\nstepvalue: 20\n" +
      "net_param { name: \"embedded\" layer { name: \"d\" type: \"Input\" top: \"d\" " +
      "input_param { shape { dim: 1 } } } }\n"
    val merged = NativeLib.mergeSolver(solver, "s.prototxt",
      "base_lr: 0.2 stepvalue: 5 net: \"other.prototxt\"", "overrides")
    val info = NativeLib.solverInfo(merged, "merged")
    assert(info.netFile === "other.prototxt" && info.netText.isEmpty)
    assert("""base_lr: 0\.2\b""".r.findFirstIn(merged).isDefined, merged)
    assert("""stepvalue: \d+""".r.findAllIn(merged).toList === List("stepvalue: 5"), merged)
    assert(merged.contains("momentum: 0.9"), merged)
    assert(!merged.contains("embedded"), merged)
    val error = intercept[CortadoConfigException](
      NativeLib.mergeSolver(solver, "s.prototxt", "base_lr: 0.2\nbogus: 1", "overrides"))
    assert(error.getMessage.contains("overrides:2"), error.getMessage)
  }

  test("layers lists each layer's name, type, bottoms and tops") {
    val net = "layer { name: \"d\" type: \"Input\" top: \"x\" input_param { shape { dim: 2 " +
      "dim: 3 } } }\nlayer { name: \"ip\" type: \"InnerProduct\" bottom: \"x\" top: \"y\" " +
      "inner_product_param { num_output: 4 } }\n" +
      "layer { name: \"t\" type: \"Silence\" bottom: \"y\" include { phase: TRAIN } }\n"
    assert(NativeLib.layers(net, "n", NativeNet.TEST).toSeq ===
      Seq("d\tInput\t0\t1\tx", "ip\tInnerProduct\t1\tx\t1\ty"))
    assert(NativeLib.layers(net, "n", NativeNet.TRAIN).last === "t\tSilence\t1\ty\t0")
  }
}
