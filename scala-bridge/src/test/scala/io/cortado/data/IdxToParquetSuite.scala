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

  test("bad IDX files fail naming the file") {
    withTempDir("cortado-idx") { dir =>
      val conf = ss.sparkContext.hadoopConfiguration
      def error(name: String, bytes: Array[Byte]): String = {
        val path = file(dir, name, bytes)
        intercept[CortadoIOException] {
          Idx.readItems(path, conf, 0, Idx.readDims(path, conf).head)
        }.getMessage.replace(path, name)
      }
      assert(error("x.gz", Array[Byte](1, 2, 3, 4, 5)) === "x.gz: not an IDX file: bad magic number")
      assert(error("y", idx(Seq(3, 2, 2), Pixels.take(11))) === "y: truncated")
      val floats = idx(Seq(1), Seq(0), gzip = false)
      floats(2) = 0x0d
      assert(error("z", floats).contains("z: not an IDX file: data type 0x0d"))
      assert(intercept[CortadoIOException](Idx.readDims(dir.resolve("none").toString, conf))
        .getMessage.endsWith("none does not exist"))
    }
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

  test("images and labels of different counts are refused, naming both files") {
    withTempDir("cortado-idx") { dir =>
      val images = file(dir, "images.gz", idx(Seq(3, 2, 2), Pixels))
      val labels = file(dir, "labels", idx(Seq(2), Labels.take(2), gzip = false))
      val e = intercept[CortadoIOException](IdxToParquet.readDataFrame(ss, images, labels))
      assert(e.getMessage === s"$images has 3 images but $labels has 2 labels: the files do " +
        "not belong together")
    }
  }

  test("each task reads its own slice of the files, gzipped or not") {
    withTempDir("cortado-idx") { dir =>
      val conf = ss.sparkContext.hadoopConfiguration
      for ((name, gzip) <- Seq("images.gz" -> true, "images" -> false)) {
        val path = file(dir, name, idx(Seq(3, 2, 2), Pixels, gzip))
        assert(Idx.readDims(path, conf) === Seq(3, 2, 2))
        assert(Idx.readItems(path, conf, 1, 2).map(_ & 0xff).toSeq === Pixels.slice(4, 12))
        assert(Idx.readItems(path, conf, 3, 0).isEmpty)
        val past = intercept[CortadoIOException](Idx.readItems(path, conf, 2, 2))
        assert(past.getMessage === s"$path: items 2 to 4 asked, the file has 3")
      }
      // Three tasks of one row each give the rows of one task.
      val images = file(dir, "i.gz", idx(Seq(3, 2, 2), Pixels))
      val labels = file(dir, "l.gz", idx(Seq(3), Labels))
      val df = IdxToParquet.readDataFrame(ss, images, labels, partitions = 3)
      assert(df.rdd.getNumPartitions === 3)
      assert(df.collect().map(r => (r.getLong(0), r.getInt(1))).sortBy(_._1).toSeq ===
        Seq((0L, 9), (1L, 0), (2L, 3)))
    }
  }

  test("a file cut short fails in the task, naming the file") {
    withTempDir("cortado-idx") { dir =>
      val whole = NativeLmdbSuite.idx(Seq(3, 2, 2), Pixels)
      val images = file(dir, "cut", whole.take(whole.length - 3))
      val labels = file(dir, "l", idx(Seq(3), Labels, gzip = false))
      val e = intercept[Exception](IdxToParquet.readDataFrame(ss, images, labels).collect())
      val messages = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null)
        .map(_.getMessage).mkString(" / ")
      assert(messages.contains(s"$images: truncated"), messages)
    }
  }
}
