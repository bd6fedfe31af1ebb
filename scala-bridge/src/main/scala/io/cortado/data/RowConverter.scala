// SPDX-License-Identifier: Apache-2.0
package io.cortado.data

import java.nio.FloatBuffer

import org.apache.spark.ml.linalg.{SQLDataTypes, Vector => MLVector}
import org.apache.spark.mllib.linalg.{Vector => OldVector, VectorUDT => OldVectorUDT}
import org.apache.spark.sql.Row
import org.apache.spark.sql.types._

import io.cortado.CortadoConfigException
import io.cortado.jni.NativeImage

/**
 * What one feed-layer top reads: the DataFrame column `column`, one sample of shape `shape`
 * (the feed's batch shape without the batch axis) per row, as stored: the feed layer applies
 * the top's transform_param itself. `layer` and `top` name it in messages.
 */
final case class TopSpec(layer: String, top: String, column: String, shape: Seq[Int]) {

  def size: Int = shape.product

  def describe: String = s"top '$top' of layer '$layer' needs samples of shape " +
    s"${shape.mkString(" ")} ($size ${if (size == 1) "float" else "floats"})"
}

/**
 * What to do with images that are not as a top needs them.
 *
 * @param resize      resize an image of another height and width to the top's (bilinear), as
 *                    CaffeOnSpark's `-resize`; else such an image fails its row
 * @param skipCorrupt leave out rows whose image cannot be decoded (the executor's log names
 *                    each); else such a row fails the job, naming it
 */
final case class ImageOptions(resize: Boolean = false, skipCorrupt: Boolean = false)

/**
 * Turns DataFrame rows into feed samples (one `Array[Float]` per top, as [[BatchFeeder]] takes
 * them). Supported columns: arrays of float, double, int, long, short or byte, and Spark ML
 * vectors (dense or sparse; `org.apache.spark.ml.linalg` or the older `mllib.linalg`), exactly
 * the sample's size; numeric scalars (samples of one value), strings holding a number (a label
 * such as "7"), and binary: raw uint8 pixels in the top's C x H x W order (one byte per value),
 * or a JPEG or PNG file, decoded natively into the top's channels (1: gray, 3: BGR color) and,
 * with `images.resize`, resized to its height and width. The schema is checked when the
 * converter is built (in the driver, before any job); array and binary lengths, images and
 * nulls are checked per row. Both throw CortadoConfigException naming the column and the
 * expected shape.
 *
 * The rows given to [[apply]] hold the specs' columns first, in order (select them so); any
 * further columns are ignored.
 */
final class RowConverter private (specs: Seq[TopSpec], kinds: Seq[DataType],
    images: ImageOptions, columns: Seq[Int]) extends Serializable {

  /** The number of leading columns read: one per spec. */
  val width: Int = specs.length

  private val converters: Array[(Row, Long) => Array[Float]] =
    specs.indices.map(i => converter(specs(i), kinds(i), columns(i))).toArray

  /**
   * The samples of `row` (`index` numbers the row in messages); null when the row holds a
   * corrupt image and `images.skipCorrupt` leaves it out.
   */
  def apply(row: Row, index: Long): Array[Array[Float]] = {
    val out = new Array[Array[Float]](converters.length)
    var i = 0
    while (i < converters.length) {
      out(i) = converters(i)(row, index)
      if (out(i) == null) return null
      i += 1
    }
    out
  }

  /**
   * Writes the samples of `row` in place: spec `i`'s into `buffers(i)` as sample `slot` (at
   * float `slot` times its size), as [[apply]] converts them but without an array per sample.
   * False when the row holds a corrupt image that `images.skipCorrupt` leaves out: the slot is
   * then partly written, for the next row to fill.
   */
  def into(row: Row, index: Long, buffers: Array[FloatBuffer], slot: Int): Boolean = {
    var i = 0
    while (i < writers.length) {
      if (!writers(i)(row, index, buffers(i), slot * sizes(i))) return false
      i += 1
    }
    true
  }

  private val sizes: Array[Int] = specs.map(_.size).toArray
  private val writers: Array[(Row, Long, FloatBuffer, Int) => Boolean] =
    specs.indices.map(i => writer(specs(i), kinds(i), columns(i), converters(i))).toArray

  /**
   * What [[into]] does for one spec: raw pixels and Spark ML vectors go straight into the
   * buffer; other kinds through `convert`.
   */
  private def writer(spec: TopSpec, kind: DataType, column: Int,
      convert: (Row, Long) => Array[Float]): (Row, Long, FloatBuffer, Int) => Boolean = {
    val n = spec.size
    def put(buffer: FloatBuffer, at: Int, values: Array[Float]): Boolean =
      if (values == null) false else { buffer.put(at, values); true }
    kind match {
      case BinaryType => (row, index, buffer, at) =>
        val bytes = if (row.isNullAt(column)) null else row.getAs[Array[Byte]](column)
        if (bytes != null && bytes.length == n) {
          RowConverter.putPixels(bytes, n, buffer, at)
          true
        } else put(buffer, at, convert(row, index))
      case vector if RowConverter.isVector(vector) => (row, index, buffer, at) =>
        row.get(column) match {
          case v: MLVector if v.size == n =>
            RowConverter.putDoubles(v.toArray, n, buffer, at)
            true
          case _ => put(buffer, at, convert(row, index))
        }
      case _ => (row, index, buffer, at) => put(buffer, at, convert(row, index))
    }
  }

  private def converter(spec: TopSpec, kind: DataType, column: Int)
      : (Row, Long) => Array[Float] = {
    val n = spec.size
    def checked(row: Row, index: Long, length: Int): Unit = {
      if (row.isNullAt(column)) fail(spec, kind, s"row $index is null")
      if (length != n) fail(spec, kind, s"row $index has $length values")
    }
    kind match {
      case BinaryType => (row, index) =>
        val bytes = if (row.isNullAt(column)) null else row.getAs[Array[Byte]](column)
        if (bytes != null && bytes.length != n && NativeImage.looksEncoded(bytes)) {
          if (spec.shape.length != 3) {
            fail(spec, kind, s"row $index holds an encoded image, which needs a top of shape " +
              "channels x height x width")
          }
          NativeImage.decode(bytes, spec.shape(0), spec.shape(1), spec.shape(2), images.resize,
            NativeImage.NO_CROP, 0L, images.skipCorrupt, s"column '${spec.column}', row $index")
        } else {
          checked(row, index, if (bytes == null) -1 else bytes.length)
          val values = new Array[Float](n)
          RowConverter.putPixels(bytes, n, FloatBuffer.wrap(values), 0)
          values
        }
      case StringType => (row, index) =>
        if (row.isNullAt(column)) fail(spec, kind, s"row $index is null")
        val text = row.getString(column)
        try Array(text.trim.toFloat)
        catch {
          case _: NumberFormatException =>
            fail(spec, kind, s"row $index holds '$text', not a number")
        }
      case ArrayType(_: NumericType, _) => (row, index) =>
        val seq = if (row.isNullAt(column)) null else row.getSeq[Any](column)
        checked(row, index, if (seq == null) -1 else seq.length)
        val values = new Array[Float](n)
        var j = 0
        seq.foreach { v =>
          if (v == null) fail(spec, kind, s"row $index has a null element")
          values(j) = v.asInstanceOf[Number].floatValue
          j += 1
        }
        values
      case vector if RowConverter.isVector(vector) => (row, index) =>
        val values = if (row.isNullAt(column)) null else row.get(column) match {
          case v: MLVector => v.toArray
          case v: OldVector => v.toArray
          case other => fail(spec, kind, s"row $index holds a ${other.getClass.getName}")
        }
        checked(row, index, if (values == null) -1 else values.length)
        val out = new Array[Float](n)
        RowConverter.putDoubles(values, n, FloatBuffer.wrap(out), 0)
        out
      case _: NumericType => (row, index) =>
        if (row.isNullAt(column)) fail(spec, kind, s"row $index is null")
        Array(row.getAs[Number](column).floatValue)
      case _ => throw new IllegalStateException(kind.toString)
    }
  }

  private def fail(spec: TopSpec, kind: DataType, what: String): Nothing =
    RowConverter.fail(spec, kind, what)
}

