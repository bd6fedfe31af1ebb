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

  test("the extracted libraries are shared by this user's JVMs; a tampered copy is not used") {
    val dir = System.getProperty(NativeLoader.NATIVE_DIR_PROPERTY)
    assume(dir == null || dir.isEmpty, s"${NativeLoader.NATIVE_DIR_PROPERTY}=$dir")
    val extract = classOf[NativeLoader].getDeclaredMethod("extractResources")
    extract.setAccessible(true)
    val shared = extract.invoke(null).asInstanceOf[File]
    val user = System.getProperty("user.name")
    assert(shared.getName.matches(s"cortado-native-\\Q$user\\E-[0-9a-f]{16}"), shared)
    // Another JVM (here: another call) finds the same directory rather than a copy of its own.
    assert(extract.invoke(null).asInstanceOf[File] === shared)
    assert(new File(NativeLoader.loadedFrom()) === shared)
    // Tampered with: this JVM's own fresh copy is used instead. (The loaded file is replaced by
    // a rename, never rewritten in place: this JVM maps it.)
    val library = new File(shared, NativeLoader.LIBRARIES.last).toPath
    val original = java.nio.file.Files.readAllBytes(library)
    def replace(bytes: Array[Byte]): Unit = {
      val temp = java.nio.file.Files.createTempFile(shared.toPath, "swap", ".tmp")
      java.nio.file.Files.write(temp, bytes)
      java.nio.file.Files.move(temp, library, java.nio.file.StandardCopyOption.REPLACE_EXISTING,
        java.nio.file.StandardCopyOption.ATOMIC_MOVE)
    }
    try {
      replace(Array[Byte](1, 2, 3))
      val fresh = extract.invoke(null).asInstanceOf[File]
      assert(fresh !== shared)
      assert(java.nio.file.Files.readAllBytes(new File(fresh, NativeLoader.LIBRARIES.last).toPath)
        .sameElements(original))
    } finally replace(original)
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
