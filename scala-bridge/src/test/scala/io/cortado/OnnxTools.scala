// SPDX-License-Identifier: Apache-2.0
package io.cortado

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path, Paths}

import scala.collection.JavaConverters._
import scala.util.Try

import com.fasterxml.jackson.databind.ObjectMapper
import org.scalatest.Assertions

/**
 * What the ONNX suites use to judge an exported model outside Cortado: ONNX's checker and
 * OpenCV's dnn module, through src/test/resources/onnx_model.py, run by a Python 3 that has
 * them (Debian's python3-onnx and python3-opencv), and the `cortado` command of the CMake build
 * (`cortado.build.dir`, which the pom passes). A suite cancels its test, saying what is missing,
 * when one is not there.
 */
trait OnnxTools extends Assertions {
  import OnnxTools._

  /** A Python 3 that imports every one of `modules`, or the test is cancelled. */
  def pythonWith(modules: String*): String =
    findPython(modules).getOrElse(cancel(s"no Python 3 with ${modules.mkString(" and ")} " +
      s"(tried ${pythonCandidates.mkString(", ")}; Debian: apt install python3-onnx " +
      "python3-opencv; -Dcortado.test.python=PATH names another)"))

  /** The `cortado` command of the CMake build, or the test is cancelled. */
  def cortadoCommand: String = {
    val command = new File(buildDir, "cpp/tools/cortado")
    if (!command.canExecute) cancel(s"no $command: build the C++ side (its cortado_cli target)")
    command.getPath
  }

  /** ONNX's full check of the model at `model`, then its opset, graph name, inputs, outputs. */
  def checkOnnx(python: String, model: Path): OnnxGraph = {
    val (code, output) = run(Seq(python, script, "check", model.toString))
    assert(code === 0, s"onnx.checker refused $model:\n$output")
    val json = output.split("\n").reverseIterator.find(_.startsWith("{")).getOrElse(
      fail(s"no JSON line from the check of $model:\n$output"))
    val root = new ObjectMapper().readTree(json)
    def values(name: String): Seq[(String, Seq[String])] = root.get(name).elements().asScala
      .map(v => v.get("name").asText -> v.get("shape").elements().asScala.map(_.asText).toSeq)
      .toSeq
    OnnxGraph(root.get("opset").asInt, root.get("graph").asText, values("inputs"),
      values("outputs"))
  }

  /**
   * The class OpenCV's dnn module predicts with the ONNX model `model` for each image of the IDX
   * file `images`, graph input `input` holding the pixels times `scale`.
   */
  def opencvPredictions(python: String, model: Path, input: String, images: String,
      scale: Double, dir: Path): Seq[Int] = {
    val out = dir.resolve("opencv_predictions.txt")
    val (code, output) = run(Seq(python, script, "predict", model.toString, input, images,
      scale.toString, out.toString))
    assert(code === 0, s"OpenCV could not run $model:\n$output")
    Files.readAllLines(out, StandardCharsets.UTF_8).asScala.map(_.trim.toInt).toSeq
  }
}

/** An ONNX model's graph as onnx_model.py's check describes it: dimensions as text ("N", "1"). */
final case class OnnxGraph(opset: Int, name: String, inputs: Seq[(String, Seq[String])],
    outputs: Seq[(String, Seq[String])]) {
  def inputNames: Seq[String] = inputs.map(_._1)
  def outputNames: Seq[String] = outputs.map(_._1)
}

object OnnxTools {

  /** The CMake build directory (the pom's cortado.build.dir; else ../build from scala-bridge). */
  def buildDir: File = new File(sys.props.getOrElse("cortado.build.dir", "../build"))

  private def pythonCandidates: Seq[String] =
    (sys.props.get("cortado.test.python").toSeq ++ Seq("python3", "/usr/bin/python3")).distinct

  private def findPython(modules: Seq[String]): Option[String] =
    pythonCandidates.find { p =>
      Try(run(Seq(p, "-c", s"import ${modules.mkString(", ")}"))._1 == 0).getOrElse(false)
    }

  /** onnx_model.py, from the test classpath. */
  private lazy val script: String =
    Paths.get(getClass.getResource("/onnx_model.py").toURI).toString

  /**
   * Runs `command` with `env` added to this JVM's environment; its exit status and its output
   * (stdout and stderr together), read whole.
   */
  def run(command: Seq[String], env: Map[String, String] = Map.empty): (Int, String) = {
    val builder = new ProcessBuilder(command: _*).redirectErrorStream(true)
    env.foreach { case (k, v) => builder.environment().put(k, v) }
    val process = builder.start()
    process.getOutputStream.close()
    val output = new String(process.getInputStream.readAllBytes(), StandardCharsets.UTF_8)
    (process.waitFor(), output)
  }
}
