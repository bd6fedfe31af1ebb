// SPDX-License-Identifier: Apache-2.0
package io.cortado.ml

import java.nio.file.{Files, Path}

import scala.util.Random

import org.apache.spark.ml.{Pipeline, PipelineModel}
import org.apache.spark.ml.evaluation.MulticlassClassificationEvaluator
import org.apache.spark.ml.feature.{StringIndexer, VectorAssembler}
import org.apache.spark.ml.linalg.{Vector, Vectors}
import org.apache.spark.ml.tuning.{CrossValidator, CrossValidatorModel, ParamGridBuilder}
import org.apache.spark.sql.DataFrame
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir
import io.cortado.spark.CortadoSuite.{untrainedModel, write}
import io.cortado.spark.PerTest

object CortadoClassifierSuite {

  /** A CoSData feed for `phase`: top "pixels" (4 floats) and "target" (the class). */
  def feed(phase: String, batch: Int): String =
    s"""layer { name: "input" type: "CoSData" top: "pixels" top: "target"
      |  include { phase: $phase }
      |  source_class: "com.yahoo.ml.caffe.DataFrameSource"
      |  cos_data_param { batch_size: $batch
      |    top { name: "pixels" type: FLOAT_ARRAY channels: 4 sample_num_axes: 1 }
      |    top { name: "target" type: INT channels: 1 sample_num_axes: 0 } } }
      |""".stripMargin

  /** The layers after the input "pixels": a hidden layer, then 3 class scores "scores". */
  val Body: String =
    """layer { name: "hidden" type: "InnerProduct" bottom: "pixels" top: "hidden"
      |  inner_product_param { num_output: 8 weight_filler { type: "xavier" } } }
      |layer { name: "relu" type: "ReLU" bottom: "hidden" top: "hidden" }
      |layer { name: "scores" type: "InnerProduct" bottom: "hidden" top: "scores"
      |  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
      |""".stripMargin

  /** Train batch 16, test batch 10 (so transform pads partitions' last batches). */
  val Net: String = "name: \"three\"\n" + feed("TRAIN", 16) + feed("TEST", 10) + Body +
    """layer { name: "loss" type: "SoftmaxWithLoss" bottom: "scores" bottom: "target" top: "loss" }
      |layer { name: "accuracy" type: "Accuracy" bottom: "scores" bottom: "target"
      |  top: "accuracy" include { phase: TEST } }
      |""".stripMargin

  /** The same net as deploy.prototxt has it: an Input of 7 samples, then a Softmax. */
  val Deploy: String = "name: \"three\"\n" +
    """layer { name: "input" type: "Input" top: "pixels"
      |  input_param { shape { dim: 7 dim: 4 } } }
      |""".stripMargin + Body +
    """layer { name: "prob" type: "Softmax" bottom: "scores" top: "prob" }
      |""".stripMargin

  val Solver: String =
    """net: "net.prototxt"
      |base_lr: 0.05
      |momentum: 0.9
      |lr_policy: "fixed"
      |max_iter: 150
      |display: 50
      |random_seed: 1701
      |type: "SGD"
      |solver_mode: CPU
      |""".stripMargin

  val Centers: Seq[Seq[Double]] =
    Seq(Seq(1, 1, 0, 0), Seq(0, 0, 1, 1), Seq(1, 0, 1, 0)).map(_.map(_.toDouble))
  val Names: Seq[String] = Seq("iris", "rose", "tulip")
}

class CortadoClassifierSuite extends AnyFunSuite with PerTest {
  import CortadoClassifierSuite._

  /** `n` rows of columns f0..f3 (doubles around a class's center) and name (the class). */
  def flowers(n: Int, seed: Int): DataFrame = {
    val random = new Random(seed)
    val rows = (0 until n).map { i =>
      val c = i % 3
      val f = Centers(c).map(_ + 0.15 * random.nextGaussian())
      (i.toLong, f(0), f(1), f(2), f(3), Names(c))
    }
    ss.createDataFrame(rows).toDF("id", "f0", "f1", "f2", "f3", "name")
  }

