// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.file.{Files, Path, Paths}

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.TestDirs.withTempDir
import io.cortado.jni.{NativeLib, NativeLmdbSuite}

/** The LeNet-shaped MemoryData/LMDB net and data of [[CaffeOnSparkCommandsSuite]]. */
object CaffeOnSparkCommandsSuite {
  import CortadoSuite.write
  import NativeLmdbSuite.lmdb

  /** 8 x 8 images of 4 classes: class k is bright in quadrant k, with noise. */
  def images(n: Int, seed: Int): (Seq[Seq[Int]], Seq[Int]) = {
    val random = new Random(seed)
    val labels = (0 until n).map(_ % 4)
    val pixels = labels.map { k =>
      (0 until 64).map { p =>
        val (row, col) = (p / 8, p % 8)
        val quadrant = (row / 4) * 2 + col / 4
        val base = if (quadrant == k) 200 else 40
        math.max(0, math.min(255, base + (25 * random.nextGaussian()).round.toInt))
      }
    }
    (pixels, labels)
  }

  def memoryData(phase: String, batch: Int, source: String): String =
    s"""layer { name: "data" type: "MemoryData" top: "data" top: "label"
      |  include { phase: $phase }
      |  source_class: "com.yahoo.ml.caffe.LMDB"
      |  memory_data_param { source: "$source" batch_size: $batch channels: 1 height: 8
      |    width: 8 share_in_parallel: false }
      |  transform_param { scale: 0.00390625 } }
      |""".stripMargin

  /** LeNet's layers (smaller), named as in CaffeOnSpark's lenet_memory_train_test.prototxt. */
  val LeNetBody: String =
    """layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
      |  param { lr_mult: 1 } param { lr_mult: 2 }
      |  convolution_param { num_output: 4 kernel_size: 3 stride: 1
      |    weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
      |layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
      |  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
      |layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
      |  param { lr_mult: 1 } param { lr_mult: 2 }
      |  inner_product_param { num_output: 16
      |    weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
      |layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
      |layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
      |  param { lr_mult: 1 } param { lr_mult: 2 }
      |  inner_product_param { num_output: 4
      |    weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
      |layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
      |  include { phase: TEST } }
      |layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
      |""".stripMargin

  /**
   * CaffeOnSpark's lenet_memory_solver.prototxt, shortened: tests every 50 iterations on 2
   * batches, snapshots every 50 iterations under the prefix "mnist_lenet".
   */
  def solverText(net: String): String =
    s"""net: "$net"
      |test_iter: 2
      |test_interval: 50
      |base_lr: 0.05
      |momentum: 0.9
      |weight_decay: 0.0005
      |lr_policy: "inv"
      |gamma: 0.0001
      |power: 0.75
      |display: 50
      |max_iter: 100
      |snapshot: 50
      |snapshot_prefix: "mnist_lenet"
      |solver_mode: CPU
      |random_seed: 1701
      |""".stripMargin

  /** Solver and net in `dir/conf`, reading LMDB databases of 400 and 100 images in `dir`. */
  def withLeNet[T](body: (Path, String) => T): T = withTempDir("cortado-cos-commands") { dir =>
    val (trainImages, trainLabels) = images(400, seed = 3)
    val (testImages, testLabels) = images(100, seed = 5)
    val train = lmdb(dir, "mnist_train_lmdb", 8, 8, trainImages, trainLabels)
    val test = lmdb(dir, "mnist_test_lmdb", 8, 8, testImages, testLabels)
    val conf = Files.createDirectories(dir.resolve("conf"))
    write(conf, "lenet_memory_train_test.prototxt", "name: \"LeNet\"\n" +
      memoryData("TRAIN", 20, s"file:$train") + memoryData("TEST", 50, s"file:$test/") +
      LeNetBody)
    val solver = write(conf, "lenet_memory_solver.prototxt",
      solverText("lenet_memory_train_test.prototxt"))
    body(dir, solver)
  }

  def uri(dir: Path, name: String): String = dir.resolve(name).toUri.toString
}

