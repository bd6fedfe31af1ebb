// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

import io.cortado.NativeLoader;

/**
 * Natives turning image bytes into a feed layer's samples (jni/native_image_jni.cpp): JPEG and
 * PNG files decoded natively (libjpeg-turbo, libpng), and raw interleaved pixels, each into
 * {@code channels x height x width} floats (0..255, Caffe's planar layout, BGR for color as Caffe
 * decodes through OpenCV), resized bilinearly to {@code height x width} when {@code resize}
 * (CaffeOnSpark's {@code -resize}), else required to be that size.
 */
public final class NativeImage {
  static {
    NativeLoader.load();
  }

  private NativeImage() {}

  /**
   * Decodes a JPEG or PNG file's bytes: 1 channel gray, 3 channels color (gray replicated).
   * Returns null for a corrupt or truncated image when {@code skipCorrupt} (the executor's log
   * says which and why).
   *
   * @param crop with {@link #NO_CROP}, an image of another size than {@code height x width}
   *     fails without {@code resize}; with {@link #CENTRE_CROP} or {@link #RANDOM_CROP}, one at
   *     least as large on both sides is cut to that size at its centre, or at a place drawn
   *     uniformly from {@code seed} (Caffe's transformer's crop in TEST and TRAIN); {@code
   *     resize} goes first
   * @param seed the random crop's place, drawn from it (the same seed, the same place)
   * @param what names the image in messages (its row, key or path)
   * @throws io.cortado.CortadoConfigException naming {@code what}: a corrupt image (unless
   *     {@code skipCorrupt}), other than 1 or 3 channels, or another size that neither {@code
   *     resize} nor {@code crop} makes fit
   */
  public static native float[] decode(
      byte[] data,
      int channels,
      int height,
      int width,
      boolean resize,
      int crop,
      long seed,
      boolean skipCorrupt,
      String what);

  /** {@link #decode}'s crop: none (an image of another size fails without resize). */
  public static final int NO_CROP = 0;

  /** {@link #decode}'s crop: at the centre. */
  public static final int CENTRE_CROP = 1;

  /** {@link #decode}'s crop: at a place drawn from the seed. */
  public static final int RANDOM_CROP = 2;

  /**
   * Raw pixels interleaved as OpenCV holds them ({@code srcHeight x srcWidth x channels}, as
   * CaffeOnSpark's ImageDataFrame and sequence files carry raw images) to planar floats, resized
   * or cropped as {@link #decode} resizes and crops.
   */
  public static native float[] fromInterleaved(
      byte[] data,
      int channels,
      int srcHeight,
      int srcWidth,
      int height,
      int width,
      boolean resize,
      int crop,
      long seed,
      String what);

  /** Whether {@code data} starts as a JPEG or a PNG file does. */
  public static boolean looksEncoded(byte[] data) {
    if (data == null) return false;
    boolean jpeg =
        data.length >= 3 && (data[0] & 0xff) == 0xff && (data[1] & 0xff) == 0xd8
            && (data[2] & 0xff) == 0xff;
    boolean png =
        data.length >= 8 && (data[0] & 0xff) == 0x89 && data[1] == 'P' && data[2] == 'N'
            && data[3] == 'G' && data[4] == '\r' && data[5] == '\n' && (data[6] & 0xff) == 0x1a
            && data[7] == '\n';
    return jpeg || png;
  }
}
