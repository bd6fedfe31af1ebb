// SPDX-License-Identifier: Apache-2.0
package org.apache.spark.ui.cortado

import javax.servlet.http.HttpServletRequest

import scala.xml.Node

import org.apache.spark.ui.{SparkUITab, UIUtils, WebUIPage}

/** The page of [[CortadoTab]] for Spark 3.5, whose UI serves javax.servlet. */
private[cortado] final class CortadoPage(parent: SparkUITab, content: () => Seq[Node])
    extends WebUIPage("") {

  override def render(request: HttpServletRequest): Seq[Node] =
    UIUtils.headerSparkPage(request, "Cortado", content(), parent)
}
