// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.nio.file.{Files, Path}
import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._
import scala.collection.mutable.ArrayBuffer

import org.apache.spark.scheduler.{SparkListener, SparkListenerJobStart}
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.types._
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir
import io.cortado.spark.CortadoSuite.{separable, write}

object WorkersSuite {

  /** TinyNet with TRAIN batch `batch`. */
  def tinyNet(batch: Int): String = CortadoSuite.tinyNet(batch, 0.1)

  /** Displays every iteration, so that every loss reaches the listener. */
  val EverySolver: String =
    """net: "net.prototxt"
      |base_lr: 0.05
      |momentum: 0.9
      |weight_decay: 0.001
      |lr_policy: "fixed"
      |max_iter: 20
      |display: 1
      |random_seed: 1701
      |""".stripMargin

  /** Trains and returns the model path and every event the listener saw. */
  def trainRecording(spark: SparkSession, data: DataFrame, config: Config)
      : (String, Seq[TrainingEvent]) = {
    val events = new ConcurrentLinkedQueue[TrainingEvent]()
    val cortado = new Cortado(spark)
    cortado.addProgressListener(e => events.add(e))
    val model = cortado.train(data, config)
    (model, events.asScala.toSeq)
  }

  /** The losses of the iterations that trained (not the closing display). */
  def losses(events: Seq[TrainingEvent]): Seq[(Int, Float)] =
    events.collect { case i: IterationEvent if !i.closing => i.iteration -> i.loss }

  /** The executor JVMs' process ids, as their tasks see them. */
  def executorPids(spark: SparkSession): Set[Long] =
    spark.sparkContext.parallelize(0 until 8, 8).map { _ =>
      Thread.sleep(200)
      ProcessHandle.current().pid()
    }.collect().toSet

  /**
   * EverySolver for `maxIter` iterations, displaying every 1000 and snapshotting every 2000
   * under `dir`/snap/tiny: long enough to kill an executor in the middle.
   */
  def snapshottingSolver(dir: Path, maxIter: Int): String =
    write(dir, "solver.prototxt", EverySolver.replace("max_iter: 20", s"max_iter: $maxIter")
      .replace("display: 1", "display: 1000") + "snapshot: 2000\n" +
      s"""snapshot_prefix: "${dir.resolve("snap/tiny")}"\n""")

  /** `rows` samples of `separable` in `partitions` partitions, in order. */
  def partitioned(spark: SparkSession, rows: Seq[Row], partitions: Int): DataFrame = {
    val schema = StructType(Seq(StructField("id", LongType), StructField("features",
      ArrayType(FloatType, containsNull = false)), StructField("label", IntegerType)))
    spark.createDataFrame(spark.sparkContext.parallelize(rows, partitions), schema)
  }
}

/**
 * Training on several workers in one JVM (local[2]: Spark's local mode runs the barrier stage's
 * tasks as threads, each worker with its own sockets): equivalence with one worker of the
 * summed batch, and the driver's checks.
 */
class WorkersSuite extends AnyFunSuite with PerTest {
  import WorkersSuite._

  private def files(dir: Path, batch: Int, solver: String = EverySolver): Config = {
    write(dir, "net.prototxt", tinyNet(batch))
    Config(write(dir, "solver.prototxt", solver), model = dir.resolve("m.caffemodel").toUri
      .toString, snapshotInterval = 0)
  }

  test("2 workers of batch 4 train as 1 worker of batch 8 on the same rows") {
    val samples = separable(ss, 128, 5).collect().toSeq
    val (first, second) = samples.splitAt(64)
    // One worker of batch 8 sees, per iteration, 4 rows of each half, as the two workers do.
    val interleaved = first.grouped(4).zip(second.grouped(4)).flatMap { case (a, b) => a ++ b }
      .toSeq
    val single = withTempDir("cortado-one") { dir =>
      losses(trainRecording(ss, partitioned(ss, interleaved, 1), files(dir, 8))._2)
    }
    val (two, events) = withTempDir("cortado-two") { dir =>
      val config = files(dir, 4).copy(clusterSize = 2)
      val (model, events) = trainRecording(ss, partitioned(ss, first ++ second, 2), config)
      assert(Files.size(java.nio.file.Paths.get(new java.net.URI(model))) > 0)
      (losses(events), events)
    }
    // And as 1 worker of batch 4 with iter_size 2 (how keepGlobalBatch makes up for a lost
    // worker), its images per second counting both passes.
    val (accumulated, accumulatedEvents) = withTempDir("cortado-iter-size") { dir =>
      val (_, events) = trainRecording(ss, partitioned(ss, interleaved, 1),
        files(dir, 4).copy(solverOverrides = "iter_size: 2"))
      (losses(events), events)
    }
    assert(single.map(_._1) === (0 until 20))
    assert(two.map(_._1) === single.map(_._1))
    assert(accumulated.map(_._1) === single.map(_._1))
    single.zip(two).zip(accumulated).foreach { case (((iter, a), (_, b)), (_, c)) =>
      assert(math.abs(a - b) <= 1e-5 * math.abs(a), s"iteration $iter: $a against $b")
      assert(math.abs(a - c) <= 1e-5 * math.abs(a), s"iteration $iter: $a against $c")
    }
    accumulatedEvents.collect { case i: IterationEvent if i.iterations > 0 => i }.foreach(i =>
      assert(math.abs(i.imagesPerSecond - 8 * i.iterationsPerSecond) <
        1e-6 * i.imagesPerSecond))
    assert(single.last._2 < single.head._2 / 2, single)
    val joined = events.collect { case LogEvent(t) if t.contains("workers joined") => t }
    assert(joined.size === 1, events)
    assert(joined.head.startsWith("2 workers joined through tcp: worker 0 at "), joined.head)
    assert(joined.head.endsWith("; 128 training rows, 64 to 64 per worker"), joined.head)
    // Beside it, what the backend says about its connections.
    val connection = events.collect { case LogEvent(t) if t.startsWith("Connection: ") => t }
    assert(connection === Seq("Connection: tcp: rank 0 of 2; allreduce: auto (a step costs 32 " +
      "KB)"), events)
    // Images per second count every worker's batch: 2 x 4 per iteration.
    val speeds = events.collect { case i: IterationEvent if i.iterations > 0 => i }
    assert(speeds.nonEmpty)
    speeds.foreach(i => assert(math.abs(i.imagesPerSecond - 8 * i.iterationsPerSecond) <
      1e-6 * i.imagesPerSecond))
  }

