// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.{ByteArrayInputStream, ObjectInputStream}

import org.apache.hadoop.io.BytesWritable
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.types._

import io.cortado.CortadoConfigException
import io.cortado.data.ImageOptions
import io.cortado.jni.NativeImage
import io.cortado.storage.HadoopFiles

/**
 * CaffeOnSpark's image sources of a MemoryData layer, read as a DataFrame of `id` (string),
 * the data top's column (`array<float>`, the layer's channels x height x width, decoded or
 * rearranged natively) and the label top's column (float):
 *
 *  - `com.yahoo.ml.caffe.ImageDataFrame`: a DataFrame (`memory_data_param.dataframe_format`,
 *    default parquet, at `memory_data_param.source`, its columns chosen by
 *    `dataframe_column_select` SQL expressions) with the columns `label` (string or number) and
 *    `data` (binary, or a string of bytes), and optionally `id` (string; else `SampleID`, as
 *    CaffeOnSpark's Binary2DataFrame names it), `channels`, `height`,
 *    `width` (int) and `encoded` (boolean; when absent, `memory_data_param.image_encoded`);
 *  - `com.yahoo.ml.caffe.SeqImageDataSource`: a Hadoop sequence file of BytesWritable pairs, the
 *    key a Java-serialised Scala tuple `(id, label)` (an encoded image) or `(id, label, channels,
 *    height, width, encoded)`, the value the image's bytes (what CaffeOnSpark's
 *    Binary2Sequence and LMDB2Sequence tools write).
 *
 * An encoded image (JPEG or PNG) is decoded into the layer's channels (1: gray, 3: BGR). A raw
 * image holds its pixels interleaved as OpenCV holds them (height x width x channels), as
 * CaffeOnSpark's sources carry them, and is rearranged into Caffe's planar layout. An image of
 * another height and width is resized to the layer's with `images.resize` (CaffeOnSpark's
 * `-resize`), else fails naming it; a corrupt one fails naming it, or with
 * `images.skipCorrupt` is left out (the executor's log names it).
 *
 * @param shape the data top's sample shape: channels, height, width
 * @param owner the net and layer, starting messages
 */
