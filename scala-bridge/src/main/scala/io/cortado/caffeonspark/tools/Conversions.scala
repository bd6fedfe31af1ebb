// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.tools

import java.util.Locale

import scala.collection.mutable.ArrayBuffer

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.{Column, DataFrame, Row, SQLContext}
import org.apache.spark.sql.functions.{coalesce, col, explode, lit, to_json}
import org.apache.spark.sql.types._
import org.slf4j.{Logger, LoggerFactory}

import io.cortado.{CortadoConfigException, CortadoIOException}
import io.cortado.storage.SerializableConfiguration

/**
 * CaffeOnSpark's caption conversions (`com.yahoo.ml.caffe.tools.Conversions`): a COCO caption
 * file to a DataFrame of images and captions ([[Coco2ImageCaptionFile]]), that to the
 * DataFrame an LRCN net's CoSData layer reads ([[ImageCaption2Embedding]], [[Image2Embedding]]),
 * and embeddings back to captions ([[Embedding2Caption]]). The DataFrames have CaffeOnSpark's
 * columns and types, so nets written for CaffeOnSpark read them unchanged.
 *
 * Differences from CaffeOnSpark:
 *  - The caption file may be one JSON object on one line or on many.
 *  - An annotation naming an image the file does not list, an image listed twice, a record
 *    without its id, file name or caption, and a file that is missing or not JSON fail with
 *    CortadoConfigException or CortadoIOException naming the file and the record (CaffeOnSpark
 *    dropped the annotation, or failed inside Spark).
 *  - The image-caption rows are in id order (CaffeOnSpark's came in the order of a join).
 *  - The `data` struct's height and width are the caption file's, as CaffeOnSpark's; where the
 *    file gives none, they are read from the image's header (JPEG or PNG, in Scala, without
 *    decoding the pixels) rather than left null. An image whose header disagrees with the file
 *    (a resized copy) is logged, once a partition.
 *  - [[Embedding2Caption]]'s id column is a long as its schema says (CaffeOnSpark put the
 *    string there); an empty embedding gives an empty caption.
 */
object Conversions {

  /** The object's logger, as CaffeOnSpark's. */
  val log: Logger = LoggerFactory.getLogger(getClass)

