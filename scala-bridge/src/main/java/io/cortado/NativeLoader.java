// SPDX-License-Identifier: Apache-2.0
package io.cortado;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Loads Cortado's native libraries, libcortado.so and then libcortado_jni.so, once per class
 * loader.
 *
 * <p>Where from: the directory named by the system property {@value #NATIVE_DIR_PROPERTY} when it
 * is set (a developer's CMake build, or an installation: the directory must hold both libraries);
 * otherwise the jar's resources under {@code native/<os.name>-<os.arch>/} (for example {@code
 * native/Linux-amd64/}), extracted to a fresh temporary directory that is deleted when the JVM
 * exits. libcortado.so goes first, so that libcortado_jni.so finds it already loaded whatever its
 * run path says. The libraries the engine itself links (protobuf, spdlog, OpenBLAS, ...) come
 * from the system.
 *
 * <p>Every class with native methods calls {@link #load()} in its static initialiser, so user code
 * never needs to. Thread-safe. A failure throws {@link UnsatisfiedLinkError} naming what was
 * tried, and the next call tries again.
 */
public final class NativeLoader {
  /** System property: a directory holding libcortado.so and libcortado_jni.so. */
  public static final String NATIVE_DIR_PROPERTY = "cortado.native.dir";

  /** The libraries, in load order. */
  static final String[] LIBRARIES = {"libcortado.so", "libcortado_jni.so"};

  private static boolean loaded = false;
  private static String loadedFrom = null;

  private NativeLoader() {}

  /** The resource folder for this platform, as the build names it: native/os.name-os.arch. */
  public static String resourceFolder() {
    return "native/" + System.getProperty("os.name") + "-" + System.getProperty("os.arch");
  }

  /** Loads the libraries if this class loader has not loaded them yet. */
  public static synchronized void load() {
    if (loaded) {
      return;
    }
    String dir = System.getProperty(NATIVE_DIR_PROPERTY);
    if (dir != null && !dir.isEmpty()) {
      loadFrom(new File(dir), NATIVE_DIR_PROPERTY + "=" + dir);
    } else {
      loadFrom(extractResources(), "the jar's " + resourceFolder() + "/");
    }
    loaded = true;
  }

  /** Where the libraries were loaded from (a directory), or null before {@link #load()}. */
  public static synchronized String loadedFrom() {
    return loadedFrom;
  }

  private static void loadFrom(File dir, String origin) {
    for (String name : LIBRARIES) {
      File library = new File(dir, name);
      if (!library.isFile()) {
        throw new UnsatisfiedLinkError(
            "Cortado: " + library + " does not exist (libraries from " + origin + ")");
      }
      try {
        System.load(library.getAbsolutePath());
      } catch (UnsatisfiedLinkError e) {
        UnsatisfiedLinkError error = new UnsatisfiedLinkError(
            "Cortado: cannot load " + library + " (libraries from " + origin + "): "
                + e.getMessage());
        error.initCause(e);
        throw error;
      }
    }
    loadedFrom = dir.getAbsolutePath();
  }

  private static File extractResources() {
    String folder = resourceFolder();
    Path dir;
    try {
      dir = Files.createTempDirectory("cortado-native-");
    } catch (IOException e) {
      throw linkError("cannot create a temporary directory for the native libraries", e);
    }
    dir.toFile().deleteOnExit();
    ClassLoader classLoader = NativeLoader.class.getClassLoader();
    for (String name : LIBRARIES) {
      String resource = folder + "/" + name;
      Path target = dir.resolve(name);
      try (InputStream in = classLoader.getResourceAsStream(resource)) {
        if (in == null) {
          throw new UnsatisfiedLinkError("Cortado: the jar has no resource " + resource
              + ": it was built without native libraries for this platform; set -D"
              + NATIVE_DIR_PROPERTY + "=DIR to load them from a directory");
        }
        Files.copy(in, target, StandardCopyOption.REPLACE_EXISTING);
      } catch (IOException e) {
        throw linkError("cannot extract " + resource + " to " + target, e);
      }
      // deleteOnExit runs in reverse order: the files go before their directory.
      target.toFile().deleteOnExit();
    }
    return dir.toFile();
  }

  private static UnsatisfiedLinkError linkError(String message, Throwable cause) {
    UnsatisfiedLinkError error = new UnsatisfiedLinkError("Cortado: " + message);
    error.initCause(cause);
    return error;
  }
}