final case class ImageSource(layer: String, source: String, sourceClass: String,
    format: String, columnSelect: Seq[String], encodedByDefault: Boolean, dataColumn: String,
    labelColumn: Option[String], shape: Seq[Int], owner: String,
    images: ImageOptions = ImageOptions(), crop: Int = NativeImage.NO_CROP) extends DataSource {

  def load(spark: SparkSession): DataFrame = {
    val decode = pixels
    val rows = records(spark).flatMap { r =>
      Option(decode(r)).map(values => Row(r.id, values, ImageSource.labelValue(r, owner)))
    }
    val unused = "_cortado_no_label"
    val schema = StructType(Seq(StructField("id", StringType),
      StructField(dataColumn, ArrayType(FloatType, containsNull = false), nullable = false),
      StructField(labelColumn.getOrElse(unused), FloatType, nullable = false)))
    val df = spark.createDataFrame(rows, schema)
    if (labelColumn.isDefined) df else df.drop(unused)
  }

  /** The images as the source holds them, one record each, not yet decoded. */
  private[cortado] def records(spark: SparkSession): RDD[ImageSource.Record] =
    sourceClass match {
      case ImageSource.DataFrameClass => dataFrameRecords(spark)
      case ImageSource.SequenceClass => sequenceRecords(spark)
    }

  /**
   * The function (serialisable, for the executors) that turns a record into the data top's
   * sample: the layer's channels x height x width, planar; null for a corrupt image left out
   * with `images.skipCorrupt`.
   */
  private[cortado] def pixels: ImageSource.Record => Array[Float] = {
    val Seq(c, h, w) = shape
    val (owner, images, encodedByDefault, crop) =
      (this.owner, this.images, this.encodedByDefault, this.crop)
    record => {
      val ImageSource.Record(id, _, channels, height, width, encoded, data) = record
      val what = s"$owner: image '$id'"
      if (data == null) throw new CortadoConfigException(s"$what has no data")
      // A raw image's shape: the record's, where it gives one, else the layer's.
      val (ch, hh, ww) = (if (channels > 0) channels else c, if (height > 0) height else h,
        if (width > 0) width else w)
      // Flagged encoded, or plainly a JPEG/PNG file that is not a raw image's size.
      val decode = encoded.getOrElse(encodedByDefault) ||
        (data.length != ch * hh * ww && NativeImage.looksEncoded(data))
      // A random crop's place: the same for an image on every run.
      val seed = ImageSource.cropSeed(id)
      if (decode) {
        NativeImage.decode(data, c, h, w, images.resize, crop, seed, images.skipCorrupt, what)
      } else {
        if (data.length != ch * hh * ww) {
          throw new CortadoConfigException(s"$what: a raw image of $ch x $hh x $ww needs " +
            s"${ch * hh * ww} bytes, it has ${data.length}")
        }
        if (ch != c) {
          throw new CortadoConfigException(
            s"$what has $ch channels; the layer takes $c (${shape.mkString(" x ")})")
        }
        NativeImage.fromInterleaved(data, ch, hh, ww, h, w, images.resize, crop, seed, what)
      }
    }
  }

  private def dataFrameRecords(spark: SparkSession): RDD[ImageSource.Record] = {
    val read = spark.read.format(if (format.isEmpty) "parquet" else format)
      .load(HadoopFiles.absoluteLocal(source))
    val df = if (columnSelect.isEmpty) read else read.selectExpr(columnSelect: _*)
    val owner = this.owner
    val fields = df.schema.fields.map(f => f.name -> f.dataType).toMap
    Seq("label", "data").filterNot(fields.contains).foreach { missing =>
      throw new CortadoConfigException(s"$owner: the ImageDataFrame at $source has no column " +
        s"'$missing' (it has: ${df.columns.mkString(", ")}); it needs label and data, and may " +
        "have id, channels, height, width and encoded")
    }
    def index(name: String) = if (fields.contains(name)) df.schema.fieldIndex(name) else -1
    // Binary2DataFrame (and io.cortado.data.ImageFolder) name the id column SampleID.
    val id = if (fields.contains("id")) index("id") else index("SampleID")
    val (label, data) = (index("label"), index("data"))
    val (channels, height, width, encoded) =
      (index("channels"), index("height"), index("width"), index("encoded"))
    df.rdd.zipWithIndex.map { case (row, n) =>
      def int(i: Int) = if (i < 0 || row.isNullAt(i)) 0 else row.getAs[Number](i).intValue
      val key = if (id < 0 || row.isNullAt(id)) n.toString else row.get(id).toString
      val bytes = if (row.isNullAt(data)) null else row.get(data) match {
        case b: Array[Byte] => b
        case s: String => s.getBytes("ISO-8859-1")
        case other => throw new CortadoConfigException(
          s"$owner: image '$key': column 'data' holds ${other.getClass.getSimpleName}, not " +
            "bytes")
      }
      ImageSource.Record(key, if (row.isNullAt(label)) "" else row.get(label).toString,
        int(channels), int(height), int(width),
        if (encoded < 0 || row.isNullAt(encoded)) None else Some(row.getBoolean(encoded)), bytes)
    }
  }

  private def sequenceRecords(spark: SparkSession): RDD[ImageSource.Record] = {
    val owner = this.owner
    spark.sparkContext.sequenceFile(HadoopFiles.absoluteLocal(source), classOf[BytesWritable],
      classOf[BytesWritable])
      .zipWithIndex.map { case ((key, value), n) =>
        val bytes = if (value == null) null else value.copyBytes()
        if (key == null) ImageSource.Record(n.toString, "", 0, 0, 0, Some(true), bytes)
        else {
          val in = new ObjectInputStream(new ByteArrayInputStream(key.copyBytes()))
          val tuple = try in.readObject() finally in.close()
          tuple match {
            case (id: String, label: String) =>
              ImageSource.Record(id, label, 0, 0, 0, Some(true), bytes)
            case (id: String, label: String, c: Int, h: Int, w: Int, encoded: Boolean) =>
              ImageSource.Record(id, label, c, h, w, Some(encoded), bytes)
            case other => throw new CortadoConfigException(
              s"$owner: record $n of the sequence file $source has a key of class " +
                s"${other.getClass.getName}; supported are Scala tuples (id, label) and (id, " +
                "label, channels, height, width, encoded)")
          }
        }
      }
  }
}

object ImageSource {

  /** The seed of an image's random crop: from its id (a 64-bit mix of the id's hash). */
  def cropSeed(id: String): Long = {
    var z = id.hashCode.toLong + 0x9E3779B97F4A7C15L
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL
    z ^ (z >>> 31)
  }

  val DataFrameClass = "com.yahoo.ml.caffe.ImageDataFrame"
  val SequenceClass = "com.yahoo.ml.caffe.SeqImageDataSource"

  /** A record's label as a number, failing with the image's name when it is not one. */
  private[cortado] def labelValue(r: Record, owner: String): Float =
    try Option(r.label).getOrElse("").trim.toFloat
    catch {
      case _: NumberFormatException =>
        throw new CortadoConfigException(
          s"$owner: image '${r.id}' has the label '${r.label}', not a number")
    }

  /** One image as the sources give it; 0 for a dimension they do not give. */
  private[cortado] final case class Record(id: String, label: String, channels: Int, height: Int,
      width: Int, encoded: Option[Boolean], data: Array[Byte])
}
