// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

import io.cortado.NativeLoader;
import java.nio.ByteBuffer;

/**
 * Natives over one external-input feed (jni/native_feed_jni.cpp): the queue of a "CoSData" layer
 * or a "MemoryData" layer with {@code source_class} set, which a Spark task fills with whole
 * batches. A feed handle comes from {@link NativeTrainer#feed} or {@link NativeNet#feed} and is
 * freed exactly once with {@link #dispose}; it keeps the queue alive, not the net: once the net is
 * gone (its session or net disposed), pushes throw CortadoCommException.
 *
 * <p>Unlike the other natives these are meant for a feeder thread running beside the thread that
 * trains: each feed is a bounded queue (a few batches) that the net's data layer empties.
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
  public static native void push(long feed, ByteBuffer[] tops);

  /**
   * Ends the data: batches queued so far are still used, then the net's next forward pass
   * throws CortadoIOException ("end of data"). Later pushes throw. Idempotent.
   */
  public static native void close(long feed);

  /**
   * Stops the feed now, dropping queued batches: a waiting or later forward pass throws
   * CortadoCommException carrying {@code reason}, as do pushes.
   */
  public static native void abort(long feed, String reason);

  /** The layer's top names, in the order {@link #push} takes them. */
  public static native String[] topNames(long feed);

  /** The batch shape of top {@code top} (batch axis first, or last for a transposed top). */
  public static native int[] topShape(long feed, int top);

  /** Batches pushed so far. */
  public static native long pushed(long feed);

  /** Frees the handle (the queue lives on while its layer does). */
  public static native void dispose(long feed);
}
