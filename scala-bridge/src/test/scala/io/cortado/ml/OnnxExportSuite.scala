// SPDX-License-Identifier: Apache-2.0
package io.cortado.ml

import java.nio.file.{Files, Path}

import scala.collection.JavaConverters._
import scala.util.Random

import org.apache.spark.ml.linalg.Vectors
import org.apache.spark.ml.util.Identifiable
import org.apache.spark.sql.DataFrame
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoConfigException, CortadoException, CortadoIOException, OnnxTools}
import io.cortado.TestDirs.withTempDir
import io.cortado.jni.{NativeLib, NativeNet}
import io.cortado.spark.{Config, Cortado, PerTest}
import io.cortado.spark.CortadoSuite.write

/**
 * ONNX export from the JVM: CortadoClassificationModel.exportOnnx and Cortado.exportOnnx on the
 * three-class net of CortadoClassifierSuite, judged by ONNX's own checker (onnx_model.py
 * check); refusals name the layer and type, or the opset. The export of a trained LeNet run by
 * OpenCV is in io.cortado.spark.OnnxFashionMnistSuite.
 */
class OnnxExportSuite extends AnyFunSuite with PerTest with OnnxTools {
  import CortadoClassifierSuite.{Centers, Net, Solver}

  /** `n` rows of a 4-vector "features" around a class's center and its class, "label". */
  def vectors(n: Int, seed: Int): DataFrame = {
    val random = new Random(seed)
    val rows = (0 until n).map { i =>
      val c = i % 3
      (Vectors.dense(Centers(c).map(_ + 0.15 * random.nextGaussian()).toArray), c.toDouble)
    }
    ss.createDataFrame(rows).toDF("features", "label")
  }

  /** A model of [[Net]] trained briefly, with the folder its net and solver are in. */
  def withModel[T](body: (Path, String, CortadoClassificationModel) => T): T =
    withTempDir("cortado-onnx") { dir =>
      write(dir, "net.prototxt", Net)
      val solver = write(dir, "solver.prototxt", Solver)
      val model = new CortadoClassifier().setSolver(solver).setMaxIter(40)
        .fit(vectors(120, seed = 1))
      body(dir, solver, model)
    }

  /** Temporary files an export left in `dir`. */
  def hiddenFiles(dir: Path): Seq[String] = {
    val names = Files.list(dir)
    try names.iterator.asScala.map(_.getFileName.toString).filter(_.contains(".tmp")).toSeq
    finally names.close()
  }

  /** The export's refusal when this build has no ONNX export: the tests are cancelled. */
  def exported[T](body: => T): T =
    try body
    catch {
      case e: CortadoException if e.getMessage.contains("needs a build with ONNX") =>
        cancel(e.getMessage)
    }

  test("a trained model exports to a local path: ONNX's checker accepts it, and its inputs " +
    "and outputs are the net's blobs") {
    val python = pythonWith("onnx")
    withModel { (dir, _, model) =>
      val path = dir.resolve("three.onnx")
      exported(model.exportOnnx(path.toString))
      val graph = checkOnnx(python, path)
      assert(graph.opset === 13)
      assert(graph.name === "three")
      // The TEST feed layer's top the layers read (its label only feeds loss and accuracy,
      // which an ONNX model leaves out), and the class scores, which no exported layer reads.
      val feed = NativeLib.dataLayers(model.netText, model.netSource, NativeNet.TEST).head
      assert(feed.tops.toSeq === Seq("pixels", "target"))
      val blobs = NativeLib.blobNames(model.netText, model.netSource, NativeNet.TEST).toSeq
      assert(graph.inputs === Seq("pixels" -> Seq("N", "4")))
      assert(graph.outputNames === Seq("scores") && blobs.contains("scores"))

      // Opset 17 and the net's own batch (the TEST feed's 10), to a file: URI.
      val fixed = dir.resolve("three_fixed.onnx")
      model.exportOnnx(fixed.toUri.toString, opset = 17, dynamicBatch = false)
      val fixedGraph = checkOnnx(python, fixed)
      assert(fixedGraph.opset === 17)
      assert(fixedGraph.inputs === Seq("pixels" -> Seq("10", "4")))
      assert(fixedGraph.outputNames === Seq("scores"))

      // An existing path is refused before any work, and stays as it was.
      val before = Files.readAllBytes(path)
      val refused = intercept[CortadoIOException](model.exportOnnx(path.toString, opset = 15))
      assert(refused.getMessage.contains(s"the ONNX model $path already exists"), refused)
      assert(Files.readAllBytes(path).sameElements(before))
      assert(hiddenFiles(dir).isEmpty, hiddenFiles(dir))
    }
  }

