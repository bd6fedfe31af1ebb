// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

import io.cortado.NativeLoader;
import java.nio.ByteBuffer;

/**
 * Natives over a native Net (jni/native_net_jni.cpp), addressed by the handle {@link #create}
 * returns. Each handle must be freed exactly once with {@link #dispose}; a disposed handle must
 * not be used again. A net is used by one thread at a time.
 *
 * <p>Data moves in whole blobs through direct {@link ByteBuffer}s of native-order float32
 * ({@code ByteBuffer.allocateDirect(4 * n).order(ByteOrder.nativeOrder())}), read and written
 * from the buffer's address (its position and limit are ignored; pass a slice to start
 * elsewhere). Errors arrive as the exceptions of docs/dev/errors.md.
 */
public final class NativeNet {
  static {
    NativeLoader.load();
  }

  /** Caffe's phases (caffe.Phase). */
  public static final int TRAIN = 0;

  public static final int TEST = 1;

  private NativeNet() {}

  /**
   * Builds a net from prototxt text for {@code phase} (TRAIN or TEST) on the CPU ({@code device}
   * -1) or a CUDA device, with the random seed {@code seed} (negative: from the clock). {@code
   * source} names the text in error messages.
   */
  public static native long create(
      String prototxt, String source, int phase, int device, long seed);

  /** Frees the net. */
  public static native void dispose(long handle);

  /** Runs forward; returns the total weighted loss (0 for a net without losses). */
  public static native float forward(long handle);

  /**
   * Declares that the net will only run forward from now on: layers drop what they keep for
   * backward, and blobs other than the outputs and those named in {@code keep} (a caller reads
   * them after {@link #forward}) share data buffers where their lifetimes allow. Returns the
   * bytes saved (0 when the environment sets CORTADO_SHARE_BUFFERS=0). An unknown name in
   * {@code keep} throws and changes nothing.
   */
  public static native long forwardOnly(long handle, String[] keep);

  /** The names of the net's blobs, in the order the net creates them. */
  public static native String[] blobNames(long handle);

  /** The shape of blob {@code name}. */
  public static native int[] blobShape(long handle, String name);

  /**
   * Copies the data of blob {@code name} into {@code buffer} (direct, at least 4 * count bytes);
   * returns the number of floats written.
   */
  public static native long copyBlobData(long handle, String name, ByteBuffer buffer);

  /**
   * Sets the data of blob {@code name} (an input, usually) from {@code buffer}. With a non-null
   * {@code shape} that differs from the blob's, the blob is reshaped and the net re-runs its
   * reshape first (a new batch size, say). {@code buffer} must be direct and hold at least 4 *
   * count bytes.
   */
  public static native void setBlobData(long handle, String name, int[] shape, ByteBuffer buffer);

  /**
   * Copies weights by layer name from a .caffemodel (a binary NetParameter, old formats
   * upgraded), as Caffe's CopyTrainedLayersFrom: {@code source} names the bytes in messages.
   */
  public static native void loadWeights(long handle, byte[] caffemodel, String source);

  /** The net with its weights as .caffemodel bytes (a binary NetParameter). */
  public static native byte[] saveWeights(long handle);

  /** The net's feed layers, qualified by phase ("TEST/data"), sorted. */
  public static native String[] feedLayers(long handle);

  /**
   * A handle on the feed of layer {@code layer} (a plain or phase-qualified name), for {@link
   * NativeFeed}; free it with {@link NativeFeed#dispose}.
   */
  public static native long feed(long handle, String layer);
}
