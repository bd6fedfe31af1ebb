// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni

import java.io.{ByteArrayOutputStream, DataOutputStream}
import java.nio.{ByteBuffer, ByteOrder}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoConfigException, CortadoIOException}
import io.cortado.TestDirs.withTempDir

object NativeLmdbSuite {

  /** Uncompressed IDX bytes of unsigned bytes with these dimensions. */
  def idx(dims: Seq[Int], data: Seq[Int]): Array[Byte] = {
    val bytes = new ByteArrayOutputStream
    val out = new DataOutputStream(bytes)
    out.write(Array[Byte](0, 0, 0x08, dims.length.toByte))
    dims.foreach(out.writeInt)
    data.foreach(out.writeByte)
    out.close()
    bytes.toByteArray
  }

  /**
   * An LMDB database at `dir/name` converted from IDX files of `images` (each `rows` x `cols`
   * values 0..255) and `labels`, through NativeLmdb.convertIdx; returns its path.
   */
  def lmdb(dir: Path, name: String, rows: Int, cols: Int, images: Seq[Seq[Int]],
      labels: Seq[Int]): String = {
    val imageFile = Files.write(dir.resolve(s"$name-images.idx"),
      idx(Seq(images.size, rows, cols), images.flatten))
    val labelFile = Files.write(dir.resolve(s"$name-labels.idx"), idx(Seq(labels.size), labels))
    val out = dir.resolve(name).toString
    val written = NativeLmdb.convertIdx(imageFile.toString, labelFile.toString, out)
    require(written == images.size, s"convertIdx wrote $written records, not ${images.size}")
    out
  }

  /** Image i of the test databases: value j is (i * 37 + j) mod 256. */
  def image(i: Int, size: Int): Seq[Int] = (0 until size).map(j => (i * 37 + j) % 256)

  def direct(bytes: Int): ByteBuffer =
    ByteBuffer.allocateDirect(bytes).order(ByteOrder.nativeOrder())

  /** The keys NativeLmdb.read packs: length (big-endian int32), then the bytes. */
  def unpackKeys(packed: Array[Byte]): Seq[String] = {
    val b = ByteBuffer.wrap(packed)
    Iterator.continually(b).takeWhile(_.hasRemaining).map { _ =>
      val key = new Array[Byte](b.getInt())
      b.get(key)
      new String(key, StandardCharsets.UTF_8)
    }.toSeq
  }
}

class NativeLmdbSuite extends AnyFunSuite {
  import NativeLmdbSuite._

  test("convertIdx writes a database; open, count, shape and read ranges in key order") {
    withTempDir("cortado-lmdb") { dir =>
      val db = lmdb(dir, "db", 2, 3, (0 until 10).map(image(_, 6)), (0 until 10).map(_ % 4))
      val h = NativeLmdb.open(db, "test")
      try {
        assert(NativeLmdb.count(h) === 10L)
        assert(NativeLmdb.shape(h).toSeq === Seq(1, 2, 3))
        val data = direct(4 * 6 * 4)
        val labels = direct(4 * 4)
        Seq(0 -> 4, 4 -> 4, 8 -> 2, 1 -> 3).foreach { case (start, n) =>
          val keys = unpackKeys(NativeLmdb.read(h, start, n, data, labels))
          assert(keys === (start until start + n).map(i => f"$i%08d"))
          val values = new Array[Float](n * 6)
          data.asFloatBuffer().get(values)
          assert(values.toSeq === (start until start + n).flatMap(image(_, 6)).map(_.toFloat))
          val ints = new Array[Int](n)
          labels.asIntBuffer().get(ints)
          assert(ints.toSeq === (start until start + n).map(_ % 4))
        }
        assert(NativeLmdb.read(h, 10, 0, data, labels).isEmpty)
      } finally NativeLmdb.dispose(h)
    }
  }

  test("bad arguments throw and name what is wrong") {
    withTempDir("cortado-lmdb") { dir =>
      val db = lmdb(dir, "db", 2, 2, (0 until 3).map(image(_, 4)), Seq(1, 2, 3))
      val h = NativeLmdb.open(db, "test")
      try {
        val data = direct(3 * 4 * 4)
        val labels = direct(3 * 4)
        val range = intercept[CortadoConfigException](NativeLmdb.read(h, 2, 2, data, labels))
        assert(range.getMessage.contains(s"records [2, 4) are not within LMDB database '$db' " +
          "of 3 records"), range.getMessage)
        val small = intercept[CortadoConfigException](NativeLmdb.read(h, 0, 3, direct(47), labels))
        assert(small.getMessage.contains("data holds 47 bytes, needs 48"), small.getMessage)
        val heap = ByteBuffer.allocate(48)
        assert(intercept[CortadoConfigException](NativeLmdb.read(h, 0, 3, heap, labels))
          .getMessage.contains("not a direct buffer"))
        assert(intercept[CortadoConfigException](NativeLmdb.read(h, 0, -1, data, labels))
          .getMessage.contains("negative"))
      } finally NativeLmdb.dispose(h)
      assert(intercept[CortadoConfigException](NativeLmdb.count(0L)).getMessage
        .contains("null handle"))
      // convertIdx never overwrites.
      val again = intercept[CortadoConfigException](NativeLmdb.convertIdx(
        dir.resolve("db-images.idx").toString, dir.resolve("db-labels.idx").toString, db))
      assert(again.getMessage.contains(db), again.getMessage)
    }
  }

  test("a missing database is a CortadoIOException naming the path") {
    val e = intercept[CortadoIOException](NativeLmdb.open("/nonexistent/mnist_lmdb", "layer 'x'"))
    assert(e.getMessage === "layer 'x': LMDB database '/nonexistent/mnist_lmdb' does not exist")
  }
}
