// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

import io.cortado.NativeLoader;
import java.nio.ByteBuffer;

/**
 * Natives over the external-input feeds of a net (jni/native_feed_jni.cpp): the "CoSData" layers
 * and the "MemoryData" layers with {@code source_class} set, which a Spark task fills with whole
 * batches. {@code handle} is a live {@link NativeNet} or {@link NativeSolver} handle; a disposed
 * one throws. {@code layer} is a feed layer's name, optionally qualified by phase ({@code
 * "TEST/data"}): a plain name present in a solver's train and test nets means the train net's.
 *
 * <p>Unlike the other natives these are meant for a feeder thread running beside the thread that
 * steps the solver: each feed is a bounded queue (a few batches) that the net's data layer
 * empties. Disposing the net or solver aborts its feeds, so a blocked {@link #push} returns.
 */
public final class NativeFeed {
  static {
    NativeLoader.load();
  }

  private NativeFeed() {}

  /**
   * Queues one batch: one direct buffer per top, in the layer's top order, each holding exactly
   * the top's batch ({@link #topShape}) as native-order float32 from address 0 (position and
   * limit are ignored; the capacity must be the batch's size in bytes). Copied with one memcpy
   * per top, so the buffers may be reused once this returns. Blocks while the feed is full.
   * Throws CortadoConfigException for a wrong number of buffers or a wrong size (the message
   * names the layer, the top and both shapes) and CortadoCommException once the feed is closed
   * or aborted.
   */
  public static native void push(long handle, String layer, ByteBuffer[] tops);

  /**
   * Ends the data: batches queued so far are still used, then the net's next forward pass
   * throws CortadoIOException ("end of data"). Later pushes throw. Idempotent.
   */
  public static native void close(long handle, String layer);

  /**
   * Stops the feed now, dropping queued batches: a waiting or later forward pass throws
   * CortadoCommException carrying {@code reason}, as do pushes.
   */
  public static native void abort(long handle, String layer, String reason);

  /** The feed layers of the net or solver, qualified by phase ("TRAIN/data"), sorted. */
  public static native String[] layers(long handle);

  /** The layer's top names, in the order {@link #push} takes them. */
  public static native String[] topNames(long handle, String layer);

  /** The batch shape of top {@code top} (batch axis first, or last for a transposed top). */
  public static native int[] topShape(long handle, String layer, int top);
}