  /** [[flowers]] as the classifier reads them: a vector "features" and a double "label". */
  def vectors(n: Int, seed: Int): DataFrame = {
    val spark = ss
    import spark.implicits._
    flowers(n, seed).as[(Long, Double, Double, Double, Double, String)].map {
      case (id, a, b, c, d, name) => (id, Vectors.dense(a, b, c, d), Names.indexOf(name).toDouble)
    }.toDF("id", "features", "label")
  }

  def withSolver[T](body: (Path, String) => T): T = withTempDir("cortado-ml") { dir =>
    write(dir, "net.prototxt", Net)
    body(dir, write(dir, "solver.prototxt", Solver))
  }

  def accuracy(predictions: DataFrame, label: String = "label"): Double =
    new MulticlassClassificationEvaluator().setLabelCol(label).setMetricName("accuracy")
      .evaluate(predictions)

  def predictions(df: DataFrame): Map[Long, (Double, Vector)] =
    df.select("id", "prediction", "probability").collect().map { r =>
      r.getLong(0) -> (r.getDouble(1), r.getAs[Vector](2))
    }.toMap

  test("fit trains, transform predicts, and save then load predicts the same") {
    withSolver { (dir, solver) =>
      val classifier = new CortadoClassifier().setSolver(solver).setPredictionCol("prediction")
        .setMaxIter(120)
      val model = classifier.fit(vectors(300, seed = 1))
      // maxIter reached the solver: the last display is at iteration 120.
      assert(model.trainingLog.exists(_.contains("] Trained 120 iterations")),
        model.trainingLog.takeRight(4))
      assert(model.trainingLog.exists(_.contains("] Iteration 100, lr = 0.05")))
      assert(model.trainingLog.head.matches("I\\d{4} \\d\\d:\\d\\d:\\d\\d\\.\\d{6} \\d+ .*"))

      val test = vectors(95, seed = 2).repartition(3)
      val out = model.transform(test)
      assert(out.columns.toSeq === Seq("id", "features", "label", "rawPrediction", "probability",
        "prediction"))
      val rows = out.collect()
      assert(rows.length === 95)
      rows.foreach { r =>
        val raw = r.getAs[Vector]("rawPrediction").toArray
        val p = r.getAs[Vector]("probability").toArray
        assert(raw.length === 3 && p.length === 3)
        assert(math.abs(p.sum - 1.0) < 1e-6)
        val expected = raw.map(s => math.exp(s - raw.max))
        p.indices.foreach(i => assert(math.abs(p(i) - expected(i) / expected.sum) < 1e-6))
        assert(r.getAs[Double]("prediction") === raw.indexOf(raw.max).toDouble)
      }
      assert(accuracy(out) > 0.95, accuracy(out))

      val saved = dir.resolve("saved").toString
      model.write.save(saved)
      Seq("metadata/part-00000", "data/net.prototxt", "data/weights.caffemodel",
        "data/training.log").foreach(f => assert(Files.isRegularFile(dir.resolve(s"saved/$f")), f))
      val loaded = CortadoClassificationModel.load(saved)
      assert(loaded.uid === model.uid)
      assert(loaded.getPredictionCol === "prediction")
      assert(loaded.trainingLog === model.trainingLog)
      assert(predictions(loaded.transform(test)) === predictions(out))
      // Saving over an existing folder needs overwrite, as for Spark's own models.
      intercept[java.io.IOException](model.write.save(saved))
      model.setPredictionCol("guess").write.overwrite().save(saved)
      assert(CortadoClassificationModel.load(saved).getPredictionCol === "guess")
    }
  }

