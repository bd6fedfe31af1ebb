// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.net.{InetAddress, ServerSocket}
import java.nio.file.Files

import org.apache.spark.{SparkConf, SparkException}
import org.apache.spark.sql.SparkSession
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoCommException, CortadoConfigException}
import io.cortado.TestDirs.withTempDir
import io.cortado.jni.NativeComm
import io.cortado.spark.CortadoSuite.write

/**
 * Where the workers listen: spark.cortado.interface and spark.cortado.portRange, parsed and
 * checked in the driver, resolved on the workers, and used by two workers training in local[2];
 * and the command line's solver shipped with --files and its timeouts from Spark's settings.
 */
class NetworkSettingsSuite extends AnyFunSuite with PerTest {

  /** Spark settings of the next session (set before the test first calls ss). */
  private var settings: Map[String, String] = Map.empty

  override protected def sparkSessionBuilder: SparkSession.Builder =
    settings.foldLeft(super.sparkSessionBuilder) { case (b, (k, v)) => b.config(k, v) }

  override def afterEach(): Unit = {
    settings = Map.empty
    super.afterEach()
  }

  private def conf(pairs: (String, String)*): SparkConf =
    new SparkConf(loadDefaults = false).setAll(pairs)

  test("the settings parse, and a malformed one names itself") {
    assert(NetworkSettings.of(conf()) === NetworkSettings())
    assert(NetworkSettings.of(conf(NetworkSettings.PortRangeKey -> " 40000-40099 ",
      NetworkSettings.InterfaceKey -> "eth1")) === NetworkSettings("eth1", 40000, 40099))
    assert(NetworkSettings.of(conf(NetworkSettings.PortRangeKey -> "40000")) ===
      NetworkSettings("", 40000, 40000))
    for ((text, why) <- Seq("40099-40000" -> "starts after it ends", "0-10" -> "has port 0",
      "1-70000" -> "has port 70000", "a-b" -> "is not a range", "1-2-3" -> "is not a range",
      "40000-" -> "is not a range")) {
      val e = intercept[CortadoConfigException] {
        NetworkSettings.of(conf(NetworkSettings.PortRangeKey -> text))
      }
      assert(e.getMessage.startsWith(s"spark.cortado.portRange='$text' $why"), e.getMessage)
    }
    val e = intercept[CortadoConfigException] {
      NetworkSettings.of(conf(NetworkSettings.InterfaceKey -> "eth 1"))
    }
    assert(e.getMessage.contains("is not a network interface name"), e.getMessage)
  }

  test("an interface resolves to its IPv4 address; one the host lacks lists what it has") {
    assert(NetworkSettings("lo").listenAddress(fail("not the interface")) === "127.0.0.1")
    assert(NetworkSettings().listenAddress("10.1.2.3") === "10.1.2.3")
    val e = intercept[CortadoConfigException](NetworkSettings.addressOf("cortado-none9"))
    val host = InetAddress.getLocalHost.getHostName
    assert(e.getMessage.startsWith(s"spark.cortado.interface=cortado-none9: host $host has no " +
      "interface cortado-none9 (it has: "), e.getMessage)
    assert(e.getMessage.contains("lo 127.0.0.1"), e.getMessage)
  }

