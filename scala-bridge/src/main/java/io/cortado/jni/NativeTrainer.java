// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

import io.cortado.NativeLoader;

/**
 * Natives over a native training session (jni/native_trainer_jni.cpp): the same Trainer that
 * {@code cortado train} runs, with one solver replica per device, addressed by the handle {@link
 * #create} returns; free each handle exactly once with {@link #dispose}. Training, testing and
 * snapshots are used by one thread at a time; {@link #abort} may be called from any thread.
 *
 * <p>Caffe's cadence is decided natively: {@link #train} and {@link #step} display every {@code
 * display} iterations, test every {@code test_interval} and snapshot every {@code snapshot}
 * iterations, reporting each to a {@link TrainerListener} on the calling thread. Snapshots are
 * bytes for the JVM to store anywhere (a Hadoop path): the session never writes files.
 */
public final class NativeTrainer {
  static {
    NativeLoader.load();
  }

  private NativeTrainer() {}

  /**
   * Builds a session from solver text and, when {@code netText} is non-null, net text (which
   * replaces the solver's net, train_net and test_net fields). Sources name the texts in errors.
   *
   * @param devices one replica per entry: -1 is a CPU replica, n &ge; 0 CUDA device n; null or
   *     empty: one replica on the solver's device ({@link SolverInfo#device})
   * @param maxIter &ge; 0 overrides max_iter; negative keeps the solver's
   * @param snapshotInterval &ge; 0 overrides snapshot (0: none); negative keeps the solver's
   * @param snapshotPrefix non-null overrides snapshot_prefix: the snapshots' state bytes name
   *     their model {@code <file name of prefix>_iter_<N>.caffemodel}
   * @param tests false: the session builds no test nets (test_iter, test_net and test_state are
   *     cleared, test_interval becomes 0), so nothing waits on a TEST feed nobody fills
   * @param comm 0: this session trains alone; else a {@link NativeComm} communicator whose ranks
   *     train one job together (rank 0 displays, tests and snapshots; the others are quiet), the
   *     session keeping its own share of it; {@link #abort} aborts it too
   */
  public static native long create(
      String solverText,
      String solverSource,
      String netText,
      String netSource,
      int[] devices,
      int maxIter,
      int snapshotInterval,
      String snapshotPrefix,
      boolean tests,
      long comm);

  /** Aborts the feeds, frees the replicas and their nets. */
  public static native void dispose(long handle);

  /** The number of replicas (devices) training together. */
  public static native int numReplicas(long handle);

  /**
   * Gives the session's CPU work {@code threads} threads from the next train or step on (0:
   * every core the process may use, or OMP_NUM_THREADS), divided among CPU replicas, and
   * returns the OpenMP threads each replica now computes with, as the OpenMP runtime reports
   * them (1 on CUDA devices).
   */
  public static native int useCpuThreads(long handle, int threads);

  /**
   * Trains to max_iter as {@code cortado train} does (Caffe's Solver::Solve): the cadence above,
   * a final snapshot when {@code snapshot_after_train} and the last iteration was not one, and
   * Caffe's closing display and test pass. Returns early after {@link #abort} by throwing
   * CortadoCommException carrying the reason.
   */
  public static native void train(long handle, TrainerListener listener);

  /** Runs {@code iterations} iterations with the same cadence (no closing pass). */
  public static native void step(long handle, int iterations, TrainerListener listener);

  /** Iterations done (restored ones included). */
  public static native int iter(long handle);

  /** The learning rate of the next iteration under the solver's lr_policy. */
  public static native float learningRate(long handle);

  /** The smoothed loss of the last iteration (Caffe's display value). */
  public static native float smoothedLoss(long handle);

  /**
   * The current model and solver state: {@code [model, state]}, .caffemodel and .solverstate
   * bytes (binary protos) exactly as the same session would write them to files; the state's
   * learned_net is {@code learnedNet}.
   */
  public static native byte[][] snapshot(long handle, String learnedNet);

  /**
   * Restores what {@link #snapshot} gave (or a Caffe snapshot's two files): weights, history,
   * iteration. With a null {@code state} only the weights are copied (fine-tuning: Caffe's
   * {@code --weights}); every replica then starts from them.
   */
  public static native void restore(long handle, byte[] model, byte[] state);

  /** Runs every test net once (test_iter batches each); the means in testOutputNames order. */
  public static native float[] test(long handle);

  /**
   * Names of the test outputs: "test net index/blob name", with "[i]" for each element of a
   * blob holding several values ("0/accuracy", "0/loss").
   */
  public static native String[] testOutputNames(long handle);

  /** The feed layers of replica {@code replica}'s nets, qualified by phase ("TRAIN/data"). */
  public static native String[] feedLayers(long handle, int replica);

  /**
   * A handle on the feed of layer {@code layer} ("TRAIN/data", or a plain name meaning the
   * TRAIN net's) of replica {@code replica}, for {@link NativeFeed}; free it with {@link
   * NativeFeed#dispose}. It stays usable (pushes throw) after the session is disposed.
   */
  public static native long feed(long handle, int replica, String layer);

  /**
   * From any thread: training stops once {@code iteration} iterations are done (restored ones
   * counted), or after the iteration in progress when that many are done already, every rank of
   * the job after the same iteration; {@link #train} then takes its closing snapshot (with
   * snapshot_after_train) and returns. A negative {@code iteration} withdraws the request.
   */
  public static native void stopAt(long handle, int iteration);

  /**
   * Stops training from any thread: every feed of every replica is aborted with {@code reason},
   * so a waiting forward pass fails, and the replicas leave their loops; {@link #train} then
   * throws. Idempotent.
   */
  public static native void abort(long handle, String reason);
}
