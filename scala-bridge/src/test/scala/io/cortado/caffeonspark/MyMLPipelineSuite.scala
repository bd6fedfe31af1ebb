// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark

import org.apache.spark.SparkContext
import org.apache.spark.ml.classification.LogisticRegressionModel
import org.apache.spark.sql.SparkSession
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.caffeonspark.examples.MyMLPipeline
import io.cortado.spark.CaffeOnSparkCommandsSuite

/**
 * CaffeOnSpark's MyMLPipeline example, ported by its import line only, run as `spark-submit`
 * runs it: its main makes its own SparkContext from `new SparkConf()`, so the master and the
 * rest come from system properties, and no other SparkContext may be alive (this suite has no
 * PerTest session).
 */
class MyMLPipelineSuite extends AnyFunSuite {
  import CaffeOnSparkCommandsSuite.{uri, withLeNet}

  /** What spark-submit would pass: a local master of 2 threads, on loopback, without UI. */
  val SparkProperties: Map[String, String] = Map(
    "spark.master" -> "local[2]",
    "spark.app.name" -> "MyMLPipelineSuite",
    "spark.ui.enabled" -> "false",
    "spark.driver.host" -> "127.0.0.1",
    "spark.driver.bindAddress" -> "127.0.0.1")

  test("MyMLPipeline trains LeNet, extracts ip2 and fits a LogisticRegression that classifies") {
    withLeNet { (dir, solver) =>
      val output = uri(dir, "lr_model")
      val args = Array("-train", "-features", "ip2", "-label", "label", "-conf", solver,
        "-model", uri(dir, "lenet.caffemodel"), "-output", output)
      val before = SparkProperties.keys.map(k => k -> Option(System.getProperty(k))).toMap
      SparkProperties.foreach { case (k, v) => System.setProperty(k, v) }
      try {
        MyMLPipeline.main(args)

        // The saved model, on the features of the TEST rows (computed again with the
        // trained net), against their labels.
        val model = LogisticRegressionModel.load(output)
        val sc = SparkContext.getOrCreate()
        val cos = new CaffeOnSpark(sc)
        val conf = new Config(sc, args)
        val features = cos.features(DataSource.getSource(conf, false))
        val input = features
          .withColumn("Label", cos.floatarray2doubleUDF(features(conf.label)))
          .withColumn("Feature", cos.floatarray2doublevectorUDF(features(conf.features(0))))
        val predictions = model.transform(input).select("Label", "prediction").collect()
        assert(predictions.length === 100)
        val correct = predictions.count(p => p.getDouble(0) == p.getDouble(1))
        assert(correct >= 90, s"$correct of 100 test rows classified correctly")
      } finally {
        try {
          // The pipeline leaves its context running, as the original does.
          SparkContext.getOrCreate().stop()
          SparkSession.clearActiveSession()
          SparkSession.clearDefaultSession()
        } finally {
          before.foreach {
            case (k, Some(v)) => System.setProperty(k, v)
            case (k, None) => System.clearProperty(k)
          }
        }
      }
    }
  }
}
