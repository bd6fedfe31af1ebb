// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.awt.image.BufferedImage
import java.io.{ByteArrayOutputStream, ObjectOutputStream}
import java.nio.file.{Files, Path}
import javax.imageio.ImageIO

import scala.util.Random

import org.apache.hadoop.io.BytesWritable
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir
import io.cortado.data.ImageFolder
import io.cortado.jni.NativeImage

/**
 * Images through Spark as CaffeOnSpark's users bring them: a folder of JPEG files with a label
 * file (ImageFolder, CaffeOnSpark's Binary2DataFrame), read by a MemoryData layer with
 * `source_class` ImageDataFrame, the same images in a sequence file (SeqImageDataSource), and
 * JPEG bytes in a DataFrame's binary column read by a CoSData layer; one corrupt file among
 * them. The images are 16 x 16 and the nets take 8 x 8: `-resize`.
 */
class ImageSourceSuite extends AnyFunSuite with PerTest {
  import CortadoOnSparkSuite.Body
  import CortadoSuite.write

  /** A `size` x `size` color image: class 0 reddish, class 1 bluish, with noise. */
  def image(label: Int, random: Random, size: Int = 16): BufferedImage = {
    val img = new BufferedImage(size, size, BufferedImage.TYPE_3BYTE_BGR)
    for (y <- 0 until size; x <- 0 until size) {
      def noisy(v: Int) = math.max(0, math.min(255, v + (20 * random.nextGaussian()).round.toInt))
      val (r, g, b) = if (label == 0) (200, 60, 40) else (40, 60, 200)
      img.setRGB(x, y, (noisy(r) << 16) | (noisy(g) << 8) | noisy(b))
    }
    img
  }

  def encode(img: BufferedImage, format: String): Array[Byte] = {
    val out = new ByteArrayOutputStream
    assert(ImageIO.write(img, format, out), s"no ImageIO writer for $format")
    out.toByteArray
  }

  /** 48 JPEG files (24 per class) and labels.txt in `dir/images`; file 7 is cut short. */
  def imageFolder(dir: Path): (String, String, Seq[(String, Int, Array[Byte])]) = {
    val random = new Random(5)
    val root = Files.createDirectories(dir.resolve("images"))
    val images = (0 until 48).map { i =>
      val label = i % 2
      val bytes = encode(image(label, random), "jpg")
      val name = f"img$i%02d.jpg"
      val written = if (i == 7) bytes.take(bytes.length / 3) else bytes
      Files.write(root.resolve(name), written)
      (name, label, written)
    }
    val labels = write(root, "labels.txt", images.map { case (n, l, _) => s"$n $l" }
      .mkString("", "\n", "\n"))
    (root.toUri.toString, labels, images)
  }

  def memoryNet(sourceClass: String, train: String, test: String, select: String = ""): String =
    Seq(("TRAIN", train, 8), ("TEST", test, 10)).map { case (phase, source, batch) =>
      s"""layer { name: "data" type: "MemoryData" top: "data" top: "label"
        |  include { phase: $phase } source_class: "$sourceClass"
        |  memory_data_param { source: "$source" batch_size: $batch channels: 3 height: 8
        |    width: 8 $select }
        |  transform_param { scale: 0.00390625 } }
        |""".stripMargin
    }.mkString + Body

  def solver(dir: Path, net: String): String =
    write(dir, s"solver_$net", s"""net: "$net"
      |base_lr: 0.05
      |momentum: 0.9
      |lr_policy: "fixed"
      |max_iter: 60
      |display: 20
      |random_seed: 3
      |""".stripMargin)

  def cos(args: String*): CortadoOnSparkSuite.Result = CortadoOnSparkSuite.runMain(ss, args)

  def accuracy(out: String): Option[Double] = out.linesIterator.collectFirst {
    case line if line.startsWith("accuracy = ") => line.stripPrefix("accuracy = ").toDouble
  }

  test("an image folder as an ImageDataFrame: -resize, and the corrupt file fails the run " +
      "naming it, or with -skipCorrupt is left out") {
    withTempDir("cortado-images") { dir =>
      val (root, labels, _) = imageFolder(dir)
      val parquet = dir.resolve("images.parquet").toUri.toString
      ImageFolder.load(ss, root, labels).write.parquet(parquet)
      val df = ss.read.parquet(parquet)
      assert(df.schema.simpleString === "struct<SampleID:string,label:int,data:binary>")
      assert(df.count() === 48)

      write(dir, "net.prototxt", memoryNet("com.yahoo.ml.caffe.ImageDataFrame", parquet,
        parquet, """dataframe_column_select: "SampleID as id" """ +
          """dataframe_column_select: "label" dataframe_column_select: "data" image_encoded: true"""))
      val s = solver(dir, "net.prototxt")
      val model = dir.resolve("net.caffemodel").toUri.toString

      val corrupt = cos("-train", "-conf", s, "-model", model, "-resize")
      assert(corrupt.code === CortadoOnSpark.FailureExit)
      assert(corrupt.err.contains("image 'img07.jpg'"), corrupt.err)

      val unsized = cos("-train", "-conf", s, "-model", model, "-skipCorrupt")
      assert(unsized.code === CortadoOnSpark.FailureExit)
      assert(unsized.err.contains("16 x 16") && unsized.err.contains("-resize"), unsized.err)

      val ok = cos("-train", "-test", "-conf", s, "-model", model, "-resize", "-skipCorrupt")
      assert(ok.code === 0, ok.err)
      assert(accuracy(ok.out).exists(_ >= 0.95), ok.out)

      // Features keep the ids of the rows read (47: the corrupt one left out).
      val features = dir.resolve("features").toUri.toString
      val f = cos("-features", "ip", "-label", "label", "-conf", s, "-model", model, "-resize",
        "-skipCorrupt", "-output", features)
      assert(f.code === 0, f.err)
      val ids = ss.read.json(features).select("SampleID").collect().map(_.getString(0)).toSet
      assert(ids.size === 47 && !ids.contains("img07.jpg") && ids.contains("img08.jpg"))
    }
  }

