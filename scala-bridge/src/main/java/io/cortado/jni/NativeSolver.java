// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

import io.cortado.NativeLoader;

/**
 * Natives over a native Solver (jni/native_solver_jni.cpp), addressed by the handle {@link
 * #create} returns; free each handle exactly once with {@link #dispose}. A solver is used by one
 * thread at a time.
 *
 * <p>Snapshots are bytes, for the JVM to store anywhere (a Hadoop FileSystem path): the native
 * side never keeps snapshot files. To that end the solver's own snapshot settings are replaced:
 * no automatic snapshots during {@link #step}, binary-proto format, files only in a private
 * temporary directory while {@link #snapshot} and {@link #restore} run.
 */
public final class NativeSolver {
  static {
    NativeLoader.load();
  }

  private NativeSolver() {}

  /**
   * Builds a solver (its type from the solver prototxt) with its train net and test nets on the
   * CPU ({@code device} -1) or a CUDA device. With a non-null {@code netPrototxt} the net comes
   * from that text (replacing the solver's net, train_net and test_net fields, as the Spark
   * driver passes both texts); otherwise the solver must embed its nets (net_param, ...).
   * Sources name the texts in error messages.
   */
  public static native long create(
      String solverPrototxt, String solverSource, String netPrototxt, String netSource,
      int device);

  /** Frees the solver and its nets. */
  public static native void dispose(long handle);

  /** Runs {@code iterations} training iterations; returns the smoothed loss (Caffe's display). */
  public static native float step(long handle, int iterations);

  /** The number of iterations done (restored ones included). */
  public static native int iter(long handle);

  /**
   * The learning rate of the next iteration under the solver's lr_policy (what Caffe logs as
   * {@code Iteration N, lr = X}).
   */
  public static native float learningRate(long handle);

  /**
   * The current model and solver state: {@code [model, state]}, a .caffemodel (binary
   * NetParameter with the weights) and a .solverstate (binary SolverState: iteration, lr step,
   * history). The state's learned_net is {@code learnedNet}: where the caller will store the
   * model, so that {@code cortado train --snapshot} finds it (Caffe also looks for its file name
   * next to the state file). {@link #restore} ignores it.
   */
  public static native byte[][] snapshot(long handle, String learnedNet);

  /** Restores what {@link #snapshot} returned (from this or another solver of the same nets). */
  public static native void restore(long handle, byte[] model, byte[] state);

  /**
   * Runs every test net once (test_iter batches each) and returns the mean of each output, in
   * the order of {@link #testOutputNames}.
   */
  public static native float[] testAll(long handle);

  /**
   * Names of the test outputs: "test net index/blob name", with "[i]" appended for each element
   * of a blob holding several values ("0/accuracy", "0/loss").
   */
  public static native String[] testOutputNames(long handle);
}
