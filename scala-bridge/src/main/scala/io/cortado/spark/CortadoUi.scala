// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.util.WeakHashMap

import scala.util.control.NonFatal
import scala.xml.Node

import org.apache.spark.SparkContext
import org.apache.spark.ui.cortado.CortadoTab
import org.slf4j.LoggerFactory

/**
 * The "Cortado" tab of the driver's Spark UI (`/cortado/`): the training runs of the
 * application, newest first, as [[TrainingRuns]] keeps them. The tab is attached once per
 * SparkContext, the first time [[Cortado]] trains on it, when the context has a UI
 * (`spark.ui.enabled`); without one nothing is attached. The page reloads itself every
 * [[RefreshSeconds]] seconds.
 */
object CortadoUi {

  private val log = LoggerFactory.getLogger(classOf[Cortado])

  val RefreshSeconds = 3

  // None: the context has no UI (or attaching failed), asked once.
  private val boards = new WeakHashMap[SparkContext, Option[TrainingRuns]]()

  /** The runs the tab of `sc` shows, attaching the tab on the first call; None without a UI. */
  def runs(sc: SparkContext): Option[TrainingRuns] = boards.synchronized {
    Option(boards.get(sc)).getOrElse {
      val board = new TrainingRuns()
      val attached =
        try CortadoTab.attach(sc, () => render(board.snapshot()))
        catch {
          case NonFatal(e) =>
            log.warn(s"the Cortado tab could not be added to the Spark UI: $e")
            false
        }
      val result = if (attached) Some(board) else None
      boards.put(sc, result)
      result
    }
  }

  /** The page's body. */
  def render(runs: Seq[TrainingRun.View]): Seq[Node] = {
    val intro =
      <meta http-equiv="refresh" content={RefreshSeconds.toString}/>
      <p>Training runs of Cortado in this application, newest first
        (this page reloads every {RefreshSeconds} s).</p>
    if (runs.isEmpty) intro ++ <p>No training has started yet.</p>
    else intro ++ runs.flatMap(renderRun)
  }

  private def renderRun(run: TrainingRun.View): Seq[Node] = {
    val state = run.state match {
      case TrainingRun.Running => "running"
      case TrainingRun.Finished => "finished"
      case TrainingRun.Failed(reason) => s"failed: $reason"
    }
    val iteration = run.latest.map(_.iteration.toString).getOrElse("-")
    <h4 id={s"cortado-run-${run.id}"}>Run {run.id}: {run.solver} ({state})</h4>
    <ul class="list-unstyled">
      <li><strong>Iteration: </strong>
        <span class="cortado-iteration">{iteration} / {run.maxIter}</span></li>
      <li><strong>Loss: </strong>
        <span class="cortado-loss">{run.latest.map(e => loss(e.loss)).getOrElse("-")}</span>
        (smoothed over the last {run.recent.size} displays:
        {run.smoothedLoss.map(loss).getOrElse("-")})</li>
      <li><strong>Learning rate: </strong>
        {run.speed.map(e => CortadoOnSpark.caffeFormat(e.learningRate.toDouble)).getOrElse("-")}
      </li>
      <li><strong>Speed: </strong>
        {run.speed.map(e => f"${e.imagesPerSecond}%.1f images/s (${e.iterationsPerSecond}%.3g " +
          "iter/s)").getOrElse("-")}</li>
      <li><strong>Elapsed: </strong>{duration(run.elapsedMillis)}</li>
      <li><strong>Workers: </strong>{if (run.workers > 0) run.workers.toString else "-"}
        {if (run.attempt > 1) s"(attempt ${run.attempt})" else ""}</li>
      <li><strong>Last test: </strong>{run.test.map(testText).getOrElse("-")}</li>
      <li><strong>Snapshots written: </strong>{run.snapshotCount.toString}
        {if (run.snapshots.isEmpty) "" else s"(last: ${run.snapshots.last})"}</li>
    </ul>
    <table class="table table-bordered table-sm table-striped">
      <thead>
        <tr><th>Iteration</th><th>Loss</th><th>Learning rate</th><th>Images/s</th></tr>
      </thead>
      <tbody>{run.recent.map(iterationRow)}</tbody>
    </table>
  }

  private def iterationRow(e: IterationEvent): Node =
    if (e.closing) <tr><td>{e.iteration.toString}</td><td>{loss(e.loss)}</td><td/><td/></tr>
    else {
      <tr>
        <td>{e.iteration.toString}</td><td>{loss(e.loss)}</td>
        <td>{CortadoOnSpark.caffeFormat(e.learningRate.toDouble)}</td>
        <td>{f"${e.imagesPerSecond}%.1f"}</td>
      </tr>
    }

  private def loss(value: Double): String = CortadoOnSpark.caffeFormat(value)

  private def testText(t: TestEvent): String =
    s"iteration ${t.iteration}: " +
      t.outputs.map { case (name, v) => s"$name = ${CortadoOnSpark.caffeFormat(v)}" }
        .mkString(", ")

  private def duration(millis: Long): String = {
    val s = millis / 1000
    if (s < 60) f"${millis / 1000.0}%.1f s"
    else if (s < 3600) f"${s / 60} min ${s % 60}%02d s"
    else f"${s / 3600} h ${s / 60 % 60}%02d min"
  }
}
