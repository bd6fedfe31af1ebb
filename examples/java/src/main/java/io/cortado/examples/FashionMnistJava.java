// SPDX-License-Identifier: Apache-2.0
package io.cortado.examples;

import static org.apache.spark.ml.functions.vector_to_array;
import static org.apache.spark.sql.functions.array;
import static org.apache.spark.sql.functions.array_max;
import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.element_at;
import static org.apache.spark.sql.functions.expr;
import static org.apache.spark.sql.functions.lit;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Collectors;

import org.apache.spark.ml.Pipeline;
import org.apache.spark.ml.PipelineModel;
import org.apache.spark.ml.PipelineStage;
import org.apache.spark.ml.evaluation.MulticlassClassificationEvaluator;
import org.apache.spark.ml.feature.IndexToString;
import org.apache.spark.ml.feature.StringIndexer;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

import io.cortado.ml.CortadoClassifier;
import io.cortado.spark.Config;
import io.cortado.spark.Cortado;

/**
 * Cortado from Java (examples/java): trains Caffe's LeNet on Fashion-MNIST with Cortado.train,
 * printing the training log through a progress listener; tests the model (testAsJava) and
 * extracts the class scores of every test image (features); then fits a Spark ML Pipeline
 * (StringIndexer, CortadoClassifier, IndexToString) on the same data and measures its accuracy on
 * the test images. The DataFrames are io.cortado.data.IdxToParquet's: id (long), label (int) and
 * data (784 uint8 pixels).
 *
 * <p>Arguments: TRAIN.parquet TEST.parquet SOLVER.prototxt OUTPUT-FOLDER [ITERATIONS]. Both
 * trainings run ITERATIONS iterations (default: the solver's max_iter); the model is written to
 * OUTPUT-FOLDER/lenet.caffemodel. Among the lines printed to stdout, those that
 * examples/java/run.sh checks with CHECK=1 (here from a run of 2,000 iterations):
 *
 * <pre>
 * Cortado.testAsJava: accuracy = 0.8814, loss = 0.3279 (10000 images)
 * Cortado.features: 10000 rows of 10000 test rows, columns [id, ip2, label]
 * Pipeline accuracy: 0.8851 (10000 images)
 * </pre>
 */
public final class FashionMnistJava {

  /** Fashion-MNIST's class names, by label. */
  private static final String[] CLASSES = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
      "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

  private FashionMnistJava() {}

  public static void main(String[] args) {
    if (args.length < 4 || args.length > 5) {
      System.err.println("usage: FashionMnistJava TRAIN.parquet TEST.parquet SOLVER.prototxt "
          + "OUTPUT-FOLDER [ITERATIONS]");
      System.exit(2);
    }
    int iterations = args.length == 5 ? Integer.parseInt(args[4]) : 0;
    SparkSession spark = SparkSession.builder().appName("Cortado from Java").getOrCreate();
    try {
      run(spark, args[0], args[1], args[2], args[3], iterations);
    } finally {
      spark.stop();
    }
  }

