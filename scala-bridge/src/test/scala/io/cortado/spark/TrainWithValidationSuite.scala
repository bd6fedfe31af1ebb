// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, DataInputStream, DataOutputStream}
import java.net.ServerSocket
import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._

import org.apache.spark.sql.SparkSession
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.TestDirs.withTempDir

object TrainWithValidationSuite {

  /**
   * Trains the tiny net of CortadoSuite with validation, recording each event with whether a
   * Spark job was active when it arrived; returns the validation frame's rows and the events.
   */
  def trainAndRecord(spark: SparkSession, solverText: String)
      : (Seq[org.apache.spark.sql.Row], Seq[(TrainingEvent, Boolean)]) =
    withTempDir("cortado-validation") { dir =>
      CortadoSuite.write(dir, "net.prototxt", CortadoSuite.TinyNet)
      val solver = CortadoSuite.write(dir, "solver.prototxt", solverText)
      val config = Config(solver, model = dir.resolve("tiny.caffemodel").toUri.toString)
      val events = new ConcurrentLinkedQueue[(TrainingEvent, Boolean)]()
      val cortado = new Cortado(spark)
      cortado.addProgressListener { e =>
        events.add(e -> spark.sparkContext.statusTracker.getActiveJobIds().nonEmpty)
      }
      val frame = cortado.trainWithValidation(CortadoSuite.separable(spark, 200, 7),
        CortadoSuite.separable(spark, 40, 11), config)
      require(frame.columns.toSeq == Seq("iteration", "accuracy", "loss"), frame.columns.toSeq)
      (frame.collect().toSeq, events.asScala.toSeq)
    }
}

class TrainWithValidationSuite extends AnyFunSuite with PerTest {
  import TrainWithValidationSuite._

