// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, ObjectInputStream,
  ObjectOutputStream}
import java.nio.file.{Files, Path}

import org.apache.spark.sql.types.{ArrayType, FloatType, StringType}
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir
import io.cortado.spark.{CaffeOnSparkCommandsSuite, CortadoOnSparkSuite, CortadoSuite, PerTest}

/**
 * The compatibility package as CaffeOnSpark programs use it: Config from CaffeOnSpark's command
 * line, DataSource.getSource, and CaffeOnSpark's train, trainWithValidation, test and features
 * on the LeNet-shaped LMDB net of [[CaffeOnSparkCommandsSuite]] and on a CoSData DataFrame net.
 */
object CaffeOnSparkApiSuite {

  /** A CoSData layer for `phase` reading `source` with `sourceClass`. */
  def cosLayer(phase: String, batch: Int, source: String,
      sourceClass: String = "com.yahoo.ml.caffe.DataFrameSource"): String =
    s"""layer { name: "data" type: "CoSData" top: "data" top: "label"
      |  include { phase: $phase }
      |  source_class: "$sourceClass"
      |  cos_data_param { source: "$source" batch_size: $batch
      |    top { name: "features" type: FLOAT_ARRAY channels: 4 sample_num_axes: 1 }
      |    top { name: "label" type: INT channels: 1 sample_num_axes: 0 } } }
      |""".stripMargin
}

class CaffeOnSparkApiSuite extends AnyFunSuite with PerTest {
  import CaffeOnSparkApiSuite.cosLayer
  import CaffeOnSparkCommandsSuite.{uri, withLeNet}
  import CortadoSuite.write

  /** A solver of CortadoOnSparkSuite's CoSData net in `dir`, its sources given, unread. */
  def dataFrameSolver(dir: Path, train: String, test: String,
      sourceClass: String = "com.yahoo.ml.caffe.DataFrameSource"): String = {
    write(dir, "net.prototxt", "name: \"tiny\"\n" + cosLayer("TRAIN", 8, train, sourceClass) +
      cosLayer("TEST", 10, test, sourceClass) + CortadoOnSparkSuite.Body)
    write(dir, "solver.prototxt", CortadoSuite.TinySolver)
  }

