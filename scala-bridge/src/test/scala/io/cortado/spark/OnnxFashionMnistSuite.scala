// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path, Paths}

import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.OnnxTools
import io.cortado.TestDirs.withTempDir
import io.cortado.data.{Idx, IdxToParquet}
import io.cortado.ml.CortadoClassificationModel

/**
 * The demo's LeNet (examples/spark-fashion-mnist: Caffe's net with CoSData layers over Parquet
 * made from Fashion-MNIST, trained by CortadoOnSpark's -train), trained briefly in local[2] and
 * exported with -exportOnnx, is run by OpenCV's dnn module on the 10,000 test images: every
 * image gets the class Cortado gives it, both through the Spark model's transform and through
 * `cortado test` (an ArgMax over the same layers, reading the images from an LMDB made by
 * `cortado convert_idx`). The images are Debian's dataset-fashion-mnist.
 */
class OnnxFashionMnistSuite extends AnyFunSuite with PerTest with OnnxTools {
  import CortadoOnSparkSuite.runMain
  import CortadoSuite.write

  val DataDir: Path = Paths.get("/usr/share/datasets/fashion-mnist")
  /** The demo's folder, from scala-bridge/ (where Maven runs the suites). */
  val Demo: Path = Paths.get(System.getProperty("user.dir")).resolve(
    "../examples/spark-fashion-mnist").normalize
  /** The data layers' transform_param scale: what the ONNX graph's input holds is pixels x it. */
  val Scale = 0.00390625
  val Iterations = 300
  val TrainImages = 12800
  val TestImages = 10000

  def read(path: Path): String = new String(Files.readAllBytes(path), StandardCharsets.UTF_8)

  def data(name: String): String = {
    val path = DataDir.resolve(name)
    if (!Files.isRegularFile(path)) cancel(s"no $path: apt install dataset-fashion-mnist")
    path.toString
  }

  /**
   * The first `count` items of the IDX file `path` as an IDX file in `dir` (not gzipped), for
   * IdxToParquet: converting all 60,000 training images would take most of the test's time.
   */
  def idxHead(path: String, count: Int, dir: Path): String = {
    val conf = new Configuration()
    val dims = Idx.readDims(path, conf)
    val header = java.nio.ByteBuffer.allocate(4 + 4 * dims.size)
      .putInt(0x800 + dims.size).putInt(count)
    dims.tail.foreach(d => header.putInt(d))
    val out = dir.resolve(Paths.get(path).getFileName.toString.stripSuffix(".gz"))
    Files.write(out, header.array() ++ Idx.readItems(path, conf, 0, count))
    out.toString
  }

  /**
   * The classes `cortado test` gives the test images: the demo's layers (conv1 to ip2) after a
   * Data layer over `lmdb` in batches of 100, then an ArgMax, whose every element the command
   * logs as "Batch i, predicted = k".
   */
  def cortadoTestPredictions(dir: Path, lmdb: Path, weights: Path): Seq[Int] = {
    val demo = read(Demo.resolve("lenet_cos_train_test.prototxt"))
    val body = demo.substring(demo.indexOf("layer {\n  name: \"conv1\""),
      demo.indexOf("layer {\n  name: \"accuracy\""))
    val net = write(dir, "lenet_argmax_test.prototxt", "name: \"LeNet\"\n" +
      s"""layer { name: "data" type: "Data" top: "data" top: "label"
        |  include { phase: TEST }
        |  transform_param { scale: $Scale }
        |  data_param { source: "$lmdb" batch_size: 100 backend: LMDB } }
        |""".stripMargin + body +
      """layer { name: "predicted" type: "ArgMax" bottom: "ip2" top: "predicted" }
        |""".stripMargin)
    val (code, log) = OnnxTools.run(Seq(cortadoCommand, "test", s"--model=$net",
      s"--weights=$weights", s"--iterations=${TestImages / 100}"),
      Map("CORTADO_LOG_LEVEL" -> "info"))
    assert(code === 0, log.takeRight(4000))
    val line = """Batch (\d+), predicted = (\d+)""".r.unanchored
    log.split("\n").toSeq.collect { case line(_, k) => k.toInt }
  }

