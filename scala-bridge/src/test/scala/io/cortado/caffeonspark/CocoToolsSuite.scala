// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import java.awt.image.BufferedImage
import java.io.ByteArrayOutputStream
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Path}
import javax.imageio.ImageIO

import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.types._
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoConfigException, CortadoIOException}
import io.cortado.TestDirs.withTempDir
import io.cortado.caffeonspark.tools.{CocoCaptions, CocoDataSetConverter, Conversions, Vocab}
import io.cortado.spark.PerTest

/**
 * CaffeOnSpark's caption tools (Conversions, Vocab, CocoDataSetConverter) on a COCO caption
 * file of three captions of two small JPEGs, written by the tests: the image-caption rows, the
 * vocabulary, the embeddings worked out by hand, captions read back, the converter's outputs,
 * and each kind of bad input.
 */
class CocoToolsSuite extends AnyFunSuite with PerTest {
  import CocoToolsSuite._

  test("sentence2Words splits as CaffeOnSpark: word and other runs, lower case, no last stop") {
    assert(Conversions.sentence2Words("A cat, on a mat.").toSeq ===
      Seq("a", "cat", ",", "on", "a", "mat"))
    assert(Conversions.sentence2Words("  Two  dogs' toys!! ").toSeq ===
      Seq("two", "dogs", "'", "toys", "!!"))
    // Only a last "." goes; other runs of non-word characters are words, spaces trimmed.
    assert(Conversions.sentence2Words("It's 3 p.m. . Now.").toSeq ===
      Seq("it", "'", "s", "3", "p", ".", "m", ". .", "now"))
    assert(Conversions.sentence2Words("Café_1...").toSeq === Seq("caf", "é", "_1", "..."))
    assert(Conversions.sentence2Words(" . ").isEmpty)
    assert(Conversions.sentence2Words("").isEmpty)
  }

  test("image sizes from JPEG and PNG headers") {
    assert(CocoCaptions.imageSize(jpegBytes(7, 3)) === Some((3, 7)))
    assert(CocoCaptions.imageSize(jpegBytes(300, 513)) === Some((513, 300)))
    assert(CocoCaptions.imageSize(encode(image(5, 9), "png")) === Some((9, 5)))
    assert(CocoCaptions.imageSize("not an image".getBytes(UTF_8)).isEmpty)
    assert(CocoCaptions.imageSize(jpegBytes(7, 3).take(20)).isEmpty)
  }

  test("Coco2ImageCaptionFile: a row per caption, in id order, with its image's fields") {
    withCoco { coco =>
      val df = Conversions.Coco2ImageCaptionFile(ss.sqlContext, coco.json, 2)
      assert(df.schema === ImageCaptionSchema)
      assert(df.rdd.getNumPartitions === 2)
      assert(df.collect().toSeq === Seq(
        Row(1L, 2, 3, "img7.jpg", "http://f/7", "A cat on a mat."),
        Row(2L, 5, 4, "img9.jpg", "http://f/9", "A dog and a cat on a log"),
        Row(3L, 2, 3, "img7.jpg", "http://f/7", "The cat sat.")))
    }
  }

  test("Coco2ImageCaptionFile without annotations: a row per image, its coco_url") {
    withCoco { coco =>
      val json = coco.write("images.json",
        """{"images": [{"id": 9, "file_name": "img9.jpg", "height": 5, "width": 4,
          |  "coco_url": "http://c/9"},
          | {"id": 7, "file_name": "img7.jpg", "coco_url": "http://c/7",
          |  "flickr_url": "http://f/7"}]}""".stripMargin)
      val df = Conversions.Coco2ImageCaptionFile(ss.sqlContext, json, 0)
      assert(df.schema === StructType(ImageCaptionSchema.fields.take(5)))
      assert(df.collect().toSeq === Seq(Row(7L, null, null, "img7.jpg", "http://c/7"),
        Row(9L, 5, 4, "img9.jpg", "http://c/9")))
      // Without sizes in the file, the image's header gives them.
      val embedded = Conversions.Image2Embedding(coco.images, df)
      assert(embedded.schema === StructType(EmbeddingSchema.fields.take(3)))
      assert(embedded.collect().toSeq.map(plain) === Seq(
        Seq("7", Seq(2, 3, coco.img7.toSeq), 0), Seq("9", Seq(5, 4, coco.img9.toSeq), 0)))
    }
  }