  test("Config from CaffeOnSpark's command line: every field, toString, toCortado") {
    withLeNet { (dir, solver) =>
      val model = uri(dir, "models/lenet.caffemodel")
      val conf = new Config(null, Array("-conf", solver, "-train", "-features", "ip1,ip2",
        "-label", "label", "-outputFormat", "parquet", "-model", model, "-output", "file:/o",
        "-devices", "2", "-persistent", "-snapshot", "file:/s.solverstate",
        "-weights", "file:/w.caffemodel", "-connection", "infiniband", "-resize",
        "-clusterSize", "3", "-lmdb_partitions", "4", "-imageRoot", "file:/images",
        "-labelFile", "file:/labels.txt", "-captionFile", "c.json", "-captionLength", "30",
        "-vocabSize", "100", "-imageCaptionDFDir", "df", "-vocabDir", "vocab",
        "-embeddingDFDir", "emb", "-exchangePrecision", "float16", "-cpuThreads", "2",
        "-allreduce", "halving", "-latencyKb", "8", "-hierarchical", "false"))
      assert(conf.protoFile === solver)
      assert(conf.isTraining && !conf.isTest && conf.isFeature)
      assert(conf.features.toSeq === Seq("ip1", "ip2", "label"))
      assert(conf.label === "label")
      assert(conf.outputFormat === "parquet")
      assert(conf.modelPath === model)
      assert(conf.outputPath === "file:/o")
      assert(conf.devices === 2)
      assert(conf.isRddPersistent)
      assert(conf.snapshotStateFile === "file:/s.solverstate")
      assert(conf.snapshotModelFile === "file:/w.caffemodel")
      assert(conf.connection === Config.RDMA)
      assert(conf.resize)
      assert(conf.clusterSize === 3)
      assert(conf.lmdb_partitions === 4)
      assert(conf.imageRoot === "file:/images")
      assert(conf.labelFile === "file:/labels.txt")
      assert(conf.captionFile === "c.json")
      assert(conf.captionLength === 30)
      assert(conf.vocabSize === 100)
      assert(conf.imageCaptionDFDir === "df")
      assert(conf.vocabDir === "vocab")
      assert(conf.embeddingDFDir === "emb")
      assert(conf.transform_thread_per_device === 1)
      val lines = conf.toString.linesIterator.toSeq
      assert(lines.take(4) === Seq(s"protoFile:$solver", "train:true", "test:false",
        "features:ip1,ip2,label"))
      assert(lines.contains("clusterSize:3") && lines.contains("lmdb_partitions:4") &&
        lines.contains("weights:file:/w.caffemodel") && lines.contains("embeddingDFDir:emb"))

      val cortado = conf.toCortado
      assert(cortado.solverFile === solver && cortado.model === model)
      assert(cortado.weights === "file:/w.caffemodel")
      assert(cortado.snapshot === "file:/s.solverstate")
      assert(cortado.devices === 2 && cortado.clusterSize === 3)
      assert(cortado.connection === "infiniband")
      // Cortado's own flags go on too.
      assert(cortado.exchangePrecision === "float16" && cortado.cpuThreads === 2)
      assert(cortado.allreduce === "halving" && cortado.latencyKb === 8 && !cortado.hierarchical)
      // Snapshots beside the model, under the solver's snapshot_prefix, as the CLI puts them.
      assert(cortado.snapshotPrefix === s"file:${dir.resolve("models")}/mnist_lenet")

      // Without flags: CaffeOnSpark's command-line defaults (clusterSize 1 without a
      // SparkContext, the LMDB partitions following it), but SOCKET.
      val plain = new Config(null, Array("-conf", solver))
      assert(!plain.isTraining && !plain.isTest && !plain.isFeature)
      assert(plain.features === null && plain.label === "")
      assert(plain.outputPath === "output" && plain.outputFormat === "json")
      assert(plain.devices === 1 && plain.clusterSize === 1 && plain.lmdb_partitions === 1)
      assert(plain.connection === Config.SOCKET)
      assert(plain.imageRoot === null && plain.labelFile === null)
      assert(plain.captionLength === 20 && plain.vocabSize === -1)
      assert(plain.modelPath === "" && plain.snapshotModelFile === "")
      assert(!plain.toString.contains("features:"))
      assert(plain.toCortado.connection === "ethernet")
      assert(plain.toCortado.allreduce === "auto" && plain.toCortado.latencyKb === 32 &&
        plain.toCortado.hierarchical && plain.toCortado.exchangePrecision === "auto")
      assert(new Config(null, Array("-connection", "ethernet")).connection === Config.SOCKET)
      assert((Config.NONE, Config.RDMA, Config.SOCKET) === ((0, 1, 2)))

      // Serializable, as CaffeOnSpark's (its SparkContext stays behind).
      val bytes = new ByteArrayOutputStream
      val out = new ObjectOutputStream(bytes)
      out.writeObject(conf)
      out.close()
      val copy = new ObjectInputStream(new ByteArrayInputStream(bytes.toByteArray))
        .readObject().asInstanceOf[Config]
      assert(copy.toString === conf.toString)
    }
  }

  test("Config: the label joins the features; test and features exclude each other; bad flags") {
    val conf = new Config(null)
    assert(conf.features === null)
    conf.label = "label"
    assert(conf.features === null)
    conf.features = Array("ip2")
    assert(conf.features.toSeq === Seq("ip2", "label"))
    conf.features = Array("label", "ip1")
    assert(conf.features.toSeq === Seq("label", "ip1"))
    conf.label = "target"
    assert(conf.features.toSeq === Seq("label", "ip1", "target"))
    conf.label = ""
    conf.features = Array("ip1")
    assert(conf.features.toSeq === Seq("ip1"))

    conf.isTest = true
    conf.isFeature = true
    assert(conf.isFeature && !conf.isTest)
    conf.isTest = true
    assert(conf.isTest && !conf.isFeature)
    conf.isTest = false
    assert(!conf.isTest && !conf.isFeature)
    // On the command line the features win, as in CaffeOnSpark.
    val both = new Config(null, Array("-test", "-features", "ip2"))
    assert(both.isFeature && !both.isTest)

    Seq(Seq("-bogus") -> "-bogus", Seq("-devices", "two") -> "-devices",
      Seq("-captionLength", "long") -> "-captionLength",
      Seq("-connection", "carrier-pigeon") -> "-connection").foreach { case (flags, name) =>
      val args = ("-conf" +: "s" +: flags).toArray
      val e = intercept[IllegalArgumentException](new Config(null, args))
      assert(e.getMessage.contains(name), e.getMessage)
    }
  }

