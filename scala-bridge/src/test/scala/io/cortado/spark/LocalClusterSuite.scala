// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.File

import org.apache.spark.SparkException
import org.apache.spark.sql.SparkSession
import org.scalatest.Suite
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.NativeLoader
import io.cortado.jni.{NativeNet, NativeNetSuite}

/**
 * Spark's local-cluster mode with numWorkers executors of one core each (local-cluster[N,1,1024]):
 * a worker in this JVM starts each executor as a separate JVM, so a task there loads the native
 * libraries afresh, from the classpath's resources, as an executor on a cluster does.
 *
 * Without a Spark installation, the executor's classpath is this JVM's classpath, passed the way
 * Spark's own tests do it: SPARK_TESTING and SPARK_SCALA_VERSION let the launcher run without a
 * SPARK_HOME holding jars, and SPARK_DIST_CLASSPATH carries the classpath.
 */
trait LocalCluster extends PerTest { self: Suite =>

  override protected def master: String = s"local-cluster[$numWorkers,1,1024]"

  override protected def sparkSessionBuilder: SparkSession.Builder = {
    // The pom points SPARK_HOME into target/, where the worker puts its work/ directory.
    val sparkHome = new File(sys.env.getOrElse("SPARK_HOME", "target/spark-home"))
    sparkHome.mkdirs()
    super.sparkSessionBuilder
      .config("spark.home", sparkHome.getAbsolutePath)
      .config("spark.executor.memory", "512m")
      .config("spark.executor.cores", "1")
      .config("spark.executorEnv.SPARK_TESTING", "1")
      .config("spark.executorEnv.SPARK_SCALA_VERSION", "2.12")
      .config("spark.executorEnv.SPARK_DIST_CLASSPATH", System.getProperty("java.class.path"))
      .config("spark.executorEnv.CORTADO_LOG_LEVEL", "warn")
  }
}

class LocalClusterSuite extends AnyFunSuite with LocalCluster {

  override protected val numWorkers: Int = 1

  test("the native library loads in a separate executor JVM, NativeNet runs there, and a " +
    "native error there arrives as the Java exception") {
    val driverPid = ProcessHandle.current().pid()
    val results = ss.sparkContext
      .parallelize(0 until 4, numSlices = 2)
      .mapPartitions { part =>
        val values = part.toSeq
        val input = values.flatMap(i => Seq.fill(3)(i.toFloat))
        val out = NativeNetSuite.withNet(NativeNetSuite.TinyNet) { net =>
          NativeNetSuite.forwardIp(net, input)
        }
        val pid = ProcessHandle.current().pid()
        values.zip(out.grouped(2).toSeq).map { case (i, o) =>
          (i, o, pid, NativeLoader.loadedFrom())
        }.iterator
      }
      .collect()
    assert(results.length === 4)
    results.foreach { case (i, out, pid, loadedFrom) =>
      assert(pid !== driverPid, "the task ran in the driver's JVM")
      assert(new File(loadedFrom).getName.startsWith("cortado-native-"), loadedFrom)
      assert(out === Seq(1.5f * i + 1, 1.5f * i + 1), s"row $i")
    }

    // A native error there comes back as the Java exception, and the executor lives on.
    val e = intercept[SparkException] {
      ss.sparkContext
        .parallelize(0 until 1, numSlices = 1)
        .map { _ =>
          NativeNet.create("layer { name: 'x' type: 'Frobnicate' }", "executor.prototxt",
            NativeNet.TEST, -1, 1)
        }
        .collect()
    }
    assert(e.getMessage.contains("CortadoConfigException"), e.getMessage)
    assert(e.getMessage.contains("executor.prototxt: layer 'x': unknown layer type 'Frobnicate'"),
      e.getMessage)
    val pids = ss.sparkContext.parallelize(0 until 2, 2).map(_ => ProcessHandle.current().pid())
    assert(pids.collect().toSet === results.map(_._3).toSet, "the executor JVM was replaced")
  }

  test("the training log of a task in an executor JVM reaches the driver while the job runs") {
    val (rows, events) = TrainWithValidationSuite.trainAndRecord(ss, CortadoSuite.TinySolver)
    assert(rows.map(_.getInt(0)) === Seq(0, 20, 40, 60, 80, 100))
    val live = events.collect { case (_: IterationEvent | _: TestEvent, active) => active }
    // Six test passes; displays at 0, 25, 50, 75 and the closing one at 100.
    assert(live.size === 11)
    assert(live.forall(identity), "events arrived only after the job (the fallback path)")
  }
}
