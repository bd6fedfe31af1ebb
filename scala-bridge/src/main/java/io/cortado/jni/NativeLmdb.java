// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

import io.cortado.NativeLoader;
import java.nio.ByteBuffer;

/**
 * Natives reading an LMDB database of Caffe {@code Datum} records (jni/native_lmdb_jni.cpp), as
 * Caffe's {@code convert_imageset} and {@code convert_mnist_data} write them: opened read-only,
 * records addressed by their index in key order and decoded in bulk into direct buffers, so that
 * a Spark task reads its range of records with one call per chunk. Every record must have the
 * shape of the first; encoded (JPEG/PNG) datums are decoded natively.
 *
 * <p>A handle is used by one thread at a time and disposed exactly once.
 */
public final class NativeLmdb {
  static {
    NativeLoader.load();
  }

  private NativeLmdb() {}

  /**
   * Opens the database directory {@code path} (a local path) read-only and reads its first
   * record, which fixes the shape. {@code owner} starts error messages (the layer or source
   * reading it). Throws CortadoIOException when the path does not exist (naming it) or holds no
   * LMDB database, CortadoConfigException when it has no records or its first record is a corrupt
   * image.
   */
  public static native long open(String path, String owner);

  /** The number of records. */
  public static native long count(long handle);

  /** The shape of every record: {channels, height, width}. */
  public static native int[] shape(long handle);

  /**
   * Decodes records {@code [start, start + count)} in key order. {@code data} receives {@code
   * count * channels * height * width} native-order float32 values from address 0, record after
   * record in C x H x W order (uint8 {@code data} bytes as 0..255, or {@code float_data} as
   * stored); {@code labels} receives {@code count} native-order int32 labels. Both must be direct
   * buffers of at least that many bytes (position and limit are ignored). Returns the keys: for
   * each record, its length as a big-endian int32 followed by its bytes.
   *
   * <p>Throws CortadoConfigException for a range outside the database or buffers that are too
   * small, CortadoIOException naming the key and the path for a record of another shape or one
   * that is not a Datum, and CortadoConfigException for a corrupt encoded record.
   */
  public static native byte[] read(
      long handle, long start, int count, ByteBuffer data, ByteBuffer labels);

  /** Closes the database. */
  public static native void dispose(long handle);

  /**
   * Converts MNIST-style IDX files (gzipped or not) into a new LMDB database at {@code out}, as
   * {@code cortado convert_idx} does: one raw Datum per image (1 x rows x cols uint8, its label)
   * under keys {@code %08d}. {@code out} must not exist. Returns the number of records.
   */
  public static native long convertIdx(String images, String labels, String out);
}
