// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import java.nio.file.{Files, Path}

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

import com.example.sources.Samples
import io.cortado.TestDirs.withTempDir
import io.cortado.spark.{CaffeOnSparkCommandsSuite, CortadoOnSparkSuite, CortadoSuite, PerTest}

/**
 * `source_class` naming a class of the application's (com.example.sources): made by
 * DataSource.getSource with CaffeOnSpark's constructor, its samples fed through CaffeOnSpark's
 * queue (makeRDD, offer, nextBatch) into training, testing and features, from the API and from
 * the main class; and every way such a class can be wrong, named.
 */
class SourceClassSuite extends AnyFunSuite with PerTest {
  import CortadoSuite.write

  /** A MemoryData layer of `phase` reading `source` with the class `cls`: 4 x 1 x 1 samples. */
  def memoryLayer(phase: String, cls: String, source: String, batch: Int,
      shape: String = "channels: 4 height: 1 width: 1"): String =
    s"""layer { name: "data" type: "MemoryData" top: "data" top: "label"
      |  include { phase: $phase }
      |  source_class: "$cls"
      |  memory_data_param { source: "$source" batch_size: $batch $shape } }
      |""".stripMargin

  /** A solver in `dir` over a net of `layers` and the linear classifier. */
  def solver(dir: Path, layers: String): String = {
    write(dir, "net.prototxt", "name: \"user\"\n" + layers + CortadoOnSparkSuite.Body)
    write(dir, "solver.prototxt", CortadoSuite.TinySolver)
  }

  def uri(dir: Path, name: String): String = dir.resolve(name).toUri.toString

