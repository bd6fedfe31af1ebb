// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import scala.annotation.nowarn

import org.apache.spark.sql.Row
import org.apache.spark.sql.expressions.{MutableAggregationBuffer, UserDefinedAggregateFunction}
import org.apache.spark.sql.types._

/**
 * CaffeOnSpark's `VectorMean`: an aggregate of a column of float arrays of length `n` (such as
 * a feature blob) into their element-wise mean, an array of doubles:
 * `df.agg(new VectorMean(4096)(df("fc7")))`. Sums are kept in doubles. Null rows are left out;
 * an array of another length fails, naming both lengths. No rows give an empty result (null).
 *
 * A UserDefinedAggregateFunction as CaffeOnSpark's was (Spark deprecates the class in favour
 * of `functions.udaf` with an Aggregator, but keeps it in 3.5 and 4.1): programs call it
 * unchanged.
 *
 * @param n the length of every array
 */
@nowarn("cat=deprecation")
class VectorMean(n: Int) extends UserDefinedAggregateFunction {
  require(n > 0, s"VectorMean: the vector length must be positive, not $n")

  def inputSchema: StructType =
    StructType(Seq(StructField("vector", ArrayType(FloatType, containsNull = false))))

  def bufferSchema: StructType = StructType(Seq(
    StructField("sums", ArrayType(DoubleType, containsNull = false), nullable = false),
    StructField("rows", LongType, nullable = false)))

  def dataType: DataType = ArrayType(DoubleType, containsNull = false)

  def deterministic: Boolean = true

  def initialize(buffer: MutableAggregationBuffer): Unit = {
    buffer(0) = Array.fill(n)(0.0)
    buffer(1) = 0L
  }

  def update(buffer: MutableAggregationBuffer, input: Row): Unit = {
    if (input.isNullAt(0)) return
    val vector = input.getSeq[Float](0)
    if (vector.length != n) {
      throw new IllegalArgumentException(
        s"VectorMean($n): a row holds ${vector.length} values, not $n")
    }
    val sums = buffer.getSeq[Double](0).toArray
    var i = 0
    while (i < n) {
      sums(i) += vector(i)
      i += 1
    }
    buffer(0) = sums
    buffer(1) = buffer.getLong(1) + 1
  }

  def merge(buffer: MutableAggregationBuffer, other: Row): Unit = {
    val sums = buffer.getSeq[Double](0).toArray
    val more = other.getSeq[Double](0)
    var i = 0
    while (i < n) {
      sums(i) += more(i)
      i += 1
    }
    buffer(0) = sums
    buffer(1) = buffer.getLong(1) + other.getLong(1)
  }

  def evaluate(buffer: Row): Any = {
    val rows = buffer.getLong(1)
    if (rows == 0) null else buffer.getSeq[Double](0).map(_ / rows).toArray
  }
}
