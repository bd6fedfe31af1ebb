// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}
import java.util.concurrent.{CountDownLatch, TimeUnit}

import scala.collection.JavaConverters._
import scala.collection.mutable.ArrayBuffer
import scala.util.Random

import org.apache.spark.SparkException
import org.apache.spark.scheduler.{SparkListener, SparkListenerJobStart}
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir

object CortadoSuite {

  /** A CoSData layer for `phase` reading column "features" (4 floats) and "label" (an int). */
  def feedLayer(phase: String, batch: Int): String =
    s"""layer { name: "data" type: "CoSData" top: "data" top: "label"
      |  include { phase: $phase }
      |  source_class: "com.yahoo.ml.caffe.DataFrameSource"
      |  cos_data_param { batch_size: $batch
      |    top { name: "features" type: FLOAT_ARRAY channels: 4 sample_num_axes: 1 }
      |    top { name: "label" type: INT channels: 1 sample_num_axes: 0 } } }
      |""".stripMargin

  /**
   * CoSData (TRAIN batch `batch`, TEST batch 10) -> InnerProduct (gaussian weights of `std`) ->
   * SoftmaxWithLoss, and Accuracy in TEST.
   */
  def tinyNet(batch: Int, std: Double): String =
    "name: \"tiny\"\n" + feedLayer("TRAIN", batch) + feedLayer("TEST", 10) +
      s"""layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        |  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: $std } } }
        |layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
        |layer { name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy"
        |  include { phase: TEST } }
        |""".stripMargin

  val TinyNet: String = tinyNet(8, 0.01)

  /** The net by a relative path (resolved against the solver's directory), with a test net. */
  val TinySolver: String =
    """net: "net.prototxt"
      |test_iter: 1
      |test_interval: 20
      |base_lr: 0.1
      |momentum: 0.9
      |lr_policy: "fixed"
      |max_iter: 100
      |display: 25
      |random_seed: 1701
      |type: "SGD"
      |""".stripMargin

  /** Two separable classes: label 1 near (1, 1, 0, 0), label 0 near (0, 0, 1, 1). */
  def separable(spark: SparkSession, n: Int, seed: Int): DataFrame = {
    val random = new Random(seed)
    val rows = (0 until n).map { i =>
      val label = i % 2
      val center = if (label == 1) Seq(1f, 1f, 0f, 0f) else Seq(0f, 0f, 1f, 1f)
      (i.toLong, center.map(_ + 0.2f * random.nextGaussian().toFloat), label)
    }
    spark.createDataFrame(rows).toDF("id", "features", "label")
  }

  /**
   * The weights a net starts with (its fillers), as a .caffemodel in `dir`: a model for
   * features() and test() where the weights do not matter.
   */
  def untrainedModel(dir: Path, netText: String): String = {
    val net = io.cortado.jni.NativeNet.create(netText, "net.prototxt",
      io.cortado.jni.NativeNet.TEST, -1, 1)
    val bytes =
      try io.cortado.jni.NativeNet.saveWeights(net)
      finally io.cortado.jni.NativeNet.dispose(net)
    val path = dir.resolve("untrained.caffemodel")
    Files.write(path, bytes)
    path.toString
  }

  def write(dir: Path, name: String, text: String): String = {
    val path = dir.resolve(name)
    Files.write(path, text.getBytes(StandardCharsets.UTF_8))
    path.toString
  }
}

class CortadoSuite extends AnyFunSuite with PerTest {
  import CortadoSuite._

  def separable(n: Int, seed: Int = 7): DataFrame = CortadoSuite.separable(ss, n, seed)

  def withFiles[T](body: (Path, Config) => T): T = withTempDir("cortado-api") { dir =>
    write(dir, "net.prototxt", TinyNet)
    val solver = write(dir, "solver.prototxt", TinySolver)
    body(dir, Config(solver, model = dir.resolve("out/tiny.caffemodel").toUri.toString))
  }

  test("train writes a model that test() scores as accurate") {
    withFiles { (dir, config) =>
      val cortado = new Cortado(ss)
      assert(cortado.train(separable(200), config) === config.model)
      assert(Files.size(dir.resolve("out/tiny.caffemodel")) > 0)
      // No temporary file is left: it was renamed (Hadoop's local file system adds a .crc).
      val names = Files.list(dir.resolve("out")).iterator().asScala.map(_.getFileName.toString)
      assert(names.filterNot(_.endsWith(".crc")).toSeq === Seq("tiny.caffemodel"))
      // The solver sets no snapshot interval: no snapshot, not even snapshot_after_train's.
      assert(!Files.list(dir).iterator().asScala.exists(_.getFileName.toString.contains("_iter_")))

      val metrics = cortado.test(separable(100, seed = 11), config)
      assert(metrics.keySet === Set("accuracy", "loss"))
      assert(metrics("accuracy") >= 0.95, metrics)
      assert(metrics("loss") < 0.3, metrics)
      assert(cortado.testAsJava(separable(100, seed = 11), config).get("accuracy") ===
        metrics("accuracy"))
      val frame = cortado.testDataFrame(separable(100, seed = 11), config).collect()
      assert(frame.map(r => r.getString(0) -> r.getDouble(1)).toMap === metrics)
    }
  }

