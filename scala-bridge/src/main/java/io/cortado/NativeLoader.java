// SPDX-License-Identifier: Apache-2.0
package io.cortado;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * Loads Cortado's native libraries, libcortado_preload.so, libcortado.so and then
 * libcortado_jni.so, once per class loader. The first sets the environment the others read as
 * they start: it keeps UCX (which libcortado.so links) from taking the JVM's fault signals, and
 * makes OpenMP's idle threads passive (cpp/core/preload.cpp).
 *
 * <p>Where from: the directory named by the system property {@value #NATIVE_DIR_PROPERTY} when it
 * is set (a developer's CMake build, or an installation: the directory must hold every library);
 * otherwise the jar's resources under {@code native/<os.name>-<os.arch>/} (for example {@code
 * native/Linux-amd64/}), extracted once per user and content to a directory under {@code
 * java.io.tmpdir} that later JVMs reuse (see extractResources). libcortado.so goes first, so that libcortado_jni.so finds it already loaded whatever its
 * run path says. The libraries the engine itself links (protobuf, spdlog, OpenBLAS, ...) come
 * from the system.
 *
 * <p>Every class with native methods calls {@link #load()} in its static initialiser, so user code
 * never needs to. Thread-safe. A failure throws {@link UnsatisfiedLinkError} naming what was
 * tried, and the next call tries again.
 */
public final class NativeLoader {
  /** System property: a directory holding the libraries (a build's cpp/ directory). */
  public static final String NATIVE_DIR_PROPERTY = "cortado.native.dir";

  /** The libraries, in load order. */
  static final String[] LIBRARIES = {
    "libcortado_preload.so", "libcortado.so", "libcortado_jni.so"
  };

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

  /**
   * Extracts the jar's libraries once per content and user: into {@code
   * <java.io.tmpdir>/cortado-native-<user>-<sha256 of the libraries, 16 hex digits>}, which the
   * next JVM of this user with the same jar reuses after checking the files' digests (an executor
   * killed with SIGKILL runs no exit hooks, so a directory per JVM would be left behind each
   * time). A directory owned by another user, or whose files differ, is never used: the
   * libraries then go to a fresh directory of this JVM, deleted at exit. The directory is filled
   * under a temporary name and renamed into place, so no JVM sees it half-written.
   */
  private static File extractResources() {
    String folder = resourceFolder();
    ClassLoader classLoader = NativeLoader.class.getClassLoader();
    byte[][] contents = new byte[LIBRARIES.length][];
    MessageDigest digest = sha256();
    for (int i = 0; i < LIBRARIES.length; ++i) {
      String resource = folder + "/" + LIBRARIES[i];
      try (InputStream in = classLoader.getResourceAsStream(resource)) {
        if (in == null) {
          throw new UnsatisfiedLinkError("Cortado: the jar has no resource " + resource
              + ": it was built without native libraries for this platform; set -D"
              + NATIVE_DIR_PROPERTY + "=DIR to load them from a directory");
        }
        contents[i] = in.readAllBytes();
      } catch (IOException e) {
        throw linkError("cannot read " + resource + " from the jar", e);
      }
      digest.update(contents[i]);
    }
    String hash = hex(digest.digest()).substring(0, 16);
    String user = System.getProperty("user.name", "user").replaceAll("[^A-Za-z0-9_.-]", "_");
    Path tmp = Path.of(System.getProperty("java.io.tmpdir"));
    Path shared = tmp.resolve("cortado-native-" + user + "-" + hash);
    if (holds(shared, contents)) {
      return shared.toFile();
    }
    Path fresh;
    try {
      fresh = Files.createTempDirectory(tmp, "cortado-native-" + user + "-" + hash + ".");
      for (int i = 0; i < LIBRARIES.length; ++i) {
        Files.write(fresh.resolve(LIBRARIES[i]), contents[i]);
      }
    } catch (IOException e) {
      throw linkError("cannot extract the native libraries under " + tmp, e);
    }
    try {
      Files.move(fresh, shared, StandardCopyOption.ATOMIC_MOVE);
      return shared.toFile();
    } catch (IOException e) {
      // Another JVM got there first (its copy is checked), or the name is taken by something
      // this JVM must not use: keep the fresh copy for this JVM alone.
      if (holds(shared, contents)) {
        deleteTree(fresh);
        return shared.toFile();
      }
      for (String name : LIBRARIES) {
        fresh.resolve(name).toFile().deleteOnExit();
      }
      fresh.toFile().deleteOnExit();
      return fresh.toFile();
    }
  }

  /** Whether `dir` is this user's and holds exactly `contents` under the library names. */
  private static boolean holds(Path dir, byte[][] contents) {
    try {
      if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)) {
        return false;
      }
      String me = System.getProperty("user.name");
      if (me == null || !Files.getOwner(dir, LinkOption.NOFOLLOW_LINKS).getName().equals(me)) {
        return false;
      }
      for (int i = 0; i < LIBRARIES.length; ++i) {
        Path file = dir.resolve(LIBRARIES[i]);
        if (!Files.isRegularFile(file, LinkOption.NOFOLLOW_LINKS)
            || !MessageDigest.isEqual(
                sha256().digest(Files.readAllBytes(file)), sha256().digest(contents[i]))) {
          return false;
        }
      }
      return true;
    } catch (IOException e) {
      return false;
    }
  }

  private static void deleteTree(Path dir) {
    for (String name : LIBRARIES) {
      dir.resolve(name).toFile().delete();
    }
    dir.toFile().delete();
  }

  private static MessageDigest sha256() {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw linkError("SHA-256 is not available in this JVM", e);
    }
  }

  private static String hex(byte[] bytes) {
    StringBuilder text = new StringBuilder();
    for (byte b : bytes) {
      text.append(String.format("%02x", b & 0xff));
    }
    return text.toString();
  }

  private static UnsatisfiedLinkError linkError(String message, Throwable cause) {
    UnsatisfiedLinkError error = new UnsatisfiedLinkError("Cortado: " + message);
    error.initCause(cause);
    return error;
  }
}