  /** The messages of `e` and its causes. */
  def messages(e: Throwable): String =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).map(_.getMessage).mkString(" / ")

  test("a class on DataSource: made by getSource, its queue feeds training; the samples exact") {
    withTempDir("cortado-source-class") { dir =>
      val cls = "com.example.sources.SyntheticSource"
      // 95 samples in 3 partitions of batch 10: partial batches at every partition's end.
      val conf = new Config(ss.sparkContext, Array("-conf", solver(dir,
        memoryLayer("TRAIN", cls, "synthetic:95", 10) + memoryLayer("TEST", cls, "synthetic:40",
          8)), "-model", uri(dir, "user.caffemodel"), "-features", "data", "-label", "label"))
      val before = Samples.inits.get
      val train = DataSource.getSource(conf, true)
      assert(train.getClass.getName === cls && train.isTrain)
      // CaffeOnSpark's layer index (the TRAIN layer is the net's first), init() already run.
      assert(train.layerId === conf.train_data_layer_id && train.layerId === 0)
      assert(Samples.inits.get === before + 1)
      assert(train.batchSize() === 10 && train.sourceFilePath === "synthetic:95")
      assert(!train.useCoSDataLayer() && train.getNumTops() === 2)
      assert(train.getTopDataType(0) === null && train.getTopTransformParam(0) === null)
      val test = DataSource.getSource(conf, false)
      assert(test.layerId === 1 && test.batchSize() === 8)

      val cos = new CaffeOnSpark(ss.sparkContext)
      cos.train(train)
      assert(Files.size(dir.resolve("user.caffemodel")) > 0)
      // init() ran again in each of the 3 partitions on the executors.
      assert(Samples.inits.get >= before + 2 + 3)
      val accuracy = cos.test(test)("accuracy").head
      assert(accuracy >= 0.95, accuracy)
      // Every sample once, as the class batched it: the data blob is the sample's features.
      val features = cos.features2(DataSource.getSource(conf, false)).collect()
      assert(features.map(_.getString(0)).sorted.toSeq === (0 until 40).map(i => f"s$i%04d"))
      features.foreach { row =>
        val i = row.getString(0).drop(1).toInt
        assert(row.getSeq[Float](1) === Samples.features(i).toSeq, row)
        assert(row.getSeq[Float](2) === Seq((i % 2).toFloat), row)
      }
    }
  }

  test("an ImageDataSource of one's own (makeRDD only) through the main class and the API") {
    withTempDir("cortado-image-class") { dir =>
      // 2 x 2 gray images: label 1 bright on the left column, label 0 on the right.
      def lines(n: Int, from: Int) = (from until from + n).map { i =>
        val label = i % 2
        val (bright, dark) = (200 + i % 50, 10 + i % 30)
        val pixels = if (label == 1) Seq(bright, dark, bright, dark) else Seq(dark, bright,
          dark, bright)
        (s"img$i,$label," + pixels.mkString(","), i, pixels)
      }
      val trainLines = lines(120, 0)
      val testLines = lines(30, 1000)
      Files.write(dir.resolve("train.csv"), trainLines.map(_._1).asJava)
      Files.write(dir.resolve("test.csv"), testLines.map(_._1).asJava)
      val cls = "com.example.sources.CsvImageSource"
      val shape = "channels: 1 height: 2 width: 2"
      val solverFile = solver(dir,
        memoryLayer("TRAIN", cls, uri(dir, "train.csv"), 12, shape).replace(
          "include { phase: TRAIN }", "include { phase: TRAIN } transform_param { scale: 0.01 }") +
          memoryLayer("TEST", cls, uri(dir, "test.csv"), 10, shape).replace(
            "include { phase: TEST }", "include { phase: TEST } transform_param { scale: 0.01 }"))
      val model = uri(dir, "images.caffemodel")
      val trained = CortadoOnSparkSuite.runMain(ss, Seq("-train", "-conf", solverFile,
        "-model", model, "-clusterSize", "1"))
      assert(trained.code === 0, trained.err)
      assert(trained.out.contains(s"Model written to $model"), trained.out)
      val tested = CortadoOnSparkSuite.runMain(ss, Seq("-test", "-conf", solverFile,
        "-model", model))
      assert(tested.code === 0, tested.err)
      val accuracy = """accuracy = ([0-9.]+)""".r.findFirstMatchIn(tested.out)
        .map(_.group(1).toDouble)
      assert(accuracy.exists(_ >= 0.95), tested.out)

      // The pixels arrive as the image holds them (the layer's scale applies after the feed).
      val conf = new Config(ss.sparkContext, Array("-conf", solverFile, "-model", model,
        "-features", "data"))
      val rows = new CaffeOnSpark(ss.sparkContext).features2(DataSource.getSource(conf, false))
        .collect()
      assert(rows.length === 30)
      val expected = testLines.map { case (_, i, pixels) => s"img$i" -> pixels }.toMap
      rows.foreach { row =>
        val pixels = expected(row.getString(0)).map(_ * 0.01f)
        row.getSeq[Float](1).zip(pixels).foreach { case (a, b) => assert(math.abs(a - b) < 1e-5) }
      }
    }
  }

  test("a DataFrameSource of one's own on a CoSData layer: its makeRDD, the built-in batching") {
    withTempDir("cortado-row-class") { dir =>
      def csv(name: String, n: Int) = Files.write(dir.resolve(name), (0 until n).map { i =>
        s"r$i,${i % 2}," + Samples.features(i).mkString(",")
      }.asJava)
      csv("train.csv", 100)
      csv("test.csv", 30)
      def cos(phase: String, source: String, batch: Int) = CaffeOnSparkApiSuite.cosLayer(phase,
        batch, source, "com.example.sources.CsvRowSource")
      val conf = new Config(ss.sparkContext, Array("-conf", solver(dir,
        cos("TRAIN", uri(dir, "train.csv"), 10) + cos("TEST", uri(dir, "test.csv"), 10)),
        "-model", uri(dir, "rows.caffemodel")))
      val source = DataSource.getSource(conf, true)
      assert(source.isInstanceOf[DataFrameSource] && source.useCoSDataLayer())
      assert(source.getTopDataType(0).toString === "FLOAT_ARRAY")
      val api = new CaffeOnSpark(ss.sparkContext)
      api.train(source)
      val accuracy = api.test(DataSource.getSource(conf, false))("accuracy").head
      assert(accuracy >= 0.95, accuracy)
    }
  }

  test("a subclass of LMDB goes through the queue and feeds what LMDB itself feeds") {
    CaffeOnSparkCommandsSuite.withLeNet { (dir, solverFile) =>
      val sc = ss.sparkContext
      val args = Array("-conf", solverFile, "-model", uri(dir, "lenet.caffemodel"),
        "-features", "data", "-label", "label")
      val cos = new CaffeOnSpark(sc)
      val native = DataSource.getSource(new Config(sc, args), false)
      assert(native.getClass === classOf[LMDB])
      // LMDB's makeRDD: CaffeOnSpark's samples, one per record.
      val records = native.asInstanceOf[LMDB].makeRDD(sc).collect()
      assert(records.length === 100 && records.forall(r => r._4 == 8 && r._5 == 8))
      CortadoSuite.untrainedModel(dir, new String(Files.readAllBytes(
        dir.resolve("conf/lenet_memory_train_test.prototxt")), "UTF-8"))
      Files.copy(dir.resolve("untrained.caffemodel"), dir.resolve("lenet.caffemodel"))
      def byId(source: DataSource[_, _]) = cos.features2(source).collect()
        .map(r => r.getString(0) -> (r.getSeq[Float](1), r.getSeq[Float](2))).toMap
      val expected = byId(native)
      val net = dir.resolve("conf/lenet_memory_train_test.prototxt")
      Files.write(net, new String(Files.readAllBytes(net), "UTF-8")
        .replace("com.yahoo.ml.caffe.LMDB", "com.example.sources.QueuedLmdb").getBytes("UTF-8"))
      val queued = DataSource.getSource(new Config(sc, args), false)
      assert(queued.getClass.getName === "com.example.sources.QueuedLmdb")
      val got = byId(queued)
      assert(got.size === 100 && got === expected)
    }
  }

  test("a class that cannot serve is refused, naming the layer and the class") {
    withTempDir("cortado-bad-class") { dir =>
      def refused(cls: String, run: Boolean = false): String = {
        val conf = new Config(ss.sparkContext, Array("-conf", solver(dir,
          memoryLayer("TRAIN", cls, "synthetic:30", 10)), "-model", uri(dir, "m.caffemodel")))
        val e = intercept[Exception] {
          val source = DataSource.getSource(conf, true)
          if (run) new CaffeOnSpark(ss.sparkContext).train(source)
        }
        val text = messages(e)
        assert(text.contains("layer 'data' (MemoryData)") && text.contains(cls), text)
        text
      }
      assert(refused("com.example.sources.Missing").contains("--jars"))
      assert(refused("com.example.sources.NotASource")
        .contains("does not extend io.cortado.caffeonspark.DataSource"))
      assert(refused("com.example.sources.NoConstructorSource").contains("no public constructor"))
      assert(refused("com.example.sources.RefusingSource").contains("init() returned false"))
      assert(refused("com.example.sources.WrongHolderSource", run = true)
        .contains("Array[Array[Float]]"))
      assert(refused("com.example.sources.EndlessSource", run = true)
        .contains("must return false once it has taken STOP_MARK"))
      assert(refused("com.example.sources.FailingSource", run = true)
        .contains("sample s0007 is bad"))
    }
  }
}
