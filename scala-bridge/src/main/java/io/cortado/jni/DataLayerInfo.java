// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

/**
 * A data layer of a phase's net, as {@link NativeLib#dataLayers} reads it natively: every layer
 * whose type is a data layer (CoSData, MemoryData, Data, ImageData, HDF5Data, ...), after the
 * phase's include/exclude rules. Arrays run over the layer's tops, in order.
 */
public final class DataLayerInfo {
  public final String name;
  public final String type;
  /**
   * {@code source_class} as written (CaffeOnSpark), except that CaffeOnSpark's classes named in
   * this jar's package ({@code io.cortado.caffeonspark.LMDB}, ...) read as CaffeOnSpark names
   * them ({@code com.yahoo.ml.caffe.LMDB}, ...: see {@link #canonicalSourceClass}); empty when
   * unset.
   */
  public final String sourceClass;
  /**
   * Whether the JVM feeds it: a CoSData layer, or a MemoryData layer with a source_class.
   */
  public final boolean feed;
  /**
   * What it reads: {@code cos_data_param.source}, {@code memory_data_param.source}, {@code
   * data_param.source}, {@code image_data_param.source} or {@code hdf5_data_param.source};
   * empty when none.
   */
  public final String source;
  /**
   * {@code cos_data_param.dataframe_format} or {@code memory_data_param.dataframe_format}; empty
   * when unset.
   */
  public final String dataframeFormat;
  public final String[] tops;
  /** The column each top reads: a CoSData top's {@code name}, else the top's name. */
  public final String[] columns;
  /** A CoSData top's {@code type} ("FLOAT", "INT", "RAW_IMAGE", ...); else empty. */
  public final String[] topTypes;
  /** A CoSData top's {@code transpose}; else false. */
  public final boolean[] transposed;
  /**
   * For a feed layer, each top's sample shape as pushed (before transform_param; no batch
   * axis); empty arrays for other layers.
   */
  public final int[][] sampleShapes;
  /** The batch size of a feed layer; 0 for other layers. */
  public final int batchSize;
  /** {@code memory_data_param.dataframe_column_select} (CaffeOnSpark's ImageDataFrame). */
  public final String[] columnSelect;
  /** {@code memory_data_param.image_encoded} (CaffeOnSpark's ImageDataFrame). */
  public final boolean imageEncoded;
  /** The layer's {@code transform_param.crop_size}; 0 when unset. */
  public final int cropSize;

  public DataLayerInfo(
      String name,
      String type,
      String sourceClass,
      boolean feed,
      String source,
      String dataframeFormat,
      String[] tops,
      String[] columns,
      String[] topTypes,
      boolean[] transposed,
      int[][] sampleShapes,
      int batchSize,
      String[] columnSelect,
      boolean imageEncoded,
      int cropSize) {
    this.name = name;
    this.type = type;
    this.sourceClass = canonicalSourceClass(sourceClass);
    this.feed = feed;
    this.source = source;
    this.dataframeFormat = dataframeFormat;
    this.tops = tops;
    this.columns = columns;
    this.topTypes = topTypes;
    this.transposed = transposed;
    this.sampleShapes = sampleShapes;
    this.batchSize = batchSize;
    this.columnSelect = columnSelect;
    this.imageEncoded = imageEncoded;
    this.cropSize = cropSize;
  }

  private static final String OUR_PACKAGE = "io.cortado.caffeonspark.";
  private static final String CAFFE_ON_SPARK_PACKAGE = "com.yahoo.ml.caffe.";

  /**
   * {@code io.cortado.caffeonspark.X} as {@code com.yahoo.ml.caffe.X} for CaffeOnSpark's
   * source classes X (LMDB, ImageDataFrame, SeqImageDataSource, DataFrameSource), which this jar
   * has under its own package too; any other name (null as empty) as it is.
   */
  public static String canonicalSourceClass(String sourceClass) {
    if (sourceClass == null) return "";
    if (sourceClass.startsWith(OUR_PACKAGE)) {
      String simple = sourceClass.substring(OUR_PACKAGE.length());
      switch (simple) {
        case "LMDB":
        case "ImageDataFrame":
        case "SeqImageDataSource":
        case "DataFrameSource":
          return CAFFE_ON_SPARK_PACKAGE + simple;
        default:
          break;
      }
    }
    return sourceClass;
  }
}
