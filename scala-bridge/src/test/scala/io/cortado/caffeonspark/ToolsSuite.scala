// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import java.awt.image.BufferedImage
import java.io.{ByteArrayInputStream, ByteArrayOutputStream, ObjectInputStream, PrintStream}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}
import java.util.Base64
import javax.imageio.ImageIO

import scala.collection.JavaConverters._

import org.apache.hadoop.io.BytesWritable
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir
import io.cortado.caffeonspark.tools.{Binary2DataFrame, Binary2Sequence, LMDB2DataFrame,
  LMDB2Sequence, Tool}
import io.cortado.jni.NativeLmdbSuite
import io.cortado.spark.{CortadoOnSparkSuite, CortadoSuite, ImageSource, LmdbSourceSuite, PerTest}

object ToolsSuite {

  /** Pixel (x, y) of image i as (r, g, b). */
  def pixel(i: Int, x: Int, y: Int): (Int, Int, Int) =
    ((40 * i + 10 * x) % 256, (30 * y + i) % 256, (7 * i + x * y) % 256)

  /** Image i, `w` x `h`, as a PNG file (lossless, so that decoding gives [[pixel]] back). */
  def png(i: Int, w: Int, h: Int): Array[Byte] = {
    val img = new BufferedImage(w, h, BufferedImage.TYPE_INT_RGB)
    for (y <- 0 until h; x <- 0 until w) {
      val (r, g, b) = pixel(i, x, y)
      img.setRGB(x, y, (r << 16) | (g << 8) | b)
    }
    val out = new ByteArrayOutputStream
    assert(ImageIO.write(img, "png", out))
    out.toByteArray
  }

  /** Image i as a data layer gets it: planar B, G, R, each row after row, as floats. */
  def bgr(i: Int, w: Int, h: Int): Seq[Float] =
    for (c <- 0 until 3; y <- 0 until h; x <- 0 until w) yield {
      val (r, g, b) = pixel(i, x, y)
      Seq(b, g, r)(c).toFloat
    }

  /**
   * `n` PNG files img<i>.png (4 x 4) in `dir/images` and `dir/images/labels.txt` holding
   * `lines` (by default `img<i>.png <i mod 2>`); returns the image root and the label file as
   * `file:` paths, and the files' bytes.
   */
  def imageFolder(dir: Path, n: Int, lines: Option[Seq[String]] = None)
      : (String, String, Seq[Array[Byte]]) = {
    val root = Files.createDirectories(dir.resolve("images"))
    val files = (0 until n).map { i =>
      val bytes = png(i, 4, 4)
      Files.write(root.resolve(s"img$i.png"), bytes)
      bytes
    }
    val text = lines.getOrElse((0 until n).map(i => s"img$i.png ${i % 2}"))
    val labels = Files.write(root.resolve("labels.txt"),
      text.mkString("", "\n", "\n").getBytes(StandardCharsets.UTF_8))
    (s"file:$root", s"file:$labels", files)
  }

  /** The key of record i in the databases NativeLmdb.convertIdx writes. */
  def key(i: Int): String = f"$i%08d"

  def deserialize(bytes: Array[Byte]): AnyRef = {
    val in = new ObjectInputStream(new ByteArrayInputStream(bytes))
    try in.readObject() finally in.close()
  }

  /** A tool's exit status and what it wrote to stderr. */
  final case class Result(code: Int, err: String)

  type Runner = (Seq[String], () => SparkSession, PrintStream) => Int

  def runTool(tool: Runner, ss: SparkSession, args: String*): Result = {
    val err = new ByteArrayOutputStream
    val code = tool(args, () => ss, new PrintStream(err, true, "UTF-8"))
    Result(code, err.toString("UTF-8"))
  }

  /** The names directly in `dir`. */
  def names(dir: Path): Set[String] = {
    val list = Files.list(dir)
    try list.iterator().asScala.map(_.getFileName.toString).toSet finally list.close()
  }
}

/**
 * CaffeOnSpark's conversion tools and LmdbRDD: each output checked row by row (ids, labels,
 * bytes, shapes), then read back by Cortado's image sources; and each bad input.
 */
class ToolsSuite extends AnyFunSuite with PerTest {
  import ToolsSuite._

