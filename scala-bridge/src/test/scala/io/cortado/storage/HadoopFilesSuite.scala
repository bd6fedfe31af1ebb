// SPDX-License-Identifier: Apache-2.0
package io.cortado.storage

import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoIOException
import io.cortado.TestDirs.withTempDir

class HadoopFilesSuite extends AnyFunSuite {

  private val conf = new Configuration()

  test("bytes round-trip through a file: URI, replacing an existing file, leaving no temp") {
    withTempDir("cortado-hadoop-files") { tempDir =>
      val dir = tempDir.toUri.toString
      val path = dir + "model.bin"
      HadoopFiles.writeBytesAtomic(path, Array[Byte](1, 2, 3), conf)
      HadoopFiles.writeBytesAtomic(path, Array[Byte](4, 5), conf)
      assert(HadoopFiles.readBytes(path, conf).toSeq === Seq[Byte](4, 5))
      assert(HadoopFiles.listNames(dir, conf).filterNot(_.endsWith(".crc")) === Seq("model.bin"))
    }
  }

  test("writeAtomically: the output appears whole under its name, never over an existing one; " +
      "a failed write leaves nothing") {
    withTempDir("cortado-hadoop-atomic") { tempDir =>
      val dir = tempDir.toUri.toString
      val out = dir + "out"
      var seen = ""
      HadoopFiles.writeAtomically(out, conf, "the output") { temp =>
        seen = temp
        assert(!HadoopFiles.exists(out, conf))  // not under its name while being written
        HadoopFiles.writeBytesAtomic(temp + "/part-0", Array[Byte](7), conf)
      }
      assert(seen.contains("/.out.") && seen.endsWith(".tmp"), seen)
      assert(HadoopFiles.readBytes(out + "/part-0", conf).toSeq === Seq[Byte](7))
      val again = intercept[CortadoIOException] {
        HadoopFiles.writeAtomically(out, conf, "the output")(_ => fail("ran over an existing one"))
      }
      assert(again.getMessage === s"the output $out already exists: remove it or name another")
      val failed = dir + "failed"
      intercept[IllegalStateException] {
        HadoopFiles.writeAtomically(failed, conf, "the output") { temp =>
          HadoopFiles.writeBytesAtomic(temp + "/part-0", Array[Byte](1), conf)
          throw new IllegalStateException("the job failed")
        }
      }
      assert(tempDir.toFile.list().toSeq === Seq("out"))  // no temporary left, nor "failed"
    }
  }

  test("a missing file names its path") {
    val e = intercept[CortadoIOException] {
      HadoopFiles.readBytes("file:///nonexistent/cortado/model.bin", conf)
    }
    assert(e.getMessage === "file:///nonexistent/cortado/model.bin does not exist")
  }
}
