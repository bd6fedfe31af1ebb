// SPDX-License-Identifier: Apache-2.0
package io.cortado.data

import java.io.ByteArrayOutputStream
import java.nio.file.{Files, Path}
import java.util.zip.GZIPOutputStream

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoIOException
import io.cortado.TestDirs.withTempDir
import io.cortado.jni.NativeLmdbSuite
import io.cortado.spark.{Config, Cortado, CortadoSuite, PerTest}

class IdxToParquetSuite extends AnyFunSuite with PerTest {

  /** IDX bytes of unsigned bytes with these dimensions, gzipped when `gzip`. */
  def idx(dims: Seq[Int], data: Seq[Int], gzip: Boolean = true): Array[Byte] = {
    val bytes = NativeLmdbSuite.idx(dims, data)
    if (!gzip) bytes
    else {
      val zipped = new ByteArrayOutputStream
      val z = new GZIPOutputStream(zipped)
      z.write(bytes)
      z.close()
      zipped.toByteArray
    }
  }

  def file(dir: Path, name: String, bytes: Array[Byte]): String =
    Files.write(dir.resolve(name), bytes).toString

  // Three 2 x 2 images (pixel values up to 255: unsigned) and their labels.
  val Pixels: Seq[Int] = Seq(0, 1, 2, 3, 10, 20, 30, 40, 255, 254, 128, 7)
  val Labels: Seq[Int] = Seq(9, 0, 3)

  test("parses gzipped and plain IDX files") {
    val images = Idx.parse(idx(Seq(3, 2, 2), Pixels), "images")
    assert(images.dims === Seq(3, 2, 2) && images.count === 3 && images.itemSize === 4)
    assert(images.data.map(_ & 0xff).toSeq === Pixels)
    val labels = Idx.parse(idx(Seq(3), Labels, gzip = false), "labels")
    assert(labels.dims === Seq(3) && labels.itemSize === 1)
  }

  test("bad IDX files fail naming the file") {
    val e = intercept[CortadoIOException](Idx.parse(Array[Byte](1, 2, 3, 4, 5), "x.gz"))
    assert(e.getMessage === "x.gz: not an IDX file: bad magic number")
    val short = intercept[CortadoIOException](Idx.parse(idx(Seq(3, 2, 2), Pixels.take(11)), "y"))
    assert(short.getMessage.contains("dimensions 3 x 2 x 2 need 12 bytes of data, the file has 11"))
    val floats = idx(Seq(1), Seq(0), gzip = false)
    floats(2) = 0x0d
    assert(intercept[CortadoIOException](Idx.parse(floats, "z")).getMessage
      .contains("data type 0x0d"))
  }

  test("converts IDX files to Parquet rows (id, label, data) that a CoSData net reads") {
    withTempDir("cortado-idx") { dir =>
      val images = file(dir, "images.gz", idx(Seq(3, 2, 2), Pixels))
      val labels = file(dir, "labels.gz", idx(Seq(3), Labels))
      val output = dir.resolve("out.parquet").toUri.toString
      assert(IdxToParquet.convert(ss, images, labels, output) === 3)

      val df = ss.read.parquet(output)
      assert(df.schema.simpleString === "struct<id:bigint,label:int,data:binary>")
      val rows = df.collect().map(r => (r.getLong(0), r.getInt(1),
        r.getAs[Array[Byte]](2).map(_ & 0xff).toSeq)).sortBy(_._1)
      assert(rows.toSeq === Seq((0L, 9, Pixels.slice(0, 4)), (1L, 0, Pixels.slice(4, 8)),
        (2L, 3, Pixels.slice(8, 12))))

      // A RAW_IMAGE top reads `data` as uint8 pixels and an INT top reads `label`.
      val net =
        """layer { name: "data" type: "CoSData" top: "data" top: "label"
          |  source_class: "com.yahoo.ml.caffe.DataFrameSource"
          |  cos_data_param { batch_size: 2
          |    top { name: "data" type: RAW_IMAGE channels: 1 height: 2 width: 2
          |          transform_param { scale: 0.5 } }
          |    top { name: "label" type: INT channels: 1 sample_num_axes: 0 } } }
          |layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
          |  inner_product_param { num_output: 1 } }
          |""".stripMargin
      CortadoSuite.write(dir, "net.prototxt", net)
      val solver = CortadoSuite.write(dir, "solver.prototxt", "net: \"net.prototxt\"\n")
      val model = CortadoSuite.untrainedModel(dir, net)
      val features = new Cortado(ss).features(df, Seq("data", "label"), Config(solver, model))
        .collect().map(r => r.getLong(0) -> (r.getSeq[Float](1), r.getSeq[Float](2))).toMap
      assert(features(2L) === (Seq(127.5f, 127f, 64f, 3.5f), Seq(3f)))
    }
  }

  test("images and labels of different counts are refused") {
    val e = intercept[CortadoIOException] {
      IdxToParquet.toDataFrame(ss, Idx.parse(idx(Seq(3, 2, 2), Pixels), "i"),
        Idx.parse(idx(Seq(2), Labels.take(2)), "l"))
    }
    assert(e.getMessage.contains("3 images but 2 labels"))
  }
}
