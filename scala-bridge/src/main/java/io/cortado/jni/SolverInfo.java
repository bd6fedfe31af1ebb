// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

/**
 * What the driver needs to know of a solver prototxt, read natively by {@link
 * NativeLib#solverInfo} (parsed with the schema, old formats upgraded, Caffe's defaults
 * applied), so that no prototxt is read on the JVM side.
 */
public final class SolverInfo {
  /** The net file as written ({@code net}, else {@code train_net}); empty when embedded. */
  public final String netFile;
  /** The embedded net ({@code net_param}, else {@code train_net_param}) as prototxt; or empty. */
  public final String netText;
  public final String type;
  public final int maxIter;
  public final int display;
  public final int testInterval;
  /** {@code test_iter}, one per test net. */
  public final int[] testIter;
  public final boolean testInitialization;
  /** {@code snapshot}: the interval (0: none). */
  public final int snapshot;
  public final boolean snapshotAfterTrain;
  /** {@code snapshot_prefix} as written; empty when unset (see {@link NativeLib#snapshotPrefix}). */
  public final String snapshotPrefix;
  /** The device the solver asks for: -1 the CPU, n &ge; 0 CUDA device n (Trainer's rule). */
  public final int device;
  /** {@code solver_mode: GPU}, whether or not this machine has a GPU ({@link #device} says). */
  public final boolean gpuRequested;
  /** {@code snapshot_format: HDF5} (Caffe's default is BINARYPROTO). */
  public final boolean snapshotHdf5;

  /** {@code iter_size}: forward/backward passes accumulated per update (Caffe's default 1). */
  public final int iterSize;

  /** {@code base_lr}. */
  public final float baseLr;

  public SolverInfo(
      String netFile,
      String netText,
      String type,
      int maxIter,
      int display,
      int testInterval,
      int[] testIter,
      boolean testInitialization,
      int snapshot,
      boolean snapshotAfterTrain,
      String snapshotPrefix,
      int device,
      boolean gpuRequested,
      boolean snapshotHdf5,
      int iterSize,
      float baseLr) {
    this.netFile = netFile;
    this.netText = netText;
    this.type = type;
    this.maxIter = maxIter;
    this.display = display;
    this.testInterval = testInterval;
    this.testIter = testIter;
    this.testInitialization = testInitialization;
    this.snapshot = snapshot;
    this.snapshotAfterTrain = snapshotAfterTrain;
    this.snapshotPrefix = snapshotPrefix;
    this.device = device;
    this.gpuRequested = gpuRequested;
    this.snapshotHdf5 = snapshotHdf5;
    this.iterSize = iterSize;
    this.baseLr = baseLr;
  }
}
