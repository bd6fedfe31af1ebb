// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.{ByteArrayOutputStream, File, PrintStream}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}

import scala.util.Random

import org.apache.spark.sql.{DataFrame, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.TestDirs.withTempDir
import io.cortado.cli.Options

object CortadoOnSparkSuite {

  /** InnerProduct, SoftmaxWithLoss and (in TEST) Accuracy over the tops "data" and "label". */
  val Body: String =
    """layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      |  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.01 } } }
      |layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
      |layer { name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy"
      |  include { phase: TEST } }
      |""".stripMargin

  final case class Result(code: Int, out: String, err: String)

  /** Runs the main class's logic on session `ss`, capturing what it prints. */
  def runMain(ss: SparkSession, args: Seq[String]): Result = {
    val out = new ByteArrayOutputStream
    val err = new ByteArrayOutputStream
    val code = CortadoOnSpark.run(args, () => ss, new PrintStream(out, true, "UTF-8"),
      new PrintStream(err, true, "UTF-8"))
    Result(code, out.toString("UTF-8"), err.toString("UTF-8"))
  }
}

class CortadoOnSparkSuite extends AnyFunSuite with PerTest {
  import CortadoOnSparkSuite.{Body, Result, runMain}
  import CortadoSuite.write

  /** A CoSData layer for `phase` reading `source` (Parquet unless `format` says otherwise). */
  def cosLayer(phase: String, batch: Int, source: String, extra: String = ""): String =
    s"""layer { name: "data" type: "CoSData" top: "data" top: "label"
      |  include { phase: $phase }
      |  source_class: "com.yahoo.ml.caffe.DataFrameSource"
      |  cos_data_param { source: "$source" batch_size: $batch $extra
      |    top { name: "features" type: FLOAT_ARRAY channels: 4 sample_num_axes: 1 }
      |    top { name: "label" type: INT channels: 1 sample_num_axes: 0 } } }
      |""".stripMargin

  /** Two separable classes: label 1 near (1, 1, 0, 0), label 0 near (0, 0, 1, 1). */
  def separable(n: Int, seed: Int): DataFrame = {
    val random = new Random(seed)
    val rows = (0 until n).map { i =>
      val label = i % 2
      val center = if (label == 1) Seq(1f, 1f, 0f, 0f) else Seq(0f, 0f, 1f, 1f)
      (i.toLong, center.map(_ + 0.2f * random.nextGaussian().toFloat), label)
    }
    ss.createDataFrame(rows).toDF("id", "features", "label")
  }

  /** Runs the main class's logic on this suite's session, capturing what it prints. */
  def cos(args: String*): Result = runMain(ss, args)

  /** Solver and net in `dir`, the net reading train.parquet and test.parquet there. */
  def withData[T](body: (Path, String) => T): T = withTempDir("cortado-main") { dir =>
    val train = dir.resolve("train.parquet").toUri.toString
    val test = dir.resolve("test.parquet").toUri.toString
    separable(200, seed = 7).write.parquet(train)
    separable(100, seed = 11).write.parquet(test)
    write(dir, "net.prototxt",
      "name: \"tiny\"\n" + cosLayer("TRAIN", 8, train) + cosLayer("TEST", 10, test) + Body)
    val solver = write(dir, "solver.prototxt",
      """net: "net.prototxt"
        |test_iter: 1
        |test_interval: 20
        |base_lr: 0.1
        |momentum: 0.9
        |lr_policy: "fixed"
        |max_iter: 100
        |display: 25
        |random_seed: 1701
        |""".stripMargin)
    body(dir, solver)
  }

  def uri(dir: Path, name: String): String = dir.resolve(name).toUri.toString

  test("-train, then -test, then -features on Parquet sources named by the CoSData layers") {
    withData { (dir, solver) =>
      val model = uri(dir, "model/tiny.caffemodel")
      val trained = cos("-train", "-conf", solver, "-model", model)
      assert(trained.code === 0, trained.err)
      assert(Files.size(dir.resolve("model/tiny.caffemodel")) > 0)

      // Caffe's format on stdout; no -output given: nothing written.
      val tested = cos("-test", "-conf", solver, "-model", model)
      assert(tested.code === 0, tested.err)
      val metrics = tested.out.linesIterator.collect {
        case line if line.contains(" = ") =>
          val Array(k, v) = line.split(" = ")
          k -> v.toDouble
      }.toMap
      assert(metrics.keySet === Set("accuracy", "loss"), tested.out)
      assert(metrics("accuracy") >= 0.95, tested.out)
      assert(tested.out.linesIterator.next().matches("accuracy = [0-9.]+"), tested.out)
      assert(!Files.exists(dir.resolve("output")) && !Files.exists(new File("output").toPath))

      // Features: SampleID (the id column as a string), the blobs and the label, one row per
      // input row, in the default json.
      val features = cos("-features", "ip", "-label", "label", "-conf", solver, "-model", model,
        "-output", uri(dir, "features"))
      assert(features.code === 0, features.err)
      val rows = ss.read.json(uri(dir, "features"))
      assert(rows.columns.toSet === Set("SampleID", "ip", "label"))
      assert(rows.count() === 100)
      assert(rows.select("SampleID").collect().map(_.getString(0).toLong).sorted.toSeq ===
        (0L until 100L))
      val labels = rows.collect().map { r =>
        val ip = r.getSeq[Double](r.fieldIndex("ip"))
        (if (ip(1) > ip(0)) 1.0 else 0.0) -> r.getSeq[Double](r.fieldIndex("label")).head
      }
      assert(labels.count { case (predicted, label) => predicted == label } >= 95)
    }
  }

  test("-clusterSize 2 -connection ethernet trains on 2 workers; -comm names a backend") {
    withData { (dir, solver) =>
      val model = uri(dir, "tiny.caffemodel")
      val trained = cos("-train", "-test", "-conf", solver, "-model", model, "-clusterSize", "2",
        "-connection", "ethernet")
      assert(trained.code === 0, trained.err)
      val accuracy = trained.out.linesIterator.collectFirst {
        case line if line.startsWith("accuracy = ") => line.stripPrefix("accuracy = ").toDouble
      }
      assert(accuracy.exists(_ >= 0.95), trained.out)
      val bad = cos("-train", "-conf", solver, "-model", model, "-comm", "smoke-signals")
      assert(bad.code === CortadoOnSpark.UsageExit)
      assert(bad.err.contains("-comm must be tcp, ucx, mpi or nccl, not 'smoke-signals'"), bad.err)
      // 2 workers of 3 CPU replicas each.
      val replicas = cos("-train", "-conf", solver, "-model", uri(dir, "other.caffemodel"),
        "-clusterSize", "2", "-comm", "tcp", "-devices", "3")
      assert(replicas.code === 0, replicas.err)
      assert(Files.size(dir.resolve("other.caffemodel")) > 0)
    }
  }

  test("-train -test in one run writes the metrics to -output: CaffeOnSpark's text file, or " +
    "with -testDataFrame parquet and json") {
    withData { (dir, solver) =>
      val model = uri(dir, "tiny.caffemodel")
      val both = cos("-train", "-test", "-conf", solver, "-model", model,
        "-output", uri(dir, "metrics"), "-outputFormat", "parquet", "-testDataFrame")
      assert(both.code === 0, both.err)
      assert(both.out.contains(s"Model written to $model"))
      val printed = both.out.linesIterator.filter(_.startsWith("accuracy = ")).toSeq
      assert(printed.size === 1)
      val saved = ss.read.parquet(uri(dir, "metrics")).collect()
        .map(r => r.getString(0) -> r.getDouble(1)).toMap
      assert(saved.keySet === Set("accuracy", "loss"))
      assert(printed.head === s"accuracy = ${CortadoOnSpark.caffeFormat(saved("accuracy"))}")

      val json = cos("-test", "-conf", solver, "-model", model, "-output", uri(dir, "json"),
        "-testDataFrame")
      assert(json.code === 0, json.err)
      assert(ss.read.json(uri(dir, "json")).collect()
        .map(r => r.getAs[String]("metric") -> r.getAs[Double]("value")).toMap === saved)

      // Without -testDataFrame: "name: value" lines in a file, as CaffeOnSpark wrote them; an
      // existing file is replaced, and a repeated flag and a stray argument only warn.
      Files.write(dir.resolve("results.txt"), "old".getBytes(StandardCharsets.UTF_8))
      val text = cos("-test", "-conf", solver, "-model", model, "-output",
        uri(dir, "results.txt"), "-model", uri(dir, "missing.caffemodel"), "stray")
      assert(text.code === 0, text.err)
      assert(text.err.contains("CortadoOnSpark: warning: -model given twice"), text.err)
      assert(text.err.contains("CortadoOnSpark: warning: argument 'stray' is not a flag"))
      val lines = new String(Files.readAllBytes(dir.resolve("results.txt")),
        StandardCharsets.UTF_8).linesIterator.toSeq
      assert(lines.map(_.split(": ")(0)) === Seq("accuracy", "loss"), lines)
      lines.foreach { line =>
        val Array(name, value) = line.split(": ")
        assert(value.toDouble === saved(name), line)
      }

      val parquet = cos("-features", "ip", "-conf", solver, "-model", model,
        "-outputFormat", "parquet", "-output", uri(dir, "features"))
      assert(parquet.code === 0, parquet.err)
      val features = ss.read.parquet(uri(dir, "features"))
      assert(features.schema.simpleString === "struct<SampleID:string,ip:array<float>>")
      assert(features.count() === 100)
    }
  }

  test("bad flag combinations print the usage and exit 2 without starting Spark") {
    def noSpark(): SparkSession = fail("the SparkSession must not be created")
    Seq(
      Seq("-train", "-conf", "s.prototxt") -> "-model is required",
      Seq("-label", "label", "-test", "-conf", "s", "-model", "m") -> "-label adds a blob",
      Seq("-train", "-conf", "s", "-model", "m", "-bogus") -> "unknown flag '-bogus'",
      Seq("-test", "-conf", "s", "-model", "m", "-outputFormat", "csv") -> "json or parquet"
    ).foreach { case (args, message) =>
      val out = new ByteArrayOutputStream
      val err = new ByteArrayOutputStream
      val code = CortadoOnSpark.run(args, () => noSpark(), new PrintStream(out),
        new PrintStream(err))
      val text = err.toString("UTF-8")
      assert(code === CortadoOnSpark.UsageExit)
      assert(text.contains(message), text)
      assert(text.contains(Options.Usage) && text.contains("memory_data_param.source"), text)
      assert(out.size() === 0)
    }

    // The real main exits with that status (a JVM of its own: main calls System.exit).
    val java = new File(System.getProperty("java.home"), "bin/java").getPath
    val process = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
      "io.cortado.spark.CortadoOnSpark", "-test", "-conf", "s.prototxt")
      .redirectErrorStream(true).start()
    val printed = new String(process.getInputStream.readAllBytes(), StandardCharsets.UTF_8)
    assert(process.waitFor() === CortadoOnSpark.UsageExit, printed)
    assert(printed.contains("CortadoOnSpark: -model is required") &&
      printed.contains("Usage: spark-submit"), printed)
  }

  test("Data layers and missing sources fail with exit 1 and say what is supported") {
    withTempDir("cortado-main") { dir =>
      val lmdbNet = write(dir, "lmdb.prototxt",
        """layer { name: "mnist" type: "Data" top: "data" top: "label"
          |  data_param { source: "mnist_train_lmdb" batch_size: 8 backend: LMDB } }
          |""".stripMargin + Body)
      val lmdb = write(dir, "lmdb_solver.prototxt", s"""net: "$lmdbNet"\nbase_lr: 0.1\n""")
      val r = cos("-train", "-conf", lmdb, "-model", uri(dir, "m"))
      assert(r.code === CortadoOnSpark.FailureExit)
      assert(r.err.contains("the TRAIN net has no CoSData layer") &&
        r.err.contains("reads mnist_train_lmdb: Data layers (LMDB or LevelDB) are not read " +
          "through Spark: name the LMDB database in a MemoryData layer with source_class: " +
          "\"com.yahoo.ml.caffe.LMDB\""), r.err)

      val classNet = write(dir, "class.prototxt",
        cosLayer("TRAIN", 8, "mnist_lmdb").replace("DataFrameSource", "LMDB") + Body)
      val byClass = write(dir, "class_solver.prototxt", s"""net: "$classNet"\nbase_lr: 0.1\n""")
      val c = cos("-train", "-conf", byClass, "-model", uri(dir, "m"))
      assert(c.code === CortadoOnSpark.FailureExit)
      assert(c.err.contains("class.prototxt: layer 'data' (CoSData): LMDB database '" +
        new File("mnist_lmdb").getAbsolutePath + "' does not exist"), c.err)

      val noSource = write(dir, "nosource.prototxt",
        cosLayer("TEST", 8, "").replace("source: \"\"", "") + Body)
      val none = write(dir, "none_solver.prototxt", s"""net: "$noSource"\nbase_lr: 0.1\n""")
      val n = cos("-test", "-conf", none, "-model", uri(dir, "m"))
      assert(n.code === CortadoOnSpark.FailureExit)
      assert(n.err.contains("cos_data_param.source is not set"), n.err)
    }
  }

  test("a bad row fails in the task; the main class prints the Cortado message, exit 1") {
    withTempDir("cortado-main") { dir =>
      val source = uri(dir, "bad.parquet")
      ss.createDataFrame(Seq((0L, Seq(1f, 2f, 3f, 4f, 5f), 0))).toDF("id", "features", "label")
        .write.parquet(source)
      val net = write(dir, "net.prototxt", cosLayer("TRAIN", 8, source) + Body)
      val solver = write(dir, "solver.prototxt",
        s"""net: "$net"\nbase_lr: 0.1\nlr_policy: "fixed"\nmax_iter: 5\n""")
      val r = cos("-train", "-conf", solver, "-model", uri(dir, "m.caffemodel"))
      assert(r.code === CortadoOnSpark.FailureExit)
      assert(r.err.trim === "CortadoOnSpark: column 'features' (array<float>): top 'data' of " +
        "layer 'data' needs samples of shape 4 (4 floats); row 0 has 5 values", r.err)
    }
  }

  test("a CoSData source in another DataFrame format (dataframe_format: json)") {
    withTempDir("cortado-main") { dir =>
      val source = uri(dir, "train.json")
      separable(40, seed = 3).write.json(source)
      val net = write(dir, "net.prototxt",
        cosLayer("TRAIN", 8, source, "dataframe_format: \"json\"") + Body)
      val solver = write(dir, "solver.prototxt",
        s"""net: "$net"\nbase_lr: 0.1\nlr_policy: "fixed"\nmax_iter: 5\n""")
      val spec = DataSource.of(solver, "TRAIN", ss.sparkContext.hadoopConfiguration)
      assert(spec === DataFrameSource("data", source, "json", "com.yahoo.ml.caffe.DataFrameSource"))
      val r = cos("-train", "-conf", solver, "-model", uri(dir, "m.caffemodel"))
      assert(r.code === 0, r.err)
      assert(Files.size(dir.resolve("m.caffemodel")) > 0)
    }
  }

  test("caffeFormat prints six significant digits as Caffe's log does") {
    assert(CortadoOnSpark.caffeFormat(0.8912000000000001) === "0.8912")
    assert(CortadoOnSpark.caffeFormat(0.30576401948928833) === "0.305764")
    assert(CortadoOnSpark.caffeFormat(1.0) === "1")
    assert(CortadoOnSpark.caffeFormat(0.0) === "0")
  }
}
