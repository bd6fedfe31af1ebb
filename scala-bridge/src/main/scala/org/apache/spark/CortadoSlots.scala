// SPDX-License-Identifier: Apache-2.0
package org.apache.spark

/**
 * The number of tasks the cluster can run at once, as Spark's own check of a barrier stage
 * counts them (SparkContext.maxNumConcurrentTasks for the default resource profile, which Spark
 * keeps package-private): what the driver compares a training job's worker count against
 * before it submits the barrier stage.
 */
object CortadoSlots {

  def available(sc: SparkContext): Int =
    sc.maxNumConcurrentTasks(sc.resourceProfileManager.defaultResourceProfile)

  /**
   * Waits up to `millis` for the listener bus to deliver every event posted so far (Spark's own
   * package-private wait), so that a listener has seen a failed task before its job's
   * failure is handled. Returns quietly when the time runs out.
   */
  def drainListeners(sc: SparkContext, millis: Long): Unit =
    try sc.listenerBus.waitUntilEmpty(millis)
    catch { case _: java.util.concurrent.TimeoutException => }
}