  test("DataSource.getSource: the kind the feed layer's source_class names, and its batch") {
    withLeNet { (dir, solver) =>
      val conf = new Config(null, Array("-conf", solver, "-model", uri(dir, "m")))
      val train = DataSource.getSource(conf, true)
      assert(train.isInstanceOf[LMDB] && train.isTrain)
      // CaffeOnSpark's index of the layer: the TRAIN data layer is the net's first.
      assert(train.layerId === conf.train_data_layer_id && train.layerId === 0)
      assert(train.batchSize() === 20)
      assert(train.sourceFilePath === s"file:${dir.resolve("mnist_train_lmdb")}")
      val test = DataSource.getSource(conf, false)
      assert(test.isInstanceOf[LMDB] && !test.isTrain && test.batchSize() === 50)
      // Made directly, as CaffeOnSpark's sources could be, a source finds its layer itself.
      assert(new LMDB(conf, 0, false).batchSize() === 50)
      val wrong = intercept[CortadoConfigException](new DataFrameSource(conf, 0, true).batchSize())
      assert(wrong.getMessage.contains("com.yahoo.ml.caffe.LMDB"), wrong.getMessage)
    }
    withTempDir("cortado-cos-api") { dir =>
      val conf = new Config(null, Array("-conf",
        dataFrameSolver(dir, uri(dir, "train.parquet"), uri(dir, "test.parquet"))))
      val train = DataSource.getSource(conf, true)
      assert(train.isInstanceOf[DataFrameSource] && train.batchSize() === 8)
      assert(train.sourceFilePath === uri(dir, "train.parquet"))
      assert(DataSource.getSource(conf, false).batchSize() === 10)

      val images = new Config(null, Array("-conf", dataFrameSolver(dir, uri(dir, "a"),
        uri(dir, "b"), "com.yahoo.ml.caffe.ImageDataFrame")))
      assert(DataSource.getSource(images, true).isInstanceOf[ImageDataFrame])

      // Sequence files of images: a SeqImageDataSource; the other classes refuse the layer.
      write(dir, "seq.prototxt", "name: \"seq\"\n" +
        """layer { name: "data" type: "MemoryData" top: "data" top: "label"
          |  source_class: "com.yahoo.ml.caffe.SeqImageDataSource"
          |  memory_data_param { source: "file:/data/seq" batch_size: 4 channels: 1 height: 2
          |    width: 2 } }
          |""".stripMargin + CortadoOnSparkSuite.Body)
      val seqSolver = write(dir, "seq_solver.prototxt",
        CortadoSuite.TinySolver.replace("net.prototxt", "seq.prototxt"))
      val seq = new Config(null, Array("-conf", seqSolver))
      val sequence = DataSource.getSource(seq, true)
      assert(sequence.isInstanceOf[SeqImageDataSource] && sequence.batchSize() === 4)
      assert(sequence.sourceFilePath === "file:/data/seq")
      val wrong = intercept[CortadoConfigException](new LMDB(seq, 0, true).batchSize())
      assert(wrong.getMessage.contains("SeqImageDataSource"), wrong.getMessage)

      val none = intercept[CortadoConfigException](DataSource.getSource(new Config(null), true))
      assert(none.getMessage.contains("protoFile"), none.getMessage)
    }
  }

