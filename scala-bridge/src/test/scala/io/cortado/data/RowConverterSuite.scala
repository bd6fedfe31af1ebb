// SPDX-License-Identifier: Apache-2.0
package io.cortado.data

import java.nio.{ByteBuffer, ByteOrder, FloatBuffer}

import org.apache.spark.ml.linalg.{SQLDataTypes, Vectors}
import org.apache.spark.mllib.linalg.{Vectors => OldVectors, VectorUDT => OldVectorUDT}
import org.apache.spark.sql.Row
import org.apache.spark.sql.types._
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException

class RowConverterSuite extends AnyFunSuite {

  /** One top per column kind: pixels, a vector, an array, a number, a string. */
  val Specs: Seq[TopSpec] = Seq(
    TopSpec("data", "pixels", "pixels", Seq(1, 2, 2)),
    TopSpec("data", "vec", "vec", Seq(3)),
    TopSpec("data", "arr", "arr", Seq(2)),
    TopSpec("data", "num", "num", Seq()),
    TopSpec("data", "text", "text", Seq()))

  def schema(vector: DataType): StructType = StructType(Seq(
    StructField("pixels", BinaryType), StructField("vec", vector),
    StructField("arr", ArrayType(DoubleType)), StructField("num", IntegerType),
    StructField("text", StringType)))

  /** Buffers for 3 samples of each spec, every value -1. */
  def buffers(): Array[FloatBuffer] = Specs.map { spec =>
    val floats = ByteBuffer.allocateDirect(4 * 3 * spec.size).order(ByteOrder.nativeOrder())
      .asFloatBuffer()
    (0 until floats.capacity).foreach(i => floats.put(i, -1f))
    floats
  }.toArray

  def contents(buffer: FloatBuffer): Seq[Float] = (0 until buffer.capacity).map(buffer.get)

  test("into writes in place the samples apply converts, at the given slot") {
    val rows = Seq(
      schema(SQLDataTypes.VectorType) -> Row(Array[Byte](0, 7, -1, 12),
        Vectors.dense(0.5, -2, 3), Seq(1.5, 2.5), 7, " 4 "),
      schema(SQLDataTypes.VectorType) -> Row(Array[Byte](1, 2, 3, 4),
        Vectors.sparse(3, Array(1), Array(9.0)), Seq(0.0, -1.0), -3, "2.5"),
      schema(new OldVectorUDT) -> Row(Array[Byte](9, 8, 7, 6), OldVectors.dense(1, 2, 3),
        Seq(4.0, 5.0), 0, "1"))
    rows.foreach { case (kind, row) =>
      val converter = RowConverter(kind, Specs)
      val out = buffers()
      assert(converter.into(row, 0L, out, 1))
      val samples = converter(row, 0L)
      Specs.indices.foreach { i =>
        val n = Specs(i).size
        assert(contents(out(i)) === Seq.fill(n)(-1f) ++ samples(i).toSeq ++ Seq.fill(n)(-1f),
          Specs(i).column)
      }
    }
  }

  test("into refuses a row as apply does, naming the column") {
    val converter = RowConverter(schema(SQLDataTypes.VectorType), Specs)
    def message(row: Row): String =
      intercept[CortadoConfigException](converter.into(row, 5L, buffers(), 0)).getMessage
    val good = Seq[Any](Array[Byte](0, 1, 2, 3), Vectors.dense(1, 2, 3), Seq(1.0, 2.0), 1, "1")
    assert(message(Row.fromSeq(good.updated(0, Array[Byte](1, 2, 3)))) ===
      "column 'pixels' (binary): top 'pixels' of layer 'data' needs samples of shape 1 2 2 " +
      "(4 floats); row 5 has 3 values")
    assert(message(Row.fromSeq(good.updated(1, Vectors.dense(1, 2)))).contains(
      "column 'vec' (vector): top 'vec' of layer 'data' needs samples of shape 3 (3 floats); " +
        "row 5 has 2 values"))
    assert(message(Row.fromSeq(good.updated(1, null))).endsWith("row 5 is null"))
    assert(message(Row.fromSeq(good.updated(4, "seven")))
      .endsWith("row 5 holds 'seven', not a number"))
  }
}