  test("2 workers resumed from a snapshot go on as the uninterrupted run (momentum included)") {
    // Each worker's partition is one batch, so every iteration reads the same rows wherever
    // the run started: a resumed run must repeat the uninterrupted one's losses.
    val rows = separable(ss, 8, 9).collect().toSeq
    withTempDir("cortado-resume") { dir =>
      val solver = write(dir, "solver.prototxt", EverySolver + "snapshot: 10\n" +
        s"""snapshot_prefix: "${dir.resolve("snap/tiny")}"\n""")
      write(dir, "net.prototxt", tinyNet(4))
      val config = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 2)
      val straight = losses(trainRecording(ss, partitioned(ss, rows, 2), config)._2)
      val resumed = losses(trainRecording(ss, partitioned(ss, rows, 2), config.copy(
        weights = dir.resolve("snap/tiny_iter_10.caffemodel").toUri.toString,
        snapshot = dir.resolve("snap/tiny_iter_10.solverstate").toUri.toString,
        snapshotPrefix = dir.resolve("again/tiny").toUri.toString))._2)
      assert(straight.map(_._1) === (0 until 20))
      assert(resumed.map(_._1) === (10 until 20))
      resumed.zip(straight.drop(10)).foreach { case ((i, a), (_, b)) =>
        assert(math.abs(a - b) <= 1e-5 * math.abs(b), s"iteration $i: $a resumed, $b straight")
      }
    }
  }

  test("2 workers with their gradients in bfloat16 train, and say what the gradients travel as") {
    val samples = separable(ss, 128, 5).collect().toSeq
    withTempDir("cortado-bf16") { dir =>
      val config = files(dir, 4).copy(clusterSize = 2, exchangePrecision = "bfloat16")
      val (_, events) = trainRecording(ss, partitioned(ss, samples, 2), config)
      val wire = events.collect { case LogEvent(t) if t.startsWith("Gradients travel") => t }
      assert(wire === Seq("Gradients travel between the workers as bfloat16"), events)
      val trained = losses(events)
      assert(trained.size === 20 && trained.last._2 < trained.head._2 / 2, trained)
    }
  }

  test("2 workers with allreduce = \"doubling\" sum by recursive doubling, as the log says") {
    val samples = separable(ss, 128, 5).collect().toSeq
    withTempDir("cortado-doubling") { dir =>
      val config = files(dir, 4).copy(clusterSize = 2, allreduce = "doubling", latencyKb = 3,
        hierarchical = false)
      val (_, events) = trainRecording(ss, partitioned(ss, samples, 2), config)
      // Worker 0's communicator, built from the plan, names the algorithm its AllReduce runs
      // (with two ranks, doubling is one swap of the whole buffer, for every allreduce).
      val connection = events.collect { case LogEvent(t) if t.startsWith("Connection: ") => t }
      assert(connection === Seq("Connection: tcp: rank 0 of 2; allreduce: doubling"), events)
      val trained = losses(events)
      assert(trained.size === 20 && trained.last._2 < trained.head._2 / 2, trained)
    }
    // A bad value fails in the driver, before any job, naming the field and the values.
    withTempDir("cortado-bad-allreduce") { dir =>
      val e = intercept[CortadoConfigException](new Cortado(ss).train(
        partitioned(ss, samples, 2), files(dir, 4).copy(clusterSize = 2, allreduce = "tree")))
      assert(e.getMessage === "Config.allreduce (-allreduce) must be auto, ring, doubling or " +
        "halving, not 'tree'")
      val latency = intercept[CortadoConfigException](new Cortado(ss).train(
        partitioned(ss, samples, 2), files(dir, 4).copy(clusterSize = 2, latencyKb = 0)))
      assert(latency.getMessage === "Config.latencyKb (-latencyKb) must be a positive number " +
        "of KB, not 0")
    }
  }

  test("2 CPU replicas of one worker (-devices 2) train as one replica of the summed batch") {
    val samples = separable(ss, 64, 9).collect().toSeq
    val single = withTempDir("cortado-one") { dir =>
      losses(trainRecording(ss, partitioned(ss, samples, 1), files(dir, 8))._2)
    }
    val two = withTempDir("cortado-replicas") { dir =>
      losses(trainRecording(ss, partitioned(ss, samples, 1), files(dir, 4).copy(devices = 2))._2)
    }
    assert(two.map(_._1) === single.map(_._1))
    single.zip(two).foreach { case ((iter, a), (_, b)) =>
      assert(math.abs(a - b) <= 1e-5 * math.abs(a), s"iteration $iter: $a against $b")
    }
  }

  test("a worker with fewer rows cycles them; a union of two data sets is repartitioned") {
    val samples = separable(ss, 64, 3).collect().toSeq
    val schema = separable(ss, 1, 3).schema
    // Partition 0 keeps 8 rows, partition 1 all 32 of its own: a narrow step, still 2.
    val uneven = ss.createDataFrame(ss.sparkContext.parallelize(samples, 2)
      .mapPartitionsWithIndex((i, rows) => if (i == 0) rows.take(8) else rows), schema)
    withTempDir("cortado-uneven") { dir =>
      val config = files(dir, 4).copy(clusterSize = 2)
      val (_, events) = trainRecording(ss, uneven, config)
      assert(losses(events).map(_._1) === (0 until 20))
      val joined = events.collect { case LogEvent(t) if t.contains("joined") => t }
      assert(joined.head.endsWith("; 40 training rows, 8 to 32 per worker"), joined)
      // Two partitions, but from two one-partition parents: Spark would refuse the barrier
      // stage as it is.
      val union = partitioned(ss, samples.take(10), 1).union(partitioned(ss, samples.drop(10), 1))
      assert(union.rdd.getNumPartitions === 2)
      assert(!TaskData.fitsBarrierStage(union.rdd, 2) && TaskData.fitsBarrierStage(uneven.rdd, 2))
      val (_, unionEvents) = trainRecording(ss, union, config)
      assert(losses(unionEvents).map(_._1) === (0 until 20))
    }
  }

  test("trainWithValidation with 2 workers tests on worker 0 on Caffe's schedule") {
    withTempDir("cortado-validation") { dir =>
      write(dir, "net.prototxt", CortadoSuite.TinyNet)
      val solver = write(dir, "solver.prototxt", CortadoSuite.TinySolver)
      val config = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 2)
      // Three partitions: repartitioned into two.
      val frame = new Cortado(ss).trainWithValidation(separable(ss, 200, 7).repartition(3),
        separable(ss, 40, 11), config).collect()
      assert(frame.map(_.getInt(0)).toSeq === Seq(0, 20, 40, 60, 80, 100))
      assert(frame.last.getDouble(1) >= 0.95, frame.toSeq)
    }
  }

  test("more workers than the cluster's task slots fail within the start timeout, naming both") {
    withTempDir("cortado-slots") { dir =>
      val config = files(dir, 4).copy(clusterSize = 3, startTimeoutSeconds = 2)
      val t0 = System.nanoTime()
      val e = intercept[CortadoConfigException](new Cortado(ss).train(separable(ss, 40, 1),
        config))
      val seconds = (System.nanoTime() - t0) / 1e9
      assert(e.getMessage.startsWith("training with 3 workers needs 3 task slots at once (one " +
        "barrier stage), but after 2 s the cluster (local[2]) offers 2"), e.getMessage)
      assert(seconds >= 2 && seconds < 20, s"$seconds s")
    }
  }

  test("with several workers a net that does not parse fails in the driver before any job") {
    withTempDir("cortado-bad") { dir =>
      val config = files(dir, 4).copy(clusterSize = 2)
      write(dir, "net.prototxt", "layer { name: \"ip\" type: \"InnerProduct\"\n  bogus: 1 }\n")
      val jobs = ArrayBuffer.empty[Int]
      ss.sparkContext.addSparkListener(new SparkListener {
        override def onJobStart(job: SparkListenerJobStart): Unit = jobs.synchronized {
          jobs += job.jobId
        }
      })
      val df = separable(ss, 20, 1)
      val e = intercept[CortadoConfigException](new Cortado(ss).train(df, config))
      assert(e.getMessage.startsWith(s"${dir.resolve("net.prototxt")}:2:"), e.getMessage)
      assert(jobs.synchronized(jobs.isEmpty), jobs)
    }
  }

  test("a backend this build lacks and bad connection settings are refused in the driver") {
    withTempDir("cortado-backend") { dir =>
      val config = files(dir, 4).copy(clusterSize = 2)
      val known = io.cortado.jni.NativeComm.backends().toSeq
      assert(known.contains("tcp"), known)
      val e = intercept[CortadoConfigException] {
        new Cortado(ss).train(separable(ss, 20, 1), config.copy(backend = "carrier-pigeon"))
      }
      assert(e.getMessage === "the 'carrier-pigeon' backend is not in this build of Cortado " +
        s"(it has: ${known.mkString(", ")})")
      if (known.contains("mpi")) {
        val m = intercept[CortadoConfigException] {
          new Cortado(ss).train(separable(ss, 20, 1), config.copy(backend = "mpi"))
        }
        assert(m.getMessage.startsWith("the mpi backend takes one worker per process, and " +
          "local[2] runs every task in one JVM"), m.getMessage)
      }
      val f = intercept[CortadoConfigException] {
        new Cortado(ss).train(separable(ss, 20, 1),
          config.copy(connection = "infiniband", connectionFallback = "wifi"))
      }
      assert(f.getMessage === "Config.connectionFallback must be ethernet or empty, not 'wifi'")
      val p = intercept[CortadoConfigException] {
        new Cortado(ss).train(separable(ss, 20, 1), config.copy(exchangePrecision = "fp8"))
      }
      assert(p.getMessage ===
        "Config.exchangePrecision must be auto, float32, bfloat16 or float16, not 'fp8'")
      if (!known.contains("ucx")) {
        val u = intercept[CortadoConfigException] {
          new Cortado(ss).train(separable(ss, 20, 1), config.copy(connection = "infiniband"))
        }
        assert(u.getMessage.startsWith("-connection infiniband runs on the 'ucx' backend, which " +
          s"is not in this build of Cortado (it has: ${known.mkString(", ")}): use -connection " +
          "ethernet"), u.getMessage)
      }
    }
  }

  test("-connection infiniband selects ucx and asks for RDMA; an explicit backend overrides") {
    val c = Config("solver.prototxt")
    assert(Workers.backendOf(c) === "tcp" && !Workers.requiresRdma(c))
    assert(Workers.backendOf(c.copy(connection = "ethernet")) === "tcp")
    assert(Workers.backendOf(c.copy(connection = "InfiniBand")) === "ucx")
    assert(Workers.requiresRdma(c.copy(connection = "infiniband")))
    // -comm (Config.backend) is taken as it is: no RDMA check.
    val mpi = c.copy(connection = "infiniband", backend = "mpi")
    assert(Workers.backendOf(mpi) === "mpi" && !Workers.requiresRdma(mpi))
    val ucx = c.copy(backend = "ucx")
    assert(Workers.backendOf(ucx) === "ucx" && !Workers.requiresRdma(ucx))
    val e = intercept[CortadoConfigException](Workers.backendOf(c.copy(connection = "wifi")))
    assert(e.getMessage === "Config.connection must be ethernet or infiniband, not 'wifi'")
    // CaffeOnSpark's flags reach the Config.
    val o = io.cortado.cli.Options.parse(Seq("-train", "-conf", "s", "-model", "m",
      "-connection", "infiniband", "-connectionFallback", "ethernet")).toOption.get
    val fromFlags = Config.fromOptions(o)
    assert(fromFlags.connection === "infiniband" && fromFlags.connectionFallback === "ethernet")
    assert(Workers.backendOf(fromFlags) === "ucx" && Workers.requiresRdma(fromFlags))
  }

  test("two workers on one GPU of a host fail alike on every worker, naming both") {
    val plan = WorkerPlan(3, "tcp", "t", 1, 1, 1)
    def peer(rank: Int, host: String, gpus: Seq[Int]) =
      Rendezvous.Peer(rank, host, 7000 + rank, s"e$rank", gpus, 10, Array.emptyByteArray)
    Rendezvous.check(plan, Seq(peer(0, "a", Seq(0)), peer(1, "b", Seq(0)), peer(2, "a", Seq(1))))
    val e = intercept[CortadoConfigException] {
      Rendezvous.check(plan, Seq(peer(0, "a", Seq(0, 1)), peer(1, "b", Seq(0)),
        peer(2, "a", Seq(1))))
    }
    assert(e.getMessage.startsWith("workers 0 and 2 both train on GPU 1 of host a"), e.getMessage)
    val mpi = intercept[CortadoConfigException] {
      Rendezvous.check(plan.copy(backend = "mpi"), Seq(peer(0, "a", Nil), peer(1, "a", Nil),
        peer(2, "a", Nil)).map(p => p.copy(executor = if (p.rank == 0) "x" else "y")))
    }
    assert(mpi.getMessage.startsWith("the mpi backend takes one worker per process, but " +
      "workers 1 and 2 run in one executor"), mpi.getMessage)
    val peers = Seq(peer(0, "h", Seq(3)), peer(1, "h", Nil).copy(rendezvous = Array[Byte](0, 9)),
      peer(2, "h", Nil).copy(rdma = Seq("mlx5_0:1 InfiniBand 100 Gb/s", "odd\t,line\n")))
    assert(peers.map(p => Rendezvous.Peer.decode(p.encode)).map(p => (p.rank, p.address, p.gpus,
      p.rendezvous.toSeq, p.rdma)) ===
      peers.map(p => (p.rank, p.address, p.gpus, p.rendezvous.toSeq, p.rdma)))
    Seq("", "0\th", peers(2).encode + "\tmore", peers(2).encode.replace("\t7002\t", "\tport\t"),
      peers(2).encode + "!").foreach { text =>
      val m = intercept[IllegalStateException](Rendezvous.Peer.decode(text))
      assert(m.getMessage.startsWith("a worker sent a malformed rendezvous record"), text)
    }
  }

  test("-connection infiniband: a host without an RDMA port fails every worker, unless allowed") {
    val plan = WorkerPlan(3, "ucx", "t", 1, 1, 1, requireRdma = true)
    val port = Seq("mlx5_0:1 InfiniBand 100 Gb/s")
    def peer(rank: Int, host: String, rdma: Seq[String]) =
      Rendezvous.Peer(rank, host, 7000 + rank, s"e$rank", Nil, 10, Array.emptyByteArray, rdma)
    val everywhere = Seq(peer(0, "a", port), peer(1, "b", port), peer(2, "a", port))
    Rendezvous.check(plan, everywhere)
    assert(Rendezvous.rdmaWarning(plan.copy(rdmaFallback = true), everywhere) === None)
    val oneHost = Seq(peer(0, "a", port), peer(1, "b", Nil), peer(2, "b", Nil))
    val e = intercept[CortadoConfigException](Rendezvous.check(plan, oneHost))
    assert(e.getMessage === "-connection infiniband needs an RDMA device (InfiniBand or RoCE) on " +
      "every host, but host b (workers 1, 2) has none (libibverbs lists no active port): use " +
      "-connection ethernet, or add -connectionFallback ethernet to run over TCP")
    val twoHosts = intercept[CortadoConfigException] {
      Rendezvous.check(plan, Seq(peer(0, "c", Nil), peer(1, "b", port), peer(2, "a", Nil)))
    }
    assert(twoHosts.getMessage.contains("but hosts c (worker 0), a (worker 2) have none"),
      twoHosts.getMessage)
    // With the fallback: no failure, and worker 0 warns.
    val fallback = plan.copy(rdmaFallback = true)
    Rendezvous.check(fallback, oneHost)
    assert(Rendezvous.rdmaWarning(fallback, oneHost) === Some("Warning: -connection infiniband, " +
      "but host b (workers 1, 2) has no RDMA device (libibverbs lists no active port): as " +
      "-connectionFallback ethernet allows, UCX carries the gradients to and from them over " +
      "TCP (or shared memory within a host) instead"))
    // An explicit backend (-comm) asks for nothing: the workers send no ports, nothing is checked.
    val explicit = plan.copy(requireRdma = false)
    val none = everywhere.map(_.copy(rdma = Nil))
    Rendezvous.check(explicit, none)
    assert(Rendezvous.rdmaWarning(explicit.copy(rdmaFallback = true), none) === None)
  }
}

