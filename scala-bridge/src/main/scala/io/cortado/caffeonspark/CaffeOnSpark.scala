// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import org.apache.spark.SparkContext
import org.apache.spark.ml.linalg.{Vector, Vectors}
import org.apache.spark.sql.{Column, DataFrame, Row, SparkSession}
import org.apache.spark.sql.expressions.UserDefinedFunction
import org.apache.spark.sql.functions.{col, udf}
import org.apache.spark.sql.types.{ArrayType, FloatType, StringType, StructField, StructType}
import org.apache.spark.storage.StorageLevel

import io.cortado.CortadoConfigException
import io.cortado.spark.{Cortado, CortadoOnSpark}

/**
 * CaffeOnSpark's `com.yahoo.ml.caffe.CaffeOnSpark`, over the native API
 * ([[io.cortado.spark.Cortado]], which new code should use), so that CaffeOnSpark programs
 * port by changing their imports:
 *
 * {{{
 * import io.cortado.caffeonspark.{Config, CaffeOnSpark, DataSource}
 *
 * val cos = new CaffeOnSpark(sc)
 * val conf = new Config(sc, args)
 * cos.train(DataSource.getSource(conf, true))
 * val features = cos.features(DataSource.getSource(conf, false))
 * }}}
 *
 * Each method loads the source's data as a DataFrame and runs one [[io.cortado.spark.Cortado]]
 * call with the settings of `source.conf` (see Config.toCortado): training on
 * `conf.clusterSize` workers, one Spark task each, with the model written to
 * `conf.modelPath` and snapshots beside it. Errors are Cortado's (CortadoConfigException for a
 * bad prototxt or source, naming it), not CaffeOnSpark's IllegalStateException.
 *
 * @param sc the application's SparkContext; a SparkSession on it is taken (or made) when needed
 */
class CaffeOnSpark(@transient val sc: SparkContext) extends Serializable {
  import CaffeOnSpark._

  /** The label column of [[features]] as a double: the array's first value. */
  @transient val floatarray2doubleUDF: UserDefinedFunction =
    udf((values: Seq[Float]) => values.head.toDouble)

  /** A float array column of [[features]] as a Spark ML vector (of doubles), for Spark ML. */
  @transient val floatarray2doublevectorUDF: UserDefinedFunction =
    udf((values: Seq[Float]) => Vectors.dense(values.map(_.toDouble).toArray): Vector)

  @transient private lazy val spark: SparkSession = DataSource.session(sc)

  @transient private lazy val cortado = new Cortado(spark)

  /**
   * Trains on `source` (the TRAIN net's) for the solver's max_iter iterations and writes the
   * model to `source.conf.modelPath` (see [[io.cortado.spark.Cortado.train]]). The test nets
   * do not run: see [[trainWithValidation]].
   */
  def train[T1, T2](source: DataSource[T1, T2]): Unit =
    cortado.train(source.load(spark), source.conf.toCortado)

  /**
   * [[train]] on `sourceTrain`, testing on `sourceValidation` (the TEST net's) as Caffe tests
   * during training: every `test_interval` iterations (and at the start with
   * `test_initialization`) the TEST net runs `test_iter` batches (see
   * [[io.cortado.spark.Cortado.trainWithValidation]]). Returns CaffeOnSpark's result: one
   * array<float> column per TEST net output (`accuracy`, `loss`), holding the mean of each of
   * its values over the pass, one row per test pass in order.
   */
  def trainWithValidation[T1, T2](sourceTrain: DataSource[T1, T2],
      sourceValidation: DataSource[T1, T2]): DataFrame = {
    val passes = cortado.trainWithValidation(sourceTrain.load(spark),
      sourceValidation.load(spark), sourceTrain.conf.toCortado)
    // Cortado's columns: iteration, then a double per output value ("name[i]" for blobs of
    // several values), regrouped into an array per blob.
    val blobs = groupOutputs(passes.columns.toSeq.drop(1))
    val rows = passes.collect().map { pass =>
      Row.fromSeq(blobs.map { case (_, names) => names.map(n => pass.getAs[Double](n).toFloat) })
    }
    val schema = StructType(blobs.map { case (blob, _) =>
      StructField(blob, ArrayType(FloatType), nullable = false)
    })
    spark.createDataFrame(spark.sparkContext.parallelize(rows.toSeq, 1), schema)
  }