  private val b2s: Runner = Binary2Sequence.run
  private val b2df: Runner = Binary2DataFrame.run
  private val l2s: Runner = LMDB2Sequence.run
  private val l2df: Runner = LMDB2DataFrame.run

  /**
   * The sequence file at `path` as (key, value) pairs, the key deserialised, ordered by the
   * key's first field (the id; the part files are listed in no particular order).
   */
  def sequencePairs(path: String): Seq[(Product, Array[Byte])] =
    ss.sparkContext.sequenceFile(path, classOf[BytesWritable], classOf[BytesWritable])
      .map { case (k, v) => (k.copyBytes(), v.copyBytes()) }.collect().toSeq
      .map { case (k, v) => (deserialize(k).asInstanceOf[Product], v) }
      .sortBy(_._1.productElement(0).toString)

  /** `source` read by ImageSource as a data layer of `shape`: id -> (values, label). */
  def readImages(sourceClass: String, source: String, shape: Seq[Int], format: String = "",
      encoded: Boolean = false): Map[String, (Seq[Float], Float)] =
    ImageSource("data", source, sourceClass, format, Nil, encoded, "data", Some("label"), shape,
      "test").load(ss).collect().map { r =>
      r.getString(0) -> (r.getSeq[Float](1), r.getFloat(2))
    }.toMap

  /** An LMDB database of 10 records of 1 x 2 x 3 (NativeLmdbSuite.image), labels i mod 4. */
  def lmdb(dir: Path): String =
    NativeLmdbSuite.lmdb(dir, "db", 2, 3, (0 until 10).map(NativeLmdbSuite.image(_, 6)),
      (0 until 10).map(_ % 4))

  test("Binary2Sequence: makeRDD as CaffeOnSpark's test calls it; main writes (file, label) " +
      "keys and the files' bytes, which SeqImageDataSource reads") {
    withTempDir("cortado-b2s") { dir =>
      val (root, labels, files) = imageFolder(dir, 5)
      val out = s"file:${dir.resolve("seq")}"
      val args = Array("-imageRoot", root, "-labelFile", labels, "-output", out)
      val conf = new Config(ss.sparkContext, args)
      val rdd = new Binary2Sequence(ss.sparkContext, conf).makeRDD()
      assert(rdd.count() === ss.sparkContext.textFile(conf.labelFile).count())
      assert(rdd.count() === 5)

      val r = runTool(b2s, ss, args: _*)
      assert(r.code === 0, r.err)
      val pairs = sequencePairs(out)
      assert(pairs.map(_._1) === (0 until 5).map(i => (s"img$i.png",
        (i % 2).toString)))
      pairs.map(_._2).zip(files).foreach { case (written, file) => assert(written === file) }
      assert(names(dir) === Set("images", "seq"))

      val read = readImages(ImageSource.SequenceClass, out, Seq(3, 4, 4))
      assert(read.keySet === (0 until 5).map(i => s"img$i.png").toSet)
      for (i <- 0 until 5) {
        assert(read(s"img$i.png")._1 === bgr(i, 4, 4))
        assert(read(s"img$i.png")._2 === (i % 2).toFloat)
      }
    }
  }

