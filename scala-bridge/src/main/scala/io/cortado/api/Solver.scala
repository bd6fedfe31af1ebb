// SPDX-License-Identifier: Apache-2.0
package io.cortado.api

import io.cortado.jni.{NativeTrainer, TrainerListener}

/** A solver's snapshot: .caffemodel and .solverstate bytes, restored together. */
final case class SolverSnapshot(model: Array[Byte], state: Array[Byte])

/**
 * A native training session (see [[io.cortado.jni.NativeTrainer]]): the solver with its train
 * and test nets, one replica per device, closed exactly once with `close()`, after which it
 * must not be used. Not thread-safe: one thread at a time.
 *
 * The solver's own cadence applies (display, test_interval, snapshot); what it reports is
 * dropped here: use [[io.cortado.jni.NativeTrainer.step]] with a listener to receive it.
 */
final class Solver private (private var handle: Long) extends AutoCloseable {

  private def live: Long = synchronized(handle)

  /** Runs `iterations` iterations; returns the smoothed loss (Caffe's display value). */
  def step(iterations: Int): Float = {
    NativeTrainer.step(live, iterations, Solver.Silent)
    NativeTrainer.smoothedLoss(live)
  }

  /** Iterations done (restored ones included). */
  def iter: Int = NativeTrainer.iter(live)

  /** The learning rate of the next iteration under the solver's lr_policy. */
  def learningRate: Float = NativeTrainer.learningRate(live)

  /**
   * The model and solver state as bytes; the state names `learnedNet` as its model file (where
   * the model bytes will be stored), as Caffe's snapshots do.
   */
  def snapshot(learnedNet: String): SolverSnapshot = {
    val Array(model, state) = NativeTrainer.snapshot(live, learnedNet)
    SolverSnapshot(model, state)
  }

  def restore(snapshot: SolverSnapshot): Unit =
    NativeTrainer.restore(live, snapshot.model, snapshot.state)

  /** Copies weights alone from .caffemodel bytes (fine-tuning); the iteration stays. */
  def loadWeights(model: Array[Byte]): Unit = NativeTrainer.restore(live, model, null)

  /** Runs the test nets; the mean of each output by name ("0/accuracy"), in the nets' order. */
  def test(): Seq[(String, Float)] = {
    val values = NativeTrainer.test(live)
    NativeTrainer.testOutputNames(live).toSeq.zip(values)
  }

  override def close(): Unit = {
    val h = synchronized {
      val h = handle
      handle = 0
      h
    }
    if (h != 0) NativeTrainer.dispose(h)
  }
}

object Solver {

  /** Drops what the session reports. */
  private val Silent: TrainerListener = new TrainerListener {
    override def onIteration(iter: Int, loss: Float, learningRate: Float, iterations: Int,
        seconds: Double): Unit = ()
    override def onTest(iter: Int, names: Array[String], values: Array[Float]): Unit = ()
    override def onSnapshot(iter: Int, model: Array[Byte], state: Array[Byte]): Unit = ()
  }

  /**
   * Builds a solver from solver text and net text (the net replaces the solver's net fields;
   * None: the solver embeds its nets). Sources name the texts in errors; device -1 is the CPU,
   * n >= 0 CUDA device n.
   */
  def apply(
      solverText: String,
      solverSource: String,
      netText: Option[String],
      netSource: String = "<net>",
      device: Int = -1): Solver =
    new Solver(NativeTrainer.create(solverText, solverSource, netText.orNull, netSource,
      Array(device), -1, -1, null, true, 0L))
}