  /** A port that was free a moment ago, with `width` - 1 after it below 65536. */
  private def freePort(width: Int): Int = {
    val socket = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))
    try math.min(socket.getLocalPort, 65536 - width)
    finally socket.close()
  }

  test("two workers listen on the interface's address within the port range") {
    val first = freePort(10)
    settings = Map(NetworkSettings.InterfaceKey -> "lo",
      NetworkSettings.PortRangeKey -> s"$first-${first + 9}")
    withTempDir("cortado-ports") { dir =>
      write(dir, "net.prototxt", WorkersSuite.tinyNet(4))
      val config = Config(write(dir, "solver.prototxt", WorkersSuite.EverySolver),
        model = dir.resolve("m.caffemodel").toUri.toString, snapshotInterval = 0, clusterSize = 2)
      val (_, events) = WorkersSuite.trainRecording(ss, CortadoSuite.separable(ss, 64, 3)
        .repartition(2), config)
      val joined = events.collect { case LogEvent(t) if t.contains("workers joined") => t }
      assert(joined.size === 1, events)
      val ports = "127\\.0\\.0\\.1:(\\d+)".r.findAllMatchIn(joined.head).map(_.group(1).toInt)
        .toSeq
      assert(ports.size === 2 && ports.distinct.size === 2, joined.head)
      ports.foreach(p => assert(p >= first && p <= first + 9, joined.head))
    }
  }

  test("a range of one port cannot hold two workers of one host: the run fails naming it") {
    val port = freePort(1)
    settings = Map(NetworkSettings.PortRangeKey -> port.toString)
    withTempDir("cortado-ports") { dir =>
      write(dir, "net.prototxt", WorkersSuite.tinyNet(4))
      val config = Config(write(dir, "solver.prototxt", WorkersSuite.EverySolver),
        model = dir.resolve("m.caffemodel").toUri.toString, snapshotInterval = 0,
        clusterSize = 2, maxAttempts = 1)
      val e = intercept[SparkException] {
        new Cortado(ss).train(CortadoSuite.separable(ss, 64, 3).repartition(2), config)
      }
      assert(e.getMessage.contains(s"every port of $port-$port is in use"), e.getMessage)
    }
  }

  test("NativeComm.listen takes the range's next free port") {
    val first = freePort(5)
    val a = NativeComm.listen("127.0.0.1", first, first + 4)
    try {
      val b = NativeComm.listen("127.0.0.1", first, first + 4)
      try assert(NativeComm.port(b) > NativeComm.port(a) && NativeComm.port(b) <= first + 4)
      finally NativeComm.closeListener(b)
      val e = intercept[CortadoCommException] {
        NativeComm.listen("127.0.0.1", NativeComm.port(a), NativeComm.port(a))
      }
      assert(e.getMessage.contains("is in use"), e.getMessage)
    } finally NativeComm.closeListener(a)
  }

  test("the command line reads a bare -conf from the working directory or Spark's files, and " +
    "its timeouts from Spark's settings") {
    withTempDir("cortado-shipped") { dir =>
      // Not in the working directory, not fetched: the path stays a Hadoop path.
      for (path <- Seq("no-such-solver-9.prototxt", "hdfs:///m/solver.prototxt",
        "/abs/solver.prototxt")) {
        assert(CortadoOnSpark.shippedFile(path) === path)
      }
      // Shipped with --files (SparkContext.addFile): found among Spark's files.
      val name = s"shipped-${System.nanoTime()}.prototxt"
      val file = Files.write(dir.resolve(name), "net: \"n.prototxt\"\n".getBytes)
      ss.sparkContext.addFile(file.toString)
      val found = CortadoOnSpark.shippedFile(name)
      assert(found.startsWith("file:/") && found.endsWith(s"/$name"), found)
      assert(new String(Files.readAllBytes(java.nio.file.Paths.get(found.stripPrefix("file:")))) ===
        "net: \"n.prototxt\"\n")
    }
    val base = Config("s.prototxt")
    val set = CortadoOnSpark.withTimeouts(base,
      conf(CortadoOnSpark.StartTimeoutKey -> "15", CortadoOnSpark.CommTimeoutKey -> "30s"))
    assert(set.startTimeoutSeconds === 15.0 && set.commTimeoutSeconds === 30.0)
    assert(CortadoOnSpark.withTimeouts(base, conf()) === base)
    val e = intercept[CortadoConfigException] {
      CortadoOnSpark.withTimeouts(base, conf(CortadoOnSpark.CommTimeoutKey -> "-1"))
    }
    assert(e.getMessage === "spark.cortado.commTimeout='-1' is not a number of seconds above 0")
  }
}
