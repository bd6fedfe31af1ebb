// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.RandomAccessFile
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}

import scala.concurrent.{Await, Future}
import scala.concurrent.ExecutionContext.Implicits.global
import scala.concurrent.duration._
import scala.util.Random

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.types._
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir
import io.cortado.jni.NativeNet
import io.cortado.spark.CortadoSuite.{separable, write}

object JobPlanSuite {

  /** The layers of CortadoSuite.TinyNet, each without its `layer { ... }`. */
  private def tinyLayers(feedSyntax: (String, Int) => String): Seq[String] = Seq(
    feedSyntax("TRAIN", 8),
    feedSyntax("TEST", 10),
    """name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      |  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.01 } }"""
      .stripMargin,
    """name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss"""",
    """name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy"
      |  include { phase: TEST }""".stripMargin)

  /**
   * CortadoSuite.TinyNet in protobuf's list syntax wherever a field repeats: `layer [ {...},
   * {...} ]`, `top: ["data", "label"]`, `include [ { phase: TRAIN } ]` and the feed's tops.
   */
  val TinyNetAsLists: String = {
    def feed(phase: String, batch: Int): String =
      s"""name: "data" type: "CoSData" top: ["data", "label"]
        |  include [ { phase: $phase } ]
        |  source_class: "com.yahoo.ml.caffe.DataFrameSource"
        |  cos_data_param { batch_size: $batch
        |    top [ { name: "features" type: FLOAT_ARRAY channels: 4 sample_num_axes: 1 },
        |          { name: "label" type: INT channels: 1 sample_num_axes: 0 } ] }""".stripMargin
    "name: \"tiny\"\nlayer [\n" + tinyLayers(feed).map(l => s"  { $l }").mkString(",\n") + "\n]\n"
  }

  /** CortadoSuite.TinySolver with `test_iter` in list syntax. */
  val TinySolverAsLists: String = CortadoSuite.TinySolver.replace("test_iter: 1", "test_iter: [1]")

  /** The columns of CortadoSuite.separable. */
  val Schema: StructType = StructType(Seq(StructField("id", LongType),
    StructField("features", ArrayType(FloatType, containsNull = false)),
    StructField("label", IntegerType)))

  /**
   * Texts no parser should take, each with what it is: none may hang the driver or make it
   * allocate without bound.
   */
  val Hostile: Seq[(String, Array[Byte])] = {
    val mb = 1 << 20
    val garbage = new Array[Byte](64 << 10)
    new Random(5).nextBytes(garbage)
    Seq[(String, String)](
      "an empty file" -> "",
      "an unterminated string" -> "name: \"tiny\nlayer { name: \"ip\" type: \"InnerProduct\" }\n",
      "an unclosed brace" -> "layer { name: \"ip\" type: \"InnerProduct\"\n  layer {\n",
      "a stray closing brace" -> "layer { name: \"ip\" type: \"InnerProduct\" } }\n",
      "'[' without ']'" -> "layer [ { name: \"ip\" type: \"InnerProduct\" },\n",
      "a list of scalars without ']'" -> "layer { name: \"ip\" top: [\"a\", \"b\"\n",
      "1 MiB of '['" -> "[" * mb,
      "a field and 1 MiB of '['" -> ("layer " + "[" * mb),
      "a field and 1 MiB of '{'" -> ("layer " + "{" * mb),
      "200,000 opened messages" -> ("layer { " * 200000),
      "200,000 layers without a type in a list" ->
        ("layer [ " + Seq.fill(200000)("{ }").mkString(", ") + " ]"))
      .map { case (what, text) => what -> text.getBytes(StandardCharsets.UTF_8) } :+
      ("binary garbage" -> garbage)
  }
}

/**
 * The driver's reading of solver and net (JobPlan, DataSource): the texts go to the native
 * parser whole, so protobuf's list syntax means what it means to `cortado train`, and no text
 * makes the driver hang or run out of memory.
 */
class JobPlanSuite extends AnyFunSuite with PerTest {
  import JobPlanSuite._

  private val hadoopConf = new Configuration()

  /** The solver and net of `dir`, as Cortado would read them (TRAIN, with validation). */
  private def plan(dir: Path): Plan =
    JobPlan.make(Config(dir.resolve("solver.prototxt").toString), NativeNet.TRAIN, Schema,
      Some(Schema), hadoopConf)

  /** `body` within `seconds`, else a failure saying that it did not finish. */
  private def within[T](seconds: Int, what: String)(body: => T): T = {
    val f = Future(body)
    try Await.result(f, seconds.seconds)
    catch {
      case _: java.util.concurrent.TimeoutException => fail(s"$what: no result in $seconds s")
    }
  }

