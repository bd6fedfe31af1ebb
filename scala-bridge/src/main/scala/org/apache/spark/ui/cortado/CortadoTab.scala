// SPDX-License-Identifier: Apache-2.0
package org.apache.spark.ui.cortado

import scala.xml.Node

import org.apache.spark.SparkContext
import org.apache.spark.ui.{SparkUI, SparkUITab}

/**
 * The "Cortado" tab of the driver's Spark UI, at `/cortado/`. Spark keeps its UI classes
 * package-private, so this much lives under org.apache.spark; what the page shows, and the
 * state behind it, come from io.cortado.spark.CortadoUi. The page itself (CortadoPage) is in
 * the source folder of each Spark line: Spark 3 serves javax.servlet, Spark 4 jakarta.servlet.
 */
final class CortadoTab private (ui: SparkUI, content: () => Seq[Node])
    extends SparkUITab(ui, "cortado") {
  attachPage(new CortadoPage(this, content))
}

object CortadoTab {

  /** Adds a tab showing `content()` to the UI of `sc`; false when `sc` has no UI. */
  def attach(sc: SparkContext, content: () => Seq[Node]): Boolean = sc.ui match {
    case Some(ui) =>
      ui.attachTab(new CortadoTab(ui, content))
      true
    case None => false
  }
}