/**
 * Two workers in two executor JVMs (local-cluster[2,1,1024]): the barrier stage puts one worker
 * in each, they meet over loopback sockets, and the job trains as one.
 */
class ClusterWorkersSuite extends AnyFunSuite with LocalCluster {
  import WorkersSuite._

  override protected val numWorkers: Int = 2

  test("2 workers in 2 executor JVMs train one model, reporting live to the driver") {
    withTempDir("cortado-cluster") { dir =>
      write(dir, "net.prototxt", CortadoSuite.TinyNet)
      val solver = write(dir, "solver.prototxt", CortadoSuite.TinySolver)
      val config = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 2)
      val events = new ConcurrentLinkedQueue[(TrainingEvent, Boolean)]()
      val cortado = new Cortado(ss)
      cortado.addProgressListener { e =>
        events.add(e -> ss.sparkContext.statusTracker.getActiveJobIds().nonEmpty)
      }
      cortado.train(separable(ss, 200, 7), config)
      val joined = events.asScala.collect { case (LogEvent(t), _) if t.contains("joined") => t }
      assert(joined.size === 1, events)
      val executors = "on executor (\\S+)".r.findAllMatchIn(joined.head).map(_.group(1)).toSeq
      assert(executors.size === 2 && executors.distinct.size === 2, joined.head)
      val displays = events.asScala.collect { case (i: IterationEvent, live) => (i, live) }
      assert(displays.map(_._1.iteration) === Seq(0, 25, 50, 75, 100))
      assert(displays.forall(_._2), "events arrived only after the job")
      val metrics = cortado.test(separable(ss, 100, 11), config)
      assert(metrics("accuracy") >= 0.95, metrics)
      // Both executor JVMs load the libraries from one extracted copy, not one copy each.
      val loaded = ss.sparkContext.parallelize(0 until 8, 8).map { _ =>
        Thread.sleep(100)
        (ProcessHandle.current().pid(), io.cortado.NativeLoader.loadedFrom())
      }.collect().toSet
      assert(loaded.map(_._1).size === 2 && loaded.map(_._2).size === 1, loaded)
    }
  }
}