  test("a net and solver in list syntax plan as the same net in repeated fields") {
    withTempDir("cortado-lists") { dir =>
      write(dir, "net.prototxt", TinyNetAsLists)
      write(dir, "solver.prototxt", TinySolverAsLists)
      val lists = within(30, "planning the list syntax")(plan(dir))
      write(dir, "net.prototxt", CortadoSuite.TinyNet)
      write(dir, "solver.prototxt", CortadoSuite.TinySolver)
      val fields = plan(dir)
      assert(lists.netConf.feedLayer === "TRAIN/data")
      assert(lists.netConf.batchSize === 8)
      assert(lists.specs === fields.specs)
      assert(lists.validation.map(v => (v.feedLayer, v.specs)) ===
        fields.validation.map(v => (v.feedLayer, v.specs)))
      assert(lists.info.testIter.toSeq === Seq(1))
      // The main class's data source, once the feed layers name one.
      def withSource(net: String) = net.replace("cos_data_param { batch_size: ",
        "cos_data_param { source: \"file:/data/test.parquet\" batch_size: ")
      val solver = dir.resolve("solver.prototxt").toString
      write(dir, "net.prototxt", withSource(CortadoSuite.TinyNet))
      val source = DataSource.of(solver, "TEST", hadoopConf)
      assert(source === DataFrameSource("data", "file:/data/test.parquet", "parquet",
        "com.yahoo.ml.caffe.DataFrameSource"))
      write(dir, "net.prototxt", withSource(TinyNetAsLists))
      write(dir, "solver.prototxt", TinySolverAsLists)
      assert(DataSource.of(solver, "TEST", hadoopConf) === source)
    }
  }

  test("a net in list syntax trains and validates exactly as in repeated fields") {
    def run(net: String, solver: String): (Seq[String], Array[Byte]) =
      withTempDir("cortado-lists") { dir =>
        write(dir, "net.prototxt", net)
        val config = Config(write(dir, "solver.prototxt", solver),
          model = dir.resolve("m.caffemodel").toUri.toString)
        val tests = new Cortado(ss).trainWithValidation(separable(ss, 200, 7),
          separable(ss, 40, 11), config).collect().map(_.toString).toSeq
        (tests, Files.readAllBytes(dir.resolve("m.caffemodel")))
      }
    val (listTests, listModel) = run(TinyNetAsLists, TinySolverAsLists)
    val (fieldTests, fieldModel) = run(CortadoSuite.TinyNet, CortadoSuite.TinySolver)
    assert(listTests.size === 6, listTests)
    assert(listTests === fieldTests)
    assert(listModel.toSeq === fieldModel.toSeq)
  }

  test("hostile net and solver texts fail fast in the driver, naming the file") {
    withTempDir("cortado-hostile") { dir =>
      val net = dir.resolve("net.prototxt").toString
      val solver = dir.resolve("solver.prototxt").toString
      def refused(what: String, file: String): Unit = {
        val e = within(20, what)(intercept[CortadoConfigException](plan(dir)))
        assert(e.getMessage.startsWith(s"$file:"), s"$what: ${e.getMessage}")
      }
      Hostile.foreach { case (what, text) =>
        val t0 = System.nanoTime()
        // As the net of a good solver, as the solver, and as the net embedded in a solver.
        write(dir, "solver.prototxt", CortadoSuite.TinySolver)
        Files.write(dir.resolve("net.prototxt"), text)
        refused(s"$what as the net", net)
        write(dir, "net.prototxt", CortadoSuite.TinyNet)
        Files.write(dir.resolve("solver.prototxt"), text)
        refused(s"$what as the solver", solver)
        Files.write(dir.resolve("solver.prototxt"),
          "max_iter: 10\nnet_param {\n".getBytes(StandardCharsets.UTF_8) ++ text)
        refused(s"$what in the solver's net_param", solver)
        val seconds = (System.nanoTime() - t0) / 1e9
        assert(seconds < 10, s"$what: $seconds s")
      }
    }
  }

  test("a file too large for a prototxt is refused before it is read, naming it") {
    withTempDir("cortado-large") { dir =>
      write(dir, "solver.prototxt", CortadoSuite.TinySolver)
      val net = dir.resolve("net.prototxt")
      // Sparse: no disk blocks, and the driver must not read them either.
      val file = new RandomAccessFile(net.toFile, "rw")
      try file.setLength(JobPlan.MaxPrototxtBytes + 1)
      finally file.close()
      val e = within(20, "a large net")(intercept[CortadoConfigException](plan(dir)))
      assert(e.getMessage === s"$net is ${JobPlan.MaxPrototxtBytes + 1} bytes, more than a " +
        "prototxt may be (64 MiB): is it the right file?")
    }
  }
}