  test("a sequence file of (id, label) keys and JPEG values (SeqImageDataSource); a relative " +
      "file: path") {
    withTempDir("cortado-images-seq") { dir =>
      val (_, _, images) = imageFolder(dir)
      val seq = dir.resolve("images.seq").toUri.toString
      val pairs = images.filter(_._1 != "img07.jpg").map { case (name, label, bytes) =>
        val key = new ByteArrayOutputStream
        val out = new ObjectOutputStream(key)
        out.writeObject((name, label.toString))
        out.close()
        (key.toByteArray, bytes)
      }
      ss.sparkContext.parallelize(pairs, 2)
        .map { case (k, v) => (new BytesWritable(k), new BytesWritable(v)) }
        .saveAsSequenceFile(seq)
      // The TEST phase names it as `file:` and a path relative to the working directory, as
      // CaffeOnSpark's users wrote such paths.
      val relative = "file:" + java.nio.file.Paths.get(System.getProperty("user.dir"))
        .toAbsolutePath.relativize(dir.resolve("images.seq"))
      write(dir, "net.prototxt",
        memoryNet("com.yahoo.ml.caffe.SeqImageDataSource", seq, relative))
      val r = cos("-train", "-test", "-conf", solver(dir, "net.prototxt"),
        "-model", dir.resolve("seq.caffemodel").toUri.toString, "-resize")
      assert(r.code === 0, r.err)
      assert(accuracy(r.out).exists(_ >= 0.95), r.out)
    }
  }

  test("crop_size: an image larger than the layer is cut to its size, at a random place in " +
      "TRAIN and at the centre in TEST, as Caffe's transformer cuts it") {
    // 1 channel, 4 x 5, pixel (y, x) = 5y + x, interleaved (one channel: the same bytes).
    val pixels = Array.tabulate[Byte](20)(_.toByte)
    def window(top: Int, left: Int) =
      for (y <- top until top + 2; x <- left until left + 3) yield (5 * y + x).toFloat
    val centre = NativeImage.fromInterleaved(pixels, 1, 4, 5, 2, 3, false,
      NativeImage.CENTRE_CROP, 0L, "centre")
    assert(centre.toSeq === window(1, 1))
    // Random: every place with top in 0..2 and left in 0..2 turns up, each a window of the
    // image; the same seed gives the same place.
    val places = (0L until 200L).map { seed =>
      val got = NativeImage.fromInterleaved(pixels, 1, 4, 5, 2, 3, false,
        NativeImage.RANDOM_CROP, seed, "random").toSeq
      val place = for (t <- 0 to 2; l <- 0 to 2 if window(t, l) == got) yield (t, l)
      assert(place.size === 1, got)
      assert(NativeImage.fromInterleaved(pixels, 1, 4, 5, 2, 3, false, NativeImage.RANDOM_CROP,
        seed, "again").toSeq === got)
      place.head
    }
    assert(places.toSet === (for (t <- 0 to 2; l <- 0 to 2) yield (t, l)).toSet)
    // -resize goes first; an image smaller than the layer is still refused, saying why.
    assert(NativeImage.fromInterleaved(pixels, 1, 4, 5, 4, 5, true, NativeImage.CENTRE_CROP,
      0L, "same").toSeq === pixels.map(_.toFloat).toSeq)
    val small = intercept[CortadoConfigException](NativeImage.fromInterleaved(pixels, 1, 4, 5,
      6, 3, false, NativeImage.CENTRE_CROP, 0L, "image 'small'"))
    assert(small.getMessage.contains("image 'small' is 4 x 5; the layer takes 6 x 3") &&
      small.getMessage.contains("crop_size"), small.getMessage)

    // The 16 x 16 JPEG folder on a layer of 8 x 8 with crop_size 8 (CaffeOnSpark's CaffeNet
    // layout: memory_data_param of the crop's size), no -resize: it trains and tests.
    withTempDir("cortado-images-crop") { dir =>
      val (root, labels, _) = imageFolder(dir)
      val parquet = dir.resolve("images.parquet").toUri.toString
      ImageFolder.load(ss, root, labels).write.parquet(parquet)
      write(dir, "net.prototxt", memoryNet("com.yahoo.ml.caffe.ImageDataFrame", parquet,
        parquet, """dataframe_column_select: "SampleID as id" """ +
          """dataframe_column_select: "label" dataframe_column_select: "data" image_encoded: true""")
        .replace("transform_param { scale: 0.00390625 }",
          "transform_param { scale: 0.00390625 crop_size: 8 mirror: true }"))
      val r = cos("-train", "-test", "-conf", solver(dir, "net.prototxt"),
        "-model", dir.resolve("crop.caffemodel").toUri.toString, "-skipCorrupt")
      assert(r.code === 0, r.err)
      assert(accuracy(r.out).exists(_ >= 0.95), r.out)
    }
  }

