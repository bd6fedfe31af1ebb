// SPDX-License-Identifier: Apache-2.0
package io.cortado

import java.io.File

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.jni.NativeLib

class NativeLoaderSuite extends AnyFunSuite {

  test("the native libraries load and answer") {
    assert(NativeLib.version() === "0.1.0")
    assert(NativeLoader.loadedFrom() != null)
    NativeLoader.LIBRARIES.foreach { name =>
      assert(new File(NativeLoader.loadedFrom(), name).isFile, s"$name where it was loaded from")
    }
  }

  test("without cortado.native.dir the libraries come from the jar's resources") {
    val dir = System.getProperty(NativeLoader.NATIVE_DIR_PROPERTY)
    assume(dir == null || dir.isEmpty, s"${NativeLoader.NATIVE_DIR_PROPERTY}=$dir")
    NativeLoader.LIBRARIES.foreach { name =>
      val resource = NativeLoader.resourceFolder() + "/" + name
      assert(getClass.getClassLoader.getResource(resource) != null, resource)
    }
    assert(new File(NativeLoader.loadedFrom()).getName.startsWith("cortado-native-"))
  }

  test("deviceQuery describes the build") {
    val lines = NativeLib.deviceQuery()
    assert(lines.nonEmpty)
    assert(lines.exists(_.toLowerCase.contains("cpu")), lines.mkString("\n"))
  }

  test("load is idempotent") {
    val from = NativeLoader.loadedFrom()
    NativeLoader.load()
    assert(NativeLoader.loadedFrom() === from)
  }
}
