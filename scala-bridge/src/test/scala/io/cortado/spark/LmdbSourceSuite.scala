// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.file.{Files, Path}
import java.util.concurrent.atomic.AtomicInteger

import scala.util.Random

import org.apache.spark.scheduler.{SparkListener, SparkListenerJobStart}
import org.apache.spark.sql.functions.spark_partition_id
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoConfigException, CortadoException, CortadoIOException}
import io.cortado.TestDirs.withTempDir
import io.cortado.jni.{NativeLib, NativeLmdbSuite}

object LmdbSourceSuite {

  /** 2 x 2 images: label 1 bright on the left column, label 0 on the right. */
  def separable(n: Int, seed: Int): (Seq[Seq[Int]], Seq[Int]) = {
    val random = new Random(seed)
    val labels = (0 until n).map(_ % 2)
    val images = labels.map { label =>
      val center = if (label == 1) Seq(200, 50, 200, 50) else Seq(50, 200, 50, 200)
      center.map(c => math.max(0, math.min(255, c + (30 * random.nextGaussian()).round.toInt)))
    }
    (images, labels)
  }

  def memoryLayer(phase: String, batch: Int, source: String, shape: String = "1 2 2"): String = {
    val Array(c, h, w) = shape.split(" ")
    s"""layer { name: "data" type: "MemoryData" top: "data" top: "label" include { phase: $phase }
      |  source_class: "com.yahoo.ml.caffe.LMDB"
      |  memory_data_param { source: "$source" batch_size: $batch channels: $c height: $h
      |    width: $w share_in_parallel: false }
      |  transform_param { scale: 0.00390625 } }
      |""".stripMargin
  }
}

class LmdbSourceSuite extends AnyFunSuite with PerTest {
  import LmdbSourceSuite.{memoryLayer, separable}
  import CortadoOnSparkSuite.Body
  import CortadoSuite.write
  import NativeLmdbSuite.{image, lmdb}

  def key(i: Int): String = f"$i%08d"

  /** Counts the Spark jobs started from now on. */
  def countJobs(): AtomicInteger = {
    val jobs = new AtomicInteger
    ss.sparkContext.addSparkListener(new SparkListener {
      override def onJobStart(job: SparkListenerJobStart): Unit = jobs.incrementAndGet()
    })
    jobs
  }

  test("an LMDB database reads into a DataFrame of id, data and label over several partitions") {
    withTempDir("cortado-lmdb") { dir =>
      val db = lmdb(dir, "db", 2, 3, (0 until 10).map(image(_, 6)), (0 until 10).map(_ % 3))
      val df = LmdbSource.load(ss, "file:" + db, partitions = 3)
      assert(df.schema.simpleString === "struct<id:string,data:array<float>,label:int>")
      assert(df.rdd.getNumPartitions === 3)
      val rows = df.withColumn("p", spark_partition_id()).collect()
      assert(rows.map(_.getString(0)).toSeq === (0 until 10).map(key))
      rows.zipWithIndex.foreach { case (r, i) =>
        assert(r.getSeq[Float](1) === image(i, 6).map(_.toFloat), s"record $i")
        assert(r.getInt(2) === i % 3, s"record $i")
      }
      // Each task reads its own range of records, in key order.
      assert(rows.map(_.getInt(3)).toSeq === Seq(0, 0, 0, 1, 1, 1, 2, 2, 2, 2))

      // Spark's default parallelism (local[2]), a plain path, other column names, no label.
      val plain = LmdbSource.load(ss, db, dataColumn = "pixels", labelColumn = None,
        idColumn = "key")
      assert(plain.rdd.getNumPartitions === 2)
      assert(plain.columns.toSeq === Seq("key", "pixels"))
      assert(plain.orderBy("key").collect().map(_.getSeq[Float](1)).toSeq ===
        (0 until 10).map(image(_, 6).map(_.toFloat)))
      // More partitions than records: one record each.
      assert(LmdbSource.load(ss, db, partitions = 50).rdd.getNumPartitions === 10)
      assert(intercept[CortadoConfigException](
        LmdbSource.load(ss, db, dataColumn = "id")).getMessage.contains("distinct names"))
    }
  }