  test("JPEG and PNG bytes in a DataFrame's binary column feed a CoSData top; raw rows and " +
      "string labels too; color comes as BGR") {
    withTempDir("cortado-images-cos") { dir =>
      val random = new Random(9)
      val red = new BufferedImage(8, 8, BufferedImage.TYPE_3BYTE_BGR)
      for (y <- 0 until 8; x <- 0 until 8) red.setRGB(x, y, 0xff0000)
      val png = encode(red, "png")
      val jpeg = encode(image(1, random, size = 8), "jpg")
      // Raw bytes in a CoSData top are planar, C x H x W, as Caffe's datums hold them.
      val raw = Array.tabulate[Byte](3 * 64)(i => (i % 251).toByte)
      val rows = Seq(("png", png, "0"), ("jpeg", jpeg, "1"), ("raw", raw, "1"))
      val parquet = dir.resolve("rows.parquet").toUri.toString
      ss.createDataFrame(rows).toDF("id", "data", "label").write.parquet(parquet)
      write(dir, "net.prototxt",
        s"""layer { name: "data" type: "CoSData" top: "data" top: "label"
          |  cos_data_param { source: "$parquet" batch_size: 3
          |    top { name: "data" type: RAW_IMAGE channels: 3 height: 8 width: 8 }
          |    top { name: "label" type: INT channels: 1 sample_num_axes: 0 } } }
          |""".stripMargin + Body.replace("include { phase: TEST }", ""))
      val s = write(dir, "solver.prototxt", "net: \"net.prototxt\"\nbase_lr: 0.01\n" +
        "max_iter: 1\nlr_policy: \"fixed\"\n")
      val model = dir.resolve("m.caffemodel").toUri.toString
      val trained = cos("-train", "-conf", s, "-model", model)
      assert(trained.code === 0, trained.err)
      val out = dir.resolve("f").toUri.toString
      val r = cos("-features", "data,label", "-conf", s, "-model", model, "-output", out)
      assert(r.code === 0, r.err)
      val byId = ss.read.json(out).collect().map { row =>
        row.getAs[String]("SampleID") -> row.getSeq[Double](row.fieldIndex("data"))
      }.toMap
      // Pure red: B and G planes 0, R plane 255.
      assert(byId("png").slice(0, 128).forall(_ == 0.0) && byId("png").drop(128).forall(_ == 255))
      assert(byId("raw") === raw.map(b => (b & 0xff).toDouble).toSeq)
      val bluish = byId("jpeg")
      assert(bluish.take(64).sum / 64 > 150 && bluish.drop(128).sum / 64 < 100, bluish)
    }
  }

  test("an ImageDataFrame of raw interleaved pixels with channels, height and width columns") {
    withTempDir("cortado-images-raw") { dir =>
      // 2 x 2 images of 3 channels, interleaved (B, G, R per pixel).
      val interleaved = Array[Byte](1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
      val rows = (0 until 4).map(i => (s"r$i", s"${i % 2}", 3, 2, 2, false, interleaved))
      val parquet = dir.resolve("raw.parquet").toUri.toString
      ss.createDataFrame(rows).toDF("id", "label", "channels", "height", "width", "encoded",
        "data").write.parquet(parquet)
      val net = memoryNet("com.yahoo.ml.caffe.ImageDataFrame", parquet, parquet)
        .replace("height: 8", "height: 2").replace("width: 8", "width: 2")
        .replace("batch_size: 10", "batch_size: 2").replace("batch_size: 8", "batch_size: 2")
        .replace("scale: 0.00390625", "scale: 1")
      write(dir, "net.prototxt", net)
      val s = solver(dir, "net.prototxt")
      val model = dir.resolve("m.caffemodel").toUri.toString
      assert(cos("-train", "-conf", s, "-model", model).code === 0)
      val out = dir.resolve("f").toUri.toString
      val r = cos("-features", "data", "-conf", s, "-model", model, "-output", out)
      assert(r.code === 0, r.err)
      val data = ss.read.json(out).collect().map(_.getSeq[Double](1)).distinct
      // Planar: the B plane (1, 4, 7, 10), then G, then R.
      assert(data.toSeq === Seq(Seq(1, 4, 7, 10, 2, 5, 8, 11, 3, 6, 9, 12).map(_.toDouble)))
    }
  }
}