  test("a Pipeline of StringIndexer, VectorAssembler and CortadoClassifier fits, saves, loads") {
    withSolver { (dir, solver) =>
      val pipeline = new Pipeline().setStages(Array(
        new StringIndexer().setInputCol("name").setOutputCol("label"),
        new VectorAssembler().setInputCols(Array("f0", "f1", "f2", "f3")).setOutputCol("vec"),
        new CortadoClassifier().setSolver(solver).setFeaturesCol("vec")))
      val model = pipeline.fit(flowers(300, seed = 3))
      val test = flowers(90, seed = 4)
      val out = model.transform(test)
      assert(accuracy(out) > 0.95, accuracy(out))
      model.write.save(dir.resolve("pipeline").toString)
      val loaded = PipelineModel.load(dir.resolve("pipeline").toString)
      assert(loaded.stages.last.isInstanceOf[CortadoClassificationModel])
      assert(predictions(loaded.transform(test)) === predictions(out))
    }
  }

  test("CrossValidator picks the learning rate that learns") {
    withSolver { (_, solver) =>
      val classifier = new CortadoClassifier().setSolver(solver).setMaxIter(60)
      val grid = new ParamGridBuilder().addGrid(classifier.baseLr, Array(1e-7, 0.05)).build()
      val cv = new CrossValidator().setEstimator(classifier).setEstimatorParamMaps(grid)
        .setEvaluator(new MulticlassClassificationEvaluator().setMetricName("accuracy"))
        .setNumFolds(2).setSeed(7)
      val model: CrossValidatorModel = cv.fit(vectors(240, seed = 5))
      val Array(tiny, good) = model.avgMetrics
      assert(good > 0.9, model.avgMetrics.toSeq)
      assert(tiny < 0.7, model.avgMetrics.toSeq)
      assert(model.bestModel.parent.asInstanceOf[CortadoClassifier].getBaseLr === 0.05)
    }
  }

  test("an executor builds the net once per task slot and keeps it between transforms") {
    withSolver { (_, solver) =>
      val model = new CortadoClassifier().setSolver(solver).setMaxIter(20)
        .fit(vectors(60, seed = 6))
      val data = vectors(120, seed = 7).repartition(6).cache()
      data.count()
      NetPool.clear()
      val before = NetPool.built
      assert(model.transform(data).count() === 120)
      val first = NetPool.built - before
      // local[2]: two tasks at a time, six partitions.
      assert(first >= 1 && first <= 2, first)
      assert(model.transform(data).select("prediction").collect().length === 120)
      assert(NetPool.built - before === first)
    }
  }

  test("a model from a deploy prototxt and a .caffemodel predicts as the fitted one") {
    withSolver { (dir, solver) =>
      val fitted = new CortadoClassifier().setSolver(solver).fit(vectors(300, seed = 8))
      Files.write(dir.resolve("trained.caffemodel"), fitted.weights)
      val deploy = write(dir, "deploy.prototxt", Deploy)
      val loaded = CortadoClassificationModel.fromCaffe(deploy,
        dir.resolve("trained.caffemodel").toString).setOutputBlobs(Array("prob"))
      // 23 rows: batches of 7, the last one of 2.
      val test = vectors(23, seed = 9).coalesce(1)
      val out = loaded.transform(test)
      val expected = predictions(fitted.transform(test))
      val got = out.select("id", "prediction", "probability", "prob").collect()
      assert(got.length === 23)
      got.foreach { r =>
        val (prediction, probability) = expected(r.getLong(0))
        assert(r.getDouble(1) === prediction)
        val p = r.getAs[Vector](2).toArray
        val softmax = r.getAs[Vector](3).toArray
        p.indices.foreach { i =>
          assert(math.abs(p(i) - probability(i)) < 1e-5)
          assert(math.abs(softmax(i) - p(i)) < 1e-5)
        }
      }
    }
  }

