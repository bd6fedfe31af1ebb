// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.examples

// CaffeOnSpark's example program, structured as the original and with its imports as they were,
// but for the first line, which named com.yahoo.ml.caffe: porting needs nothing more.
import io.cortado.caffeonspark.{Config, CaffeOnSpark, DataSource}
import org.apache.spark.{SparkConf, SparkContext}
import org.apache.spark.ml.classification.LogisticRegression
import scala.collection.immutable.Map

/**
 * A Spark program that uses CaffeOnSpark's API (here Cortado's compatibility package) for deep
 * learning and Spark ML for conventional machine learning: trains the net on the TRAIN source,
 * extracts the TEST source's features (`-features`, with the `-label` blob), fits a logistic
 * regression of the label on the first feature blob and saves it to `-output`.
 */
object MyMLPipeline {
  def main(args: Array[String]): Unit = {
    // CaffeOnSpark initialization
    val ctx = new SparkContext(new SparkConf())
    val cos = new CaffeOnSpark(ctx)
    var conf = new Config(ctx, args)

    // deep learning: training on the TRAIN source named by the net prototxt
    val dl_train_source = DataSource.getSource(conf, true)
    cos.train(dl_train_source)

    // the trained model's features of the TEST source named by the net prototxt
    val lr_raw_source = DataSource.getSource(conf, false)
    val extracted_df = cos.features(lr_raw_source)

    // the data as Spark ML's LogisticRegression takes it
    val lr_input_df = extracted_df
      .withColumn("Label", cos.floatarray2doubleUDF(extracted_df(conf.label)))
      .withColumn("Feature", cos.floatarray2doublevectorUDF(extracted_df(conf.features(0))))

    // a logistic regression model learnt with Spark ML
    val lr = new LogisticRegression().setLabelCol("Label").setFeaturesCol("Feature")
    val lr_model = lr.fit(lr_input_df)

    // the classification model, saved to -output
    lr_model.write.overwrite().save(conf.outputPath)
  }
}