  test("Binary2DataFrame: SampleID, label, data from 'file label id' lines, in parquet read " +
      "by ImageDataFrame, and in json (the default) with data as base64") {
    withTempDir("cortado-b2df") { dir =>
      val lines = (0 until 4).map(i => s"img$i.png ${3 - i} id-$i")
      val (root, labels, files) = imageFolder(dir, 4, Some(lines))
      val parquet = s"file:${dir.resolve("df.parquet")}"
      val r = runTool(b2df, ss, "-imageRoot", root, "-labelFile", labels, "-output", parquet,
        "-outputFormat", "parquet")
      assert(r.code === 0, r.err)
      val df = ss.read.parquet(parquet)
      assert(df.schema.simpleString === "struct<SampleID:string,label:int,data:binary>")
      val rows = df.collect().sortBy(_.getString(0))
      assert(rows.map(r => (r.getString(0), r.getInt(1))).toSeq ===
        (0 until 4).map(i => (s"id-$i", 3 - i)))
      rows.map(_.getAs[Array[Byte]](2)).zip(files).foreach { case (d, f) => assert(d === f) }

      val read = readImages(ImageSource.DataFrameClass, parquet, Seq(3, 4, 4), "parquet",
        encoded = true)
      assert(read.keySet === (0 until 4).map(i => s"id-$i").toSet)
      for (i <- 0 until 4) assert(read(s"id-$i") === ((bgr(i, 4, 4), (3 - i).toFloat)))

      val json = s"file:${dir.resolve("df.json")}"
      val j = runTool(b2df, ss, "-imageRoot", root, "-labelFile", labels, "-output", json)
      assert(j.code === 0, j.err)
      val jrows = ss.read.json(json).collect().sortBy(_.getAs[String]("SampleID"))
      assert(jrows.map(_.getAs[Long]("label")).toSeq === Seq(3L, 2L, 1L, 0L))
      jrows.map(r => Base64.getDecoder.decode(r.getAs[String]("data"))).zip(files).foreach {
        case (d, f) => assert(d === f)
      }

      // As an RDD of rows, as CaffeOnSpark's makeRDD gave them.
      val conf = new Config(ss.sparkContext, Array("-imageRoot", root, "-labelFile", labels))
      val made = new Binary2DataFrame(ss.sparkContext, conf).makeRDD().collect()
      assert(made.map(r => (r.getString(0), r.getInt(1))).toSeq ===
        (0 until 4).map(i => (s"id-$i", 3 - i)))
      assert(Binary2DataFrame.schema.simpleString ===
        "struct<SampleID:string,label:int,data:binary>")
    }
  }

  test("LmdbRDD: CaffeOnSpark's tuples, every record once in key order over the partitions") {
    withTempDir("cortado-lmdbrdd") { dir =>
      val db = lmdb(dir)
      val rdd = new LmdbRDD(ss.sparkContext, s"file:$db", 3)
      assert(rdd.partitions.length === 3)
      val perPartition = rdd.glom().collect().map(_.length).toSeq
      assert(perPartition === Seq(3, 3, 4))
      val records = rdd.collect().toSeq
      assert(records.map(_._1) === (0 until 10).map(key))
      records.zipWithIndex.foreach { case ((id, label, c, h, w, encoded, data), i) =>
        assert((label, c, h, w, encoded) === (((i % 4).toString, 1, 2, 3, false)), id)
        assert(data.map(_ & 0xff).toSeq === NativeLmdbSuite.image(i, 6), id)
      }
      assert(new LmdbRDD(ss.sparkContext, s"file:$db", 50).partitions.length === 10)
      assert(new LmdbRDD(ss.sparkContext, db, 0).partitions.length ===
        ss.sparkContext.defaultParallelism)
    }
  }

  test("LmdbRDD's pixels: planar values interleaved as OpenCV holds them; a value that is " +
      "not a byte fails naming the record") {
    // 3 channels of 2 pixels: B = (1, 2), G = (3, 4), R = (5, 6).
    val planar = Array[Float](1, 2, 3, 4, 5, 6)
    assert(LmdbRDD.interleave(planar, 3, 2, "r").toSeq === Seq[Byte](1, 3, 5, 2, 4, 6))
    assert(LmdbRDD.interleave(Array[Float](0, 255), 1, 2, "r").map(_ & 0xff).toSeq ===
      Seq(0, 255))
    val e = intercept[CortadoConfigException] {
      LmdbRDD.interleave(Array[Float](1, 0.5f), 1, 2, "LMDB source db: record '00000003'")
    }
    assert(e.getMessage.contains("record '00000003'") && e.getMessage.contains("0.5"),
      e.getMessage)
  }

  test("LMDB2Sequence: (id, label, channels, height, width, encoded) keys and interleaved " +
      "pixels, which SeqImageDataSource reads") {
    withTempDir("cortado-l2s") { dir =>
      val db = lmdb(dir)
      val out = s"file:${dir.resolve("seq")}"
      val r = runTool(l2s, ss, "-imageRoot", s"file:$db", "-output", out, "-lmdb_partitions", "3")
      assert(r.code === 0, r.err)
      val pairs = sequencePairs(out)
      assert(pairs.map(_._1) ===
        (0 until 10).map(i => (key(i), (i % 4).toString, 1, 2, 3, false)))
      pairs.zipWithIndex.foreach { case ((_, value), i) =>
        assert(value.map(_ & 0xff).toSeq === NativeLmdbSuite.image(i, 6))
      }
      assert(new java.io.File(dir.resolve("seq").toString).list().count(_.startsWith("part-"))
        === 3)

      val read = readImages(ImageSource.SequenceClass, out, Seq(1, 2, 3))
      assert(read.size === 10)
      for (i <- 0 until 10) {
        assert(read(key(i)) ===
          ((NativeLmdbSuite.image(i, 6).map(_.toFloat), (i % 4).toFloat)))
      }
    }
  }

