// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.net.{HttpURLConnection, URL}
import java.nio.charset.StandardCharsets
import java.nio.file.Path
import java.util.concurrent.{CountDownLatch, TimeUnit}

import scala.collection.mutable.ArrayBuffer
import scala.io.Source

import org.apache.spark.SparkContext
import org.apache.spark.scheduler.{SparkListener, SparkListenerJobStart}
import org.apache.spark.sql.SparkSession
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.TestDirs.withTempDir

/** The "Cortado" tab of the Spark UI while and after Cortado trains, and the job description. */
class SparkUiSuite extends AnyFunSuite with PerTest {
  import CortadoSuite.{separable, write, TinyNet}

  private var ui = true

  override protected def sparkSessionBuilder: SparkSession.Builder =
    super.sparkSessionBuilder
      .config("spark.ui.enabled", ui.toString)
      .config("spark.ui.port", "0") // any free port; the test reads it from uiWebUrl
      .config("spark.ui.showConsoleProgress", "false")

  private val Solver =
    """net: "net.prototxt"
      |test_iter: 1
      |test_interval: 20
      |base_lr: 0.1
      |lr_policy: "fixed"
      |max_iter: 60
      |display: 10
      |snapshot: 30
      |random_seed: 1701
      |type: "SGD"
      |""".stripMargin

  private def withSolver[T](body: (Path, Config) => T): T = withTempDir("cortado-ui") { dir =>
    write(dir, "net.prototxt", TinyNet)
    val solver = write(dir, "solver.prototxt", Solver)
    body(dir, Config(solver, model = dir.resolve("tiny.caffemodel").toUri.toString,
      snapshotPrefix = dir.resolve("snap").toUri.toString))
  }

  private def page(sc: SparkContext): String = {
    val base = sc.uiWebUrl.getOrElse(fail("the SparkContext has no UI"))
    val connection = new URL(s"$base/cortado/").openConnection().asInstanceOf[HttpURLConnection]
    connection.setConnectTimeout(10000)
    connection.setReadTimeout(10000)
    try {
      assert(connection.getResponseCode === 200)
      val source = Source.fromInputStream(connection.getInputStream, StandardCharsets.UTF_8.name)
      try source.mkString
      finally source.close()
    } finally connection.disconnect()
  }

  private def iteration(html: String): String =
    """<span class="cortado-iteration">([^<]*)</span>""".r.findFirstMatchIn(html)
      .map(_.group(1)).getOrElse(fail(s"no iteration on the page:\n$html"))

  private def loss(html: String): String =
    """<span class="cortado-loss">([^<]*)</span>""".r.findFirstMatchIn(html)
      .map(_.group(1)).getOrElse(fail(s"no loss on the page:\n$html"))

  test("the Cortado tab shows the run while it trains, then its end") {
    withSolver { (_, config) =>
      val sc = ss.sparkContext
      val seen = ArrayBuffer.empty[(IterationEvent, String)]
      val cortado = new Cortado(ss)
      cortado.addProgressListener(new ProgressListener {
        override def onProgress(event: TrainingEvent): Unit = event match {
          case e: IterationEvent if e.iteration == 20 && !e.closing =>
            seen.synchronized(seen += e -> page(sc))
          case _ =>
        }
      })
      val data = separable(ss, 200, 7)
      cortado.trainWithValidation(data, data, config)

      val (event, during) = seen.synchronized(seen.toList) match {
        case Seq(one) => one
        case other => fail(s"expected one page fetched at iteration 20, got ${other.size}")
      }
      assert(iteration(during) === "20 / 60")
      assert(loss(during) === CortadoOnSpark.caffeFormat(event.loss.toDouble))
      assert(during.contains("solver.prototxt (running)"), during)
      assert(during.contains(s"""http-equiv="refresh" content="${CortadoUi.RefreshSeconds}""""))

      val after = page(sc)
      assert(iteration(after) === "60 / 60")
      assert(after.contains("solver.prototxt (finished)"), after)
      assert("""Last test: </strong>iteration 60: .*accuracy = """.r.findFirstIn(after).isDefined,
        after)
      assert("""Snapshots written: </strong>2\b""".r.findFirstIn(after).isDefined, after)
      assert(after.contains("snap_iter_60.caffemodel"), after)
      // The recent iterations, newest first.
      assert(after.indexOf("<td>60</td>") < after.indexOf("<td>50</td>"), after)
    }
  }

  test("the tab is attached once and lists each run; the training job has a description") {
    withSolver { (_, config) =>
      val sc = ss.sparkContext
      val descriptions = ArrayBuffer.empty[String]
      val marker = new CountDownLatch(1)
      sc.addSparkListener(new SparkListener {
        override def onJobStart(job: SparkListenerJobStart): Unit = descriptions.synchronized {
          val props = Option(job.properties)
          props.flatMap(p => Option(p.getProperty("spark.job.description")))
            .foreach(descriptions += _)
          if (props.exists(_.getProperty("marker") != null)) marker.countDown()
        }
      })
      sc.setJobDescription("the caller's")
      val data = separable(ss, 100, 7)
      new Cortado(ss).train(data, config)
      new Cortado(ss).train(data, config.copy(snapshotInterval = 0))
      assert(sc.getLocalProperty("spark.job.description") === "the caller's")
      sc.setJobDescription(null)
      sc.setLocalProperty("marker", "yes")
      sc.parallelize(Seq(1)).count()
      assert(marker.await(30, TimeUnit.SECONDS))
      assert(descriptions.synchronized(descriptions.toList)
        .count(_ == "Cortado training: solver.prototxt, 1 worker") === 2, descriptions)

      val html = page(sc)
      assert(html.contains("Run 2: solver.prototxt (finished)"), html)
      assert(html.contains("Run 1: solver.prototxt (finished)"), html)
      assert(html.indexOf("Run 2:") < html.indexOf("Run 1:"))
      // One tab in the navigation bar.
      assert(""">\s*Cortado\s*</a>""".r.findAllIn(html).size === 1, html)
    }
  }

  test("without a UI nothing is attached and training works") {
    ui = false
    try {
      withSolver { (dir, config) =>
        assert(ss.sparkContext.uiWebUrl.isEmpty)
        new Cortado(ss).train(separable(ss, 100, 7), config.copy(snapshotInterval = 0))
        assert(dir.resolve("tiny.caffemodel").toFile.length() > 0)
        assert(CortadoUi.runs(ss.sparkContext).isEmpty)
      }
    } finally ui = true
  }
}