  test("schema problems are refused by transformSchema, naming the column") {
    withSolver { (dir, solver) =>
      val classifier = new CortadoClassifier().setSolver(solver)
      val df = vectors(10, seed = 10)
      def message(body: => Any): String = intercept[CortadoConfigException](body).getMessage
      assert(message(classifier.setFeaturesCol("vec").transformSchema(df.schema))
        .contains("features column 'vec' is missing"))
      val strings = flowers(10, seed = 1)
      assert(message(classifier.setFeaturesCol("name").transformSchema(strings.schema))
        .contains("features column 'name' is string"))
      classifier.setFeaturesCol("features")
      assert(message(classifier.setPredictionCol("label").transformSchema(df.schema))
        .contains("output column 'label' exists already"))
      classifier.setPredictionCol("prediction")
      assert(message(classifier.setFeaturesTop("image").fit(df)).contains("'image' is not a top"))
      classifier.setFeaturesTop("")
      assert(message(classifier.setBaseLr(0.1).setSolverOverrides("base_lr: 0.2").fit(df))
        .contains("base_lr is set twice"))
      val model = CortadoClassificationModel.fromCaffe(write(dir, "deploy.prototxt", Deploy),
        untrainedModel(dir, Deploy))
      assert(message(model.setScoresBlob("nothing").transformSchema(df.schema))
        .contains("no blob 'nothing'"))
    }
  }

  test("rows of the validation indicator are tested during training") {
    withSolver { (_, solver) =>
      import org.apache.spark.sql.functions.col
      val data = vectors(200, seed = 12).withColumn("held", col("id") >= 150)
      val model = new CortadoClassifier().setSolver(solver).setMaxIter(60)
        .setSolverOverrides("test_iter: 5\ntest_interval: 30")
        .setValidationIndicatorCol("held").fit(data)
      val passes = model.trainingLog.filter(_.contains("] Iteration ")).filter(_.contains("Testing net"))
      assert(passes.map(_.split("] ").last) === Seq(0, 30, 60).map(i => s"Iteration $i, Testing net (#0)"))
      val accuracy = model.trainingLog.filter(_.contains("Test net output #0: accuracy = "))
        .map(_.split(" = ").last.toDouble)
      assert(accuracy.length === 3 && accuracy.last > 0.9, accuracy)
      val message = intercept[CortadoConfigException](new CortadoClassifier().setSolver(solver)
        .setValidationIndicatorCol("id").fit(data)).getMessage
      assert(message.contains("validation indicator column 'id' is bigint, not boolean"))
    }
  }