  test("features gives one row per input with the blobs' values") {
    withFiles { (_, config) =>
      val cortado = new Cortado(ss)
      cortado.train(separable(200), config)
      // 23 rows: two whole TEST batches of 10 and a padded one.
      val input = separable(23, seed = 3)
      val out = cortado.features(input, Seq("ip", "label"), config)
      assert(out.columns.toSeq === Seq("id", "ip", "label"))
      val rows = out.collect()
      assert(rows.map(_.getLong(0)).sorted.toSeq === (0L until 23L))
      val labels = input.collect().map(r => r.getLong(0) -> r.getInt(2)).toMap
      rows.foreach { r =>
        val ip = r.getSeq[Float](1)
        assert(ip.length === 2)
        assert(r.getSeq[Float](2) === Seq(labels(r.getLong(0)).toFloat))
        // The trained net separates the classes: the larger score is the label's.
        assert((if (ip(1) > ip(0)) 1 else 0) === labels(r.getLong(0)))
      }
      // The Java overload, and the row number as id when the DataFrame has no id column.
      val numbered = cortado.features(input.drop("id"), java.util.Arrays.asList("ip"), config)
      assert(numbered.collect().map(_.getLong(0)).toSeq === (0L until 23L))
    }
  }

  test("Cortado is serializable; a copy keeps neither the SparkSession nor the listeners") {
    // What a closure of a spark-shell or notebook line carries when an earlier line it reaches
    // holds `val cortado = new Cortado(spark)` (tests/spark/repl.sh runs such a session).
    val cortado = new Cortado(ss)
    cortado.addProgressListener(e => println(e))
    val bytes = new java.io.ByteArrayOutputStream
    val out = new java.io.ObjectOutputStream(bytes)
    out.writeObject(cortado)
    out.close()
    val copy = new java.io.ObjectInputStream(new java.io.ByteArrayInputStream(bytes.toByteArray))
      .readObject().asInstanceOf[Cortado]
    assert(copy.spark === null)
    assert(cortado.spark eq ss)
  }

  test("a column of the wrong type fails in the driver naming the column and the shape") {
    withFiles { (_, config) =>
      val df = ss.createDataFrame(Seq((1L, "a b c d", 0))).toDF("id", "features", "label")
      val e = intercept[CortadoConfigException](new Cortado(ss).train(df, config))
      assert(e.getMessage.contains("column 'features' (string): top 'data' of layer 'data' " +
        "needs samples of shape 4 (4 floats)"), e.getMessage)
      val scalar = ss.createDataFrame(Seq((1L, 0.5f, 0))).toDF("id", "features", "label")
      val s = intercept[CortadoConfigException](new Cortado(ss).train(scalar, config))
      assert(s.getMessage.contains("column 'features' (float)"), s.getMessage)
      val missing = intercept[CortadoConfigException] {
        new Cortado(ss).train(separable(10).drop("label"), config)
      }
      assert(missing.getMessage.contains("column 'label', which the DataFrame lacks"))
    }
  }

  test("an array of the wrong size fails before training, naming the column and the shape") {
    withFiles { (_, config) =>
      val df = ss.createDataFrame(Seq((1L, Seq(1f, 2f, 3f, 4f, 5f), 0))).toDF("id", "features",
        "label")
      val e = intercept[SparkException](new Cortado(ss).train(df, config))
      assert(e.getMessage.contains("column 'features' (array<float>): top 'data' of layer " +
        "'data' needs samples of shape 4 (4 floats); row 0 has 5 values"), e.getMessage)
    }
  }

  test("a model path that cannot be written fails before training, naming it") {
    withFiles { (dir, config) =>
      val blocker = write(dir, "a-file", "not a directory")
      val jobs = ArrayBuffer.empty[Int]
      ss.sparkContext.addSparkListener(new SparkListener {
        override def onJobStart(job: SparkListenerJobStart): Unit = jobs.synchronized {
          jobs += job.jobId
        }
      })
      val df = separable(20)
      val under = new java.io.File(blocker, "m.caffemodel").toURI.toString
      val e = intercept[io.cortado.CortadoIOException] {
        new Cortado(ss).train(df, config.copy(model = under))
      }
      assert(e.getMessage.startsWith(s"cannot write $under"), e.getMessage)
      val directory = intercept[io.cortado.CortadoIOException] {
        new Cortado(ss).train(df, config.copy(model = dir.toUri.toString))
      }
      assert(directory.getMessage.endsWith("is a directory, not a file that can be written"),
        directory.getMessage)
      assert(jobs.synchronized(jobs.isEmpty), jobs)
    }
  }

