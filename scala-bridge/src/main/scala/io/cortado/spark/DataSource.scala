// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.charset.StandardCharsets

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.{DataFrame, SparkSession}

import io.cortado.CortadoConfigException
import io.cortado.storage.HadoopFiles

/**
 * Where CaffeOnSpark's main class finds a phase's data: the `source` of the net's CoSData layer
 * of that phase (`cos_data_param.source`), read as a DataFrame of `cos_data_param
 * .dataframe_format` (default parquet; any format Spark's DataFrameReader knows).
 *
 * @param layer       the CoSData layer's name
 * @param source      the path (or table) handed to `spark.read.format(format).load`
 * @param format      the DataFrameReader format
 * @param sourceClass the layer's `source_class`, as written
 */
final case class DataSource(layer: String, source: String, format: String, sourceClass: String) {

  def load(spark: SparkSession): DataFrame = spark.read.format(format).load(source)
}

object DataSource {

  /**
   * CaffeOnSpark's source classes read through Spark here: DataFrameSource (any DataFrame) and
   * ImageDataFrame (a DataFrame of images, whose columns the CoSData tops name). An empty
   * source_class means a DataFrame too.
   */
  val DataFrameClasses: Set[String] =
    Set("", "com.yahoo.ml.caffe.DataFrameSource", "com.yahoo.ml.caffe.ImageDataFrame")

  private val LmdbHint =
    "LMDB (and LevelDB) sources cannot be read through Spark by Cortado yet: convert the data " +
      "to a DataFrame (Parquet; examples/spark-fashion-mnist/run.sh shows how) and name it in a " +
      "CoSData layer's cos_data_param.source, or train from LMDB with `cortado train`"

  /**
   * The data source of the `phase` ("TRAIN" or "TEST") net of the solver at `solverFile`,
   * whose net is found as [[Cortado]] finds it. Throws CortadoConfigException, naming the net
   * and the layer, when the phase has no CoSData layer with a source, or its source is one that
   * cannot be read through Spark (LMDB, sequence files).
   */
  def of(solverFile: String, phase: String, conf: Configuration): DataSource = {
    val (netText, netSource) = netOf(solverFile, conf)
    val layers = Prototxt.parse(netText).messages("layer").filter(inPhase(_, phase))
    def describe(l: Prototxt) =
      s"$netSource: layer '${l.get("name").getOrElse("")}' (${l.get("type").getOrElse("")})"
    layers.filter(_.get("type").contains("CoSData")) match {
      case Seq(layer) =>
        val cos = layer.message("cos_data_param")
        val source = cos.flatMap(_.get("source")).getOrElse("")
        val sourceClass = layer.get("source_class").getOrElse("")
        if (sourceClass.endsWith(".LMDB")) {
          throw new CortadoConfigException(
            s"${describe(layer)}: source_class $sourceClass: $LmdbHint")
        }
        if (!DataFrameClasses(sourceClass)) {
          throw new CortadoConfigException(
            s"${describe(layer)}: source_class $sourceClass is not supported; CoSData layers " +
              s"read DataFrames (${DataFrameClasses.filter(_.nonEmpty).mkString(", ")}, or none)")
        }
        if (source.isEmpty) {
          throw new CortadoConfigException(
            s"${describe(layer)}: cos_data_param.source is not set: it names the $phase data " +
              "(a Parquet directory, or a path in cos_data_param.dataframe_format)")
        }
        DataSource(layer.get("name").getOrElse(""), source,
          cos.flatMap(_.get("dataframe_format")).getOrElse("parquet"), sourceClass)
      case Seq() =>
        val hint = layers.collectFirst {
          case l if l.get("type").exists(Set("Data", "ImageData")) =>
            s" ${describe(l)} reads ${l.message("data_param").flatMap(_.get("source"))
              .getOrElse("a database")}: $LmdbHint"
          case l if l.get("type").contains("MemoryData") =>
            s" ${describe(l)} names no source; a MemoryData layer is fed through the DataFrame " +
              "API (io.cortado.spark.Cortado), not by the main class"
        }.getOrElse("")
        throw new CortadoConfigException(
          s"$netSource: the $phase net has no CoSData layer, so there is no data source to read." +
            hint)
      case several =>
        throw new CortadoConfigException(
          s"$netSource: the $phase net has ${several.size} CoSData layers; one is supported")
    }
  }

  /** The net text and its source name: the solver's `net`/`train_net` file, or `net_param`. */
  private def netOf(solverFile: String, conf: Configuration): (String, String) = {
    val solver = Prototxt.parse(readText(solverFile, conf))
    solver.get("net").orElse(solver.get("train_net")) match {
      case Some(path) =>
        val p = new Path(path)
        val resolved =
          if (p.isAbsolute || HadoopFiles.exists(path, conf)) path
          else new Path(new Path(solverFile).getParent, p).toString
        (readText(resolved, conf), resolved)
      case None =>
        val embedded = solver.message("net_param").orElse(solver.message("train_net_param"))
        (embedded.map(_.text).getOrElse {
          throw new CortadoConfigException(s"$solverFile: the solver names no net")
        }, solverFile)
    }
  }

  private def readText(path: String, conf: Configuration): String =
    new String(HadoopFiles.readBytes(path, conf), StandardCharsets.UTF_8)

  private def inPhase(layer: Prototxt, phase: String): Boolean = {
    val includes = layer.messages("include")
    if (includes.nonEmpty) includes.exists(r => r.get("phase").forall(_ == phase))
    else !layer.messages("exclude").exists(_.get("phase").contains(phase))
  }
}
