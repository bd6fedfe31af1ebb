// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni

import java.util.concurrent.{Callable, Executors, TimeUnit}

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoCommException, CortadoConfigException}

/**
 * NativeComm from the JVM: ranks as threads of this JVM, each with its listener, meeting as a
 * Spark job's workers do (listen, exchange the addresses, connect).
 */
class NativeCommSuite extends AnyFunSuite {

  /** How a ring is summed: NativeComm.connect's allreduce, latencyKb and hierarchical. */
  private case class Sums(allreduce: String = "auto", latencyKb: Int = 32,
      hierarchical: Boolean = true)

  /**
   * Runs `body(rank, comm)` on `world` ranks joined with the tokens given, one thread each;
   * rank r listens on 127.0.0.(hosts(r) + 1) (every rank on 127.0.0.1 by default).
   */
  private def onRanks[T](world: Int, tokens: Int => String, sums: Sums = Sums(),
      hosts: Int => Int = _ => 0)(body: (Int, Long) => T): Seq[Either[Throwable, T]] = {
    val listeners = (0 until world).map(r => NativeComm.listen(s"127.0.0.${hosts(r) + 1}"))
    val peers = listeners.indices.map(r =>
      s"127.0.0.${hosts(r) + 1}:${NativeComm.port(listeners(r))}").toArray
    val pool = Executors.newFixedThreadPool(world)
    try {
      val futures = (0 until world).map { rank =>
        pool.submit(new Callable[Either[Throwable, T]] {
          override def call(): Either[Throwable, T] =
            try {
              val comm = NativeComm.connect(listeners(rank), "tcp", rank, world, peers,
                tokens(rank), 0, Array.emptyByteArray, -1, 5, 5, 0, 0, sums.allreduce,
                sums.latencyKb, sums.hierarchical)
              try Right(body(rank, comm))
              finally NativeComm.dispose(comm)
            } catch {
              case t: Throwable => Left(t)
            }
        })
      }
      futures.map(_.get(60, TimeUnit.SECONDS))
    } finally pool.shutdownNow()
  }

  test("three ranks as threads sum in place and agree bit for bit") {
    val results = onRanks(3, _ => "job") { (rank, comm) =>
      assert(NativeComm.backend(comm) === "tcp")
      val data = Array.tabulate(1001)(i => (rank + 1) * 0.5f + i)
      NativeComm.allReduce(comm, data)
      data
    }
    val sums = results.map(_.fold(throw _, identity))
    sums.foreach(s => assert(s.toSeq === sums.head.toSeq))
    assert(sums.head(0) === 3f && sums.head(1000) === 3003f)
  }

  test("the exchange precision is set on the communicator; tcp carries 16-bit values") {
    val results = onRanks(2, _ => "job") { (_, comm) =>
      assert(NativeComm.setExchangePrecision(comm, "bfloat16") === "bfloat16")
      assert(NativeComm.setExchangePrecision(comm, "float16") === "float16")
      assert(NativeComm.setExchangePrecision(comm, "auto") === "auto")
      val e = intercept[CortadoConfigException](NativeComm.setExchangePrecision(comm, "fp8"))
      assert(e.getMessage === "the exchange precision must be auto, float32, bfloat16 or " +
        "float16, not 'fp8'")
    }
    results.foreach(r => assert(r.isRight, r))
  }