  test("the Java call path PySpark takes through py4j: reflection on public methods") {
    withSolver { (dir, solver) =>
      def call(target: AnyRef, name: String, args: AnyRef*): AnyRef = {
        val cls = target match {
          case c: Class[_] => c
          case o => o.getClass
        }
        val method = cls.getMethods.find { m =>
          m.getName == name && m.getParameterCount == args.length &&
            m.getParameterTypes.zip(args).forall { case (t, a) =>
              a == null || boxed(t).isInstance(a)
            }
        }.getOrElse(fail(s"no public $name(${args.map(_.getClass.getSimpleName).mkString(", ")})" +
          s" on ${cls.getName}"))
        method.invoke(if (target.isInstanceOf[Class[_]]) null else target, args: _*)
      }
      val classifierClass = Class.forName("io.cortado.ml.CortadoClassifier")
      var classifier = classifierClass.getConstructor().newInstance().asInstanceOf[AnyRef]
      classifier = call(classifier, "setSolver", solver)
      classifier = call(classifier, "setMaxIter", Int.box(40))
      classifier = call(classifier, "setBaseLr", Double.box(0.05))
      val train = vectors(90, seed = 13)
      val model = call(classifier, "fit", train)
      val out = call(model, "transform", train).asInstanceOf[DataFrame]
      assert(out.columns.contains("prediction"))
      val path = dir.resolve("py4j-model").toString
      call(call(call(model, "write"), "overwrite"), "save", path)
      val modelClass = Class.forName("io.cortado.ml.CortadoClassificationModel")
      val loaded = call(modelClass, "load", path)
      assert(loaded.getClass === modelClass)
      Files.write(dir.resolve("w.caffemodel"), modelClass.getMethod("weights").invoke(loaded)
        .asInstanceOf[Array[Byte]])
      val fromCaffe = call(modelClass, "fromCaffe", write(dir, "deploy.prototxt", Deploy),
        dir.resolve("w.caffemodel").toString)
      assert(fromCaffe.getClass === modelClass)
      val png = call(model, "trainingCurves", Int.box(400), Int.box(300)).asInstanceOf[Array[Byte]]
      assert(png.length > 100 && png(1) == 'P'.toByte)
      val configClass = Class.forName("io.cortado.spark.Config")
      val config = call(configClass, "apply", solver, dir.resolve("c.caffemodel").toString, "", "",
        Int.box(1), "id", "", Int.box(-1), Boolean.box(false), Int.box(0), "", "", "",
        Double.box(120.0), Double.box(120.0), Int.box(3), Boolean.box(false),
        Boolean.box(false), "max_iter: 5")
      assert(call(config, "solverOverrides") === "max_iter: 5")
      assert(call(config, "exchangePrecision") === "auto")
      // Every field, exchangePrecision last.
      val every = call(configClass, "apply", solver, dir.resolve("c.caffemodel").toString, "",
        "", Int.box(1), "id", "", Int.box(-1), Boolean.box(false), Int.box(0), "", "", "",
        Double.box(120.0), Double.box(120.0), Int.box(3), Boolean.box(false),
        Boolean.box(false), "max_iter: 5", "bfloat16")
      assert(call(every, "exchangePrecision") === "bfloat16")
      assert(call(every, "minWorkers") === Int.box(0))
      // And with the elastic fields, last.
      val elastic = call(configClass, "apply", solver, dir.resolve("c.caffemodel").toString, "",
        "", Int.box(1), "id", "", Int.box(-1), Boolean.box(false), Int.box(3), "", "", "",
        Double.box(120.0), Double.box(120.0), Int.box(3), Boolean.box(false),
        Boolean.box(false), "max_iter: 5", "auto", Int.box(2), "linearLr", Double.box(30.0),
        Double.box(60.0))
      assert(call(elastic, "minWorkers") === Int.box(2))
      assert(call(elastic, "elasticScaling") === "linearLr")
      assert(call(elastic, "elasticGrowSeconds") === Double.box(60.0))
      assert(call(elastic, "cpuThreads") === Int.box(0))
      // And with cpuThreads, last.
      val threads = call(configClass, "apply", solver, dir.resolve("c.caffemodel").toString, "",
        "", Int.box(1), "id", "", Int.box(-1), Boolean.box(false), Int.box(3), "", "", "",
        Double.box(120.0), Double.box(120.0), Int.box(3), Boolean.box(false),
        Boolean.box(false), "max_iter: 5", "auto", Int.box(2), "linearLr", Double.box(30.0),
        Double.box(60.0), Int.box(4))
      assert(call(threads, "cpuThreads") === Int.box(4))
      assert(call(threads, "allreduce") === "auto")
      assert(call(threads, "latencyKb") === Int.box(32))
      assert(call(threads, "hierarchical") === Boolean.box(true))
      // And with the allreduce fields, last.
      val allreduce = call(configClass, "apply", solver, dir.resolve("c.caffemodel").toString,
        "", "", Int.box(1), "id", "", Int.box(-1), Boolean.box(false), Int.box(3), "", "", "",
        Double.box(120.0), Double.box(120.0), Int.box(3), Boolean.box(false),
        Boolean.box(false), "max_iter: 5", "auto", Int.box(2), "linearLr", Double.box(30.0),
        Double.box(60.0), Int.box(4), "doubling", Int.box(3), Boolean.box(false))
      assert(call(allreduce, "cpuThreads") === Int.box(4))
      assert(call(allreduce, "allreduce") === "doubling")
      assert(call(allreduce, "latencyKb") === Int.box(3))
      assert(call(allreduce, "hierarchical") === Boolean.box(false))
      // Java's constructor as it was before the allreduce fields, still there.
      val javaArgs: Seq[AnyRef] = Seq(solver, "m", "", "", Int.box(1), "id", "", Int.box(-1),
        Boolean.box(false), Int.box(0), "", "", "", Double.box(120.0), Double.box(120.0),
        Int.box(3), Boolean.box(false), Boolean.box(false), "", "auto", Int.box(0),
        "keepGlobalBatch", Double.box(60.0), Double.box(120.0), Int.box(0))
      val constructor = configClass.getConstructors.find(_.getParameterCount == javaArgs.size)
        .getOrElse(fail(s"no constructor of ${javaArgs.size} parameters on Config"))
      val old = constructor.newInstance(javaArgs: _*).asInstanceOf[AnyRef]
      assert(call(old, "allreduce") === "auto" && call(old, "latencyKb") === Int.box(32))
    }
  }

