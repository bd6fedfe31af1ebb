// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import scala.util.Try

import org.apache.spark.SparkConf

/**
 * How many CPU threads (OpenMP, OpenBLAS and oneDNN, which share one OpenMP runtime) a worker
 * trains with, and why: a worker takes its share of the executor rather than every core of the
 * host, so that executors sharing a node do not run more threads than it has cores.
 */
private[spark] object CpuThreads {

  /** The threads and the reason the training log gives for them. */
  final case class Choice(threads: Int, why: String)

  /**
   * In order: `configured` (Config.cpuThreads / -cpuThreads) when positive; OMP_NUM_THREADS
   * where the user set it (`ompEnv`, see [[userOmpThreads]]) when it is a positive number; the executor's cores
   * (`executorCores`) when this run has one training task on the executor (`tasksHere`);
   * else the task's cores (`taskCpus`, spark.task.cpus).
   */
  def choose(configured: Int, ompEnv: Option[String], taskCpus: Int,
      executorCores: ExecutorCores, tasksHere: Int): Choice = {
    val fromEnv = ompEnv.flatMap(v => Try(v.trim.takeWhile(_ != ',').toInt).toOption)
      .filter(_ > 0)
    if (configured > 0) Choice(configured, "Config.cpuThreads (-cpuThreads)")
    else if (fromEnv.isDefined) {
      Choice(fromEnv.get, "OMP_NUM_THREADS in the executor's environment")
    } else if (tasksHere <= 1) {
      Choice(executorCores.cores, s"the executor's cores (${executorCores.source}), one " +
        "training task on it")
    } else {
      val cpus = math.max(1, taskCpus)
      Choice(cpus, s"spark.task.cpus $cpus, $tasksHere training tasks on this executor")
    }
  }

  /**
   * The executor's OMP_NUM_THREADS (`env`) where the user chose it: in local mode (the driver's
   * JVM, started by the user) or through spark.executorEnv.OMP_NUM_THREADS. Spark (3.4 and later)
   * gives every executor it starts OMP_NUM_THREADS = spark.task.cpus unless that setting is
   * there; taken as the user's, it would hold an executor of 4 cores running one training task
   * to 1 thread.
   */
  def userOmpThreads(env: Option[String], conf: SparkConf, executorId: String): Option[String] =
    env.filter(_ => executorId == "driver" || conf.contains("spark.executorEnv.OMP_NUM_THREADS"))

  /** An executor's cores and where the number comes from. */
  final case class ExecutorCores(cores: Int, source: String)

  /**
   * The executor's cores: spark.executor.cores where set; N of a local[N] or
   * local-cluster[n,N,m] master; else the cores this JVM may use (a standalone executor
   * without spark.executor.cores has every core of its Worker).
   */
  def executorCores(conf: SparkConf, available: Int): ExecutorCores = {
    val LocalN = """local\[(\d+|\*)(?:,\d+)?\]""".r
    val LocalCluster = """local-cluster\[\d+,\s*(\d+),\s*\d+\]""".r
    conf.getOption("spark.executor.cores").flatMap(c => Try(c.trim.toInt).toOption)
      .filter(_ > 0) match {
      case Some(n) => ExecutorCores(n, s"spark.executor.cores $n")
      case None =>
        conf.getOption("spark.master").getOrElse("") match {
          case "local" => ExecutorCores(1, "master local")
          case m @ LocalN(n) =>
            if (n == "*") ExecutorCores(available, s"master $m: $available")
            else ExecutorCores(n.toInt, s"master $m")
          case m @ LocalCluster(n) => ExecutorCores(n.toInt, s"master $m")
          case _ => ExecutorCores(available, s"$available: the cores this JVM may use")
        }
    }
  }
}