  test("Vocab: UNK at 0, most frequent words first, equal counts alphabetically; save, load") {
    withCoco { coco =>
      val df = Conversions.Coco2ImageCaptionFile(ss.sqlContext, coco.json, 2)
      val vocab = new Vocab(ss.sqlContext)
      vocab.genFromData(df, "caption")
      val all = Seq("UNK", "a", "cat", "on", "and", "dog", "log", "mat", "sat", "the")
      assert(vocab.word2indexMap() === all.zipWithIndex.toMap)
      assert(vocab.index2wordMap() === all.zipWithIndex.map(_.swap).toMap)
      assert(vocab.word2indexMap()(Vocab.UNKNOWN_TOKEN) === 0)
      assert(vocab.word2indexMap()("a") === Vocab.VALID_TOKEN_INDEX)
      assert(vocab.word2indexMap()("cat") > Vocab.VALID_TOKEN_INDEX)

      vocab.genFromData(df, "caption", 4)
      assert(vocab.word2indexMap() === Seq("UNK", "a", "cat", "on", "and").zipWithIndex.toMap)
      val saved = coco.uri("vocab")
      vocab.save(saved)
      assert(lines(coco.dir.resolve("vocab/part-00000")) === Seq("UNK", "a", "cat", "on", "and"))
      assert(!names(coco.dir).exists(_.contains("tmp")))
      val loaded = new Vocab(ss.sqlContext)
      loaded.load(saved)
      assert(loaded.word2indexMap() === vocab.word2indexMap())
      assert(loaded.index2wordMap()(4) === "and")
      // A plain text file loads as well; loading replaces the words.
      loaded.load(coco.write("words.txt", "UNK\nzebra\n"))
      assert(loaded.word2indexMap() === Map("UNK" -> 0, "zebra" -> 1))

      val e = intercept[CortadoIOException](vocab.save(saved))
      assert(e.getMessage.contains(saved) && e.getMessage.contains("already exists"))
      assert(lines(coco.dir.resolve("vocab/part-00000")).length === 5)
    }
  }

  test("ImageCaption2Embedding: sentences worked out by hand, images with their sizes") {
    withCoco { coco =>
      val df = Conversions.Coco2ImageCaptionFile(ss.sqlContext, coco.json, 2)
      val vocab = new Vocab(ss.sqlContext)
      vocab.genFromData(df, "caption", 4) // UNK 0, a 1, cat 2, on 3, and 4
      val embedded = Conversions.ImageCaption2Embedding(coco.images, df, vocab, 6)
      assert(embedded.schema === EmbeddingSchema)
      // "A cat on a mat.": 5 words, mat unknown (1). "A dog and a cat on a log": cut to 5
      // words, dog unknown. "The cat sat.": 3 words, the and sat unknown.
      assert(embedded.collect().toSeq.map(plain) === Seq(
        Seq("1", Seq(2, 3, coco.img7.toSeq), 0,
          Seq(0, 1, 2, 3, 1, 1), Seq(0, 1, 1, 1, 1, 1), Seq(1, 2, 3, 1, 1, 0)),
        Seq("2", Seq(5, 4, coco.img9.toSeq), 0,
          Seq(0, 1, 1, 4, 1, 2), Seq(0, 1, 1, 1, 1, 1), Seq(1, 1, 4, 1, 2, 0)),
        Seq("3", Seq(2, 3, coco.img7.toSeq), 0,
          Seq(0, 1, 2, 1, -1, -1), Seq(0, 1, 1, 1, -1, -1), Seq(1, 2, 1, 0, -1, -1))))
      // Unknown words read back as index 1, the most frequent word, as in CaffeOnSpark.
      val back = Conversions.Embedding2Caption(embedded, vocab, "input_sentence", "text")
      assert(back.schema === StructType(Seq(StructField("id", LongType),
        StructField("text", StringType))))
      assert(back.collect().toSeq ===
        Seq(Row(1L, "a cat on a a"), Row(2L, "a a and a cat"), Row(3L, "a cat a")))
    }
  }