  test("the demo's LeNet trained on Spark and exported to ONNX: OpenCV predicts every test " +
    "image as Spark's transform and `cortado test` do") {
    val python = pythonWith("onnx", "cv2")
    val cli = cortadoCommand
    val (trainImages, trainLabels) =
      (data("train-images-idx3-ubyte.gz"), data("train-labels-idx1-ubyte.gz"))
    val (testImages, testLabels) =
      (data("t10k-images-idx3-ubyte.gz"), data("t10k-labels-idx1-ubyte.gz"))
    assert(Files.isDirectory(Demo), s"no $Demo")
    withTempDir("cortado-onnx-lenet") { dir =>
      def uri(name: String) = dir.resolve(name).toUri.toString
      // The demo's data as its run.sh makes it (from the first 12,800 training images), its
      // net reading it from here, and its solver for a short run: no test passes during
      // training, no snapshots.
      IdxToParquet.convert(ss, s"file:${idxHead(trainImages, TrainImages, dir)}",
        s"file:${idxHead(trainLabels, TrainImages, dir)}", uri("train.parquet"))
      IdxToParquet.convert(ss, s"file:$testImages", s"file:$testLabels", uri("test.parquet"))
      val net = write(dir, "lenet_cos_train_test.prototxt",
        read(Demo.resolve("lenet_cos_train_test.prototxt"))
          .replace("examples/spark-fashion-mnist/data/fashion_mnist_train.parquet",
            uri("train.parquet"))
          .replace("examples/spark-fashion-mnist/data/fashion_mnist_test.parquet",
            uri("test.parquet")))
      val solverText = read(Demo.resolve("lenet_cos_solver.prototxt"))
      val solver = write(dir, "lenet_cos_solver.prototxt", solverText
        .replace("examples/spark-fashion-mnist/lenet_cos_train_test.prototxt", net)
        .replace("max_iter: 10000", s"max_iter: $Iterations")
        .replace("test_interval: 500", "test_interval: 0")
        .replace("snapshot: 5000", "snapshot: 0"))
      assert(read(Paths.get(solver)).contains(s"max_iter: $Iterations\n"))

      // CortadoOnSpark -train -exportOnnx, as the demo's spark-submit line with one flag more.
      val model = uri("lenet.caffemodel")
      val onnx = dir.resolve("lenet.onnx")
      val trained = runMain(ss, Seq("-train", "-conf", solver, "-model", model,
        "-clusterSize", "1", "-exportOnnx", onnx.toUri.toString))
      if (trained.err.contains("needs a build with ONNX")) cancel(trained.err.trim)
      assert(trained.code === 0, trained.err)
      assert(trained.out.contains(s"ONNX model written to ${onnx.toUri}"), trained.out)
      val graph = checkOnnx(python, onnx)
      assert(graph.name === "LeNet" && graph.opset === 13)
      assert(graph.inputs === Seq("data" -> Seq("N", "1", "28", "28")))
      assert(graph.outputNames === Seq("ip2"))

      // From -model alone, the same bytes; an existing -exportOnnx path fails before any work.
      val again = dir.resolve("again.onnx")
      val exported = runMain(ss, Seq("-conf", solver, "-model", model, "-exportOnnx",
        again.toString))
      assert(exported.code === 0, exported.err)
      assert(Files.readAllBytes(again).sameElements(Files.readAllBytes(onnx)))
      val refused = runMain(ss, Seq("-train", "-conf", solver, "-model", uri("other.caffemodel"),
        "-exportOnnx", again.toString))
      assert(refused.code === CortadoOnSpark.FailureExit)
      assert(refused.err.contains(s"-exportOnnx $again already exists"), refused.err)
      assert(!Files.exists(dir.resolve("other.caffemodel")))

      // Cortado's classes through Spark: the model's transform over the test DataFrame (no
      // label column: the predictions alone). Its own export is the CLI's, byte for byte.
      val sparkModel = CortadoClassificationModel.fromCaffe(net, model).setFeaturesCol("data")
      val byId = sparkModel.transform(ss.read.parquet(uri("test.parquet")).select("id", "data"))
        .select("id", "prediction").collect()
        .map(r => r.getLong(0) -> r.getDouble(1).toInt).toMap
      assert(byId.size === TestImages)
      val viaTransform = (0 until TestImages).map(i => byId(i.toLong))
      val fromModel = dir.resolve("model.onnx")
      sparkModel.exportOnnx(fromModel.toString)
      assert(Files.readAllBytes(fromModel).sameElements(Files.readAllBytes(onnx)))

      // `cortado test` over an LMDB of the same images made by `cortado convert_idx`.
      val lmdb = dir.resolve("test_lmdb")
      val (converted, convertLog) = OnnxTools.run(Seq(cli, "convert_idx",
        s"--images=$testImages", s"--labels=$testLabels", s"--out=$lmdb"))
      assert(converted === 0, convertLog)
      val viaCli = cortadoTestPredictions(dir, lmdb, dir.resolve("lenet.caffemodel"))
      assert(viaCli.size === TestImages)

      // OpenCV's dnn module on the ONNX model, the pixels scaled as the data layer scales them.
      val opencv = opencvPredictions(python, onnx, "data", testImages, Scale, dir)
      assert(opencv.size === TestImages)

      val labels = Idx.readItems(testLabels, new Configuration(), 0, TestImages)
        .map(_ & 0xff).toSeq
      val withSpark = opencv.indices.count(i => opencv(i) == viaTransform(i))
      val withCortado = opencv.indices.count(i => opencv(i) == viaCli(i))
      val accuracy = opencv.indices.count(i => opencv(i) == labels(i)).toDouble / TestImages
      info(s"OpenCV on the ONNX model agrees with Spark's transform on $withSpark and with " +
        s"`cortado test` on $withCortado of $TestImages test images; its accuracy after " +
        s"$Iterations iterations: $accuracy")
      def differences(other: Seq[Int]) = opencv.indices.filter(i => opencv(i) != other(i))
        .take(10).map(i => s"image $i: ${opencv(i)} vs ${other(i)}")
      assert(withSpark === TestImages, differences(viaTransform))
      assert(withCortado === TestImages, differences(viaCli))
      assert(accuracy > 0.7, accuracy)
    }
  }
}