  test("LMDB2DataFrame: CaffeOnSpark's columns, read back by ImageDataFrame") {
    withTempDir("cortado-l2df") { dir =>
      val db = lmdb(dir)
      val out = s"file:${dir.resolve("df")}"
      val r = runTool(l2df, ss, "-imageRoot", s"file:$db", "-output", out, "-outputFormat",
        "parquet", "-lmdb_partitions", "2")
      assert(r.code === 0, r.err)
      val df = ss.read.parquet(out)
      assert(df.schema.simpleString === "struct<id:string,label:string,channels:int," +
        "height:int,width:int,encoded:boolean,data:binary>")
      val rows = df.collect().sortBy(_.getString(0))
      assert(rows.length === 10)
      rows.zipWithIndex.foreach { case (row, i) =>
        assert(row.toSeq.take(6) === Seq(key(i), (i % 4).toString, 1, 2, 3,
          false))
        assert(row.getAs[Array[Byte]](6).map(_ & 0xff).toSeq === NativeLmdbSuite.image(i, 6))
      }

      val read = readImages(ImageSource.DataFrameClass, out, Seq(1, 2, 3), "parquet")
      for (i <- 0 until 10) {
        assert(read(key(i)) ===
          ((NativeLmdbSuite.image(i, 6).map(_.toFloat), (i % 4).toFloat)))
      }
    }
  }

  test("LMDB databases converted by LMDB2Sequence and LMDB2DataFrame train a net and test it") {
    withTempDir("cortado-tools-train") { dir =>
      val (trainImages, trainLabels) = LmdbSourceSuite.separable(200, seed = 7)
      val (testImages, testLabels) = LmdbSourceSuite.separable(100, seed = 11)
      val trainDb = NativeLmdbSuite.lmdb(dir, "train_lmdb", 2, 2, trainImages, trainLabels)
      val testDb = NativeLmdbSuite.lmdb(dir, "test_lmdb", 2, 2, testImages, testLabels)
      val (seq, parquet) = (s"file:$dir/train.seq", s"file:$dir/test.parquet")
      assert(runTool(l2s, ss, "-imageRoot", s"file:$trainDb", "-output", seq).code === 0)
      assert(runTool(l2df, ss, "-imageRoot", s"file:$testDb", "-output", parquet,
        "-outputFormat", "parquet").code === 0)
      def layer(phase: String, batch: Int, sourceClass: String, source: String) =
        s"""layer { name: "data" type: "MemoryData" top: "data" top: "label"
          |  include { phase: $phase } source_class: "$sourceClass"
          |  memory_data_param { source: "$source" batch_size: $batch channels: 1 height: 2
          |    width: 2 }
          |  transform_param { scale: 0.00390625 } }
          |""".stripMargin
      CortadoSuite.write(dir, "net.prototxt",
        layer("TRAIN", 8, "com.yahoo.ml.caffe.SeqImageDataSource", seq) +
          layer("TEST", 10, "com.yahoo.ml.caffe.ImageDataFrame", parquet) +
          CortadoOnSparkSuite.Body)
      val solver = CortadoSuite.write(dir, "solver.prototxt",
        """net: "net.prototxt"
          |base_lr: 0.1
          |momentum: 0.9
          |lr_policy: "fixed"
          |max_iter: 100
          |random_seed: 1701
          |""".stripMargin)
      val model = s"file:$dir/net.caffemodel"
      val r = CortadoOnSparkSuite.runMain(ss, Seq("-train", "-test", "-conf", solver, "-model",
        model))
      assert(r.code === 0, r.err)
      val accuracy = r.out.linesIterator.collectFirst {
        case line if line.startsWith("accuracy = ") => line.stripPrefix("accuracy = ").toDouble
      }
      assert(accuracy.exists(_ >= 0.95), r.out)
    }
  }