  test("the allreduce settings reach the tcp communicator, which says how it sums") {
    def described(world: Int, sums: Sums, hosts: Int => Int = _ => 0): Seq[String] =
      onRanks(world, _ => "job", sums, hosts) { (rank, comm) =>
        val data = Array.tabulate(301)(i => rank + 1f + i)
        NativeComm.allReduce(comm, data)
        assert(data(0) === (1 to world).sum.toFloat && data(300) === data(0) + 300 * world)
        NativeComm.describe(comm)
      }.map(_.fold(throw _, identity))
    assert(described(2, Sums("doubling")) ===
      Seq("tcp: rank 0 of 2; allreduce: doubling", "tcp: rank 1 of 2; allreduce: doubling"))
    assert(described(2, Sums()).head === "tcp: rank 0 of 2; allreduce: auto (a step costs 32 KB)")
    assert(described(3, Sums("auto", latencyKb = 3)).head ===
      "tcp: rank 0 of 3; allreduce: auto (a step costs 3 KB)")
    assert(described(3, Sums("halving")).head === "tcp: rank 0 of 3; allreduce: halving")
    assert(described(2, Sums("ring")).head === "tcp: rank 0 of 2; allreduce: ring")
    // Two ranks on each of two hosts (loopback addresses): summed within each host first,
    // unless hierarchical is off.
    val twoHosts = (r: Int) => r / 2
    assert(described(4, Sums("doubling"), twoHosts).head === "tcp: rank 0 of 4; allreduce: " +
      "within each host by the ring, between the 2 hosts by doubling")
    assert(described(4, Sums("doubling", hierarchical = false), twoHosts).head ===
      "tcp: rank 0 of 4; allreduce: doubling")
  }

  test("bad allreduce settings are refused for every backend, naming the values") {
    val listener = NativeComm.listen("127.0.0.1")
    val bad = intercept[CortadoConfigException](NativeComm.connect(listener, "tcp", 0, 1,
      Array("127.0.0.1:1"), "t", 0, Array.emptyByteArray, -1, 1, 1, 0, 0, "tree", 32, true))
    assert(bad.getMessage === "allreduce must be auto, ring, doubling or halving, not 'tree'")
    val latency = intercept[CortadoConfigException](NativeComm.connect(0L, "mpi", 0, 1,
      Array.empty[String], "t", 0, Array.emptyByteArray, -1, 1, 1, 0, 0, "auto", 0, true))
    assert(latency.getMessage === "latencyKb must be a positive number of KB, not 0")
  }

  test("a rank with another job's token is refused, naming the rank") {
    val results = onRanks(2, r => if (r == 0) "job-a" else "job-b")((_, _) => ())
    val errors = results.collect { case Left(e) => e }
    assert(errors.size === 2, results)
    errors.foreach(e => assert(e.isInstanceOf[CortadoCommException], e))
    assert(errors.exists(_.getMessage.contains("token")), errors.map(_.getMessage))
  }

  test("abort from another thread ends a blocked allreduce at once") {
    val results = onRanks(2, _ => "job") { (rank, comm) =>
      if (rank == 0) {
        val t0 = System.nanoTime()
        val aborter = new Thread(() => {
          Thread.sleep(300)
          NativeComm.abort(comm, "stopped by the test")
        })
        aborter.start()
        // Rank 1 never calls: without abort this would wait for the 5 s timeout.
        val e = intercept[CortadoCommException](NativeComm.allReduce(comm, Array(1f)))
        aborter.join()
        assert((System.nanoTime() - t0) / 1e9 < 3)
        e.getMessage
      } else {
        // Stays connected (a closed socket would end rank 0's call too) and never calls.
        Thread.sleep(2000)
        "quiet"
      }
    }
    val message = results.head.fold(throw _, identity)
    assert(message.contains("stopped by the test"), message)
  }

  test("bad arguments: an unknown backend, rank 0's rendezvous for tcp, a freed listener") {
    assert(NativeComm.rootRendezvous("tcp").isEmpty)
    val e = intercept[CortadoConfigException](NativeComm.rootRendezvous("smoke-signals"))
    assert(e.getMessage.startsWith("unknown communicator backend 'smoke-signals'"), e.getMessage)
    val listener = NativeComm.listen("127.0.0.1")
    assert(NativeComm.port(listener) > 0)
    NativeComm.closeListener(listener)
    val one = NativeComm.connect(0L, "tcp", 0, 1, Array("127.0.0.1:1"), "t", 0,
      Array.emptyByteArray, -1, 1, 1, 0, 0, "auto", 32, true)
    try {
      val data = Array(2f, 3f)
      NativeComm.allReduce(one, data)
      assert(data.toSeq === Seq(2f, 3f))
    } finally NativeComm.dispose(one)
  }
}