  test("Embedding2Caption gives back the captions, cut to captionLength - 1 words") {
    withCoco { coco =>
      val df = Conversions.Coco2ImageCaptionFile(ss.sqlContext, coco.json, 2)
      val vocab = new Vocab(ss.sqlContext)
      vocab.genFromData(df, "caption")
      for ((length, expected) <- Seq(
          6 -> Seq("a cat on a mat", "a dog and a cat", "the cat sat"),
          20 -> Seq("a cat on a mat", "a dog and a cat on a log", "the cat sat"))) {
        val embedded = Conversions.ImageCaption2Embedding(coco.images, df, vocab, length)
        for (column <- Seq("input_sentence", "target_sentence")) {
          val back = Conversions.Embedding2Caption(embedded, vocab, column, "caption")
          assert(back.collect().toSeq === Seq(1L, 2L, 3L).zip(expected).map(Row.fromTuple),
            s"$column, captionLength $length")
        }
      }
    }
  }

  test("CocoDataSetConverter: its outputs; the vocabulary reused; existing outputs refused") {
    withCoco { coco =>
      def args(caption: String, embedding: String, vocabSize: Int): Array[String] = Array(
        "-captionFile", coco.json, "-imageRoot", coco.images, "-output", coco.uri("out"),
        "-imageCaptionDFDir", caption, "-vocabDir", "vocab", "-vocabSize", vocabSize.toString,
        "-captionLength", "6", "-embeddingDFDir", embedding, "-outputFormat", "parquet",
        "-clusterSize", "2")
      ss // The converter runs in this session, and stops it.
      CocoDataSetConverter.main(args("df", "emb", 4))
      val spark = sparkSessionBuilder.getOrCreate()
      try {
        assert(lines(coco.dir.resolve("out/vocab/part-00000")) ===
          Seq("UNK", "a", "cat", "on", "and"))
        val captions = spark.read.json(coco.uri("out/df"))
        assert(captions.orderBy("id").select("id", "file", "caption").collect().toSeq === Seq(
          Row(1L, "img7.jpg", "A cat on a mat."), Row(2L, "img9.jpg", "A dog and a cat on a log"),
          Row(3L, "img7.jpg", "The cat sat.")))
        val embedded = spark.read.parquet(coco.uri("out/emb"))
        assert(embedded.schema === EmbeddingSchema)
        assert(embedded.orderBy("id").select("id", "input_sentence").collect().toSeq.map(plain) ===
          Seq(Seq("1", Seq(0, 1, 2, 3, 1, 1)), Seq("2", Seq(0, 1, 1, 4, 1, 2)),
            Seq("3", Seq(0, 1, 2, 1, -1, -1))))
        assert(names(coco.dir.resolve("out")).sorted === Seq("df", "emb", "vocab"))

        // The existing vocabulary is read, not made again with -vocabSize 2 (which would
        // number "on" 1).
        CocoDataSetConverter.convert(spark, args("df2", "emb2", 2))
        assert(lines(coco.dir.resolve("out/vocab/part-00000")).length === 5)
        assert(spark.read.parquet(coco.uri("out/emb2")).orderBy("id").select("input_sentence")
          .head().getSeq[Int](0) === Seq(0, 1, 2, 3, 1, 1))

        val before = names(coco.dir.resolve("out/emb"))
        val e = intercept[CortadoIOException](CocoDataSetConverter.convert(spark,
          args("df3", "emb", 4)))
        assert(e.getMessage.contains(coco.uri("out/emb")) && e.getMessage.contains("exists"))
        assert(names(coco.dir.resolve("out/emb")) === before)
        assert(!names(coco.dir.resolve("out")).contains("df3"))

        val missing = intercept[IllegalArgumentException](CocoDataSetConverter.convert(spark,
          Array("-captionFile", coco.json, "-output", coco.uri("out3"))))
        assert(missing.getMessage.contains("-imageRoot"))
      } finally spark.stop()
    }
  }