  test("an empty model file is refused in the driver for test and features") {
    withFiles { (dir, config) =>
      val empty = config.copy(model = write(dir, "empty.caffemodel", ""))
      val e = intercept[CortadoConfigException](new Cortado(ss).test(separable(10), empty))
      assert(e.getMessage === s"${empty.model} is empty (0 bytes), not a .caffemodel")
      val f = intercept[CortadoConfigException] {
        new Cortado(ss).features(separable(10), Seq("ip"), empty)
      }
      assert(f.getMessage === e.getMessage)
    }
  }

  test("a bad solver prototxt fails in the driver with file:line before any job starts") {
    withFiles { (dir, config) =>
      val jobs = ArrayBuffer.empty[Int]
      val marker = new CountDownLatch(1)
      ss.sparkContext.addSparkListener(new SparkListener {
        override def onJobStart(job: SparkListenerJobStart): Unit = jobs.synchronized {
          jobs += job.jobId
          if (job.properties != null && job.properties.getProperty("marker") != null) {
            marker.countDown()
          }
        }
      })
      val bad = write(dir, "bad_solver.prototxt", "net: \"net.prototxt\"\nbase_lr: 0.1\nbogus: 3\n")
      val df = separable(20)
      val e = intercept[CortadoConfigException] {
        new Cortado(ss).train(df, config.copy(solverFile = bad))
      }
      assert(e.getMessage.startsWith(s"$bad:3:"), e.getMessage)
      // Listener events arrive in order: once the marker job is seen, any earlier job would be.
      ss.sparkContext.setLocalProperty("marker", "yes")
      ss.sparkContext.parallelize(Seq(1)).count()
      assert(marker.await(30, TimeUnit.SECONDS))
      assert(jobs.synchronized(jobs.toSeq) === Seq(0))
    }
  }

  test("binary columns are uint8 pixels scaled by the top's transform_param") {
    withTempDir("cortado-api") { dir =>
      val net =
        """layer { name: "data" type: "CoSData" top: "pixels"
          |  source_class: "com.yahoo.ml.caffe.DataFrameSource"
          |  cos_data_param { batch_size: 2
          |    top { name: "image" type: RAW_IMAGE channels: 1 height: 2 width: 2
          |          transform_param { scale: 0.5 mean_value: 2 } } } }
          |layer { name: "ip" type: "InnerProduct" bottom: "pixels" top: "ip"
          |  inner_product_param { num_output: 1 } }
          |""".stripMargin
      write(dir, "net.prototxt", net)
      val solver = write(dir, "solver.prototxt", "net: \"net.prototxt\"\nbase_lr: 0.1\n")
      val model = untrainedModel(dir, net)
      val images =
        Seq(Array[Byte](0, 2, 4, -1), Array[Byte](10, 20, 30, 40), Array[Byte](6, 6, 6, 6))
      val df = ss.createDataFrame(images.zipWithIndex.map { case (b, i) => (i, b) })
        .toDF("id", "image")
      val rows = new Cortado(ss).features(df, Seq("pixels"), Config(solver, model = model))
        .collect().map(r => r.getInt(0) -> r.getSeq[Float](1)).toMap
      assert(rows(0) === Seq(-1f, 0f, 1f, 126.5f))
      assert(rows(1) === Seq(4f, 9f, 14f, 19f))
      assert(rows(2) === Seq(2f, 2f, 2f, 2f))
    }
  }

  test("transform_param crops natively: the column holds whole images, the top the crop") {
    withTempDir("cortado-api") { dir =>
      // 4 x 4 images; TEST crops the centre 2 x 2 (mirror applies in TRAIN only).
      val net =
        """layer { name: "data" type: "CoSData" top: "pixels"
          |  source_class: "com.yahoo.ml.caffe.DataFrameSource"
          |  cos_data_param { batch_size: 1
          |    top { name: "image" type: RAW_IMAGE channels: 1 height: 4 width: 4
          |          transform_param { crop_size: 2 mirror: true mean_value: 1 } } } }
          |layer { name: "ip" type: "InnerProduct" bottom: "pixels" top: "ip"
          |  inner_product_param { num_output: 1 } }
          |""".stripMargin
      write(dir, "net.prototxt", net)
      val solver = write(dir, "solver.prototxt", "net: \"net.prototxt\"\nbase_lr: 0.1\n")
      val model = untrainedModel(dir, net)
      val df = ss.createDataFrame(Seq((7L, Array.tabulate[Byte](16)(_.toByte))))
        .toDF("id", "image")
      val rows = new Cortado(ss).features(df, Seq("pixels"), Config(solver, model = model))
        .collect()
      assert(rows.map(_.getLong(0)).toSeq === Seq(7L))
      assert(rows.head.getSeq[Float](1) === Seq(4f, 5f, 8f, 9f))
    }
  }
}
