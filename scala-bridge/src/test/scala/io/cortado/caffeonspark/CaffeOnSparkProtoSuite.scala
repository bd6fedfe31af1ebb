// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, ObjectInputStream,
  ObjectOutputStream}
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import scala.annotation.nowarn

import caffe.Caffe.{Phase, SolverParameter}
import org.apache.spark.SparkConf
import org.apache.spark.sql.Row
import org.apache.spark.sql.types.{ArrayType, FloatType, StringType, StructField, StructType}
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoConfigException, CortadoIOException}
import io.cortado.TestDirs.withTempDir
import io.cortado.jni.DataLayerInfo
import io.cortado.spark.{CaffeOnSparkCommandsSuite, CortadoOnSparkSuite, CortadoSuite, PerTest}

/**
 * What CaffeOnSpark's own suites and programs use beyond the training calls: Config's
 * solverParameter and netParam as Caffe's protobuf classes, its data layer ids, its defaults
 * for clusterSize and lmdb_partitions, source classes under this package's name, VectorMean and
 * FSUtils.
 */
class CaffeOnSparkProtoSuite extends AnyFunSuite with PerTest {
  import CaffeOnSparkCommandsSuite.{uri, withLeNet}
  import CortadoSuite.write

  test("Config.solverParameter and netParam: Caffe's protobuf classes, parsed natively") {
    withLeNet { (dir, solver) =>
      val conf = new Config(null, Array("-conf", solver, "-model", uri(dir, "m")))
      val s: SolverParameter = conf.solverParameter
      // As CaffeOnSpark's main decides between trainWithValidation and train.
      assert(s.hasTestInterval && s.getTestIter(0) > 0)
      assert(s.getNet === "lenet_memory_train_test.prototxt")
      assert(s.getSnapshotPrefix === "mnist_lenet")
      val net = conf.netParam
      assert(net.getName === "LeNet")
      assert(net.getLayer(0).getType === "MemoryData")
      assert(net.getLayer(0).getSourceClass === "com.yahoo.ml.caffe.LMDB")
      assert(net.getLayer(0).getMemoryDataParam.getBatchSize === 20)
      assert(net.getLayer(1).getMemoryDataParam.getBatchSize === 50)
      assert((conf.train_data_layer_id, conf.test_data_layer_id) === ((0, 1)))
      // The bytes of a message round-trip through the generated classes.
      assert(SolverParameter.parseFrom(s.toByteArray) === s)

      // Another protoFile is read afresh; a copy (serialized) reads it again.
      val other = write(dir.resolve("conf"), "other_solver.prototxt",
        new String(Files.readAllBytes(java.nio.file.Paths.get(solver)), StandardCharsets.UTF_8)
          .replaceAll("base_lr: [0-9.e-]+", "base_lr: 0.25"))
      conf.protoFile = other
      assert(conf.solverParameter.getBaseLr === 0.25f)
      val bytes = new ByteArrayOutputStream
      val out = new ObjectOutputStream(bytes)
      out.writeObject(conf)
      out.close()
      val copy = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray))
        .readObject().asInstanceOf[Config]
      assert(copy.solverParameter.getBaseLr === 0.25f && copy.test_data_layer_id === 1)
    }
  }

  test("netParam: an embedded net_param, V1 layers upgraded; data layer ids as CaffeOnSpark's") {
    withTempDir("cortado-cos-proto") { dir =>
      // Two TRAIN layers before the first TEST one: CaffeOnSpark took the later.
      val embedded = write(dir, "embedded_solver.prototxt",
        """net_param {
          |  name: "embedded"
          |  layer { name: "a" type: "Input" top: "a" include { phase: TRAIN }
          |    input_param { shape { dim: 2 dim: 3 } } }
          |  layer { name: "b" type: "Input" top: "b" include { phase: TRAIN }
          |    input_param { shape { dim: 2 dim: 1 } } }
          |  layer { name: "c" type: "Input" top: "a" top: "b" include { phase: TEST }
          |    input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 1 } } }
          |  layer { name: "ip" type: "InnerProduct" bottom: "a" top: "ip"
          |    inner_product_param { num_output: 2 } }
          |}
          |base_lr: 0.01 lr_policy: "fixed" max_iter: 10
          |""".stripMargin)
      val conf = new Config(null, Array("-conf", embedded))
      assert(conf.netParam.getName === "embedded" && conf.netParam.getLayerCount === 4)
      assert((conf.train_data_layer_id, conf.test_data_layer_id) === ((1, 2)))
      assert(Config.dataLayerId(conf.netParam, Phase.TRAIN) === 1)

      // Caffe's V1 layers (`layers`, upper-case types) come back as current layers; without a
      // TEST layer, test_data_layer_id is -1.
      write(dir, "v1.prototxt",
        """name: "v1"
          |input: "data" input_dim: 1 input_dim: 1 input_dim: 4 input_dim: 4
          |layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv"
          |  convolution_param { num_output: 2 kernel_size: 3 } include { phase: TRAIN } }
          |layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
          |""".stripMargin)
      val v1 = new Config(null, Array("-conf", write(dir, "v1_solver.prototxt",
        "net: \"v1.prototxt\" base_lr: 0.01 lr_policy: \"fixed\"")))
      val types = (0 until v1.netParam.getLayerCount).map(v1.netParam.getLayer(_).getType)
      assert(types.takeRight(2) === Seq("Convolution", "ReLU"), types)
      assert(v1.netParam.getLayersCount === 0)
      assert(v1.test_data_layer_id === -1 && v1.train_data_layer_id >= 0)

      // Errors name the file and the line.
      val bad = new Config(null, Array("-conf", write(dir, "bad_solver.prototxt",
        "net: \"v1.prototxt\"\nbase_lr: fast\n")))
      val e = intercept[CortadoConfigException](bad.solverParameter)
      assert(e.getMessage.contains("bad_solver.prototxt:2:"), e.getMessage)
      val unset = intercept[CortadoConfigException](new Config(null).netParam)
      assert(unset.getMessage.contains("protoFile"), unset.getMessage)
      val missing = new Config(null, Array("-conf", dir.resolve("none.prototxt").toString))
      assert(intercept[CortadoIOException](missing.train_data_layer_id).getMessage
        .contains("none.prototxt"))
    }
  }

  test("clusterSize and lmdb_partitions default as CaffeOnSpark's: executors, else 1") {
    assert(Config.defaultClusterSize(null, training = true) === 1)
    assert(Config.defaultClusterSize(new SparkConf(false), training = true) === 1)
    assert(Config.defaultClusterSize(
      new SparkConf(false).set("spark.executor.instances", "4"), training = true) === 4)
    val dynamic = new SparkConf(false).set("spark.dynamicAllocation.enabled", "true")
      .set("spark.dynamicAllocation.minExecutors", "3")
    assert(Config.defaultClusterSize(
      dynamic.clone.set("spark.dynamicAllocation.maxExecutors", "3"), training = true) === 3)
    val unequal = dynamic.clone.set("spark.dynamicAllocation.maxExecutors", "8")
    assert(Config.defaultClusterSize(unequal, training = false) === 3)
    val e = intercept[IllegalArgumentException](
      Config.defaultClusterSize(unequal, training = true))
    assert(e.getMessage.contains("minExecutors (3)") && e.getMessage.contains("(8)"))

    // From the command line: without the flags, the cluster size, and the LMDB partitions
    // follow it (CaffeOnSpark's converters fail on 0 partitions); given, as given.
    val plain = new Config(null, Array("-conf", "s.prototxt"))
    assert(plain.clusterSize === 1 && plain.lmdb_partitions === 1)
    assert(new Config(null).clusterSize === 1 && new Config(null).lmdb_partitions === 1)
    val sized = new Config(null, Array("-conf", "s.prototxt", "-clusterSize", "5"))
    assert(sized.clusterSize === 5 && sized.lmdb_partitions === 5)
    val both = new Config(null, Array("-clusterSize", "5", "-lmdb_partitions", "2"))
    assert(both.clusterSize === 5 && both.lmdb_partitions === 2)
    // With a SparkContext: its executors.
    val sc = ss.sparkContext
    assert(new Config(sc, Array("-conf", "s.prototxt")).clusterSize ===
      sc.getConf.getInt("spark.executor.instances", 1))
  }

  test("source_class under this package's name reads as CaffeOnSpark's") {
    Seq("LMDB", "ImageDataFrame", "SeqImageDataSource", "DataFrameSource").foreach { c =>
      assert(DataLayerInfo.canonicalSourceClass(s"io.cortado.caffeonspark.$c") ===
        s"com.yahoo.ml.caffe.$c")
      assert(DataLayerInfo.canonicalSourceClass(s"com.yahoo.ml.caffe.$c") ===
        s"com.yahoo.ml.caffe.$c")
    }
    assert(DataLayerInfo.canonicalSourceClass("io.cortado.caffeonspark.Config") ===
      "io.cortado.caffeonspark.Config")
    assert(DataLayerInfo.canonicalSourceClass("my.Source") === "my.Source")
    assert(DataLayerInfo.canonicalSourceClass(null) === "")

    withLeNet { (dir, solver) =>
      // The LMDB net with source_class "io.cortado.caffeonspark.LMDB": the same source, and a
      // training run on it.
      val net = dir.resolve("conf/lenet_memory_train_test.prototxt")
      val text = new String(Files.readAllBytes(net), StandardCharsets.UTF_8)
      Files.write(net, text.replace("com.yahoo.ml.caffe.LMDB", "io.cortado.caffeonspark.LMDB")
        .getBytes(StandardCharsets.UTF_8))
      val conf = new Config(null, Array("-conf", solver, "-model", uri(dir, "alias.caffemodel"),
        "-train"))
      val source = DataSource.getSource(conf, true)
      assert(source.isInstanceOf[LMDB] && source.batchSize() === 20)
      val r = CortadoOnSparkSuite.runMain(ss, Seq("-train", "-conf", solver, "-model",
        uri(dir, "alias.caffemodel")))
      assert(r.code === 0, r.err)
      assert(Files.size(dir.resolve("alias.caffemodel")) > 0)
    }
  }

  test("VectorMean: element-wise means of float arrays, as CaffeOnSpark's DataFrameTest") {
    val s = ss
    val schema = StructType(Seq(StructField("name", StringType, nullable = false),
      StructField("data", ArrayType(FloatType), nullable = true)))
    val rows = Seq(Row("John", Seq(20.37f, -11.34f)), Row("Tom", Seq(56.87f, 45.89f)),
      Row("Kate", Seq(123.56f, 127.30f)), Row("Nobody", null))
    val df = s.createDataFrame(s.sparkContext.parallelize(rows, 3), schema)
    @nowarn("cat=deprecation") val mean = new VectorMean(2)
    val r = df.agg(mean(df("data"))).take(1)(0).getSeq[Double](0)
    assert(r.length === 2)
    // Hand-computed, from the floats as doubles; the null row is left out.
    val expected = Seq((20.37f.toDouble + 56.87f + 123.56f) / 3,
      (-11.34f.toDouble + 45.89f + 127.30f) / 3)
    r.zip(expected).foreach { case (got, want) => assert(math.abs(got - want) < 1e-9, r) }

    val empty = df.filter("name = 'none'").agg(mean(df("data"))).take(1)(0)
    assert(empty.isNullAt(0))
    val e = intercept[Exception](df.agg(new VectorMean(3)(df("data"))).collect())
    assert(Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null)
      .exists(t => String.valueOf(t.getMessage).contains("2 values, not 3")), e.toString)
    intercept[IllegalArgumentException](new VectorMean(0))
  }

  test("FSUtils: copies between local and Hadoop paths, replacing, never half-written") {
    withTempDir("cortado-fsutils") { dir =>
      val local = dir.resolve("model.caffemodel")
      Files.write(local, Array[Byte](1, 2, 3))
      val remote = dir.resolve("remote/model.caffemodel")
      Files.createDirectories(remote.getParent)
      Files.write(remote, "old".getBytes(StandardCharsets.UTF_8))
      FSUtils.CopyFileToHDFS(local.toString, remote.toUri.toString)
      assert(Files.readAllBytes(remote).toSeq === Seq[Byte](1, 2, 3))
      // No temporary file left (Hadoop's local file system keeps a .crc beside each file).
      val left = Files.list(remote.getParent).toArray.map(_.toString).filterNot(_.endsWith(".crc"))
      assert(left.toSeq === Seq(remote.toString))
      val back = dir.resolve("back.caffemodel")
      FSUtils.CopyFileToLocal(remote.toUri.toString, back.toString)
      assert(Files.readAllBytes(back).toSeq === Seq[Byte](1, 2, 3))

      // file: paths are used in place; others are copied into the working directory.
      assert(FSUtils.GetLocalFileName(s"file:$local", "unused") === local.toString)
      val h5 = dir.resolve("w.h5")
      Files.write(h5, Array[Byte](9))
      val relative = java.nio.file.Paths.get(System.getProperty("user.dir"))
        .relativize(dir.resolve("copied"))
      val copied = FSUtils.GetLocalFileName(h5.toString, relative.toString)
      assert(copied === s"${System.getProperty("user.dir")}/$relative.h5")
      assert(Files.readAllBytes(java.nio.file.Paths.get(copied)).toSeq === Seq[Byte](9))
      assert(FSUtils.GetLocalFileName("abc", "x") === "")

      val e = intercept[CortadoIOException](
        FSUtils.CopyFileToHDFS(dir.resolve("none").toString, remote.toUri.toString))
      assert(e.getMessage.contains("none"), e.getMessage)
      assert(Files.readAllBytes(remote).toSeq === Seq[Byte](1, 2, 3))
    }
  }
}
