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

  test("a missing file names its path") {
    val e = intercept[CortadoIOException] {
      HadoopFiles.readBytes("file:///nonexistent/cortado/model.bin", conf)
    }
    assert(e.getMessage === "file:///nonexistent/cortado/model.bin does not exist")
  }
}
