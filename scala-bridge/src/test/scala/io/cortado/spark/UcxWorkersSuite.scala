// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.file.Path
import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._

import org.apache.spark.SparkException
import org.apache.spark.sql.DataFrame
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir
import io.cortado.jni.{NativeComm, NativeLib}
import io.cortado.spark.CortadoSuite.{separable, write}

/**
 * The ucx backend that -connection infiniband selects, between two executor JVMs of this host
 * (local-cluster[2,1,1024]). Without an active RDMA port here (a laptop, CI) the workers refuse
 * to train unless -connectionFallback ethernet lets UCX run over TCP or shared memory; with one
 * they train over it. What needs the ucx backend is cancelled when this build has none.
 */
class UcxWorkersSuite extends AnyFunSuite with LocalCluster {
  import WorkersSuite._

  override protected val numWorkers: Int = 2

  private def hasUcx: Boolean = NativeComm.backends().contains("ucx")

  /** This host's active RDMA ports, as the workers see them (they run here too). */
  private def rdmaHere: Seq[String] = NativeLib.rdmaDevices().toSeq.map(_.trim).filter(_.nonEmpty)

  /** 20 iterations of TinyNet (batch 4) on 2 workers through -connection infiniband. */
  private def infiniband(dir: Path): Config = {
    write(dir, "net.prototxt", tinyNet(4))
    Config(write(dir, "solver.prototxt", EverySolver),
      model = dir.resolve("m.caffemodel").toUri.toString, snapshotInterval = 0, clusterSize = 2,
      connection = "infiniband")
  }

  private def data: DataFrame = partitioned(ss, separable(ss, 128, 5).collect().toSeq, 2)

  test("-connection infiniband: without an RDMA port on the host, every worker fails before " +
    "training, and the driver does not try again") {
    withTempDir("cortado-ucx") { dir =>
      val events = new ConcurrentLinkedQueue[TrainingEvent]()
      val cortado = new Cortado(ss)
      cortado.addProgressListener(e => events.add(e))
      val known = NativeComm.backends().toSeq
      if (!hasUcx) {
        // Refused in the driver, before any job.
        val e = intercept[CortadoConfigException](cortado.train(data, infiniband(dir)))
        assert(e.getMessage.startsWith("-connection infiniband runs on the 'ucx' backend, which " +
          s"is not in this build of Cortado (it has: ${known.mkString(", ")}): use -connection " +
          "ethernet"), e.getMessage)
      } else if (rdmaHere.isEmpty) {
        // Both workers run on this host, which has none: every worker fails alike after the
        // rendezvous, and Spark's message quotes the workers' exception.
        val e = intercept[SparkException](cortado.train(data, infiniband(dir)))
        assert(e.getMessage.contains("-connection infiniband needs an RDMA device (InfiniBand or " +
          "RoCE) on every host, but host "), e.getMessage)
        assert(e.getMessage.contains(" (workers 0, 1) has none (libibverbs lists no active " +
          "port): use -connection ethernet, or add -connectionFallback ethernet to run over TCP"),
          e.getMessage)
        val seen = events.asScala.toSeq
        assert(!seen.exists(_.isInstanceOf[IterationEvent]), seen)
        // Bad settings: the driver does not try again.
        assert(!seen.exists {
          case LogEvent(t) => t.startsWith("Training attempt")
          case _ => false
        }, seen)
      } else {
        val (_, seen) = trainRecording(ss, data, infiniband(dir))
        assert(losses(seen).map(_._1) === (0 until 20))
        val texts = seen.collect { case LogEvent(t) => t }
        assert(texts.exists(_.startsWith("Connection: ucx: rank 0 of 2")), texts)
        assert(!texts.exists(_.contains("no RDMA device")), texts)
      }
    }
  }

  test("-connectionFallback ethernet: 2 workers train through ucx, the log naming the " +
    "transport and the hosts without RDMA; gradients in float16") {
    assume(hasUcx, "this build has no ucx backend (built without UCX)")
    withTempDir("cortado-ucx-fallback") { dir =>
      val config = infiniband(dir).copy(connectionFallback = "ethernet",
        exchangePrecision = "float16")
      val (_, events) = trainRecording(ss, data, config)
      val trained = losses(events)
      assert(trained.map(_._1) === (0 until 20))
      assert(trained.last._2 < trained.head._2 / 2, trained)
      val texts = events.collect { case LogEvent(t) => t }
      // ucx carries the 16-bit wire (the tcp ring's, bit for bit).
      assert(texts.filter(_.startsWith("Gradients travel")) ===
        Seq("Gradients travel between the workers as float16"), texts)
      val joined = texts.filter(_.contains("workers joined"))
      assert(joined.size === 1 && joined.head.startsWith("2 workers joined through ucx: "), texts)
      val connection = texts.filter(_.startsWith("Connection: "))
      assert(connection.size === 1, texts)
      assert(connection.head.startsWith("Connection: ucx: rank 0 of 2"), connection.head)
      val warnings = texts.filter(_.contains("no RDMA device"))
      if (rdmaHere.isEmpty) {
        assert(warnings.size === 1, texts)
        assert(warnings.head.startsWith("Warning: -connection infiniband, but host "),
          warnings.head)
        assert(warnings.head.contains(" (workers 0, 1) has no RDMA device (libibverbs lists no " +
          "active port): as -connectionFallback ethernet allows, UCX carries the gradients to " +
          "and from them over TCP (or shared memory within a host) instead"), warnings.head)
      } else {
        assert(warnings.isEmpty, texts)
      }
    }
  }
}
