// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import org.scalactic.Tolerance._
import org.scalatest.funsuite.AnyFunSuite

/** What the Spark UI's Cortado tab keeps of each run (no Spark needed). */
class TrainingRunsSuite extends AnyFunSuite {

  private def display(iteration: Int, loss: Float): IterationEvent =
    IterationEvent(iteration, loss, 0.01f, 2.0, 64.0, 10)

  test("a run keeps its latest iteration, smoothed loss, speed, test and snapshots") {
    val run = new TrainingRuns().start("solver.prototxt", 120)
    (0 to 110 by 10).foreach(i => run.onProgress(display(i, 1.0f + i)))
    run.onProgress(IterationEvent(120, 0.5f, 0f, 0.0, 0.0, 0, closing = true))
    run.onProgress(TestEvent(120, Seq("accuracy" -> 0.9, "loss" -> 0.3)))
    (1 to 7).foreach { i =>
      run.onProgress(LogEvent(s"Snapshotting to binary proto file /s/x_iter_$i.caffemodel"))
      run.onProgress(LogEvent(s"Snapshotting solver state to binary proto file /s/x_iter_$i.st"))
    }
    run.onProgress(LogEvent("Optimization Done."))
    run.attemptStarted(2, 3)
    val v = run.view()
    assert(v.latest.map(_.iteration) === Some(120))
    assert(v.recent.map(_.iteration) === (120 to 30 by -10))
    // The mean of the ten displays kept: 31, 41, ..., 111 and 0.5.
    assert(v.smoothedLoss.get === ((31 to 111 by 10).map(_.toDouble).sum + 0.5) / 10 +- 1e-6)
    // The closing display has no speed: the last one with a speed is shown.
    assert(v.speed.map(_.iteration) === Some(110))
    assert(v.test.map(_.outputs) === Some(Seq("accuracy" -> 0.9, "loss" -> 0.3)))
    assert(v.snapshotCount === 7)
    assert(v.snapshots === (3 to 7).map(i => s"/s/x_iter_$i.caffemodel"))
    assert((v.workers, v.attempt) === ((3, 2)))
    assert(v.state === TrainingRun.Running)
    run.finished()
    assert(run.view().state === TrainingRun.Finished)
  }

  test("the newest runs are kept, newest first; a failure is shown with its reason") {
    val runs = new TrainingRuns(keep = 2)
    val first = runs.start("a.prototxt", 10)
    first.failed("boom")
    runs.start("b.prototxt", 10)
    runs.start("c.prototxt", 10)
    assert(runs.snapshot().map(_.solver) === Seq("c.prototxt", "b.prototxt"))
    assert(runs.snapshot().map(_.id) === Seq(3, 2))
    assert(first.view().state === TrainingRun.Failed("boom"))
  }

  test("the page shows each run's numbers, and says when nothing ran") {
    assert(CortadoUi.render(Nil).mkString.contains("No training has started yet."))
    val runs = new TrainingRuns()
    val run = runs.start("lenet_solver.prototxt", 100)
    run.onProgress(display(40, 0.123456789f))
    val html = CortadoUi.render(runs.snapshot()).mkString
    assert(html.contains("""<span class="cortado-iteration">40 / 100</span>"""), html)
    assert(html.contains(s"""<span class="cortado-loss">${
      CortadoOnSpark.caffeFormat(0.123456789f.toDouble)}</span>"""), html)
    assert(html.contains("64.0 images/s"), html)
    assert(html.contains("Run 1: lenet_solver.prototxt (running)"), html)
  }
}
