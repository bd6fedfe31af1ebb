// SPDX-License-Identifier: Apache-2.0
package io.cortado

import java.nio.file.{Files, Path}
import java.util.Comparator

/** Temporary directories for tests, removed with their contents afterwards. */
object TestDirs {

  def withTempDir[T](name: String)(body: Path => T): T = {
    val dir = Files.createTempDirectory(name)
    try body(dir)
    finally {
      val paths = Files.walk(dir)
      try paths.sorted(Comparator.reverseOrder[Path]()).forEach(p => Files.deleteIfExists(p))
      finally paths.close()
    }
  }
}
