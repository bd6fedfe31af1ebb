// SPDX-License-Identifier: Apache-2.0
package io.cortado

import scala.util.control.NonFatal

/** Resource handling for native objects (after spark-rapids' Arm). */
object Arm {

  /** Runs `body` on `resource` and closes it afterwards, whatever happens. */
  def withResource[R <: AutoCloseable, T](resource: R)(body: R => T): T = {
    try body(resource)
    finally resource.close()
  }

  /** Runs `body` on `resource`, closing it only if `body` throws (ownership passes on). */
  def closeOnExcept[R <: AutoCloseable, T](resource: R)(body: R => T): T = {
    try body(resource)
    catch {
      case t: Throwable =>
        try resource.close()
        catch { case NonFatal(e) => t.addSuppressed(e) }
        throw t
    }
  }
}