  test("Cortado.exportOnnx reads the solver's net and Config.model, binary or HDF5, and " +
    "writes what the model's exportOnnx writes") {
    withModel { (dir, solver, model) =>
      val fromModel = dir.resolve("model.onnx")
      exported(model.exportOnnx(fromModel.toString))
      val binary = dir.resolve("three.caffemodel")
      Files.write(binary, model.weights)
      val cortado = new Cortado(ss)
      val fromConfig = dir.resolve("config.onnx")
      cortado.exportOnnx(Config(solver, model = binary.toString), fromConfig.toString)
      assert(Files.readAllBytes(fromConfig).sameElements(Files.readAllBytes(fromModel)))

      // Caffe's HDF5 model format (snapshot_format: HDF5), told apart by its signature.
      val hdf5 = dir.resolve("three.caffemodel.h5")
      val h5Bytes =
        try NativeLib.snapshotToHdf5(model.weights, false, null, hdf5.toString)
        catch { case e: CortadoException => cancel(s"no HDF5 in this build: ${e.getMessage}") }
      Files.write(hdf5, h5Bytes)
      val fromHdf5 = dir.resolve("hdf5.onnx")
      cortado.exportOnnx(Config(solver, model = s"file:$hdf5"), fromHdf5.toUri.toString)
      assert(Files.readAllBytes(fromHdf5).sameElements(Files.readAllBytes(fromModel)))
    }
  }

  test("a layer without an ONNX counterpart, or an opset out of range, fails naming it and " +
    "writes nothing") {
    withModel { (dir, solver, model) =>
      Files.write(dir.resolve("three.caffemodel"), model.weights)
      // A deploy net whose Filter layer keeps the rows its selector marks: the output's size
      // depends on the selector's values, which ONNX's static graph cannot say.
      val deploy = "name: \"filtered\"\n" +
        """layer { name: "input" type: "Input" top: "pixels" top: "keep"
          |  input_param { shape { dim: 7 dim: 4 } shape { dim: 7 dim: 1 } } }
          |layer { name: "select" type: "Filter" bottom: "pixels" bottom: "keep"
          |  top: "kept" }
          |layer { name: "scores" type: "InnerProduct" bottom: "kept" top: "scores"
          |  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
          |""".stripMargin
      val filtered = new CortadoClassificationModel(Identifiable.randomUID("cortado"), deploy,
        "filtered_deploy.prototxt", Array.emptyByteArray, Seq.empty)
      val out = dir.resolve("filtered.onnx")
      val e = exported(intercept[CortadoConfigException](filtered.exportOnnx(out.toString)))
      assert(e.getMessage.startsWith("filtered_deploy.prototxt: "), e.getMessage)
      assert(e.getMessage.contains("layer 'select' (type Filter) cannot be exported to ONNX"),
        e.getMessage)
      assert(!Files.exists(out) && hiddenFiles(dir).isEmpty, hiddenFiles(dir))

      Seq(99, 12).foreach { opset =>
        val bad = intercept[CortadoConfigException](model.exportOnnx(out.toString, opset))
        assert(bad.getMessage.contains(s"ONNX opset $opset is not supported: use 13 to 17"),
          bad.getMessage)
        val viaConfig = intercept[CortadoConfigException](new Cortado(ss).exportOnnx(
          Config(solver, model = dir.resolve("three.caffemodel").toString), out.toString, opset))
        assert(viaConfig.getMessage.contains(s"ONNX opset $opset is not supported"),
          viaConfig.getMessage)
      }
      // An empty model file is refused in the driver, naming it.
      val empty = intercept[CortadoConfigException](new Cortado(ss).exportOnnx(
        Config(solver, model = write(dir, "empty.caffemodel", "")), out.toString))
      assert(empty.getMessage.contains("empty.caffemodel is empty"), empty.getMessage)
      assert(!Files.exists(out) && hiddenFiles(dir).isEmpty, hiddenFiles(dir))

      // Weights of another net name the layer, as NativeNet.loadWeights does.
      val mismatch = intercept[CortadoException](NativeLib.exportOnnx(
        Net.replace("num_output: 3", "num_output: 5"), "five.prototxt", model.weights, 13, true))
      assert(mismatch.getMessage.startsWith("five.prototxt weights: "), mismatch.getMessage)
      assert(mismatch.getMessage.contains("scores"), mismatch.getMessage)
    }
  }
}
