// SPDX-License-Identifier: Apache-2.0
package io.cortado.ml

import org.apache.spark.ml.param._
import org.apache.spark.ml.linalg.SQLDataTypes
import org.apache.spark.sql.types.{ArrayType, BinaryType, DoubleType, NumericType, StructField,
  StructType}

import io.cortado.CortadoConfigException
import io.cortado.data.RowConverter

/**
 * The Spark ML params that [[CortadoClassifier]] and [[CortadoClassificationModel]] share: the
 * columns read and written, and which tops and blobs of the net they stand for.
 */
trait CortadoModelParams extends Params {

  final val featuresCol: Param[String] = new Param[String](this, "featuresCol",
    "the column of the net's input: a Spark ML vector, an array of numbers or binary (uint8 " +
      "pixels, or a JPEG or PNG image), one sample of the input top's shape per row")

  final val labelCol: Param[String] = new Param[String](this, "labelCol",
    "the label column (a number per row: the class index) that training reads; transform " +
      "feeds it to the net when the data has it, else 0")

  final val predictionCol: Param[String] = new Param[String](this, "predictionCol",
    "the output column of the predicted class index (double)")

  final val probabilityCol: Param[String] = new Param[String](this, "probabilityCol",
    "the output column of the class probabilities (a vector: the softmax of the scores); " +
      "empty: not written")

  final val rawPredictionCol: Param[String] = new Param[String](this, "rawPredictionCol",
    "the output column of the class scores (a vector: the scores blob); empty: not written")

  final val featuresTop: Param[String] = new Param[String](this, "featuresTop",
    "the top of the net's feed layer that featuresCol fills; empty: its first top (for a " +
      "net with Input layers: the first input)")

  final val labelTop: Param[String] = new Param[String](this, "labelTop",
    "the top of the net's feed layer that labelCol fills; empty: its other top, when it has " +
      "exactly two")

  final val scoresBlob: Param[String] = new Param[String](this, "scoresBlob",
    "the TEST net's blob of class scores, one row per sample; empty: the scores the net's " +
      "SoftmaxWithLoss, Softmax or Accuracy layer reads")

  final val outputBlobs: StringArrayParam = new StringArrayParam(this, "outputBlobs",
    "further TEST net blobs that transform adds, each as a vector column named after the " +
      "blob (the row's sample of it)")

  setDefault(featuresCol -> "features", labelCol -> "label", predictionCol -> "prediction",
    probabilityCol -> "probability", rawPredictionCol -> "rawPrediction", featuresTop -> "",
    labelTop -> "", scoresBlob -> "", outputBlobs -> Array.empty[String])

  def getFeaturesCol: String = $(featuresCol)
  def getLabelCol: String = $(labelCol)
  def getPredictionCol: String = $(predictionCol)
  def getProbabilityCol: String = $(probabilityCol)
  def getRawPredictionCol: String = $(rawPredictionCol)
  def getFeaturesTop: String = $(featuresTop)
  def getLabelTop: String = $(labelTop)
  def getScoresBlob: String = $(scoresBlob)
  def getOutputBlobs: Array[String] = $(outputBlobs)

  /** Throws, naming the column, unless `schema` has `column` of a type a net input reads. */
  protected def checkInputColumn(schema: StructType, column: String, what: String): StructField = {
    val field = schema.fields.find(_.name == column).getOrElse {
      throw new CortadoConfigException(s"$what column '$column' is missing (the data has: " +
        s"${schema.fieldNames.mkString(", ")})")
    }
    field.dataType match {
      case BinaryType | ArrayType(_: NumericType, _) | _: NumericType =>
      case other if RowConverter.isVector(other) =>
      case other =>
        throw new CortadoConfigException(s"$what column '$column' is ${other.simpleString}: " +
          "supported are Spark ML vectors, arrays of numbers, numbers and binary")
    }
    field
  }
}

private[ml] object CortadoModelParams {

  /** `schema` with the columns transform adds; throws, naming it, when one exists already. */
  def outputSchema(params: CortadoModelParams, schema: StructType): StructType = {
    val added = Seq(params.getRawPredictionCol -> SQLDataTypes.VectorType,
      params.getProbabilityCol -> SQLDataTypes.VectorType,
      params.getPredictionCol -> DoubleType).filter(_._1.nonEmpty) ++
      params.getOutputBlobs.toSeq.map(_ -> SQLDataTypes.VectorType)
    val names = added.map(_._1)
    names.diff(names.distinct).headOption.foreach { n =>
      throw new CortadoConfigException(s"output column '$n' is named twice")
    }
    names.find(schema.fieldNames.contains).foreach { n =>
      throw new CortadoConfigException(s"output column '$n' exists already in the data: " +
        "choose another name")
    }
    StructType(schema.fields ++ added.map { case (n, t) => StructField(n, t, nullable = false) })
  }
}