  /**
   * Tests the model at `source.conf.modelPath` on `source` (the TEST net's) and returns the
   * mean of each TEST net output over the whole batches, as a sequence of its values (one
   * for `accuracy` and `loss`). Sets `source.conf.isTest`, as CaffeOnSpark did.
   */
  def test[T1, T2](source: DataSource[T1, T2]): Map[String, Seq[Double]] = {
    source.conf.isTest = true
    val means = cortado.test(source.load(spark), source.conf.toCortado)
    groupOutputs(means.keys.toSeq.sorted).map { case (blob, names) =>
      blob -> names.map(means)
    }.toMap
  }

  /**
   * The blobs `source.conf.features` (with the label, which Config appends) of the TEST net
   * with the weights of `source.conf.modelPath`, for every row of `source`: columns
   * `SampleID` (a string: the row's id, the LMDB record's key or the DataFrame's `id` column,
   * else its row number) then one array<float> per blob, named after it (see
   * [[io.cortado.spark.Cortado.features]]). Computed now and kept on the executors' disks
   * (DISK_ONLY), as CaffeOnSpark did; clears `source.conf.isTest`, as CaffeOnSpark did.
   */
  def features[T1, T2](source: DataSource[T1, T2]): DataFrame = {
    source.conf.isTest = false
    val out = features2(source).persist(StorageLevel.DISK_ONLY)
    out.count()
    out
  }

  /**
   * [[features]], computed when an action runs it and not kept (CaffeOnSpark's was private).
   */
  def features2[T1, T2](source: DataSource[T1, T2]): DataFrame = {
    val blobs = Option(source.conf.features).map(_.toSeq).getOrElse(Seq.empty)
    if (blobs.isEmpty) {
      throw new CortadoConfigException(
        "Config.features (-features) names no blob to extract")
    }
    val config = source.conf.toCortado
    val out = cortado.features(source.load(spark), blobs, config)
    out.select(column(config.idColumn).cast(StringType).as(SampleIdColumn) +:
      blobs.map(column): _*)
  }
}

/**
 * The jar's main class under CaffeOnSpark's name: `spark-submit --class
 * io.cortado.caffeonspark.CaffeOnSpark cortado.jar <CaffeOnSpark's flags>` runs
 * [[io.cortado.spark.CortadoOnSpark]].
 */
object CaffeOnSpark {

  /** CaffeOnSpark's name of the id column of the features. */
  val SampleIdColumn: String = CortadoOnSpark.SampleIdColumn

  /** Runs [[io.cortado.spark.CortadoOnSpark.main]] (which exits the JVM with its status). */
  def main(args: Array[String]): Unit = CortadoOnSpark.main(args)

  /** A column by its exact name (blob names may hold dots). */
  private def column(name: String): Column = col("`" + name.replace("`", "``") + "`")

  private val Indexed = """(.+)\[(\d+)\]""".r

  /**
   * The blobs of Cortado's output names, in the order of their first name, each with its
   * names in index order: "name[i]" is value i of a blob of several values, any other name
   * a blob of one value.
   */
  private[caffeonspark] def groupOutputs(names: Seq[String]): Seq[(String, Seq[String])] = {
    val parsed = names.map {
      case n @ Indexed(blob, i) => (blob, i.toInt, n)
      case n => (n, 0, n)
    }
    parsed.map(_._1).distinct.map { blob =>
      blob -> parsed.filter(_._1 == blob).sortBy(_._2).map(_._3)
    }
  }
}