/**
 * CaffeOnSpark's documented command lines, run as its users run them, on a LeNet-shaped net
 * laid out as CaffeOnSpark's `lenet_memory_train_test.prototxt` (MemoryData layers with
 * `source_class: "com.yahoo.ml.caffe.LMDB"`, Caffe's LeNet solver with test_interval and
 * test_iter), with small generated LMDB databases. Each test asserts what CaffeOnSpark's
 * documentation shows for that command: the columns and rows of the features, `SampleID`,
 * testing during training, where snapshots go.
 */
class CaffeOnSparkCommandsSuite extends AnyFunSuite with PerTest {
  import CaffeOnSparkCommandsSuite._
  import CortadoSuite.write

  def cos(args: String*): CortadoOnSparkSuite.Result = CortadoOnSparkSuite.runMain(ss, args)

  test("-train -features accuracy,loss -label label (CaffeOnSpark's getting-started command)") {
    withLeNet { (dir, solver) =>
      val output = uri(dir, "lenet_features_result")
      val r = cos("-train", "-features", "accuracy,loss", "-label", "label", "-conf", solver,
        "-clusterSize", "1", "-devices", "1", "-connection", "ethernet",
        "-model", uri(dir, "mnist_lenet.model"), "-output", output)
      assert(r.code === 0, r.err)
      // The solver tests (test_interval, test_iter): training ran with validation, as
      // CaffeOnSpark's main runs trainWithValidation then (at iterations 0, 50 and 100).
      assert(r.out.contains("Tested 3 times during training; at iteration 100: "), r.out)
      val rows = ss.read.json(output)
      assert(rows.columns.toSeq === Seq("SampleID", "accuracy", "label", "loss"))
      val all = rows.collect()
      assert(all.length === 100)
      assert(all.map(_.getAs[String]("SampleID")).sorted.toSeq ===
        (0 until 100).map(i => f"$i%08d"))
      // accuracy and loss are per batch (50 rows): the batch's value repeated on its rows.
      val byBatch = all.groupBy(_.getAs[String]("SampleID").toInt / 50)
      byBatch.values.foreach { batch =>
        val accuracies = batch.map(_.getSeq[Double](batch.head.fieldIndex("accuracy")))
        assert(accuracies.forall(a => a.size == 1 && a == accuracies.head), accuracies.toSeq)
        assert(accuracies.head.head >= 0.9, s"accuracy ${accuracies.head.head}")
        val losses = batch.map(_.getSeq[Double](batch.head.fieldIndex("loss")))
        assert(losses.forall(_ == losses.head) && losses.head.size == 1)
      }
      all.foreach(r => assert(r.getSeq[Double](r.fieldIndex("label")).size === 1))
    }
  }

  test("-features accuracy,ip1,ip2 after training; a failed write leaves no output behind") {
    withLeNet { (dir, solver) =>
      val model = uri(dir, "mnist_lenet.model")
      assert(cos("-train", "-conf", solver, "-model", model).code === 0)
      val output = uri(dir, "features")
      val r = cos("-features", "accuracy,ip1,ip2", "-conf", solver, "-model", model,
        "-output", output, "-outputFormat", "parquet")
      assert(r.code === 0, r.err)
      val rows = ss.read.parquet(output)
      assert(rows.schema.simpleString === "struct<SampleID:string,accuracy:array<float>," +
        "ip1:array<float>,ip2:array<float>>")
      val first = rows.orderBy("SampleID").head()
      assert(first.getSeq[Float](2).size === 16 && first.getSeq[Float](3).size === 4)

      // A model that does not fit the net fails in the task, while Spark writes the output:
      // nothing is left at -output, so the same command can run again.
      val bad = dir.resolve("bad.caffemodel")
      Files.write(bad, Array.fill[Byte](64)(7))
      val again = uri(dir, "again")
      val failed = cos("-features", "accuracy,ip1,ip2", "-conf", solver,
        "-model", bad.toUri.toString, "-output", again)
      assert(failed.code === CortadoOnSpark.FailureExit, failed.out)
      assert(failed.err.contains(s"${bad.toUri}: not a valid binary NetParameter") ||
        failed.err.contains(bad.toUri.toString), failed.err)
      assert(!Files.exists(dir.resolve("again")), "the failed run left its output directory")
      val retried = cos("-features", "accuracy,ip1,ip2", "-conf", solver, "-model", model,
        "-output", again)
      assert(retried.code === 0, retried.err)
      assert(ss.read.json(again).count() === 100)
    }
  }