  test("bad caption files fail naming the file and what is wrong") {
    withCoco { coco =>
      def failure(name: String, text: String): String = {
        val json = if (text == null) coco.uri(name) else coco.write(name, text)
        val e = intercept[Exception](Conversions.Coco2ImageCaptionFile(ss.sqlContext, json, 2))
        assert(e.getMessage.contains(json), e.getMessage)
        e.getMessage
      }
      assert(failure("none.json", null).contains("does not exist"))
      assert(failure("broken.json", """{"images": [{"id": 1,, }""").contains("not valid JSON"))
      assert(failure("other.json", """{"categories": []}""").contains("no 'images' array"))
      assert(failure("scalar.json", """{"images": 3}""").contains("not an array of objects"))
      assert(failure("nofile.json", """{"images": [{"id": 1}]}""").contains("file_name"))
      assert(failure("twice.json", """{"images": [{"id": 1, "file_name": "a.jpg"},
          | {"id": 1, "file_name": "b.jpg"}]}""".stripMargin).contains("image id 1 2 times"))
      assert(failure("nocaption.json", """{"images": [{"id": 1, "file_name": "a.jpg"}],
          | "annotations": [{"id": 5, "image_id": 1, "caption": "x"},
          |  {"id": 6, "image_id": 1}]}""".stripMargin).contains("\"id\":6"))
      val orphan = failure("orphan.json", """{"images": [{"id": 1, "file_name": "a.jpg"}],
          | "annotations": [{"id": 5, "image_id": 1, "caption": "x"},
          |  {"id": 6, "image_id": 99, "caption": "y"}]}""".stripMargin)
      assert(orphan.contains("annotation 6 names image 99"), orphan)
      intercept[CortadoIOException](
        Conversions.Coco2ImageCaptionFile(ss.sqlContext, coco.uri("none.json"), 2))
    }
  }

  test("an empty vocabulary, a missing or bad vocabulary file fail naming them") {
    withCoco { coco =>
      val spark = ss
      import spark.implicits._
      val vocab = new Vocab(ss.sqlContext)
      val e = intercept[CortadoConfigException](vocab.save(coco.uri("v0")))
      assert(e.getMessage.contains("empty"))
      val empty = Seq("", " . ", null).toDF("caption")
      assert(intercept[CortadoConfigException](vocab.genFromData(empty, "caption"))
        .getMessage.contains("holds no words"))
      assert(intercept[CortadoConfigException](vocab.genFromData(empty, "text"))
        .getMessage.contains("no column 'text'"))
      val missing = coco.uri("nothing")
      val notThere = intercept[CortadoIOException](vocab.load(missing))
      assert(notThere.getMessage.contains(missing) && notThere.getMessage.contains("not exist"))
      val blank = coco.write("blank.txt", "")
      assert(intercept[CortadoConfigException](vocab.load(blank)).getMessage.contains(blank))
      val twice = coco.write("twice.txt", "UNK\ncat\ndog\ncat\n")
      assert(intercept[CortadoConfigException](vocab.load(twice)).getMessage
        .contains("'cat' is on lines 2 and 4"))
      assert(vocab.word2indexMap().isEmpty)
      val df = Conversions.Coco2ImageCaptionFile(ss.sqlContext, coco.json, 2)
      assert(intercept[CortadoConfigException](
        Conversions.ImageCaption2Embedding(coco.images, df, vocab, 6)).getMessage
        .contains("vocabulary is empty"))
    }
  }

  test("sizes are the caption file's, as CaffeOnSpark's; a missing image fails naming it") {
    withCoco { coco =>
      val vocab = new Vocab(ss.sqlContext)
      val df = Conversions.Coco2ImageCaptionFile(ss.sqlContext, coco.json, 2)
      vocab.genFromData(df, "caption")
      // img7.jpg is 2 high: the file's 3 is kept (CaffeOnSpark's own COCO images are resized
      // copies, their sizes the originals').
      val wrong = coco.write("wrong.json", Json.replace("\"height\": 2", "\"height\": 3"))
      val resized = Conversions.Coco2ImageCaptionFile(ss.sqlContext, wrong, 2)
      assert(Conversions.ImageCaption2Embedding(coco.images, resized, vocab, 6)
        .select("id", "data.height", "data.width").collect().toSeq ===
        Seq(Row("1", 3, 3), Row("2", 5, 4), Row("3", 3, 3)))
      Files.write(coco.dir.resolve("images/img7.jpg"), "not an image".getBytes(UTF_8))
      val unsized = coco.write("unsized.json", """{"images": [{"id": 7, "file_name": "img7.jpg",
          | "coco_url": "http://c/7"}]}""".stripMargin)
      val unknown = messages(intercept[Exception](Conversions.Image2Embedding(coco.images,
        Conversions.Coco2ImageCaptionFile(ss.sqlContext, unsized, 1)).collect()))
      assert(unknown.contains("img7.jpg is neither JPEG nor PNG"), unknown)
      Files.delete(coco.dir.resolve("images/img9.jpg"))
      val gone = messages(intercept[Exception](
        Conversions.ImageCaption2Embedding(coco.images, df, vocab, 6).collect()))
      assert(gone.contains("img9.jpg") && gone.contains("does not exist"), gone)
    }
  }
}