  test("bad image folders fail naming the path or the label file's line, and leave no output") {
    withTempDir("cortado-b2s-bad") { dir =>
      val lines = Seq("img0.png 0", "img1.png", "img2.png 1")
      val (root, labels, _) = imageFolder(dir, 3, Some(lines))
      val out = dir.resolve("out")
      def check(tool: Runner, args: Seq[String], code: Int, expected: String*): Unit = {
        val r = runTool(tool, ss, args: _*)
        assert(r.code === code, r.err)
        expected.foreach(e => assert(r.err.contains(e), r.err))
        assert(!Files.exists(out))
        assert(names(dir) === Set("images"), "a temporary output is left behind")
      }
      for (tool <- Seq(b2s, b2df)) {
        // A line without a label: the file and line are named.
        check(tool, Seq("-imageRoot", root, "-labelFile", labels, "-output", s"file:$out"), 1,
          s"$labels:2: 'img1.png' is not 'file label'")
        // A missing image root.
        check(tool, Seq("-imageRoot", s"file:$dir/none", "-labelFile", labels, "-output",
          s"file:$out"), 1, s"-imageRoot file:$dir/none does not exist")
        // A missing label file.
        check(tool, Seq("-imageRoot", root, "-labelFile", s"file:$dir/none.txt", "-output",
          s"file:$out"), 1, s"-labelFile file:$dir/none.txt does not exist")
        // Flags missing or unknown.
        check(tool, Seq("-imageRoot", root, "-output", s"file:$out"), Tool.UsageExit,
          "-labelFile must be given", "Usage: ")
        check(tool, Seq("-imageRoot", root, "-labelFile", labels, "-outptu", s"file:$out"),
          Tool.UsageExit, "outptu", "Usage: ")
      }

      // An image the label file names that is not there: its line and path are named.
      val missing = dir.resolve("images/missing.txt")
      Files.write(missing, "img0.png 0\n\nimg9.png 1\n".getBytes(StandardCharsets.UTF_8))
      check(b2s, Seq("-imageRoot", root, "-labelFile", s"file:$missing", "-output",
        s"file:$out"), 1, s"file:$missing:3: cannot read the image", "img9.png")
      // A label file without images.
      val empty = dir.resolve("images/empty.txt")
      Files.write(empty, "\n \n".getBytes(StandardCharsets.UTF_8))
      check(b2df, Seq("-imageRoot", root, "-labelFile", s"file:$empty", "-output",
        s"file:$out"), 1, s"-labelFile file:$empty names no images")
    }
  }

  test("a missing LMDB database fails naming it; an existing output is left as it was") {
    withTempDir("cortado-tools-bad") { dir =>
      val out = dir.resolve("out")
      for (tool <- Seq(l2s, l2df)) {
        val r = runTool(tool, ss, "-imageRoot", s"file:$dir/no_lmdb", "-output", s"file:$out")
        assert(r.code === 1, r.err)
        assert(r.err.contains(s"$dir/no_lmdb"), r.err)
        assert(names(dir) === Set.empty[String])
        val u = runTool(tool, ss, "-output", s"file:$out")
        assert(u.code === Tool.UsageExit && u.err.contains("-imageRoot must be given"), u.err)
      }

      val db = lmdb(dir)
      val (root, labels, _) = imageFolder(dir, 2)
      Files.createDirectories(out)
      Files.write(out.resolve("keep"), Array[Byte](42))
      val runs = Seq(
        runTool(l2s, ss, "-imageRoot", s"file:$db", "-output", s"file:$out"),
        runTool(l2df, ss, "-imageRoot", s"file:$db", "-output", s"file:$out"),
        runTool(b2s, ss, "-imageRoot", root, "-labelFile", labels, "-output", s"file:$out"),
        runTool(b2df, ss, "-imageRoot", root, "-labelFile", labels, "-output", s"file:$out"))
      runs.foreach { r =>
        assert(r.code === 1, r.err)
        assert(r.err.contains(s"-output file:$out already exists"), r.err)
      }
      assert(names(out) === Set("keep"))
      assert(Files.readAllBytes(out.resolve("keep")).toSeq === Seq[Byte](42))
      assert(names(dir) === Set("db", "db-images.idx", "db-labels.idx", "images", "out"))
    }
  }
}