  test("a task reads its range in chunks, and stops early without leaking the database") {
    withTempDir("cortado-lmdb") { dir =>
      val db = LmdbSource.info(lmdb(dir, "db", 2, 2, (0 until 9).map(image(_, 4)), 0 until 9))
      assert(db.count === 9 && db.shape === Seq(1, 2, 2) && db.sampleSize === 4)
      // Chunks of two records (32 bytes of values): 2-3, 4-5, 6-7, 8.
      val records = LmdbSource.read(db, "test", 2, 9, chunkBytes = 32).toSeq
      assert(records.map(_.id) === (2 until 9).map(key))
      assert(records.map(_.data.toSeq) === (2 until 9).map(image(_, 4).map(_.toFloat)))
      assert(records.map(_.label) === (2 until 9))
      assert(LmdbSource.read(db, "test", 4, 4).isEmpty)
      // A limit stops reading; the task's end closes the database.
      assert(LmdbSource.load(ss, db.path, partitions = 2).limit(3).collect().length === 3)
    }
  }

  test("a missing path fails in the driver, naming it, before any job; so does a copy that " +
      "Spark cannot make") {
    val jobs = countJobs()
    val missing = intercept[CortadoIOException](LmdbSource.load(ss, "file:/nonexistent/mnist_lmdb"))
    assert(missing.getMessage === "LMDB source file:/nonexistent/mnist_lmdb: LMDB database " +
      "'/nonexistent/mnist_lmdb' does not exist")
    // Not a local path: copied to every node by Spark, which knows no such file system.
    val other = intercept[CortadoIOException](LmdbSource.load(ss, "nosuchfs:///mnist_lmdb"))
    assert(other.getMessage.startsWith("LMDB source nosuchfs:///mnist_lmdb: cannot copy LMDB " +
      "database 'nosuchfs:///mnist_lmdb' to the executors: "), other.getMessage)
    assert(other.getMessage.contains("nosuchfs"), other.getMessage)
    assert(jobs.get() === 0)
  }

  test("a CaffeOnSpark MemoryData layer with memory_data_param.source and share_in_parallel " +
    "parses") {
    val net =
      """name: "LeNet"
        |layer { name: "data" type: "MemoryData" top: "data" top: "label"
        |  include { phase: TRAIN }
        |  source_class: "com.yahoo.ml.caffe.LMDB"
        |  memory_data_param { source: "file:/path/mnist_train_lmdb" batch_size: 64 channels: 1
        |    height: 28 width: 28 share_in_parallel: false }
        |  transform_param { scale: 0.00390625 } }
        |layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        |  inner_product_param { num_output: 10 } }
        |layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
        |""".stripMargin
    NativeLib.validateNet(net, "lenet_memory_train_test.prototxt")
    val typo = intercept[CortadoConfigException](NativeLib.validateNet(
      net.replace("share_in_parallel", "share_in_paralel"), "lenet_memory_train_test.prototxt"))
    assert(typo.getMessage.startsWith("lenet_memory_train_test.prototxt:6:") &&
      typo.getMessage.contains("share_in_paralel"), typo.getMessage)
  }

  // ---- the main class on CaffeOnSpark's MemoryData + LMDB nets ------------------------------

  def solver(dir: Path, net: String, maxIter: Int = 100): String =
    write(dir, s"solver-${net.stripSuffix(".prototxt")}.prototxt",
      s"""net: "$net"
        |test_iter: 1
        |test_interval: 20
        |base_lr: 0.1
        |momentum: 0.9
        |lr_policy: "fixed"
        |max_iter: $maxIter
        |display: 25
        |random_seed: 1701
        |""".stripMargin)

  def cos(args: String*): CortadoOnSparkSuite.Result = CortadoOnSparkSuite.runMain(ss, args)

