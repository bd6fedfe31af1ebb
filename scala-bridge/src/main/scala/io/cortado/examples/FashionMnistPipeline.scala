// SPDX-License-Identifier: Apache-2.0
package io.cortado.examples

import org.apache.spark.ml.{Pipeline, PipelineModel}
import org.apache.spark.ml.evaluation.MulticlassClassificationEvaluator
import org.apache.spark.ml.feature.{IndexToString, StringIndexer}
import org.apache.spark.ml.linalg.Vector
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.functions.{col, lit, udf}

import io.cortado.ml.{CortadoClassificationModel, CortadoClassifier}

/**
 * A Spark ML Pipeline from a DataFrame to predictions (examples/spark-ml-pipeline): the
 * Fashion-MNIST rows (`label` int, `data` 784 uint8 pixels) get their class names, a
 * StringIndexer turns the names into label indices, CortadoClassifier trains Caffe's LeNet on
 * the pixels (testing on the test images, marked by a validation indicator column, every
 * test_interval iterations), and IndexToString names the predictions. Prints sample predictions and the test
 * accuracy, saves the PipelineModel, loads it back and checks it predicts the same, and writes
 * the training curves as a PNG.
 *
 * Arguments: train.parquet test.parquet solver.prototxt output-folder [iterations]
 */
object FashionMnistPipeline {

  /** Fashion-MNIST's class names, by label. */
  val Classes: Array[String] = Array("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")

  def main(args: Array[String]): Unit = {
    if (args.length < 4 || args.length > 5) {
      System.err.println("usage: FashionMnistPipeline TRAIN.parquet TEST.parquet " +
        "SOLVER.prototxt OUTPUT-FOLDER [ITERATIONS]")
      sys.exit(2)
    }
    val Array(trainPath, testPath, solver, output) = args.take(4)
    val spark = SparkSession.builder().appName("Cortado Spark ML pipeline").getOrCreate()
    try run(spark, trainPath, testPath, solver, output, args.drop(4).headOption.map(_.toInt))
    finally spark.stop()
  }

  def run(spark: SparkSession, trainPath: String, testPath: String, solver: String,
      output: String, iterations: Option[Int]): Double = {
    val named = udf((label: Int) => Classes(label))
    def read(path: String) =
      spark.read.parquet(path).withColumn("category", named(col("label"))).drop("label")
    val train = read(trainPath)
    val test = read(testPath)

    val indexer = new StringIndexer().setInputCol("category").setOutputCol("categoryIndex")
      .setStringOrderType("alphabetAsc")
    val classifier = new CortadoClassifier().setSolver(solver).setFeaturesCol("data")
      .setLabelCol("categoryIndex")
    iterations.foreach(classifier.setMaxIter)
    val namer = new IndexToString().setInputCol("prediction").setOutputCol("predictedCategory")
      .setLabels(Classes.sorted)
    val pipeline = new Pipeline().setStages(Array(indexer, classifier, namer))

    // The test images ride along, marked, for the tests during training (test_interval).
    classifier.setValidationIndicatorCol("heldOut")
    val both = train.withColumn("heldOut", lit(false)).union(test.withColumn("heldOut", lit(true)))
    val start = System.nanoTime()
    val model = pipeline.fit(both)
    println(f"Pipeline fit in ${(System.nanoTime() - start) / 1e9}%.1f s")

    val predictions = model.transform(test).cache()
    val confidence = udf((p: Vector) => p.toArray.max)
    predictions.select(col("id"), col("category"), col("predictedCategory"),
      confidence(col("probability")).as("confidence")).show(10, truncate = false)
    val accuracy = new MulticlassClassificationEvaluator().setLabelCol("categoryIndex")
      .setMetricName("accuracy").evaluate(predictions)
    println(f"Test accuracy: $accuracy%.4f (${predictions.count()} images)")

    val saved = s"$output/pipeline-model"
    model.write.overwrite().save(saved)
    val loaded = PipelineModel.load(saved)
    val differ = loaded.transform(test).select("id", "prediction")
      .join(predictions.select(col("id"), col("prediction").as("before")), "id")
      .filter(col("prediction") =!= col("before")).count()
    println(s"Saved the PipelineModel to $saved; loaded back, it predicts $differ of the " +
      "test images differently")
    if (differ != 0) throw new IllegalStateException(s"$differ predictions changed on reload")

    val curves = s"$output/training_curves.png"
    model.stages(1).asInstanceOf[CortadoClassificationModel].saveTrainingCurves(curves)
    println(s"Training curves: $curves")
    predictions.unpersist()
    accuracy
  }
}
