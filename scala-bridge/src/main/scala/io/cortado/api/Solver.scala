// SPDX-License-Identifier: Apache-2.0
package io.cortado.api

import io.cortado.jni.NativeSolver

/** A solver's snapshot: .caffemodel bytes and .solverstate bytes, restored together. */
final case class SolverSnapshot(model: Array[Byte], state: Array[Byte])

/**
 * A native solver with its train and test nets (see [[io.cortado.jni.NativeSolver]]), closed
 * exactly once with `close()`. Not thread-safe: one thread at a time.
 */
final class Solver private (private var handle: Long) extends AutoCloseable {

  private def live: Long = synchronized(handle)

  /** Runs `iterations` iterations; returns the smoothed loss. */
  def step(iterations: Int): Float = NativeSolver.step(live, iterations)

  def iter: Int = NativeSolver.iter(live)

  /**
   * The model and solver state as bytes; the state names `learnedNet` as its model file (where
   * the model bytes will be stored), as Caffe's snapshots do.
   */
  def snapshot(learnedNet: String): SolverSnapshot = {
    val Array(model, state) = NativeSolver.snapshot(live, learnedNet)
    SolverSnapshot(model, state)
  }

  def restore(snapshot: SolverSnapshot): Unit =
    NativeSolver.restore(live, snapshot.model, snapshot.state)

  /** Runs the test nets; the mean of each output by name ("0/accuracy"), in the nets' order. */
  def test(): Seq[(String, Float)] = {
    val values = NativeSolver.testAll(live)
    NativeSolver.testOutputNames(live).toSeq.zip(values)
  }

  override def close(): Unit = {
    val h = synchronized {
      val h = handle
      handle = 0
      h
    }
    if (h != 0) NativeSolver.dispose(h)
  }
}

object Solver {

  /**
   * Builds a solver from solver text and net text (the net replaces the solver's net fields;
   * None: the solver embeds its nets). Sources name the texts in errors; device -1 is the CPU.
   */
  def apply(
      solverPrototxt: String,
      solverSource: String,
      netPrototxt: Option[String],
      netSource: String = "<net>",
      device: Int = -1): Solver =
    new Solver(
      NativeSolver.create(solverPrototxt, solverSource, netPrototxt.orNull, netSource, device))
}
