// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import org.apache.spark.SparkConf
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir
import io.cortado.jni.NativeLib
import io.cortado.spark.CortadoSuite.{separable, write}
import io.cortado.spark.CpuThreads.{Choice, ExecutorCores}

/**
 * The CPU threads a worker trains with: its share of the executor (spark.task.cpus, or the
 * executor's cores with one training task on it), OMP_NUM_THREADS, or Config.cpuThreads; and
 * the count the OpenMP runtime reports in the training log.
 */
class CpuThreadsSuite extends AnyFunSuite with PerTest {
  import WorkersSuite._

  private val four = ExecutorCores(4, "spark.executor.cores 4")

  test("-cpuThreads first, then OMP_NUM_THREADS, the executor's cores, spark.task.cpus") {
    assert(CpuThreads.choose(3, Some("8"), 2, four, 2) ===
      Choice(3, "Config.cpuThreads (-cpuThreads)"))
    assert(CpuThreads.choose(0, Some("8"), 2, four, 1) ===
      Choice(8, "OMP_NUM_THREADS in the executor's environment"))
    // OpenMP's nested form: the first level.
    assert(CpuThreads.choose(0, Some("6,2"), 2, four, 1).threads === 6)
    // Not a number: as if unset.
    assert(CpuThreads.choose(0, Some("many"), 2, four, 1) ===
      Choice(4, "the executor's cores (spark.executor.cores 4), one training task on it"))
    assert(CpuThreads.choose(0, None, 2, four, 2) ===
      Choice(2, "spark.task.cpus 2, 2 training tasks on this executor"))
    assert(CpuThreads.choose(0, None, 0, four, 3).threads === 1)
  }

  test("OMP_NUM_THREADS counts where the user set it, not where Spark gave every executor one") {
    val plain = new SparkConf(false)
    assert(CpuThreads.userOmpThreads(Some("1"), plain, "3") === None)
    assert(CpuThreads.userOmpThreads(Some("2"), plain, "driver") === Some("2"))
    val set = new SparkConf(false).set("spark.executorEnv.OMP_NUM_THREADS", "2")
    assert(CpuThreads.userOmpThreads(Some("2"), set, "3") === Some("2"))
    assert(CpuThreads.userOmpThreads(None, set, "3") === None)
  }

  test("the executor's cores: spark.executor.cores, else the master's, else the JVM's") {
    def of(pairs: (String, String)*): ExecutorCores = {
      val conf = new SparkConf(false)
      pairs.foreach { case (k, v) => conf.set(k, v) }
      CpuThreads.executorCores(conf, 16)
    }
    assert(of("spark.executor.cores" -> "4", "spark.master" -> "local[2]") === four)
    assert(of("spark.master" -> "local[3]") === ExecutorCores(3, "master local[3]"))
    assert(of("spark.master" -> "local[2,4]").cores === 2)
    assert(of("spark.master" -> "local[*]") === ExecutorCores(16, "master local[*]: 16"))
    assert(of("spark.master" -> "local") === ExecutorCores(1, "master local"))
    assert(of("spark.master" -> "local-cluster[2,3,1024]").cores === 3)
    assert(of("spark.master" -> "spark://h:7077") ===
      ExecutorCores(16, "16: the cores this JVM may use"))
    assert(of("spark.executor.cores" -> "0", "spark.master" -> "yarn").cores === 16)
  }

  test("a worker trains with its share's threads, as OpenMP reports them in the log") {
    val cases = Seq(
      (1, 0, "CPU threads: 2 per worker (the executor's cores (master local[2]), one training " +
        "task on it)"),
      (2, 0, "CPU threads: 1 per worker (spark.task.cpus 1, 2 training tasks on this executor)"),
      (2, 3, "CPU threads: 3 per worker (Config.cpuThreads (-cpuThreads))"))
    for ((workers, threads, expected) <- cases) {
      withTempDir("cortado-threads") { dir =>
        write(dir, "net.prototxt", tinyNet(4))
        val config = Config(write(dir, "solver.prototxt", EverySolver),
          model = dir.resolve("m.caffemodel").toUri.toString, snapshotInterval = 0,
          clusterSize = workers, cpuThreads = threads)
        val (_, events) = trainRecording(ss, separable(ss, 32, 3).repartition(workers), config)
        val said = events.collect { case LogEvent(t) if t.startsWith("CPU threads") => t }
        assert(said === Seq(expected), s"$workers workers, cpuThreads $threads")
      }
    }
  }

  test("in a JVM OpenMP's idle threads sleep: OMP_WAIT_POLICY set before OpenMP started") {
    // libcortado_preload.so, loaded first, sets it unless the JVM's environment chose.
    val line = NativeLib.deviceQuery().find(_.startsWith("CPU: ")).getOrElse("")
    if (sys.env.contains("OMP_WAIT_POLICY") || sys.env.contains("GOMP_SPINCOUNT")) {
      assert(line.contains(", as set"), line)
    } else {
      assert(line.endsWith("OpenMP's idle threads: OMP_WAIT_POLICY=passive, set by Cortado"),
        line)
    }
  }

  test("negative Config.cpuThreads is refused in the driver") {
    withTempDir("cortado-threads") { dir =>
      write(dir, "net.prototxt", tinyNet(4))
      val config = Config(write(dir, "solver.prototxt", EverySolver),
        model = dir.resolve("m.caffemodel").toUri.toString, cpuThreads = -2)
      val e = intercept[CortadoConfigException](new Cortado(ss).train(separable(ss, 8, 3), config))
      assert(e.getMessage.contains("Config.cpuThreads must be 0"), e.getMessage)
    }
  }
}