object RowConverter {

  /**
   * A converter for rows of the specs' columns taken from `schema`; throws
   * CortadoConfigException when a spec's column is missing, of an unsupported type, or a scalar
   * while the top needs more than one value.
   */
  def apply(schema: StructType, specs: Seq[TopSpec],
      images: ImageOptions = ImageOptions()): RowConverter =
    new RowConverter(specs, kinds(schema, specs), images, specs.indices)

  /**
   * A converter for rows of `schema` as they are: each spec reads its column where `schema` has
   * it (rather than the specs' columns first, in order). Checks as [[apply]].
   */
  def inPlace(schema: StructType, specs: Seq[TopSpec],
      images: ImageOptions = ImageOptions()): RowConverter =
    new RowConverter(specs, kinds(schema, specs), images,
      specs.map(spec => schema.fieldNames.indexOf(spec.column)))

  private def kinds(schema: StructType, specs: Seq[TopSpec]): Seq[DataType] = {
    specs.map { spec =>
      val field = schema.fields.find(_.name == spec.column).getOrElse {
        throw new CortadoConfigException(
          s"${spec.describe}, read from column '${spec.column}', which the DataFrame lacks " +
            s"(it has: ${schema.fieldNames.mkString(", ")})")
      }
      field.dataType match {
        case BinaryType | ArrayType(_: NumericType, _) =>
        case vector if isVector(vector) =>
        case _: NumericType | StringType =>
          if (spec.size != 1) fail(spec, field.dataType, "it holds one value per row")
        case other =>
          fail(spec, other, "supported are arrays of numbers, Spark ML vectors, numbers, " +
            "strings holding a number, and binary (uint8 pixels, or a JPEG or PNG image)")
      }
      field.dataType
    }
  }

  /** Spark ML's vector type, or the older mllib one. */
  /** The first `n` of `bytes`, pixels 0-255, as floats into `out` from float `at`. */
  private def putPixels(bytes: Array[Byte], n: Int, out: FloatBuffer, at: Int): Unit = {
    var j = 0
    while (j < n) { out.put(at + j, (bytes(j) & 0xff).toFloat); j += 1 }
  }

  /** The first `n` of `values` as floats into `out` from float `at`. */
  private def putDoubles(values: Array[Double], n: Int, out: FloatBuffer, at: Int): Unit = {
    var j = 0
    while (j < n) { out.put(at + j, values(j).toFloat); j += 1 }
  }

  private[cortado] def isVector(kind: DataType): Boolean =
    kind == SQLDataTypes.VectorType || kind.isInstanceOf[OldVectorUDT]

  private def fail(spec: TopSpec, kind: DataType, what: String): Nothing =
    throw new CortadoConfigException(
      s"column '${spec.column}' (${kind.simpleString}): ${spec.describe}; $what")
}
