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
}
