// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import org.scalatest.funsuite.AnyFunSuite

class PrototxtSuite extends AnyFunSuite {

  test("fields, nested messages, strings, lists and comments") {
    val p = Prototxt.parse(
      """net: "a b.prototxt"  # the net
        |max_iter: 100 display: 10;
        |net_param { name: 'n' layer { name: "x" top: "t1" top: "t2" } layer < name: "y" > }
        |mean_value: [1, 2.5]
        |""".stripMargin)
    assert(p.get("net") === Some("a b.prototxt"))
    assert(p.int("max_iter", 0) === 100)
    assert(p.int("display", 0) === 10)
    assert(p.int("snapshot", 7) === 7)
    assert(p.all("mean_value") === Seq("1", "2.5"))
    val net = p.message("net_param").get
    assert(net.get("name") === Some("n"))
    assert(net.messages("layer").map(_.get("name").get) === Seq("x", "y"))
    assert(net.messages("layer").head.all("top") === Seq("t1", "t2"))
    // A message's text is valid prototxt of its own type.
    assert(Prototxt.parse(net.text).messages("layer").size === 2)
  }

  test("a training solver never runs its test nets nor logs its display lines") {
    val text = Cortado.trainingSolverText(
      "test_interval: 5 # every 5\ntest_initialization: true\ndisplay: 100\nmax_iter: 7\n")
    val p = Prototxt.parse(text)
    assert(p.all("test_interval") === Seq(Int.MaxValue.toString))
    assert(p.all("test_initialization") === Seq("false"))
    assert(p.all("display") === Seq("0"))
    assert(p.all("max_iter") === Seq("7"))
  }
}
