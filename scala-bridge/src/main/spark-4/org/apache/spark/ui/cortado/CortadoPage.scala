// SPDX-License-Identifier: Apache-2.0
package org.apache.spark.ui.cortado

import jakarta.servlet.http.HttpServletRequest

import scala.xml.Node

import org.apache.spark.ui.{SparkUITab, UIUtils, WebUIPage}

/** The page of [[CortadoTab]] for Spark 4, whose UI serves jakarta.servlet. */
private[cortado] final class CortadoPage(parent: SparkUITab, content: () => Seq[Node])
    extends WebUIPage("") {

  override def render(request: HttpServletRequest): Seq[Node] =
    UIUtils.headerSparkPage(request, "Cortado", content(), parent)
}