  test("snapshots go beside -model under the solver's snapshot_prefix, as CaffeOnSpark put them") {
    withLeNet { (dir, solver) =>
      val models = Files.createDirectories(dir.resolve("models"))
      val r = cos("-train", "-conf", solver, "-model", uri(models, "lenet.caffemodel"))
      assert(r.code === 0, r.err)
      // (Hadoop's local file system adds hidden .crc files.)
      val written = Files.list(models).toArray.map(p => p.asInstanceOf[Path].getFileName.toString)
        .filterNot(_.startsWith("."))
      assert(written.toSet === Set("lenet.caffemodel") ++ Seq(50, 100).flatMap { i =>
        Seq("caffemodel", "solverstate", "sha256").map(ext => s"mnist_lenet_iter_$i.$ext")
      }, written.toSeq)
      assert(!Files.exists(Paths.get("mnist_lenet_iter_50.caffemodel")))
      assert(!Files.exists(dir.resolve("conf/mnist_lenet_iter_50.caffemodel")))
    }
  }

  test("snapshot_format: HDF5 writes Caffe's HDF5 snapshots and model; -weights and -snapshot " +
      "resume from them") {
    withLeNet { (dir, _) =>
      val text = solverText("lenet_memory_train_test.prototxt") + "snapshot_format: HDF5\n"
      val h5 = write(dir.resolve("conf"), "h5_solver.prototxt", text)
      val models = Files.createDirectories(dir.resolve("h5"))
      val r = cos("-train", "-conf", h5, "-model", uri(models, "lenet.caffemodel"))
      assert(r.code === 0, r.err)
      def names() = Files.list(models).toArray.map(_.asInstanceOf[Path].getFileName.toString)
        .filterNot(_.startsWith(".")).toSet
      assert(names() === Set("lenet.caffemodel") ++ Seq(50, 100).flatMap { i =>
        Seq("caffemodel.h5", "solverstate.h5", "sha256").map(ext => s"mnist_lenet_iter_$i.$ext")
      })
      val signature = Seq(0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n').map(_.toByte)
      Seq("caffemodel.h5", "solverstate.h5").foreach { ext =>
        val bytes = Files.readAllBytes(models.resolve(s"mnist_lenet_iter_100.$ext"))
        assert(bytes.take(8).toSeq === signature, ext)
      }
      // The -model file is HDF5 too, whatever its name (the driver's log warns that Caffe
      // reads HDF5 by the .h5 suffix), and it holds the same weights as the last snapshot.
      val model = Files.readAllBytes(models.resolve("lenet.caffemodel"))
      assert(model.take(8).toSeq === signature)
      assert(NativeLib.snapshotFromHdf5(model, false, "lenet.caffemodel").toSeq ===
        NativeLib.snapshotFromHdf5(Files.readAllBytes(
          models.resolve("mnist_lenet_iter_100.caffemodel.h5")), false, "snapshot").toSeq)
      // A .h5 name with the binary snapshot_format: HDF5, as Caffe will read it by its name.
      val named = cos("-train", "-conf", write(dir.resolve("conf"), "short.prototxt",
        solverText("lenet_memory_train_test.prototxt").replace("max_iter: 100", "max_iter: 10")),
        "-model", uri(models, "named.caffemodel.h5"))
      assert(named.code === 0, named.err)
      assert(Files.readAllBytes(models.resolve("named.caffemodel.h5")).take(8).toSeq ===
        signature)
      val testedNamed = cos("-test", "-conf", h5, "-model", uri(models, "named.caffemodel.h5"))
      assert(testedNamed.code === 0 && testedNamed.out.contains("accuracy = "), testedNamed.err)
      val longer = write(dir.resolve("conf"), "h5_longer.prototxt",
        text.replace("max_iter: 100", "max_iter: 150"))
      val resumed = cos("-train", "-conf", longer, "-model", uri(models, "more.caffemodel"),
        "-weights", uri(models, "mnist_lenet_iter_100.caffemodel.h5"),
        "-snapshot", uri(models, "mnist_lenet_iter_100.solverstate.h5"))
      assert(resumed.code === 0, resumed.err)
      // Resumed at 100: the next snapshot is the closing one at 150, none at 50 again.
      assert(names().contains("mnist_lenet_iter_150.solverstate.h5"), names())
      val tested = cos("-test", "-conf", h5, "-model",
        uri(models, "mnist_lenet_iter_150.caffemodel.h5"))
      assert(tested.code === 0, tested.err)
      assert(tested.out.contains("accuracy = "), tested.out)
    }
  }

  test("every flag of CaffeOnSpark's Config is accepted; the unused ones say so in one line") {
    withLeNet { (dir, solver) =>
      val r = cos("-test", "-conf", solver, "-model", uri(dir, "missing.model"),
        "-persistent", "-lmdb_partitions", "3", "-imageRoot", "file:/images",
        "-labelFile", "file:/labels.txt", "-captionFile", "c.json", "-captionLength", "20",
        "-vocabSize", "100", "-imageCaptionDFDir", "df", "-vocabDir", "vocab",
        "-embeddingDFDir", "emb")
      // The flags parse; the run then fails on the missing model, naming it.
      assert(r.code === CortadoOnSpark.FailureExit, r.err)
      assert(r.err.contains("missing.model"), r.err)
      val notes = r.err.linesIterator.filter(_.startsWith("CortadoOnSpark: note: ")).toSeq
      Seq("imageRoot", "labelFile", "captionFile", "captionLength", "vocabSize",
        "imageCaptionDFDir", "vocabDir", "embeddingDFDir", "persistent").foreach { flag =>
        assert(notes.count(_.contains(s"-$flag ")) === 1, s"-$flag: $notes")
      }
      assert(!notes.exists(_.contains("-lmdb_partitions")), notes)
    }
  }

  test("solver_mode: GPU where the executors have no GPU: training runs on the CPU and says so") {
    withLeNet { (dir, solver) =>
      val text = solverText("lenet_memory_train_test.prototxt").replace("solver_mode: CPU",
        "solver_mode: GPU")
      val gpu = write(dir.resolve("conf"), "gpu_solver.prototxt", text)
      val info = io.cortado.jni.NativeLib.solverInfo(text, gpu)
      assert(info.gpuRequested)
      assume(info.device < 0, "this machine has a GPU: the solver would train there")
      val logged = new java.util.concurrent.ConcurrentLinkedQueue[String]()
      val cortado = new Cortado(ss)
      cortado.addProgressListener {
        case LogEvent(text) => logged.add(text)
        case _ =>
      }
      val source = DataSource.of(gpu, "TRAIN", ss.sparkContext.hadoopConfiguration).load(ss)
      // (No snapshots: the solver's relative prefix would put them in the working directory.)
      cortado.train(source, Config(gpu, model = uri(dir, "gpu.model"), snapshotInterval = 0))
      assert(Files.size(dir.resolve("gpu.model")) > 0)
      val said = logged.toArray.map(_.toString).filter(_.startsWith("solver_mode is GPU"))
      assert(said.length === 1, logged)
      assert(said.head.endsWith("has no CUDA device (or this build has no CUDA): training on " +
        "the CPU"), said.head)
    }
  }

  test("Caffe's LeNet as CaffeOnSpark ran it: its Data layers made MemoryData layers reading " +
      "an LMDB (lenet_memory) or an ImageDataFrame (lenet_dataframe)") {
    // Caffe's own files, beside the repository in CI; a user's fresh clone does not have them.
    val models = Paths.get("").toAbsolutePath.getParent.getParent.resolve("shared")
      .resolve("reference-models").resolve("lenet")
    assume(Files.isDirectory(models), s"$models is absent: Caffe's reference LeNet is not beside " +
      "this clone, so this test is skipped")
    withTempDir("cortado-cos-lenet") { dir =>
      val random = new Random(11)
      def digits(n: Int): (Seq[Seq[Int]], Seq[Int]) = {
        val labels = (0 until n).map(_ % 4)
        (labels.map { k =>
          (0 until 784).map { p =>
            val quadrant = (p / 28 / 14) * 2 + (p % 28) / 14
            math.max(0, math.min(255, (if (quadrant == k) 200 else 30) +
              (20 * random.nextGaussian()).round.toInt))
          }
        }, labels)
      }
      val (trainImages, trainLabels) = digits(192)
      val (testImages, testLabels) = digits(100)
      val train = NativeLmdbSuite.lmdb(dir, "mnist_train_lmdb", 28, 28, trainImages, trainLabels)
      val test = NativeLmdbSuite.lmdb(dir, "mnist_test_lmdb", 28, 28, testImages, testLabels)
      def parquet(name: String, images: Seq[Seq[Int]], labels: Seq[Int]): String = {
        val path = dir.resolve(name).toUri.toString
        ss.createDataFrame(images.zip(labels).zipWithIndex.map { case ((img, label), i) =>
          (f"$i%08d", label.toString, img.map(_.toByte).toArray)
        }).toDF("id", "label", "data").write.parquet(path)
        path
      }
      val trainDf = parquet("mnist_train_dataframe", trainImages, trainLabels)
      val testDf = parquet("mnist_test_dataframe", testImages, testLabels)

      // CaffeOnSpark's change to Caffe's net: each Data layer becomes a MemoryData layer with a
      // source_class, its data_param a memory_data_param of the same source and batch size.
      val dataLayer = ("""(?s)layer \{\s*name: "([^"]+)"\s*type: "Data"(.*?)""" +
        """data_param \{(.*?)\}\s*\}""").r
      def asCaffeOnSpark(sourceClass: String, sources: Map[String, String]): String =
        dataLayer.replaceAllIn(
          new String(Files.readAllBytes(models.resolve("lenet_train_test.prototxt")), "UTF-8"),
          m => {
            val phase = """phase: (TRAIN|TEST)""".r.findFirstMatchIn(m.group(2)).get.group(1)
            val batch = """batch_size: (\d+)""".r.findFirstMatchIn(m.group(3)).get.group(1)
            scala.util.matching.Regex.quoteReplacement(
              s"""layer { name: "${m.group(1)}" type: "MemoryData"
                |  source_class: "$sourceClass"${m.group(2)}memory_data_param {
                |    source: "${sources(phase)}" batch_size: $batch channels: 1 height: 28
                |    width: 28 share_in_parallel: false } }""".stripMargin)
          })
      val solverText = new String(Files.readAllBytes(models.resolve("lenet_solver.prototxt")),
        "UTF-8")
      Seq("memory" -> asCaffeOnSpark(LmdbSource.SourceClass,
          Map("TRAIN" -> s"file:$train", "TEST" -> s"file:$test/")),
        "dataframe" -> asCaffeOnSpark(ImageSource.DataFrameClass,
          Map("TRAIN" -> trainDf, "TEST" -> testDf))).foreach { case (kind, net) =>
        val conf = Files.createDirectories(dir.resolve(kind))
        write(conf, s"lenet_${kind}_train_test.prototxt", net)
        // Caffe's solver (solver_mode GPU, as CaffeOnSpark's DLDemo solver), shortened.
        val solver = write(conf, s"lenet_${kind}_solver.prototxt", solverText
          .replace("examples/mnist/lenet_train_test.prototxt", s"lenet_${kind}_train_test.prototxt")
          .replace("test_iter: 100", "test_iter: 1").replace("test_interval: 500",
            "test_interval: 20").replace("max_iter: 10000", "max_iter: 40")
          .replace("display: 100", "display: 20").replace("snapshot: 5000", "snapshot: 20")
          .replace("examples/mnist/lenet", "lenet"))
        val output = uri(dir, s"${kind}_features")
        val r = cos("-train", "-features", "accuracy,loss", "-label", "label", "-conf", solver,
          "-clusterSize", "1", "-devices", "1", "-connection", "ethernet",
          "-model", uri(dir, s"$kind/mnist_lenet.model"), "-output", output)
        assert(r.code === 0, s"$kind: ${r.err}")
        assert(r.out.contains("Tested 3 times during training; at iteration 40: "), r.out)
        val rows = ss.read.json(output)
        assert(rows.columns.toSeq === Seq("SampleID", "accuracy", "label", "loss"), kind)
        assert(rows.count() === 100, kind)
        assert(Files.exists(dir.resolve(s"$kind/lenet_iter_40.caffemodel")), kind)
      }
    }
  }
}
