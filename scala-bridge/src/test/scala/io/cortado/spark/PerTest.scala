// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import org.apache.spark.sql.SparkSession
import org.scalatest.{BeforeAndAfterEach, Suite}

/**
 * A fresh local SparkSession per test (after XGBoost's PerTest): UI off, short barrier timeout,
 * no stage retries, so a failing test fails fast and leaves nothing running.
 */
trait PerTest extends BeforeAndAfterEach { self: Suite =>

  protected val numWorkers: Int = 2

  /** The master URL; suites that need executor JVMs override it (see LocalClusterSuite). */
  protected def master: String = s"local[$numWorkers]"

  @transient private var currentSession: SparkSession = _

  protected def sparkSessionBuilder: SparkSession.Builder =
    SparkSession
      .builder()
      .master(master)
      .appName(getClass.getSimpleName)
      .config("spark.ui.enabled", "false")
      .config("spark.driver.host", "127.0.0.1")
      .config("spark.driver.bindAddress", "127.0.0.1")
      .config("spark.barrier.sync.timeout", "10")
      .config("spark.stage.maxConsecutiveAttempts", "1")
      .config("spark.task.maxFailures", "1")
      .config("spark.sql.shuffle.partitions", numWorkers.toString)

  def ss: SparkSession = {
    if (currentSession == null) currentSession = sparkSessionBuilder.getOrCreate()
    currentSession
  }

  override def afterEach(): Unit = {
    try {
      if (currentSession != null) {
        currentSession.stop()
        currentSession = null
      }
    } finally {
      super.afterEach()
    }
  }
}