/**
 * Spark's GPU scheduling on a local cluster whose two workers discover the same GPU address "0"
 * (one discovery script): each task is assigned GPU 0, so the two workers of the job, on one
 * host, would share it, and every worker fails at once naming both.
 */
class GpuResourcesSuite extends AnyFunSuite with LocalCluster {

  override protected val numWorkers: Int = 2

  private lazy val script: Path = {
    val dir = Files.createTempDirectory("cortado-gpus")
    val file = dir.resolve("gpus.sh")
    Files.write(file, "#!/bin/sh\necho '{\"name\": \"gpu\", \"addresses\": [\"0\"]}'\n"
      .getBytes("UTF-8"))
    file.toFile.setExecutable(true)
    file
  }

  override protected def sparkSessionBuilder: SparkSession.Builder =
    super.sparkSessionBuilder
      .config("spark.worker.resource.gpu.amount", "1")
      .config("spark.worker.resource.gpu.discoveryScript", script.toString)
      .config("spark.executor.resource.gpu.amount", "1")
      .config("spark.task.resource.gpu.amount", "1")

  test("workers train on the GPUs Spark assigned them; two on one GPU of a host fail at once") {
    withTempDir("cortado-gpus") { dir =>
      write(dir, "net.prototxt", CortadoSuite.TinyNet)
      val solver = write(dir, "solver.prototxt", CortadoSuite.TinySolver)
      val config = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 2)
      val t0 = System.nanoTime()
      val e = intercept[Exception](new Cortado(ss).train(separable(ss, 40, 7), config))
      assert((System.nanoTime() - t0) / 1e9 < 60)
      // The executors' host is 127.0.0.1 (SPARK_LOCAL_IP), or its name where /etc/hosts gives
      // one.
      assert(e.getMessage.contains("workers 0 and 1 both train on GPU 0 of host 127.0.0.1") ||
        e.getMessage.contains("workers 0 and 1 both train on GPU 0 of host localhost"),
        e.getMessage)
    }
  }
}

