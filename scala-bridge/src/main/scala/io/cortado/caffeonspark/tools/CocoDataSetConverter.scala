// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.tools

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.slf4j.{Logger, LoggerFactory}

import io.cortado.CortadoConfigException
import io.cortado.caffeonspark.Config
import io.cortado.storage.HadoopFiles

/**
 * CaffeOnSpark's COCO converter (`com.yahoo.ml.caffe.tools.CocoDataSetConverter`): a COCO
 * caption file and its images become the DataFrame an LRCN net's CoSData layer reads.
 *
 * {{{
 * spark-submit --class io.cortado.caffeonspark.tools.CocoDataSetConverter cortado.jar \
 *   -captionFile hdfs:///coco/annotations/captions_train2014.json \
 *   -imageRoot hdfs:///coco/train2014 -output hdfs:///coco/parquet/ -outputFormat parquet \
 *   -imageCaptionDFDir df_image_caption_train2014 -vocabDir vocab -vocabSize 8800 \
 *   -captionLength 20 -embeddingDFDir df_embedded_train2014
 * }}}
 *
 * Under `-output`: `-imageCaptionDFDir` (when given) gets the image-caption DataFrame in JSON
 * ([[Conversions.Coco2ImageCaptionFile]]); `-vocabDir` the vocabulary of the captions' words,
 * the `-vocabSize` most frequent (all when not given), made when it does not exist and read
 * when it does, so that a second data set (the validation captions) is numbered as the first;
 * `-embeddingDFDir` the embedded DataFrame in `-outputFormat` (default json),
 * [[Conversions.ImageCaption2Embedding]]'s with `-captionLength` (default 20), or
 * [[Conversions.Image2Embedding]]'s for a file without captions.
 *
 * Differences from CaffeOnSpark: a missing `-imageRoot` or `-captionFile`, or a caption file
 * with captions and no `-vocabDir`, fails before anything is read (CaffeOnSpark logged an
 * error and went on); an existing output folder fails before anything is written (the
 * vocabulary's excepted), and each output is written to a temporary name and renamed; the
 * folders are joined to `-output` with a "/" when it lacks one.
 */
object CocoDataSetConverter {

  /** The object's logger, as CaffeOnSpark's. */
  val log: Logger = LoggerFactory.getLogger(getClass)

  /**
   * Converts as the object's description says, in the application's SparkSession (made when
   * there is none), which is stopped at the end.
   *
   * @throws IllegalArgumentException for a missing or bad flag, naming it
   */
  def main(args: Array[String]): Unit = {
    val spark = SparkSession.builder().appName("CocoDataSetConverter").getOrCreate()
    try convert(spark, args) finally spark.stop()
  }

  /** [[main]]'s work, in `spark`, which is left running. */
  private[caffeonspark] def convert(spark: SparkSession, args: Array[String]): Unit = {
    val sc = spark.sparkContext
    val conf = new Config(sc, args)
    if (conf.imageRoot == null || conf.imageRoot.isEmpty || conf.captionFile.isEmpty) {
      throw new IllegalArgumentException(
        "CocoDataSetConverter needs both -imageRoot and -captionFile")
    }
    val hadoop = sc.hadoopConfiguration
    val output = Option(conf.outputPath).getOrElse("")
    val imageCaptionDir =
      if (conf.imageCaptionDFDir.isEmpty) None
      else Some(CocoCaptions.under(output, conf.imageCaptionDFDir))
    val embeddingDir = CocoCaptions.under(output, conf.embeddingDFDir)
    // Refused before any work rather than after it.
    imageCaptionDir.foreach(
      CocoCaptions.refuseExisting(_, hadoop, "the image-caption DataFrame (-imageCaptionDFDir)"))
    CocoCaptions.refuseExisting(embeddingDir, hadoop, "the embedding DataFrame (-embeddingDFDir)")

    val sqlContext = spark.sqlContext
    val imageCaptions =
      Conversions.Coco2ImageCaptionFile(sqlContext, conf.captionFile, conf.clusterSize)
    val captioned = imageCaptions.columns.contains("caption")
    if (captioned && conf.vocabDir.isEmpty) {
      throw new CortadoConfigException(s"the caption file ${conf.captionFile} holds captions: " +
        "-vocabDir must name the vocabulary's folder under -output")
    }
    imageCaptionDir.foreach { dir =>
      HadoopFiles.writeAtomically(dir, hadoop, "the image-caption DataFrame") { temp =>
        imageCaptions.write.json(temp)
      }
      log.info(s"images and captions of ${conf.captionFile} written to $dir")
    }

    val embedded =
      if (captioned) {
        val vocabDir = CocoCaptions.under(output, conf.vocabDir)
        val vocab = new Vocab(sqlContext)
        val path = new Path(vocabDir)
        if (path.getFileSystem(hadoop).exists(path)) {
          log.info(s"the vocabulary $vocabDir exists: its words are used")
        } else {
          vocab.genFromData(imageCaptions, "caption", conf.vocabSize)
          vocab.save(vocabDir)
          log.info(s"vocabulary of ${vocab.word2indexMap().size} words written to $vocabDir")
        }
        vocab.load(vocabDir)
        Conversions.ImageCaption2Embedding(conf.imageRoot, imageCaptions, vocab,
          conf.captionLength)
      } else {
        Conversions.Image2Embedding(conf.imageRoot, imageCaptions)
      }
    HadoopFiles.writeAtomically(embeddingDir, hadoop, "the embedding DataFrame") { temp =>
      embedded.write.format(conf.outputFormat).save(temp)
    }
    log.info(s"embedded images of ${conf.captionFile} written to $embeddingDir")
  }
}