  test("CortadoOnSpark -train, -test and -features on a MemoryData net reading LMDB databases") {
    withTempDir("cortado-lmdb") { dir =>
      val (trainImages, trainLabels) = separable(200, seed = 7)
      val (testImages, testLabels) = separable(100, seed = 11)
      val train = lmdb(dir, "train_lmdb", 2, 2, trainImages, trainLabels)
      val test = lmdb(dir, "test_lmdb", 2, 2, testImages, testLabels)
      write(dir, "net.prototxt", "name: \"toy\"\n" + memoryLayer("TRAIN", 8, s"file:$train") +
        memoryLayer("TEST", 10, test) + Body)
      val solverFile = solver(dir, "net.prototxt")
      val model = dir.resolve("toy.caffemodel").toUri.toString

      val trained = cos("-train", "-conf", solverFile, "-model", model)
      assert(trained.code === 0, trained.err)
      assert(Files.size(dir.resolve("toy.caffemodel")) > 0)

      val tested = cos("-test", "-conf", solverFile, "-model", model)
      assert(tested.code === 0, tested.err)
      val accuracy = tested.out.linesIterator.collectFirst {
        case line if line.startsWith("accuracy = ") => line.stripPrefix("accuracy = ").toDouble
      }
      assert(accuracy.exists(_ >= 0.95), tested.out)

      // Features: the record keys as ids; the data blob shows the layer's scale was applied.
      val output = dir.resolve("features").toUri.toString
      val features = cos("-features", "ip,data", "-label", "label", "-conf", solverFile,
        "-model", model, "-output", output)
      assert(features.code === 0, features.err)
      val rows = ss.read.json(output).collect()
      assert(rows.map(_.getAs[String]("SampleID")).sorted.toSeq === (0 until 100).map(key))
      rows.foreach { r =>
        val i = r.getAs[String]("SampleID").toInt
        assert(r.getSeq[Double](r.fieldIndex("data")).map(_.toFloat) ===
          testImages(i).map(_ * 0.00390625f), s"record $i")
        assert(r.getSeq[Double](r.fieldIndex("label")) === Seq(testLabels(i).toDouble))
      }
      val correct = rows.count { r =>
        val ip = r.getSeq[Double](r.fieldIndex("ip"))
        (if (ip(1) > ip(0)) 1 else 0) == testLabels(r.getAs[String]("SampleID").toInt)
      }
      assert(correct >= 95, s"$correct of 100")
    }
  }