/** A session with dynamic allocation on: several workers are refused in the driver. */
class DynamicAllocationSuite extends AnyFunSuite with PerTest {

  override protected def sparkSessionBuilder: SparkSession.Builder =
    super.sparkSessionBuilder.config("spark.dynamicAllocation.enabled", "true")

  test("several workers with dynamic allocation on fail in the driver, saying what to change") {
    withTempDir("cortado-dynamic") { dir =>
      write(dir, "net.prototxt", CortadoSuite.TinyNet)
      val solver = write(dir, "solver.prototxt", CortadoSuite.TinySolver)
      val config = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 2)
      val e = intercept[CortadoConfigException](new Cortado(ss).train(separable(ss, 40, 7), config))
      assert(e.getMessage.startsWith("training with 2 workers runs as one gang-scheduled " +
        "(barrier) Spark stage, which Spark cannot run while executors come and go: set " +
        "spark.dynamicAllocation.enabled=false"), e.getMessage)
      // One worker needs no barrier stage.
      new Cortado(ss).train(separable(ss, 40, 7), config.copy(clusterSize = 1))
      assert(Files.size(dir.resolve("m.caffemodel")) > 0)
    }
  }
}

/**
 * The mpi backend (-comm mpi) between two executor JVMs that mpirun did not start:
 * they join through a real ompi-server that this suite starts, found through
 * OMPI_MCA_pmix_server_uri in the executors' environment. Cancelled when this build has no mpi
 * backend or ompi-server is not installed.
 */