object CocoToolsSuite {

  /** Three captions of two images, the file's records out of id order. */
  val Json: String =
    """{"info": {"description": "two images"},
      | "images": [
      |  {"id": 9, "file_name": "img9.jpg", "height": 5, "width": 4,
      |   "coco_url": "http://c/9", "flickr_url": "http://f/9"},
      |  {"id": 7, "file_name": "img7.jpg", "height": 2, "width": 3,
      |   "coco_url": "http://c/7", "flickr_url": "http://f/7"}],
      | "annotations": [
      |  {"image_id": 7, "id": 3, "caption": "The cat sat."},
      |  {"image_id": 9, "id": 2, "caption": "A dog and a cat on a log"},
      |  {"image_id": 7, "id": 1, "caption": "A cat on a mat."}]}
      |""".stripMargin

  val ImageCaptionSchema: StructType = StructType(Seq(StructField("id", LongType),
    StructField("height", IntegerType), StructField("width", IntegerType),
    StructField("file", StringType), StructField("url", StringType),
    StructField("caption", StringType)))

  val EmbeddingSchema: StructType = StructType(Seq(StructField("id", StringType),
    StructField("data", StructType(Seq(StructField("height", IntegerType),
      StructField("width", IntegerType), StructField("image", ArrayType(ByteType))))),
    StructField("label", IntegerType),
    StructField("input_sentence", ArrayType(IntegerType)),
    StructField("cont_sentence", ArrayType(IntegerType)),
    StructField("target_sentence", ArrayType(IntegerType))))

  /** A folder with [[Json]] as coco.json and its images, images/img7.jpg (3 x 2), img9.jpg. */
  final class Coco(val dir: Path) {
    val img7: Array[Byte] = jpegBytes(3, 2)
    val img9: Array[Byte] = jpegBytes(4, 5)
    Files.createDirectories(dir.resolve("images"))
    Files.write(dir.resolve("images/img7.jpg"), img7)
    Files.write(dir.resolve("images/img9.jpg"), img9)
    val json: String = write("coco.json", Json)
    val images: String = uri("images")

    def uri(name: String): String = dir.resolve(name).toUri.toString.stripSuffix("/")

    def write(name: String, text: String): String = {
      Files.write(dir.resolve(name), text.getBytes(UTF_8))
      uri(name)
    }
  }

  def withCoco[T](body: Coco => T): T = withTempDir("coco")(dir => body(new Coco(dir)))

  def image(width: Int, height: Int): BufferedImage = {
    val image = new BufferedImage(width, height, BufferedImage.TYPE_3BYTE_BGR)
    for (y <- 0 until height; x <- 0 until width) {
      image.setRGB(x, y, ((x * 50) << 16) | ((y * 40) << 8) | 128)
    }
    image
  }

  def encode(image: BufferedImage, format: String): Array[Byte] = {
    val out = new ByteArrayOutputStream()
    assert(ImageIO.write(image, format, out))
    out.toByteArray
  }

  def jpegBytes(width: Int, height: Int): Array[Byte] = encode(image(width, height), "jpg")

  def lines(file: Path): Seq[String] = new String(Files.readAllBytes(file), UTF_8)
    .split("\n").toSeq

  def names(dir: Path): Seq[String] = {
    val stream = Files.list(dir)
    try stream.toArray.map(_.asInstanceOf[Path].getFileName.toString).toSeq
    finally stream.close()
  }

  /** A row as nested Seqs (arrays and structs), for comparing with ===. */
  def plain(value: Any): Any = value match {
    case r: Row => r.toSeq.map(plain)
    case s: scala.collection.Seq[_] => s.map(plain).toList
    case a: Array[_] => a.toSeq.map(plain).toList
    case other => other
  }

  /** The messages of `e` and its causes, one a line. */
  def messages(e: Throwable): String =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).map(String.valueOf(_)).mkString("\n")
}
