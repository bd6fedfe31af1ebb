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
}