class MpiWorkersSuite extends AnyFunSuite with LocalCluster {
  import WorkersSuite._

  override protected val numWorkers: Int = 2

  private var server: Process = _
  private var uriFile: Path = _

  override protected def sparkSessionBuilder: SparkSession.Builder = {
    val builder = super.sparkSessionBuilder
      .config("spark.executorEnv.OMPI_MCA_pmix_server_uri", s"file:$uriFile")
      .config("spark.executorEnv.OMPI_MCA_btl", "self,tcp")
    // Open MPI refuses root unless told; CI runs as root.
    if (System.getProperty("user.name") == "root") {
      builder.config("spark.executorEnv.OMPI_ALLOW_RUN_AS_ROOT", "1")
        .config("spark.executorEnv.OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    } else builder
  }

  private def startServer(): Unit = {
    val onPath = sys.env.getOrElse("PATH", "").split(":").exists(d =>
      Files.isExecutable(java.nio.file.Paths.get(d, "ompi-server")))
    assume(onPath, "ompi-server is not installed (Debian: openmpi-bin)")
    assume(io.cortado.jni.NativeComm.backends().contains("mpi"),
      "this build has no mpi backend (WITH_MPI=OFF)")
    uriFile = Files.createTempDirectory("cortado-ompi").resolve("uri")
    server = new ProcessBuilder("ompi-server", "--no-daemonize", "--report-uri",
      uriFile.toString).redirectErrorStream(true)
      .redirectOutput(uriFile.resolveSibling("server.log").toFile).start()
    val deadline = System.nanoTime() + 20e9.toLong
    while (!(Files.exists(uriFile) && Files.size(uriFile) > 0) && System.nanoTime() < deadline) {
      Thread.sleep(50)
    }
    assert(Files.exists(uriFile) && Files.size(uriFile) > 0, "ompi-server wrote no URI")
  }

  override def afterEach(): Unit =
    try super.afterEach()
    finally if (server != null) {
      server.destroy()
      server.waitFor()
      server = null
    }

  test("-comm mpi trains 2 workers through mpi joined by ompi-server") {
    startServer()
    val samples = separable(ss, 128, 5).collect().toSeq
    val (first, second) = samples.splitAt(64)
    withTempDir("cortado-mpi") { dir =>
      write(dir, "net.prototxt", tinyNet(4))
      val config = Config(write(dir, "solver.prototxt", EverySolver),
        model = dir.resolve("m.caffemodel").toUri.toString, snapshotInterval = 0,
        clusterSize = 2, backend = "mpi")
      val (_, events) = trainRecording(ss, partitioned(ss, first ++ second, 2), config)
      val joined = events.collect { case LogEvent(t) if t.contains("joined") => t }
      assert(joined.size === 1 && joined.head.startsWith("2 workers joined through mpi"), events)
      assert(events.exists {
        case LogEvent(t) => t.startsWith("Connection: mpi: rank 0 of 2")
        case _ => false
      }, events)
      val trained = losses(events)
      assert(trained.map(_._1) === (0 until 20))
      assert(trained.last._2 < trained.head._2 / 2, trained)
    }
  }
}

/**
 * An executor JVM killed with SIGKILL in the middle of training on two workers
 * (local-cluster[2,1,1024]; Spark itself retries nothing here, see PerTest): the driver starts a
 * second attempt, which resumes from the newest snapshot once the cluster has replaced the
 * executor, and the run ends by itself.
 */
class ExecutorLossSuite extends AnyFunSuite with LocalCluster {
  import WorkersSuite._

  override protected val numWorkers: Int = 2

  test("a killed executor: the job resumes from the newest snapshot and finishes by itself") {
    withTempDir("cortado-loss") { dir =>
      write(dir, "net.prototxt", tinyNet(4))
      val solver = snapshottingSolver(dir, 40000)
      val config = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 2, startTimeoutSeconds = 60, commTimeoutSeconds = 20)
      val events = new ConcurrentLinkedQueue[TrainingEvent]()
      @volatile var killedAt = -1
      val pids = executorPids(ss)
      assert(pids.size === 2 && !pids.contains(ProcessHandle.current().pid()), pids)
      val cortado = new Cortado(ss)
      cortado.addProgressListener { e =>
        events.add(e)
        e match {
          case i: IterationEvent if i.iteration >= 10000 && killedAt < 0 =>
            killedAt = i.iteration
            ProcessHandle.of(pids.head).ifPresent(p => p.destroyForcibly())
          case _ =>
        }
      }
      val t0 = System.nanoTime()
      cortado.train(separable(ss, 256, 5).repartition(2), config)
      val seconds = (System.nanoTime() - t0) / 1e9
      assert(killedAt >= 10000)
      assert(Files.size(dir.resolve("m.caffemodel")) > 0)
      val texts = events.asScala.collect { case LogEvent(t) => t }.toSeq
      val retry = texts.filter(_.startsWith("Training attempt 1 of 3 failed"))
      assert(retry.size === 1, texts)
      val resumed = "resumes from \\S+_iter_(\\d+)\\.solverstate \\(iteration (\\d+)\\)".r
        .findFirstMatchIn(retry.head).map(_.group(2).toInt)
      assert(resumed.isDefined, retry.head)
      // At most the snapshot interval is trained again.
      assert(resumed.get >= killedAt - 2000 && resumed.get < 40000, (resumed, killedAt))
      val displays = events.asScala.collect { case i: IterationEvent => i.iteration }.toSeq
      assert(displays.last === 40000, displays)
      assert(texts.count(_ == "Optimization Done.") === 1, texts)
      assert(seconds < 120, s"$seconds s")

      // Nothing stays behind: once the session stops, every executor JVM of the run (the killed
      // one, the survivor and the replacement) has exited, native threads and all.
      val all = pids ++ executorPids(ss)
      ss.stop()
      def alive: Set[Long] = all.filter(p => ProcessHandle.of(p).filter(_.isAlive).isPresent)
      val deadline = System.nanoTime() + 30L * 1000 * 1000 * 1000
      while (alive.nonEmpty && System.nanoTime() < deadline) Thread.sleep(200)
      assert(alive.isEmpty, s"executor JVMs still running 30 s after the session stopped")
    }
  }
}

/**
 * Spark's own retry of a training task (spark.task.maxFailures 2, one worker) after its executor
 * is killed: the retried task resumes from the newest snapshot, not from where the job started.
 */
class TaskRetrySuite extends AnyFunSuite with LocalCluster {
  import WorkersSuite._