  /** The boxed class of a primitive parameter type (py4j passes boxed values). */
  private def boxed(t: Class[_]): Class[_] = t match {
    case java.lang.Integer.TYPE => classOf[java.lang.Integer]
    case java.lang.Double.TYPE => classOf[java.lang.Double]
    case java.lang.Boolean.TYPE => classOf[java.lang.Boolean]
    case java.lang.Long.TYPE => classOf[java.lang.Long]
    case other => other
  }

  test("the solver and the net may be given as text, and the classifier saves and loads") {
    withSolver { (dir, solver) =>
      // The file's net has 8 hidden units; netText's has 5, and it is the one trained.
      val five = Net.replace("num_output: 8", "num_output: 5")
      val solverText = Solver.replace("net: \"net.prototxt\"\n", "")
      val classifier = new CortadoClassifier().setSolverText(solverText).setNetText(five)
        .setMaxIter(150).setFeaturesCol("features")
      val model = classifier.fit(vectors(300, seed = 14))
      assert(model.netText === five)
      assert(model.netSource === "netText")
      assert(accuracy(model.transform(vectors(60, seed = 15))) > 0.95)
      // netText replaces the net the solver file names.
      val fromFile = new CortadoClassifier().setSolver(solver).setNetText(five).setMaxIter(10)
        .fit(vectors(30, seed = 16))
      assert(fromFile.netText === five)
      def message(body: => Any): String = intercept[CortadoConfigException](body).getMessage
      assert(message(new CortadoClassifier().setSolver(solver).setSolverText(solverText)
        .fit(vectors(30, seed = 16))).contains("not both"))
      assert(message(new CortadoClassifier().fit(vectors(30, seed = 16))).contains("neither"))
      assert(message(new CortadoClassifier().setSolver(solver).setNetText(five)
        .setSolverOverrides("net: \"other.prototxt\"").fit(vectors(30, seed = 16)))
        .contains("the net is set twice"))

      val path = dir.resolve("classifier").toString
      classifier.setBaseLr(0.02).setValidationIndicatorCol("held").write.save(path)
      val loaded = CortadoClassifier.load(path)
      assert(loaded.uid === classifier.uid)
      assert(loaded.getMaxIter === 150 && loaded.getBaseLr === 0.02)
      assert(loaded.getOrDefault(loaded.netText) === five)
      assert(loaded.getOrDefault(loaded.validationIndicatorCol) === "held")
      assert(!loaded.isDefined(loaded.solver))
    }
  }

  test("the training curves of a fitted model are a PNG") {
    withSolver { (_, solver) =>
      val model = new CortadoClassifier().setSolver(solver).setMaxIter(60)
        .fit(vectors(60, seed = 11))
      val png = model.trainingCurves(640, 480)
      assert(png.take(8).toSeq === Seq(0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n').map(_.toByte))
      val image = javax.imageio.ImageIO.read(new java.io.ByteArrayInputStream(png))
      assert(image.getWidth === 640 && image.getHeight === 480)
    }
  }
}