  test("train, test and features on LMDB sources, as MyMLPipeline and DLDemo use them") {
    withLeNet { (dir, solver) =>
      val sc = ss.sparkContext
      val conf = new Config(sc, Array("-train", "-features", "ip2", "-label", "label",
        "-conf", solver, "-model", uri(dir, "lenet.caffemodel"), "-lmdb_partitions", "2"))
      val cos = new CaffeOnSpark(sc)
      cos.train(DataSource.getSource(conf, true))
      assert(Files.size(dir.resolve("lenet.caffemodel")) > 0)
      // Snapshots went beside the model (every 50 iterations, prefix "mnist_lenet").
      assert(Files.exists(dir.resolve("mnist_lenet_iter_100.caffemodel")))

      val result = cos.test(DataSource.getSource(conf, false))
      assert(result.keySet === Set("accuracy", "loss"))
      assert(result.values.forall(_.size == 1), result)
      assert(result("accuracy").head >= 0.9, result)
      assert(conf.isTest && !conf.isFeature)

      val features = cos.features(DataSource.getSource(conf, false))
      assert(!conf.isTest)
      assert(features.columns.toSeq === Seq("SampleID", "ip2", "label"))
      assert(features.schema("SampleID").dataType === StringType)
      assert(features.schema("ip2").dataType.asInstanceOf[ArrayType].elementType === FloatType)
      val rows = features.collect()
      assert(rows.length === 100)
      assert(rows.map(_.getString(0)).sorted.toSeq === (0 until 100).map(i => f"$i%08d"))
      assert(rows.forall(r => r.getSeq[Float](1).size == 4 && r.getSeq[Float](2).size == 1))
      val labels = features.select(cos.floatarray2doubleUDF(features("label"))).collect()
      assert(labels.map(_.getDouble(0)).toSet === Set(0.0, 1.0, 2.0, 3.0))
      val vector = features.select(cos.floatarray2doublevectorUDF(features("ip2"))).head()
      assert(vector.getAs[org.apache.spark.ml.linalg.Vector](0).size === 4)
    }
  }

  test("trainWithValidation: an array<float> column per TEST output, a row per test pass") {
    withLeNet { (dir, solver) =>
      val sc = ss.sparkContext
      val conf = new Config(sc, Array("-train", "-conf", solver,
        "-model", uri(dir, "lenet.caffemodel")))
      val cos = new CaffeOnSpark(sc)
      // Both sources of one type, as CaffeOnSpark's main casts them.
      val train = DataSource.getSource(conf, true).asInstanceOf[DataSource[Any, Any]]
      val validation = DataSource.getSource(conf, false).asInstanceOf[DataSource[Any, Any]]
      val result = cos.trainWithValidation(train, validation)
      assert(result.columns.toSeq === Seq("accuracy", "loss"))
      assert(result.schema.forall(_.dataType == ArrayType(FloatType)), result.schema)
      // Tests at iterations 0, 50 and 100 (test_interval 50, max_iter 100).
      val passes = result.collect()
      assert(passes.length === 3)
      assert(passes.forall(p => p.getSeq[Float](0).size == 1 && p.getSeq[Float](1).size == 1))
      assert(passes.last.getSeq[Float](0).head >= 0.9, passes.toSeq)
      assert(Files.size(dir.resolve("lenet.caffemodel")) > 0)
    }
  }

  test("DataFrame sources: SampleID is the id column's value as a string") {
    withTempDir("cortado-cos-api") { dir =>
      val train = uri(dir, "train.parquet")
      val test = uri(dir, "test.parquet")
      CortadoSuite.separable(ss, 200, seed = 7).write.parquet(train)
      CortadoSuite.separable(ss, 30, seed = 11).write.parquet(test)
      val sc = ss.sparkContext
      val conf = new Config(sc, Array("-conf", dataFrameSolver(dir, train, test),
        "-model", uri(dir, "tiny.caffemodel"), "-features", "ip"))
      val cos = new CaffeOnSpark(sc)
      cos.train(DataSource.getSource(conf, true))
      assert(cos.test(DataSource.getSource(conf, false))("accuracy").head >= 0.95)
      val features = cos.features2(DataSource.getSource(conf, false))
      assert(features.columns.toSeq === Seq("SampleID", "ip"))
      assert(features.collect().map(_.getString(0)).sorted.toSeq ===
        (0 until 30).map(_.toString).sorted)
    }
  }

  test("Cortado's output names regroup into CaffeOnSpark's blobs, values in index order") {
    assert(CaffeOnSpark.groupOutputs(Seq("accuracy", "prob[1]", "loss", "prob[0]",
      "prob[10]", "prob[2]")) === Seq("accuracy" -> Seq("accuracy"),
      "prob" -> Seq("prob[0]", "prob[1]", "prob[2]", "prob[10]"), "loss" -> Seq("loss")))
    assert(CaffeOnSpark.groupOutputs(Seq.empty) === Seq.empty)
  }
}