  test("trainWithValidation tests at test_interval as Caffe does and returns the passes") {
    val (rows, events) = trainAndRecord(ss, CortadoSuite.TinySolver)
    // test_initialization (default true): iteration 0, then every 20 up to max_iter 100.
    assert(rows.map(_.getInt(0)) === Seq(0, 20, 40, 60, 80, 100))
    val accuracy = rows.map(_.getDouble(1))
    val loss = rows.map(_.getDouble(2))
    assert(accuracy.last >= 0.95, rows)
    assert(loss.last < loss.head / 2, rows)
    // The same passes reached the listener, while the job ran, in order with the iterations.
    val tests = events.collect { case (t: TestEvent, live) => (t, live) }
    assert(tests.map(_._1.iteration) === Seq(0, 20, 40, 60, 80, 100))
    assert(tests.forall(_._2), "a test pass arrived after the job had ended")
    assert(tests.map(_._1.outputs.map(_._2)) === rows.map(r => Seq(r.getDouble(1), r.getDouble(2))))
    // Caffe's displays: at 0, every 25 iterations, and the closing one at max_iter (which
    // counts no iterations of its own).
    val iterations = events.collect { case (i: IterationEvent, live) => (i, live) }
    assert(iterations.map(_._1.iteration) === Seq(0, 25, 50, 75, 100))
    assert(iterations.forall(_._2))
    iterations.map(_._1).init.foreach { i =>
      assert(i.learningRate === 0.1f)
      assert(!i.closing)
      assert(i.logLines.head.startsWith("Iteration " + i.iteration + " ("), i.logLines)
      assert(i.logLines.last === s"Iteration ${i.iteration}, lr = 0.1")
    }
    // The closing display is Caffe's one line: the loss of the final weights.
    val closing = iterations.last._1
    assert(closing.closing)
    assert(closing.logLines === Seq(s"Iteration 100, loss = ${
      CortadoOnSpark.caffeFormat(closing.loss.toDouble)}"))
    iterations.map(_._1).filter(i => i.iteration % 100 != 0).foreach { i =>
      assert(i.iterations === 25)
      assert(i.iterationsPerSecond > 0)
      assert(math.abs(i.imagesPerSecond - 8 * i.iterationsPerSecond) < 1e-6 * i.imagesPerSecond)
    }
    val ordered = events.map(_._1).collect {
      case i: IterationEvent => ("iter", i.iteration)
      case t: TestEvent => ("test", t.iteration)
    }
    assert(ordered.take(4) === Seq(("test", 0), ("iter", 0), ("test", 20), ("iter", 25)))
    val done = events.collect { case (LogEvent(text), _) => text }
    assert(done.last === "Optimization Done.")
    assert(done.exists(_.matches("Trained 100 iterations in .* ms/iter, .* images/s")), done)
  }

  test("the learning rate in the log follows the solver's policy") {
    val solver = CortadoSuite.TinySolver.replace("lr_policy: \"fixed\"",
      "lr_policy: \"step\" gamma: 0.5 stepsize: 50")
    val (_, events) = trainAndRecord(ss, solver)
    val rates = events.collect { case (i: IterationEvent, _) => i.iteration -> i.learningRate }
    // The rate of the displayed iteration's update, as Caffe logs it: 0.1 before 50, 0.05 from
    // 50; the closing display repeats the last update's.
    assert(rates.map(_._1) === Seq(0, 25, 50, 75, 100))
    rates.map(_._2).zip(Seq(0.1, 0.1, 0.05, 0.05, 0.05)).foreach { case (got, want) =>
      assert(math.abs(got - want) < 1e-7, rates)
    }
  }

  test("validation needs test_interval and a validation frame with the TEST feed's columns") {
    withTempDir("cortado-validation") { dir =>
      CortadoSuite.write(dir, "net.prototxt", CortadoSuite.TinyNet)
      val noInterval = CortadoSuite.write(dir, "solver.prototxt",
        CortadoSuite.TinySolver.replace("test_interval: 20", "test_interval: 0"))
      val cortado = new Cortado(ss)
      val data = CortadoSuite.separable(ss, 40, 7)
      val e1 = intercept[CortadoConfigException] {
        cortado.trainWithValidation(data, data, Config(noInterval, model = s"file:$dir/m"))
      }
      assert(e1.getMessage.contains("solver.prototxt: validation needs test_interval"),
        e1.getMessage)
      val solver = CortadoSuite.write(dir, "ok.prototxt", CortadoSuite.TinySolver)
      val e2 = intercept[CortadoConfigException] {
        cortado.trainWithValidation(data, data.drop("features"),
          Config(solver, model = s"file:$dir/m"))
      }
      assert(e2.getMessage.contains("features"), e2.getMessage)
      assert(e2.getMessage.contains("'data'"), e2.getMessage)
    }
  }

  test("progress events survive their encoding; a task that cannot reach the driver keeps them") {
    val events = Seq(IterationEvent(100, 0.25f, 0.01f, 80.5, 5152.0, 100),
      TestEvent(500, Seq("accuracy" -> 0.98, "loss" -> 0.0625)), LogEvent("Optimization Done."),
      IterationEvent(500, 0.125f, 0.01f, 0.0, 0.0, 0, closing = true))
    val bytes = new ByteArrayOutputStream()
    val out = new DataOutputStream(bytes)
    events.foreach(Progress.write(out, _))
    out.flush()
    val in = new DataInputStream(new ByteArrayInputStream(bytes.toByteArray))
    assert(Iterator.continually(Progress.read(in)).takeWhile(_.isDefined).flatten.toSeq ===
      events)
    assert(events(0).logLines === Seq(
      "Iteration 100 (80.50 iter/s, 1.242s/100 iters, 5152.0 images/s), loss = 0.25",
      "Iteration 100, lr = 0.01"))
    assert(events(1).logLines === Seq("Iteration 500, Testing net (#0)",
      "    Test net output #0: accuracy = 0.98", "    Test net output #1: loss = 0.0625"))
    assert(events(3).logLines === Seq("Iteration 500, loss = 0.125"))

    // A port nobody listens on: the client keeps every event for the task's result.
    val port = { val s = new ServerSocket(0); try s.getLocalPort finally s.close() }
    val client = new Progress.Client(Some(Progress.Address("127.0.0.1", port, "t")), 1000)
    events.foreach(client.send)
    client.close()
    assert(client.unsent === events)

    // A server delivers what a client with its token sends, and ignores a wrong token.
    val received = new ConcurrentLinkedQueue[TrainingEvent]()
    val server = new Progress.Server("127.0.0.1", "127.0.0.1", e => received.add(e))
    val stranger = new Progress.Client(Some(server.address.copy(token = "wrong")))
    stranger.send(LogEvent("not for you"))
    stranger.close()
    val good = new Progress.Client(Some(server.address))
    events.foreach(good.send)
    good.close()
    server.close()
    assert(good.unsent.isEmpty)
    assert(received.asScala.toSeq === events)
  }

  test("the progress channel: the token never crosses the wire; idle and surplus connections") {
    // What a client sends, seen by a stand-in server that hands it a nonce.
    val fake = new ServerSocket(0)
    val token = "the-job-secret"
    val seen = new java.util.concurrent.LinkedBlockingQueue[Array[Byte]]()
    val reader = new Thread(() => {
      val c = fake.accept()
      c.getOutputStream.write(Array.fill[Byte](16)(7))
      c.getOutputStream.flush()
      seen.put(c.getInputStream.readAllBytes())
      c.close()
    })
    reader.start()
    val client = new Progress.Client(Some(Progress.Address("127.0.0.1", fake.getLocalPort, token)))
    client.send(LogEvent("hello"))
    client.close()
    reader.join(10000)
    fake.close()
    val sent = seen.poll(10, java.util.concurrent.TimeUnit.SECONDS)
    val expected = {
      val m = javax.crypto.Mac.getInstance("HmacSHA256")
      m.init(new javax.crypto.spec.SecretKeySpec(token.getBytes("UTF-8"), "HmacSHA256"))
      m.doFinal(Array.fill[Byte](16)(7))
    }
    assert(sent.take(32).toSeq === expected.toSeq)
    assert(!new String(sent, "ISO-8859-1").contains(token))

    // Idle connections are dropped and do not hold up close(); beyond 64 open, closed at once.
    val received = new ConcurrentLinkedQueue[TrainingEvent]()
    val server = new Progress.Server("127.0.0.1", "127.0.0.1", e => received.add(e))
    val flood = (0 until 70).map(_ => new java.net.Socket("127.0.0.1", server.address.port))
    val idle =
      try {
        flood.foreach(_.setSoTimeout(10000))
        // The first 64 get a nonce; the others an immediate end of stream.
        val firstBytes = flood.map(_.getInputStream.read())
        assert(firstBytes.count(_ == -1) === 6, firstBytes)
        flood.drop(5).foreach(_.close())
        flood.take(5)
      } catch {
        case t: Throwable => flood.foreach(_.close()); throw t
      }
    try {
      // The closed ones free their places: the job's own connection gets in.
      Thread.sleep(500)
      val good = new Progress.Client(Some(server.address))
      good.send(LogEvent("from the job"))
      good.close()
      val t0 = System.nanoTime()
      server.close()
      assert((System.nanoTime() - t0) / 1e9 < 3, "idle connections held up close()")
      assert(good.unsent.isEmpty)
      assert(received.asScala.toSeq === Seq(LogEvent("from the job")))
    } finally idle.foreach(_.close())
  }

  test("cancelling the job stops the training task at once: the watchdog aborts the feed") {
    withTempDir("cortado-cancel") { dir =>
      CortadoSuite.write(dir, "net.prototxt", CortadoSuite.TinyNet)
      // Without the watchdog this task would train for a million iterations.
      val solver = CortadoSuite.write(dir, "solver.prototxt", CortadoSuite.TinySolver
        .replace("max_iter: 100", "max_iter: 1000000").replace("display: 25", "display: 10"))
      val cortado = new Cortado(ss)
      val lastEvent = new java.util.concurrent.atomic.AtomicLong(0)
      cortado.addProgressListener {
        case _: IterationEvent =>
          if (lastEvent.getAndSet(System.nanoTime()) == 0) ss.sparkContext.cancelAllJobs()
        case _ =>
      }
      val e = intercept[org.apache.spark.SparkException] {
        cortado.train(CortadoSuite.separable(ss, 200, 7),
          Config(solver, model = dir.resolve("m.caffemodel").toUri.toString))
      }
      assert(e.getMessage.contains("cancel"), e.getMessage)
      def cortadoThreads = Thread.getAllStackTraces.keySet.asScala
        .map(_.getName).filter(_.startsWith("cortado-")).toSeq
      // The task's threads (feeder, watchdog) end within seconds, and no event comes after.
      val deadline = System.nanoTime() + 10 * 1000000000L
      while (cortadoThreads.exists(n => n == "cortado-feeder" || n == "cortado-watchdog") &&
        System.nanoTime() < deadline) {
        Thread.sleep(50)
      }
      assert(!cortadoThreads.exists(n => n == "cortado-feeder" || n == "cortado-watchdog"),
        cortadoThreads)
      val last = lastEvent.get()
      Thread.sleep(1000)
      assert(lastEvent.get() === last, "training went on after the job was cancelled")
      assert(!new java.io.File(dir.resolve("m.caffemodel").toString).exists())
    }
  }
}
