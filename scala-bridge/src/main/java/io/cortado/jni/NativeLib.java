// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

import io.cortado.NativeLoader;

/**
 * Natives about the library itself: version, devices, prototxt validation (the driver checks
 * solver and net before any task starts), and ONNX export. Implemented in jni/native_lib_jni.cpp.
 *
 * <p>Errors arrive as the exceptions of docs/dev/errors.md (io.cortado.Cortado*Exception). All
 * methods are thread-safe.
 */
public final class NativeLib {
  static {
    NativeLoader.load();
  }

  private NativeLib() {}

  /** The engine's version ("0.1.0"). */
  public static native String version();

  /** What this process can compute on, one line per item, as `cortado device_query` prints. */
  public static native String[] deviceQuery();

  /**
   * Parses a net prototxt (upgrading old formats as Caffe does) and checks that every layer type
   * is known. {@code source} names the text in messages ("lenet_train_test.prototxt").
   *
   * @throws io.cortado.CortadoConfigException naming source:line:column, or the layer and type
   */
  public static native void validateNet(String prototxt, String source);

  /**
   * Parses a solver prototxt (upgrading old formats) and validates the nets embedded in it.
   *
   * @throws io.cortado.CortadoConfigException naming source:line:column
   */
  public static native void validateSolver(String prototxt, String source);

  /**
   * What the driver needs of a solver: its net, cadence, snapshot settings and device, read
   * natively (see {@link SolverInfo}). Validates as {@link #validateSolver}.
   */
  public static native SolverInfo solverInfo(String prototxt, String source);

  /**
   * A solver prototxt parsed and upgraded as training reads it, as a binary SolverParameter
   * (Caffe's caffe.proto; {@code caffe.Caffe.SolverParameter.parseFrom} reads it). Validates
   * as {@link #validateSolver}.
   */
  public static native byte[] solverParameter(String prototxt, String source);

  /**
   * A net prototxt parsed and upgraded (every phase's layers, V1 layers as current ones), as a
   * binary NetParameter ({@code caffe.Caffe.NetParameter.parseFrom} reads it). Validates as
   * {@link #validateNet}.
   */
  public static native byte[] netParameter(String prototxt, String source);

  /**
   * A snapshot file's bytes (binary proto, as the trainer gives them) in Caffe's HDF5 format
   * ({@code snapshot_format: HDF5}): a model ({@code .caffemodel.h5}), or with {@code state} a
   * solver state ({@code .solverstate.h5}), whose {@code learned_net} becomes {@code learnedNet}
   * unless null. {@code source} names it in messages.
   *
   * @throws io.cortado.CortadoException when the build has no HDF5, or the bytes do not parse
   */
  public static native byte[] snapshotToHdf5(
      byte[] bytes, boolean state, String learnedNet, String source);

  /** The reverse of {@link #snapshotToHdf5}: an HDF5 model or state as binary proto bytes. */
  public static native byte[] snapshotFromHdf5(byte[] bytes, boolean state, String source);

  /**
   * Caffe's snapshot_prefix rule for the solver at {@code solverFile}: an empty {@code prefix}
   * becomes the solver file's path without extension; a prefix ending in "/" or naming a
   * directory ({@code prefixIsDirectory}, which the caller checks on its file system) gets the
   * solver file's name without extension appended; any other prefix is kept.
   */
  public static native String snapshotPrefix(
      String solverFile, String prefix, boolean prefixIsDirectory);

  /**
   * The data layers of the {@code phase} (NativeNet.TRAIN or TEST) net of a net prototxt, in
   * order (see {@link DataLayerInfo}).
   */
  public static native DataLayerInfo[] dataLayers(String prototxt, String source, int phase);

  /**
   * The output blobs of the {@code phase} net (the tops no later layer reads, as Caffe finds
   * them), in order.
   */
  public static native String[] outputBlobs(String prototxt, String source, int phase);

  /** Every blob of the {@code phase} net (each top once, in order). */
  public static native String[] blobNames(String prototxt, String source, int phase);

  /**
   * The layers of the {@code phase} net, in order, one line each: name, type, the number of
   * bottoms, the bottoms, the number of tops, the tops, separated by tabs.
   */
  public static native String[] layers(String prototxt, String source, int phase);

  /**
   * The solver prototxt {@code prototxt} with the fields set in {@code overrides} (solver
   * prototxt text, named {@code overridesSource} in messages) replacing its own: a singular
   * field takes the override's value, a repeated field the override's list, and a net (net,
   * net_param, train_net or train_net_param) replaces the solver's, however given. Both are parsed
   * and upgraded as Caffe does; the result is solver prototxt text.
   *
   * @throws io.cortado.CortadoConfigException naming the source, line and column of a bad field
   */
  public static native String mergeSolver(
      String prototxt, String source, String overrides, String overridesSource);

  /**
   * The net prototxt {@code prototxt} with the batch size of feed layer {@code layer} (CoSData,
   * or MemoryData with source_class) of the {@code phase} net set to {@code batch}; the other
   * phase's layers stay as they are. The result is net prototxt text.
   *
   * @throws io.cortado.CortadoException naming {@code source} when that net has no such feed
   *     layer or the batch is below 1
   */
  public static native String withFeedBatchSize(
      String prototxt, String source, String layer, int phase, int batch);

  /**
   * The active RDMA ports of this host (InfiniBand or RoCE, as libibverbs lists them), one line
   * each: device:port, link layer and rate ("mlx5_0:1 InfiniBand 100 Gb/s"). Empty when there is
   * none, or when libibverbs is missing.
   */
  public static native String[] rdmaDevices();

  /**
   * A trained net as an ONNX model (docs/onnx.md): the TEST phase of the net prototxt {@code
   * prototxt} (parsed and upgraded as {@link #validateNet} does; {@code source} names it in
   * messages) is built on the CPU, every layer on its own, with the weights of {@code weights}
   * (a binary .caffemodel, a NetParameter; null or empty: the fillers' values), and exported:
   * the data layers' tops become the graph's inputs (holding what the data layer's transform
   * gives, e.g. pixels times its {@code scale}), losses and accuracies are left out, and the
   * graph's outputs are the remaining output blobs, named after them.
   *
   * @param opset the default-domain opset the model declares, 13 to 17
   * @param dynamicBatch axis 0 of every graph input and output is the symbolic "N" (any batch
   *     size); false: the net's own shapes
   * @return the serialized onnx.ModelProto
   * @throws io.cortado.CortadoConfigException naming the source and the layer with its type for
   *     a layer without an ONNX counterpart, or the opset out of range; a weights mismatch
   *     names the layer and shapes
   * @throws io.cortado.CortadoException when the build has no ONNX export (WITH_ONNX off)
   */
  public static native byte[] exportOnnx(
      String prototxt, String source, byte[] weights, int opset, boolean dynamicBatch);

  /**
   * The training curves of a training log as a PNG image of {@code width} x {@code height}
   * pixels (1200 x 900 is the `cortado plot` default): training loss against iteration and
   * against wall time, learning rate, and the test nets' outputs. {@code logText} is the text of
   * a log as Caffe's {@code caffe train}, {@code cortado train} or the Spark API write it;
   * {@code source} names it in messages.
   *
   * @return the PNG file's bytes
   * @throws io.cortado.CortadoConfigException when the text has no training iterations, or the
   *     size is outside 200 x 150 to 16384 x 16384
   * @throws io.cortado.CortadoException when the build has no PNG support
   */
  public static native byte[] plotLog(String logText, String source, int width, int height);
}