  override protected val numWorkers: Int = 2

  override protected def sparkSessionBuilder: SparkSession.Builder =
    super.sparkSessionBuilder.config("spark.task.maxFailures", "2")

  test("a training task that Spark runs again resumes from the newest snapshot") {
    withTempDir("cortado-retry") { dir =>
      write(dir, "net.prototxt", tinyNet(8))
      val solver = snapshottingSolver(dir, 60000)
      val config = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 1)
      val pids = executorPids(ss)
      assert(pids.size === 2, pids)
      val events = new ConcurrentLinkedQueue[TrainingEvent]()
      @volatile var killedAt = -1
      val cortado = new Cortado(ss)
      cortado.addProgressListener { e =>
        events.add(e)
        e match {
          case i: IterationEvent if i.iteration >= 10000 && killedAt < 0 =>
            killedAt = i.iteration
            // The task's executor is one of the two: both go.
            pids.foreach(p => ProcessHandle.of(p).ifPresent(h => h.destroyForcibly()))
          case _ =>
        }
      }
      // One partition without a shuffle: the retried task recomputes its rows rather than
      // fetching shuffle output from the executors that went.
      cortado.train(separable(ss, 256, 5).coalesce(1), config)
      assert(killedAt >= 10000)
      val texts = events.asScala.collect { case LogEvent(t) => t }.toSeq
      // Spark, not the driver's attempts, ran it again.
      assert(!texts.exists(_.startsWith("Training attempt")), texts)
      // Attempt 1, or 2 when Spark placed attempt 1 on the other executor before it saw that
      // one go too.
      val again = texts.filter(_.startsWith("Spark runs this training again (task attempt "))
      assert(again.nonEmpty && again.size <= 2, texts)
      val resumed = "\\(iteration (\\d+)\\)".r.findFirstMatchIn(again.last).get.group(1).toInt
      assert(resumed >= killedAt - 2000 && resumed < 60000, (resumed, killedAt))
      assert(events.asScala.collect { case i: IterationEvent => i.iteration }.last === 60000)
      assert(Files.size(dir.resolve("m.caffemodel")) > 0)
    }
  }
}

/**
 * The executor JVM of worker 0 killed with SIGKILL while it writes a snapshot: after the model
 * and its digests, before the state that commits the snapshot (held there by the test hook in
 * io.cortado.storage.Snapshots, switched on by system properties of the executors). The driver's
 * second attempt resumes from the snapshot before, never from the interrupted one, and the run
 * ends by itself with every file under a snapshot's name whole.
 */