  test("DataSource.of: MemoryData and CoSData layers with source_class LMDB") {
    withTempDir("cortado-lmdb") { dir =>
      val db = lmdb(dir, "db", 2, 2, (0 until 4).map(image(_, 4)), Seq(0, 1, 0, 1))
      val conf = ss.sparkContext.hadoopConfiguration
      def source(name: String, layers: String, phase: String = "TRAIN"): DataSource = {
        write(dir, name, layers + Body)
        DataSource.of(solver(dir, name), phase, conf)
      }

      val memory = source("memory.prototxt", memoryLayer("TRAIN", 2, s"file://$db")
        .replace("top: \"label\"", "top: \"target\""))
      memory match {
        case LmdbDataSource(layer, src, cls, data, label, info, owner) =>
          assert((layer, src, cls, data, label) ===
            (("data", s"file://$db", LmdbSource.SourceClass, "data", Some("target"))))
          assert(info.path === db && info.count === 4 && info.shape === Seq(1, 2, 2))
          assert(owner.endsWith("memory.prototxt: layer 'data' (MemoryData)"), owner)
        case other => fail(s"not an LMDB source: $other")
      }
      assert(memory.load(ss).columns.toSet === Set("id", "data", "target"))

      // CoSData: the scalar top gets the label, the image top the data.
      val cosLayer =
        s"""layer { name: "cos" type: "CoSData" top: "label" top: "pixels"
          |  source_class: "com.yahoo.ml.caffe.LMDB"
          |  cos_data_param { source: "$db" batch_size: 2
          |    top { name: "y" type: INT channels: 1 sample_num_axes: 0 }
          |    top { name: "x" type: RAW_IMAGE channels: 1 height: 2 width: 2 } } }
          |""".stripMargin
      source("cos.prototxt", cosLayer) match {
        case s: LmdbDataSource => assert((s.layer, s.dataColumn, s.labelColumn) ===
          (("cos", "x", Some("y"))))
        case other => fail(s"not an LMDB source: $other")
      }

      // Errors, each naming the net and the layer.
      def error(name: String, layers: String, phase: String = "TRAIN"): String =
        intercept[CortadoException](source(name, layers, phase)).getMessage
      val shape = error("shape.prototxt", memoryLayer("TRAIN", 2, db, shape = "1 3 3"))
      assert(shape.contains("shape.prototxt: layer 'data' (MemoryData): memory_data_param " +
        s"gives samples of shape 1 x 3 x 3 (9 values), but the records of LMDB database '$db' " +
        "are 1 x 2 x 2 (4 values)"), shape)
      val missing = error("missing.prototxt", memoryLayer("TEST", 2, "file:/nonexistent/lmdb"),
        "TEST")
      assert(missing.contains("missing.prototxt: layer 'data' (MemoryData): LMDB database " +
        "'/nonexistent/lmdb' does not exist"), missing)
      val remote = error("remote.prototxt", memoryLayer("TRAIN", 2, "nosuchfs:///mnist_lmdb"))
      assert(remote.contains("remote.prototxt: layer 'data' (MemoryData): cannot copy LMDB " +
        "database 'nosuchfs:///mnist_lmdb' to the executors"), remote)
      // file: with a relative path, as CaffeOnSpark took it: against the working directory.
      val cwd = java.nio.file.Paths.get("").toAbsolutePath
      val relative = "file:" + cwd.relativize(java.nio.file.Paths.get(db.stripPrefix("file:")))
      assert(source("relative.prototxt", memoryLayer("TRAIN", 2, relative))
        .asInstanceOf[LmdbDataSource].db.count === 4)
      val noSource = error("nosource.prototxt",
        memoryLayer("TRAIN", 2, "").replace("source: \"\"", ""))
      assert(noSource.contains("memory_data_param.source is not set: it names the TRAIN LMDB " +
        "database"), noSource)
      val plain = error("plain.prototxt",
        memoryLayer("TRAIN", 2, db).replace("source_class: \"com.yahoo.ml.caffe.LMDB\"", ""))
      assert(plain.contains(s"plain.prototxt: layer 'data' (MemoryData) reads $db but has no " +
        "source_class: set source_class: \"com.yahoo.ml.caffe.LMDB\" to read it"), plain)
      val fed = error("fed.prototxt", memoryLayer("TRAIN", 2, "")
        .replace("source_class: \"com.yahoo.ml.caffe.LMDB\"", "").replace("source: \"\"", ""))
      assert(fed.contains("fed.prototxt: layer 'data' (MemoryData) names no source; a " +
        "MemoryData layer is fed through the DataFrame API"), fed)
      val otherClass = error("class.prototxt",
        memoryLayer("TRAIN", 2, db).replace("com.yahoo.ml.caffe.LMDB", "com.yahoo.ml.caffe.X"))
      assert(otherClass.contains("class.prototxt: layer 'data' (MemoryData): source_class " +
        "com.yahoo.ml.caffe.X is not a class on the class path (add the jar that holds it " +
        "with --jars); on a MemoryData layer Cortado reads an LMDB database"), otherClass)
      assert(otherClass.contains("extends io.cortado.caffeonspark.DataSource"), otherClass)
      val dataLayer = error("data.prototxt",
        s"""layer { name: "mnist" type: "Data" top: "data" top: "label"
          |  data_param { source: "$db" batch_size: 2 backend: LMDB } }
          |""".stripMargin)
      assert(dataLayer.contains(s"reads $db: Data layers (LMDB or LevelDB) are not read " +
        "through Spark: name the LMDB database in a MemoryData layer with source_class"),
        dataLayer)
    }
  }

  test("CortadoOnSpark trains on a CoSData layer with source_class LMDB") {
    withTempDir("cortado-lmdb") { dir =>
      val (images, labels) = separable(40, seed = 3)
      val db = lmdb(dir, "train_lmdb", 2, 2, images, labels)
      write(dir, "cos.prototxt",
        s"""layer { name: "data" type: "CoSData" top: "data" top: "label"
          |  source_class: "com.yahoo.ml.caffe.LMDB"
          |  cos_data_param { source: "file:$db" batch_size: 8
          |    top { name: "data" type: RAW_IMAGE channels: 1 height: 2 width: 2
          |          transform_param { scale: 0.00390625 } }
          |    top { name: "label" type: INT channels: 1 sample_num_axes: 0 } } }
          |""".stripMargin + Body)
      val r = cos("-train", "-conf", solver(dir, "cos.prototxt", maxIter = 10), "-model",
        dir.resolve("m.caffemodel").toUri.toString)
      assert(r.code === 0, r.err)
      assert(Files.size(dir.resolve("m.caffemodel")) > 0)
    }
  }
}
