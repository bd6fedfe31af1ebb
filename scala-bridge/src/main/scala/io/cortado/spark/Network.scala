// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.net.{Inet4Address, NetworkInterface}

import scala.collection.JavaConverters._

import org.apache.spark.SparkConf

import io.cortado.CortadoConfigException

/**
 * Where the workers of a training job listen for each other, as the Spark configuration says:
 *
 *  - `spark.cortado.interface` (e.g. `eth1`, `ib0`, `bond0.20`): each worker listens on that
 *    network interface's IPv4 address on its own host; unset, on the address Spark's block
 *    manager uses (`spark.driver.host` / SPARK_LOCAL_IP, else the host's name), which is where
 *    Spark's own shuffle traffic goes;
 *  - `spark.cortado.portRange` (e.g. `40000-40099`, or one port `40000`): each worker takes the
 *    first free port of the range, for firewalls that open a fixed range between executors;
 *    unset, any free port. Workers sharing a host need a port each, so give a range at least as
 *    wide as the workers one host runs.
 *
 * The driver reads and checks both before any task starts ([[NetworkSettings.of]]); each worker
 * resolves the interface on its own host ([[NetworkSettings.listenAddress]]).
 */
private[spark] final case class NetworkSettings(
    interface: String = "",
    firstPort: Int = 0,
    lastPort: Int = 0) {

  /** The address this worker listens on: `interface`'s on this host, else `blockManagerHost`. */
  def listenAddress(blockManagerHost: => String): String =
    if (interface.isEmpty) blockManagerHost else NetworkSettings.addressOf(interface)

  /** "any port", "port 40000" or "ports 40000-40099", for messages. */
  def describePorts: String =
    if (firstPort == 0) "any port"
    else if (firstPort == lastPort) s"port $firstPort"
    else s"ports $firstPort-$lastPort"
}

private[spark] object NetworkSettings {

  val InterfaceKey = "spark.cortado.interface"
  val PortRangeKey = "spark.cortado.portRange"

  /** The settings of `conf`; a CortadoConfigException naming the setting when one is malformed. */
  def of(conf: SparkConf): NetworkSettings = {
    val interface = conf.get(InterfaceKey, "").trim
    if (interface.exists(c => c.isWhitespace || c == '/' || c == ':')) {
      throw new CortadoConfigException(
        s"$InterfaceKey='$interface' is not a network interface name (such as eth1 or ib0)")
    }
    val (first, last) = portRange(conf.get(PortRangeKey, ""))
    NetworkSettings(interface, first, last)
  }

  /** "40000-40099" -> (40000, 40099), "40000" -> (40000, 40000), "" -> (0, 0). */
  def portRange(text: String): (Int, Int) = {
    def bad(why: String) = new CortadoConfigException(
      s"$PortRangeKey='$text' $why: give a range such as 40000-40099 (or one port)")
    def port(s: String): Int = {
      val p = scala.util.Try(s.trim.toInt).getOrElse(throw bad("is not a range of ports"))
      if (p < 1 || p > 65535) throw bad(s"has port $p, outside 1-65535")
      p
    }
    text.trim.split("-", -1) match {
      case Array("") => (0, 0)
      case Array(one) => (port(one), port(one))
      case Array(a, b) =>
        val (first, last) = (port(a), port(b))
        if (first > last) throw bad("starts after it ends")
        (first, last)
      case _ => throw bad("is not a range of ports")
    }
  }

  /**
   * The first IPv4 address of the interface `name` of this host; a CortadoConfigException
   * naming the host and the interfaces it has otherwise.
   */
  def addressOf(name: String): String = {
    val host = java.net.InetAddress.getLocalHost.getHostName
    val interface = Option(NetworkInterface.getByName(name)).getOrElse {
      throw new CortadoConfigException(
        s"$InterfaceKey=$name: host $host has no interface $name (it has: ${listed()})")
    }
    if (!interface.isUp) {
      throw new CortadoConfigException(
        s"$InterfaceKey=$name: interface $name of host $host is down (the host's interfaces: " +
          s"${listed()})")
    }
    ipv4(interface).headOption.getOrElse {
      throw new CortadoConfigException(
        s"$InterfaceKey=$name: interface $name of host $host has no IPv4 address (the host's " +
          s"interfaces: ${listed()})")
    }
  }

  private def ipv4(interface: NetworkInterface): Seq[String] =
    interface.getInetAddresses.asScala.collect { case a: Inet4Address => a.getHostAddress }
      .toSeq.sorted

  /** "eth0 10.0.0.4, lo 127.0.0.1, wlan0 (down)", by name. */
  private def listed(): String =
    Option(NetworkInterface.getNetworkInterfaces).map(_.asScala.toSeq).getOrElse(Nil)
      .sortBy(_.getName).map { i =>
        val addresses = ipv4(i)
        if (!i.isUp) s"${i.getName} (down)"
        else if (addresses.isEmpty) s"${i.getName} (no IPv4 address)"
        else s"${i.getName} ${addresses.mkString(" ")}"
      }.mkString(", ")
}
