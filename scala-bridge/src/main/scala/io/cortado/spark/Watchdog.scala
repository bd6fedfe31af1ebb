// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import org.apache.spark.{TaskContext, TaskKilledException}

/**
 * Turns a Spark task kill (a cancelled job or stage, a lost speculative race) into a native
 * abort: a daemon thread polls the task's interrupted flag and calls `abort` once (for a
 * training task, NativeTrainer.abort, which stops its feeds too), so a training session
 * waiting on its feed fails at once instead of training on to max_iter. Outside a Spark task
 * it does nothing. `close` stops it; after that `abort` is never called.
 */
private[spark] final class Watchdog(abort: String => Unit) extends AutoCloseable {
  private val context = Option(TaskContext.get())
  @volatile private var closed = false
  @volatile var fired = false
  private val lock = new Object
  private val thread = context.map { ctx =>
    val t = new Thread(() => {
      lock.synchronized {
        while (!closed && !ctx.isInterrupted()) lock.wait(100)
        if (!closed) {
          fired = true
          abort(s"the Spark task (stage ${ctx.stageId()}, partition ${ctx.partitionId()}) " +
            "was killed")
        }
      }
    }, "cortado-watchdog")
    t.setDaemon(true)
    t.start()
    t
  }

  /** Throws Spark's TaskKilledException when the task was killed. */
  def rethrowKill(): Unit = context.foreach(Watchdog.killIfInterrupted)

  override def close(): Unit = {
    lock.synchronized {
      closed = true
      lock.notifyAll()
    }
    thread.foreach(_.join())
  }
}

private[spark] object Watchdog {

  /** Spark's own reaction to a killed task, which it reports as killed rather than failed. */
  def killIfInterrupted(context: TaskContext): Unit =
    if (context.isInterrupted()) {
      throw new TaskKilledException(s"task of stage ${context.stageId()} killed")
    }
}
