// SPDX-License-Identifier: Apache-2.0
// The Spark shell session tests/spark/repl.sh types into spark-shell (standard input, line by
// line, as a user would): Fashion-MNIST's Parquet, a progress listener class defined here,
// LeNet trained on 2 workers, tested, features extracted, then a closure over values of this
// session (a val, a def, a case class) run on the executors. Every result is a line
// "REPL_RESULT key=value ..." that repl.sh checks. Settings from the environment: REPL_WORK
// (solver, net, model), REPL_DATA (fashion_mnist_{train,test}.parquet), REPL_WORKERS.
import io.cortado.spark.{Config, Cortado, IterationEvent, ProgressListener, TrainingEvent}

val work = sys.env("REPL_WORK")
val data = sys.env("REPL_DATA")
val workers = sys.env("REPL_WORKERS").toInt

val train = spark.read.parquet(s"file:$data/fashion_mnist_train.parquet")
val test = spark.read.parquet(s"file:$data/fashion_mnist_test.parquet")
println(s"REPL_RESULT rows train=${train.count} test=${test.count}")

// A listener class of this session: training calls it on a thread of the driver.
class Recorder extends ProgressListener {
  val displays = new java.util.concurrent.atomic.AtomicInteger
  @volatile var lastIteration = -1
  @volatile var lastLoss = Float.NaN
  def onProgress(event: TrainingEvent): Unit = event match {
    case e: IterationEvent =>
      displays.incrementAndGet()
      lastIteration = e.iteration
      lastLoss = e.loss
    case _ =>
  }
}

val recorder = new Recorder
val cortado = new Cortado(spark)
cortado.addProgressListener(recorder)
val config = Config(s"$work/solver.prototxt", model = s"file:$work/lenet.caffemodel",
  clusterSize = workers)
val start = System.nanoTime
cortado.train(train, config)
val seconds = (System.nanoTime - start) / 1e9
println(f"REPL_RESULT listener displays=${recorder.displays.get} " +
  f"last=${recorder.lastIteration} loss=${recorder.lastLoss}%.4f train_seconds=$seconds%.1f")

val metrics = cortado.test(test, config)
println(f"REPL_RESULT accuracy=${metrics("accuracy")}%.4f loss=${metrics("loss")}%.4f")

val features = cortado.features(test, Seq("ip2", "label"), config).cache()
println(s"REPL_RESULT features=${features.count} columns=${features.columns.mkString(",")}")

// Values, a function and a case class of this session, used by a closure on the executors.
val margin = 2.0f
case class Scored(id: Long, label: Int, predicted: Int, confident: Boolean, executor: String)
def score(id: Long, ip2: Seq[Float], label: Float): Scored = {
  val top = ip2.indices.maxBy(i => ip2(i))
  val second = ip2.indices.filter(_ != top).map(i => ip2(i)).max
  val executor = org.apache.spark.SparkEnv.get.executorId
  Scored(id, label.toInt, top, ip2(top) - second > margin, executor)
}
val scored = features.repartition(workers).map { r =>
  score(r.getLong(0), r.getSeq[Float](1), r.getSeq[Float](2).head)
}.collect()
val executors = scored.map(_.executor).distinct.sorted.mkString(",")
val correct = scored.count(s => s.predicted == s.label)
val confident = scored.count(_.confident)

// The same in the driver, from the features collected as they are.
val local = features.collect().map(r => (r.getSeq[Float](1), r.getSeq[Float](2).head.toInt))
val localCorrect = local.count { case (ip2, label) => ip2.indexOf(ip2.max) == label }
val localConfident = local.count { case (ip2, _) => val s = ip2.sorted; s(9) - s(8) > margin }
println(f"REPL_RESULT closure rows=${scored.length} correct=$correct confident=$confident " +
  f"executors=$executors driver_correct=$localCorrect driver_confident=$localConfident " +
  f"feature_accuracy=${correct.toDouble / scored.length}%.4f")
println("REPL_RESULT done")
// Not :quit: Spark 3.5 before 3.5.6 keeps a non-daemon thread once a barrier stage (training on
// several workers) has run (SPARK-51450), so the JVM would stay after :quit stopped Spark.
sys.exit(0)