  /** The example; {@code iterations} 0 keeps the solver's max_iter. */
  static void run(SparkSession spark, String trainPath, String testPath, String solver,
      String output, int iterations) {
    Dataset<Row> train = spark.read().parquet(trainPath);
    Dataset<Row> test = spark.read().parquet(testPath).cache();
    long testRows = test.count();
    System.out.printf("Spark %s; data: %d training rows, %d test rows, columns %s%n",
        spark.version(), train.count(), testRows, Arrays.toString(test.columns()));

    // Cortado's own API. Java does not see Scala's default arguments: the Config constructor
    // takes every field (docs/api.md, "Config"), here the defaults but for the solver, the model
    // and solverOverrides.
    String overrides = iterations > 0 ? "max_iter: " + iterations : "";
    Config config = new Config(solver, output + "/lenet.caffemodel",
        "", "", 1, "id",               // weights, snapshot, devices, idColumn
        "", -1, false,                 // snapshotPrefix, snapshotInterval, resumeLatest
        0, "", "", "",                 // clusterSize, backend, connection, connectionFallback
        120, 120, 3,                   // startTimeoutSeconds, commTimeoutSeconds, maxAttempts
        false, false, overrides,       // resizeImages, skipCorruptImages, solverOverrides
        "auto", 0, "keepGlobalBatch",  // exchangePrecision, minWorkers, elasticScaling
        60, 120, 0,                    // elasticTimeoutSeconds, elasticGrowSeconds, cpuThreads
        "auto", 32, true);             // allreduce, latencyKb, hierarchical
    Cortado cortado = new Cortado(spark);
    // Called on a thread of the driver while training runs: Caffe's log lines of each event.
    cortado.addProgressListener(event -> System.out.println(event.logLines().mkString("\n")));
    long start = System.nanoTime();
    String model = cortado.train(train, config);
    System.out.printf("Cortado.train: wrote %s in %.1f s%n", model, secondsSince(start));

    Map<String, Double> metrics = new TreeMap<>(cortado.testAsJava(test, config));
    System.out.printf("Cortado.testAsJava: %s (%d images)%n",
        metrics.entrySet().stream().map(m -> String.format("%s = %.4f", m.getKey(), m.getValue()))
            .collect(Collectors.joining(", ")),
        testRows);

    // The ip2 scores (and the label, which the net carries as a blob too) of every test image.
    List<String> blobs = Arrays.asList("ip2", "label");
    Dataset<Row> features = cortado.features(test, blobs, config).cache();
    System.out.printf("Cortado.features: %d rows of %d test rows, columns %s%n", features.count(),
        testRows, Arrays.toString(features.columns()));
    features.show(3, false);
    long right = features.filter(expr("array_position(ip2, array_max(ip2)) - 1 = label[0]"))
        .count();
    System.out.printf("Highest ip2 score on the label: %d of %d rows (%.4f)%n", right, testRows,
        (double) right / testRows);

    // A Spark ML Pipeline: class names, indexed; CortadoClassifier trains on the pixels (the net's
    // top "data" read from featuresCol, "label" from labelCol); its predictions named back.
    Column classNames = array(Arrays.stream(CLASSES).map(c -> lit(c)).toArray(Column[]::new));
    Column name = element_at(classNames, col("label").plus(1));
    Dataset<Row> namedTrain = train.withColumn("category", name).drop("label");
    Dataset<Row> namedTest = test.withColumn("category", name).drop("label");
    StringIndexer indexer = new StringIndexer().setInputCol("category")
        .setOutputCol("categoryIndex").setStringOrderType("alphabetAsc");
    CortadoClassifier classifier = new CortadoClassifier().setSolver(solver)
        .setFeaturesCol("data").setLabelCol("categoryIndex");
    if (iterations > 0) {
      classifier.setMaxIter(iterations);
    }
    String[] sortedClasses = CLASSES.clone();
    Arrays.sort(sortedClasses);
    IndexToString namer = new IndexToString().setInputCol("prediction")
        .setOutputCol("predictedCategory").setLabels(sortedClasses);
    Pipeline pipeline = new Pipeline().setStages(
        new PipelineStage[] {indexer, classifier, namer});
    start = System.nanoTime();
    PipelineModel fitted = pipeline.fit(namedTrain);
    System.out.printf("Pipeline fit in %.1f s%n", secondsSince(start));

    Dataset<Row> predictions = fitted.transform(namedTest).cache();
    predictions.select(col("id"), col("category"), col("predictedCategory"),
        array_max(vector_to_array(col("probability"), "float64")).as("confidence")).show(5, false);
    double accuracy = new MulticlassClassificationEvaluator().setLabelCol("categoryIndex")
        .setMetricName("accuracy").evaluate(predictions);
    System.out.printf("Pipeline accuracy: %.4f (%d images)%n", accuracy, predictions.count());
    predictions.unpersist();
    features.unpersist();
    test.unpersist();
  }

  private static double secondsSince(long start) {
    return (System.nanoTime() - start) / 1e9;
  }
}