class SnapshotWriteLossSuite extends AnyFunSuite with LocalCluster {
  import WorkersSuite._

  override protected val numWorkers: Int = 2

  /** Where the paused writer puts its process id (the test hook's marker). */
  private lazy val marker: Path = Files.createTempDirectory("cortado-pause").resolve("paused")

  override protected def sparkSessionBuilder: SparkSession.Builder =
    super.sparkSessionBuilder.config("spark.executor.extraJavaOptions",
      s"-Dcortado.test.snapshotPauseMarker=$marker -Dcortado.test.snapshotPauseIter=6000 " +
        "-Dcortado.test.snapshotPauseMs=60000")

  override def afterEach(): Unit =
    try super.afterEach()
    finally {
      Files.deleteIfExists(marker)
      Files.deleteIfExists(marker.getParent)
    }

  private def sha256(path: Path): String =
    java.security.MessageDigest.getInstance("SHA-256").digest(Files.readAllBytes(path))
      .map(b => f"${b & 0xff}%02x").mkString

  /** The snapshot files under `dir` by their final names (not temporary or checksum files). */
  private def snapshotNames(dir: Path): Set[String] =
    Files.list(dir).iterator().asScala.map(_.getFileName.toString).filterNot(_.startsWith("."))
      .toSet

  test("an executor killed while it writes a snapshot: the job resumes from the one before") {
    withTempDir("cortado-snapshot-loss") { dir =>
      write(dir, "net.prototxt", tinyNet(4))
      val solver = snapshottingSolver(dir, 12000)
      val config = Config(solver, model = dir.resolve("m.caffemodel").toUri.toString,
        clusterSize = 2, startTimeoutSeconds = 60, commTimeoutSeconds = 20)
      val snap = dir.resolve("snap")
      val pids = executorPids(ss)
      assert(pids.size === 2, pids)
      // Waits for the paused writer, notes what the directory holds, kills the writer's JVM and
      // checks what it left.
      @volatile var killed: Option[(Long, Set[String], Boolean)] = None
      val killer = new Thread(() => {
        val deadline = System.nanoTime() + 120e9.toLong
        while (!Files.exists(marker) && System.nanoTime() < deadline) Thread.sleep(10)
        if (Files.exists(marker)) {
          val pid = new String(Files.readAllBytes(marker), "UTF-8").trim.toLong
          val during = snapshotNames(snap)
          ProcessHandle.of(pid).ifPresent { p =>
            p.destroyForcibly()
            p.onExit().get()
          }
          // The model left behind is whole: it matches the digest written after it.
          val model = snap.resolve("tiny_iter_6000.caffemodel")
          val sums = new String(Files.readAllBytes(snap.resolve("tiny_iter_6000.sha256")),
            "UTF-8")
          val whole = sums.contains(s"${sha256(model)}  tiny_iter_6000.caffemodel")
          killed = Some((pid, during, whole))
        }
      }, "snapshot-writer-killer")
      killer.setDaemon(true)
      killer.start()
      val events = new ConcurrentLinkedQueue[TrainingEvent]()
      val cortado = new Cortado(ss)
      cortado.addProgressListener(e => events.add(e))
      val t0 = System.nanoTime()
      cortado.train(separable(ss, 256, 5).repartition(2), config)
      val seconds = (System.nanoTime() - t0) / 1e9
      killer.join(10000)
      assert(killed.isDefined, "the snapshot writer never paused at iteration 6000")
      val (pid, during, wholeModel) = killed.get
      assert(pids.contains(pid), (pid, pids))
      // Killed between the model (and digests) and the state of 6000.
      assert(during.contains("tiny_iter_4000.solverstate"), during)
      assert(during.contains("tiny_iter_6000.caffemodel") &&
        during.contains("tiny_iter_6000.sha256") && !during.contains("tiny_iter_6000.solverstate"),
        during)
      assert(wholeModel)
      val texts = events.asScala.collect { case LogEvent(t) => t }.toSeq
      val retry = texts.filter(_.startsWith("Training attempt 1 of 3 failed"))
      assert(retry.size === 1, texts)
      val resumed = "resumes from \\S+/tiny_iter_(\\d+)\\.solverstate \\(iteration (\\d+)\\)".r
        .findFirstMatchIn(retry.head).map(m => (m.group(1).toInt, m.group(2).toInt))
      assert(resumed === Some((4000, 4000)), retry.head)
      assert(!texts.exists(_.startsWith("Spark runs this training again")), texts)
      val displays = events.asScala.collect { case i: IterationEvent => i.iteration }.toSeq
      assert(displays.last === 12000, displays)
      assert(texts.count(_ == "Optimization Done.") === 1, texts)
      assert(Files.size(dir.resolve("m.caffemodel")) > 0)
      // Every snapshot is complete, its files matching their digests (6000 rewritten whole by
      // the second attempt), and nothing else carries a snapshot's name.
      val iterations = (2000 to 12000 by 2000)
      assert(snapshotNames(snap) === iterations.flatMap(i =>
        Seq("caffemodel", "solverstate", "sha256").map(e => s"tiny_iter_$i.$e")).toSet)
      val conf = new org.apache.hadoop.conf.Configuration()
      iterations.foreach { i =>
        io.cortado.storage.Snapshots.read(
          io.cortado.storage.Snapshots.files(snap.resolve("tiny").toUri.toString, i), conf)
      }
      assert(seconds < 150, s"$seconds s")
    }
  }
}