  /**
   * The words of a caption, as CaffeOnSpark split them: runs of word characters (ASCII letters,
   * digits, `_`) and runs of other characters, each trimmed, the blank ones dropped, in lower
   * case; a last word "." (the full stop) is dropped. "A cat, on a mat." gives
   * `a cat , on a mat`.
   */
  def sentence2Words(sentence: String): Array[String] = {
    def isWord(c: Char): Boolean =
      (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'
    val words = ArrayBuffer[String]()
    var start = 0
    while (start < sentence.length) {
      val word = isWord(sentence.charAt(start))
      var end = start + 1
      while (end < sentence.length && isWord(sentence.charAt(end)) == word) end += 1
      val token = sentence.substring(start, end).toLowerCase(Locale.ROOT).trim
      if (token.nonEmpty) words += token
      start = end
    }
    if (words.nonEmpty && words.last == ".") words.remove(words.length - 1)
    words.toArray
  }

  /**
   * The images and captions of the COCO caption file `src` (any Hadoop path; COCO's
   * `captions_*.json`): with `annotations`, one row per caption of `id` (the caption's),
   * `height`, `width`, `file` (the image's `file_name`), `url` (its `flickr_url`) and `caption`;
   * without, one row per image of `id` (the image's), `height`, `width`, `file` and `url` (its
   * `coco_url`). The other URL stands in where the one named is absent, null where both are.
   * The rows are in id order, in `clusterSize` partitions (Spark's default when not positive).
   *
   * @throws CortadoIOException when `src` does not exist
   * @throws CortadoConfigException when it is not a COCO file: not JSON, without `images`, an
   *                                image without id or file_name, an image id twice, an
   *                                annotation without id, image_id or caption, or naming an image
   *                                that is not there
   */
  def Coco2ImageCaptionFile(sqlContext: SQLContext, src: String, clusterSize: Int): DataFrame = {
    CocoCaptions.requireExists(src, sqlContext.sparkContext.hadoopConfiguration, "the caption file")
    val raw = sqlContext.read.option("multiLine", "true").option("mode", "PERMISSIVE").json(src)
    if (raw.columns.contains("_corrupt_record")) {
      throw new CortadoConfigException(s"the caption file $src is not valid JSON (a COCO caption " +
        "file is one JSON object)")
    }
    val imageFields = arrayFields(raw, "images", src).getOrElse(
      throw new CortadoConfigException(s"the caption file $src has no 'images' array: it is not " +
        "in COCO's format"))
    val annotationFields = arrayFields(raw, "annotations", src)
    requireFields(src, "images", imageFields, Seq("id", "file_name"))
    annotationFields.foreach(requireFields(src, "annotations", _, Seq("id", "image_id", "caption")))

    def field(struct: String, fields: Set[String], name: String, kind: DataType): Column =
      if (fields.contains(name)) col(s"$struct.$name").cast(kind) else lit(null).cast(kind)
    val (preferredUrl, otherUrl) =
      if (annotationFields.isDefined) ("flickr_url", "coco_url") else ("coco_url", "flickr_url")
    val url = Seq(preferredUrl, otherUrl).filter(imageFields.contains) match {
      case Seq() => lit(null).cast(StringType)
      case names => coalesce(names.map(name => col(s"i.$name").cast(StringType)): _*)
    }
    val images = raw.select(explode(col("images")).as("i")).select(
      field("i", imageFields, "id", LongType).as("image_id"),
      field("i", imageFields, "height", IntegerType).as("height"),
      field("i", imageFields, "width", IntegerType).as("width"),
      field("i", imageFields, "file_name", StringType).as("file"),
      url.as("url"),
      to_json(col("i")).as("record"))
    firstOf(images.filter(col("image_id").isNull || col("file").isNull)).foreach { r =>
      throw new CortadoConfigException(s"the caption file $src has an image without a numeric " +
        s"id or without file_name: ${r.getAs[String]("record")}")
    }
    firstOf(images.groupBy("image_id").count().filter(col("count") > 1)).foreach { r =>
      throw new CortadoConfigException(
        s"the caption file $src lists image id ${r.getLong(0)} ${r.getLong(1)} times")
    }

    val rows = annotationFields match {
      case None =>
        images.select(col("image_id").as("id"), col("height"), col("width"), col("file"),
          col("url"))
      case Some(fields) =>
        val captions = raw.select(explode(col("annotations")).as("a")).select(
          field("a", fields, "id", LongType).as("id"),
          field("a", fields, "image_id", LongType).as("image_id"),
          field("a", fields, "caption", StringType).as("caption"),
          to_json(col("a")).as("record"))
        firstOf(captions.filter(col("id").isNull || col("image_id").isNull ||
            col("caption").isNull)).foreach { r =>
          throw new CortadoConfigException(s"the caption file $src has an annotation without a " +
            s"numeric id or image_id or without caption: ${r.getAs[String]("record")}")
        }
        val orphans = captions.join(images.select("image_id"), Seq("image_id"), "left_anti")
        val orphanCount = orphans.count()
        if (orphanCount > 0) {
          val first = orphans.orderBy("id").limit(3).collect()
            .map(r => s"annotation ${r.getAs[Long]("id")} names image ${r.getAs[Long]("image_id")}")
          throw new CortadoConfigException(s"the caption file $src has $orphanCount " +
            s"annotation(s) naming an image it does not list: ${first.mkString(", ")}" +
            (if (orphanCount > first.length) ", ..." else ""))
        }
        captions.join(images.drop("record"), Seq("image_id")).select(col("id"), col("height"),
          col("width"), col("file"), col("url"), col("caption"))
    }
    val order = rows.columns.filter(Set("id", "file", "caption")).map(col).toSeq
    if (clusterSize > 0) {
      rows.repartitionByRange(clusterSize, col("id")).sortWithinPartitions(order: _*)
    } else {
      rows.orderBy(order: _*)
    }
  }

  /**
   * The `data` column's struct: the image's `height` and `width` and its file's bytes,
   * `image`.
   */
  val INNER_DATA_FIELD_SCHEMA: StructType = StructType(Array(
    StructField("height", IntegerType, nullable = true),
    StructField("width", IntegerType, nullable = true),
    StructField("image", ArrayType(ByteType), nullable = true)))

  /**
   * The images of `imageCaptionDF` (rows of `id`, `file`, `height`, `width`, as
   * [[Coco2ImageCaptionFile]] makes them without captions) read from `imageRootFolder` (any
   * Hadoop path): `id` (a string), `data` ([[INNER_DATA_FIELD_SCHEMA]]: the row's height and
   * width, or the image header's where the row has none, and the file's bytes) and `label` (0).
   * Lazy: a missing image fails the job that reads it, naming its file.
   */
  def Image2Embedding(imageRootFolder: String, imageCaptionDF: DataFrame): DataFrame =
    embed(imageRootFolder, imageCaptionDF, None)

  /**
   * The images and captions of `imageCaptionDF` (as [[Coco2ImageCaptionFile]] makes them) as an
   * LRCN net reads them: [[Image2Embedding]]'s `id`, `data` and `label`, and three arrays of
   * `captionLength` ints. The caption's words (see [[sentence2Words]]), at most
   * `captionLength` - 1 of them, are numbered by `vocab` (a word not in it is
   * [[Vocab.UNKNOWN_ID]]); with n words w1..wn:
   *  - `input_sentence`: [[Vocab.START_END_ID]], w1, ..., wn, then [[Vocab.NO_TOKEN]];
   *  - `cont_sentence`: 0, then n ones, then [[Vocab.NO_TOKEN]];
   *  - `target_sentence`: w1, ..., wn, [[Vocab.START_END_ID]], then [[Vocab.NO_TOKEN]].
   *
   * @throws CortadoConfigException when `vocab` is empty or `captionLength` is not positive
   */
  def ImageCaption2Embedding(imageRootFolder: String,
      imageCaptionDF: DataFrame, vocab: Vocab, captionLength: Int): DataFrame = {
    if (captionLength < 1) {
      throw new CortadoConfigException(s"captionLength must be at least 1, not $captionLength")
    }
    val words = vocab.word2indexMap()
    if (words.isEmpty) {
      throw new CortadoConfigException(
        "the vocabulary is empty: genFromData or load it before embedding captions")
    }
    embed(imageRootFolder, imageCaptionDF, Some((words.toMap, captionLength)))
  }

  /**
   * The captions of `embeddingDF`'s int-array column `embeddedingColumn` (as
   * [[ImageCaption2Embedding]] makes them), read back with `vocab`: rows of `id` (a long, the
   * embedding's id) and `captionColumn`, the words joined by spaces, [[Vocab.START_END_ID]] and
   * [[Vocab.NO_TOKEN]] left out. A null embedding gives a null caption.
   *
   * @throws CortadoConfigException when a column is missing; when run, an id that is not a
   *                                number or an index not in `vocab` fails naming the row
   */
  def Embedding2Caption(embeddingDF: DataFrame, vocab: Vocab,
      embeddedingColumn: String, captionColumn: String): DataFrame = {
    requireColumns(embeddingDF, Seq("id", embeddedingColumn), "read captions from")
    val words = vocab.index2wordMap().toMap
    if (words.isEmpty) {
      throw new CortadoConfigException(
        "the vocabulary is empty: genFromData or load it before reading embeddings")
    }
    val rows = embeddingDF.select("id", embeddedingColumn).rdd.map { row =>
      val id = row.get(0) match {
        case n: Number => n.longValue
        case s: String if s.trim.matches("-?\\d+") => s.trim.toLong
        case other => throw new CortadoConfigException(
          s"an embedding's id '$other' is not a number (the caption's id)")
      }
      val caption =
        if (row.isNullAt(1)) null
        else {
          row.getSeq[Any](1).flatMap {
            case n: Number if n.intValue == Vocab.START_END_ID || n.intValue == Vocab.NO_TOKEN =>
              None
            case n: Number => Some(words.getOrElse(n.intValue, throw new CortadoConfigException(
              s"embedding $id: index ${n.intValue} of column '$embeddedingColumn' is not in " +
                s"the vocabulary (${words.size} words)")))
            case other => throw new CortadoConfigException(
              s"embedding $id: column '$embeddedingColumn' holds '$other', not an index")
          }.mkString(" ")
        }
      Row(id, caption)
    }
    val schema = StructType(Array(
      StructField("id", LongType, nullable = true),
      StructField(captionColumn, StringType, nullable = true)))
    embeddingDF.sparkSession.createDataFrame(rows, schema)
  }

  /**
   * The input, cont and target sentences of `caption` (see [[ImageCaption2Embedding]]), each
   * `captionLength` long.
   */
  private[caffeonspark] def embedCaption(caption: String,
      wordIndex: scala.collection.Map[String, Int],
      captionLength: Int): (Array[Int], Array[Int], Array[Int]) = {
    val words = sentence2Words(caption)
    val n = math.min(words.length, captionLength - 1)
    val input = Array.fill(captionLength)(Vocab.NO_TOKEN)
    val cont = Array.fill(captionLength)(Vocab.NO_TOKEN)
    val target = Array.fill(captionLength)(Vocab.NO_TOKEN)
    input(0) = Vocab.START_END_ID
    cont(0) = 0
    var i = 0
    while (i < n) {
      val index = wordIndex.getOrElse(words(i), Vocab.UNKNOWN_ID)
      input(i + 1) = index
      cont(i + 1) = 1
      target(i) = index
      i += 1
    }
    target(n) = Vocab.START_END_ID
    (input, cont, target)
  }

  /** The embedding rows of `df`: with `captions` (word indices, caption length), as captioned. */
  private def embed(imageRootFolder: String, df: DataFrame,
      captions: Option[(Map[String, Int], Int)]): DataFrame = {
    val columns = Seq("id", "file", "height", "width") ++ captions.map(_ => "caption")
    requireColumns(df, columns, "embed")
    val conf = new SerializableConfiguration(df.sparkSession.sparkContext.hadoopConfiguration)
    val root = imageRootFolder.stripSuffix("/")
    val rows = df.select(columns.map(col): _*).rdd.mapPartitions { it =>
      var warned = false
      it.map { row =>
        if (row.isNullAt(0) || row.isNullAt(1)) {
          throw new CortadoConfigException(s"an image row without id or file: $row")
        }
        val id = row.get(0).toString
        val file = row.get(1).toString
        val path = new Path(s"$root/$file")
        val bytes = CocoCaptions.readFile(path, conf.value, s"row $id's image")
        val ((height, width), logged) =
          imageSize(path, bytes, dimension(row, 2), dimension(row, 3), warned)
        warned = logged
        val data = Row(height, width, bytes)
        captions match {
          case None => Row(id, data, 0)
          case Some((wordIndex, length)) =>
            val caption = if (row.isNullAt(4)) "" else row.getString(4)
            val (input, cont, target) = embedCaption(caption, wordIndex, length)
            Row(id, data, 0, input, cont, target)
        }
      }
    }
    val base = Seq(StructField("id", StringType, nullable = true),
      StructField("data", INNER_DATA_FIELD_SCHEMA, nullable = true),
      StructField("label", IntegerType, nullable = true))
    val sentences = captions.toSeq.flatMap(_ => Seq("input_sentence", "cont_sentence",
      "target_sentence").map(StructField(_, ArrayType(IntegerType), nullable = true)))
    df.sparkSession.createDataFrame(rows, StructType(base ++ sentences))
  }

  /** A height or width of a row: a number, or None when null. */
  private def dimension(row: Row, i: Int): Option[Int] = row.get(i) match {
    case null => None
    case n: Number => Some(n.intValue)
    case s: String if s.trim.matches("\\d+") => Some(s.trim.toInt)
    case other => throw new CortadoConfigException(
      s"an image row's ${if (i == 2) "height" else "width"} is '$other', not a number: $row")
  }

  /**
   * The height and width the `data` struct gives the image at `path`: its row's (the caption
   * file's), as CaffeOnSpark's; its header's where the row gives none. `warned` says whether a
   * disagreement between the two has been logged in this partition (once is enough: a data set
   * of resized copies disagrees for every image).
   */
  private def imageSize(path: Path, bytes: Array[Byte], height: Option[Int],
      width: Option[Int], warned: Boolean): ((Int, Int), Boolean) = {
    val header = CocoCaptions.imageSize(bytes)
    (header, height, width) match {
      case (Some((h, w)), Some(rowHeight), Some(rowWidth)) =>
        val differs = h != rowHeight || w != rowWidth
        if (differs && !warned) {
          log.warn(s"the image $path is $h high and $w wide, but its row says $rowHeight high " +
            s"and $rowWidth wide: the row's sizes are kept (this is logged once a partition)")
        }
        ((rowHeight, rowWidth), warned || differs)
      case (_, Some(h), Some(w)) => ((h, w), warned)
      case (Some((h, w)), _, _) => ((height.getOrElse(h), width.getOrElse(w)), warned)
      case _ => throw new CortadoIOException(s"the image $path is neither JPEG nor PNG and its " +
        "row gives no height and width")
    }
  }

  /** The fields of the structs of the array column `name`, None when there is no such column. */
  private def arrayFields(raw: DataFrame, name: String, src: String): Option[Set[String]] =
    raw.schema.fields.find(_.name == name).map { f =>
      f.dataType match {
        case ArrayType(s: StructType, _) => s.fieldNames.toSet
        case other => throw new CortadoConfigException(s"the caption file $src has '$name' of " +
          s"${other.simpleString}, not an array of objects")
      }
    }

  private def requireFields(src: String, array: String, fields: Set[String],
      needed: Seq[String]): Unit = {
    val missing = needed.filterNot(fields.contains)
    if (missing.nonEmpty) {
      throw new CortadoConfigException(s"the caption file $src: no '$array' record has " +
        s"${missing.mkString(" or ")}")
    }
  }

  private def requireColumns(df: DataFrame, needed: Seq[String], what: String): Unit = {
    val missing = needed.filterNot(df.columns.contains)
    if (missing.nonEmpty) {
      throw new CortadoConfigException(s"cannot $what a DataFrame without " +
        s"${missing.mkString(", ")}: it has ${df.columns.mkString(", ")}")
    }
  }

  private def firstOf(df: DataFrame): Option[Row] = df.limit(1).collect().headOption
}
