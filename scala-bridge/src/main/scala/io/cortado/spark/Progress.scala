// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.{BufferedInputStream, BufferedOutputStream, DataInputStream, DataOutputStream,
  EOFException, IOException}
import java.net.{InetAddress, InetSocketAddress, ServerSocket, Socket, SocketTimeoutException}
import java.nio.charset.StandardCharsets
import java.security.{MessageDigest, SecureRandom}
import java.util.concurrent.{ConcurrentHashMap, ConcurrentLinkedQueue}
import java.util.concurrent.atomic.AtomicInteger
import javax.crypto.Mac
import javax.crypto.spec.SecretKeySpec

import scala.collection.JavaConverters._
import scala.collection.mutable.ArrayBuffer
import scala.util.control.NonFatal

import org.slf4j.LoggerFactory

/** What a training task reports while it runs (see [[ProgressListener]]). */
sealed trait TrainingEvent extends Serializable {

  /** The event as Caffe's log shows it (one or more lines). */
  def logLines: Seq[String]
}

/**
 * A display iteration of the native session (Caffe's cadence: iteration 0, every `display`
 * iterations, and the closing one at max_iter): the smoothed loss (Caffe's display), the
 * learning rate of this iteration's update (Caffe's `lr =` line) and the speed over the
 * `iterations` since the previous display, in wall time as Caffe's log measures it (0 and no
 * speed for the displays at iteration 0 and at the end, which count no iterations of their
 * own). Images per second are iterations per second times the feed's batch size.
 */
final case class IterationEvent(
    iteration: Int,
    loss: Float,
    learningRate: Float,
    iterationsPerSecond: Double,
    imagesPerSecond: Double,
    iterations: Int,
    closing: Boolean = false)
    extends TrainingEvent {

  /** Caffe's closing display (the loss of the final weights) has no speed and no lr line. */
  def logLines: Seq[String] =
    if (closing) Seq(s"Iteration $iteration, loss = ${CortadoOnSpark.caffeFormat(loss.toDouble)}")
    else Seq(
      f"Iteration $iteration ($iterationsPerSecond%.4g iter/s, " +
        f"${if (iterationsPerSecond > 0) iterations / iterationsPerSecond else 0.0}%.4gs/" +
        f"$iterations iters, $imagesPerSecond%.1f images/s), loss = " +
        CortadoOnSpark.caffeFormat(loss.toDouble),
      s"Iteration $iteration, lr = ${CortadoOnSpark.caffeFormat(learningRate.toDouble)}")
}

/** A test pass of the validation data at `iteration`: each test net output's mean. */
final case class TestEvent(iteration: Int, outputs: Seq[(String, Double)])
    extends TrainingEvent {

  def logLines: Seq[String] = s"Iteration $iteration, Testing net (#0)" +:
    outputs.zipWithIndex.map { case ((name, value), i) =>
      s"    Test net output #$i: $name = ${CortadoOnSpark.caffeFormat(value)}"
    }
}

/** Any other line of the training log (snapshots written, the end of training). */
final case class LogEvent(text: String) extends TrainingEvent {
  def logLines: Seq[String] = Seq(text)
}

/**
 * Receives the events of training runs while they run, in the driver, on a thread of the
 * progress channel (not the caller's). A Java lambda works: `cortado.addProgressListener(e ->
 * System.out.println(e))`. An exception thrown by a listener is logged and otherwise ignored.
 */
/**
 * The driver's word that an elastic training run goes on with another number of workers (see
 * Config.minWorkers): attempt `attempt` trains on `workers` of the `full` workers asked for,
 * after `before`, from iteration `iteration`, each device with batch `batch` and `iterSize`
 * passes per update at base_lr `baseLr`, as Config.elasticScaling `mode` has it (`how`: what
 * changed).
 */
final case class ResizeEvent(
    attempt: Int,
    before: Int,
    workers: Int,
    full: Int,
    iteration: Int,
    mode: String,
    batch: Int,
    iterSize: Int,
    baseLr: Float,
    how: String)
    extends TrainingEvent {

  def logLines: Seq[String] = Seq(
    s"Elastic training: attempt $attempt goes on with $workers of $full workers (was $before) " +
      s"from iteration $iteration; $mode: $how; batch $batch per device, iter_size $iterSize, " +
      s"base_lr ${CortadoOnSpark.caffeFormat(baseLr.toDouble)}")
}

trait ProgressListener {
  def onProgress(event: TrainingEvent): Unit
}

/**
 * The channel that brings a training task's events to the driver while the task runs, wherever
 * its executor is: the driver listens on a TCP port of its own host (`spark.driver.host`; bound
 * to `spark.driver.bindAddress` when set) and the task connects to it, identified by a random
 * token, and writes one framed message per event. When the task cannot connect (a firewall
 * between executors and driver), it keeps the events and returns them with its result, so the
 * driver still logs them, at the end of the task; a warning says so.
 */
private[spark] object Progress {

  private val log = LoggerFactory.getLogger(classOf[Cortado])

  private val IterationTag = 1
  private val TestTag = 2
  private val LogTag = 3
  private val ResizeTag = 4
  // From the driver to the task: stop once this many iterations are done.
  private val StopTag = 1

  private val NonceBytes = 16
  private val MacBytes = 32
  /** How long a new connection may take to prove itself. */
  private val HandshakeMillis = 5000
  /** Connections open at once (a job has one per worker 0 attempt; more is an attack or a bug). */
  private val MaxConnections = 64
  private val random = new SecureRandom()

  /** HMAC-SHA256 of `nonce` under `token`. */
  private def mac(token: String, nonce: Array[Byte]): Array[Byte] = {
    val m = Mac.getInstance("HmacSHA256")
    m.init(new SecretKeySpec(token.getBytes(StandardCharsets.UTF_8), "HmacSHA256"))
    m.doFinal(nonce)
  }

  /** Where a task sends its events. */
  final case class Address(host: String, port: Int, token: String)

  def write(out: DataOutputStream, event: TrainingEvent): Unit = event match {
    case e: IterationEvent =>
      out.writeByte(IterationTag)
      out.writeInt(e.iteration)
      out.writeFloat(e.loss)
      out.writeFloat(e.learningRate)
      out.writeDouble(e.iterationsPerSecond)
      out.writeDouble(e.imagesPerSecond)
      out.writeInt(e.iterations)
      out.writeBoolean(e.closing)
    case e: TestEvent =>
      out.writeByte(TestTag)
      out.writeInt(e.iteration)
      out.writeInt(e.outputs.size)
      e.outputs.foreach { case (name, value) => out.writeUTF(name); out.writeDouble(value) }
    case e: ResizeEvent =>
      out.writeByte(ResizeTag)
      Seq(e.attempt, e.before, e.workers, e.full, e.iteration).foreach(out.writeInt)
      out.writeUTF(e.mode)
      out.writeInt(e.batch)
      out.writeInt(e.iterSize)
      out.writeFloat(e.baseLr)
      out.writeUTF(e.how)
    case e: LogEvent =>
      out.writeByte(LogTag)
      val bytes = e.text.getBytes(StandardCharsets.UTF_8)
      out.writeInt(bytes.length)
      out.write(bytes)
  }

  /** The next event, or None at the end of the stream. */
  def read(in: DataInputStream): Option[TrainingEvent] = {
    val tag = in.read()
    tag match {
      case -1 => None
      case IterationTag =>
        Some(IterationEvent(in.readInt(), in.readFloat(), in.readFloat(), in.readDouble(),
          in.readDouble(), in.readInt(), in.readBoolean()))
      case TestTag =>
        val iteration = in.readInt()
        val n = in.readInt()
        if (n < 0 || n > 1000000) throw new IOException(s"bad progress message: $n outputs")
        Some(TestEvent(iteration, Seq.fill(n)(in.readUTF() -> in.readDouble())))
      case LogTag =>
        val n = in.readInt()
        if (n < 0 || n > (1 << 24)) throw new IOException(s"bad progress message: $n bytes")
        val bytes = new Array[Byte](n)
        in.readFully(bytes)
        Some(LogEvent(new String(bytes, StandardCharsets.UTF_8)))
      case ResizeTag =>
        val ints = Seq.fill(5)(in.readInt())
        Some(ResizeEvent(ints(0), ints(1), ints(2), ints(3), ints(4), in.readUTF(), in.readInt(),
          in.readInt(), in.readFloat(), in.readUTF()))
      case other => throw new IOException(s"bad progress message tag $other")
    }
  }

  /**
   * The driver's end: accepts the tasks of one job, checks their token and hands each event
   * to `deliver`. `close()` waits (up to `drainMillis`) for connected tasks to finish sending.
   */
  final class Server(advertised: String, bind: String, deliver: TrainingEvent => Unit)
      extends AutoCloseable {
    private val token = {
      val bytes = new Array[Byte](32)
      random.nextBytes(bytes)
      bytes.map(b => f"${b & 0xff}%02x").mkString
    }
    private val refused = new AtomicInteger(0)
    private val socket = new ServerSocket()
    socket.bind(new InetSocketAddress(InetAddress.getByName(bind), 0))
    private val readers = new ConcurrentLinkedQueue[Thread]()
    private val clients = new ConcurrentLinkedQueue[Socket]()
    // Connections that have not yet proved themselves: close() ends them at once.
    private val pending = ConcurrentHashMap.newKeySet[Socket]()
    // The authenticated connections, for requests to their tasks (requestStop).
    private val controls = ConcurrentHashMap.newKeySet[DataOutputStream]()
    @volatile private var closing = false

    val address: Address = Address(advertised, socket.getLocalPort, token)

    // Accepts until close(): a short timeout lets it see `closing` once no connection waits.
    socket.setSoTimeout(100)
    private val acceptor = new Thread(() => acceptLoop(), "cortado-progress-accept")
    acceptor.setDaemon(true)
    acceptor.start()

    private def acceptLoop(): Unit = {
      var open = true
      while (open) {
        try {
          val client = socket.accept()
          if (clients.size >= MaxConnections) {
            refuse(client, s"came while $MaxConnections were open")
            client.close()
          } else {
            clients.add(client)
            pending.add(client)
            val reader = new Thread(() => serve(client), "cortado-progress")
            reader.setDaemon(true)
            readers.add(reader)
            reader.start()
          }
        } catch {
          case _: SocketTimeoutException => open = !closing
          case e: IOException =>
            if (!socket.isClosed) log.warn(s"progress channel: accept failed: $e")
            open = !socket.isClosed && !closing
        }
      }
    }

    private def serve(client: Socket): Unit = {
      var authenticated = false
      try {
        // A connection proves it knows the token without sending it: HMAC-SHA256 of a fresh
        // nonce. Silence is cut off, so idle connections hold no thread for long.
        client.setSoTimeout(HandshakeMillis)
        val nonce = new Array[Byte](NonceBytes)
        random.nextBytes(nonce)
        val out = client.getOutputStream
        out.write(nonce)
        out.flush()
        val in = new DataInputStream(new BufferedInputStream(client.getInputStream))
        val proof = new Array[Byte](MacBytes)
        in.readFully(proof)
        if (!MessageDigest.isEqual(proof, mac(token, nonce))) {
          refuse(client, "did not prove it belongs to this job")
        } else {
          authenticated = true
          pending.remove(client)
          client.setSoTimeout(0)
          val control = new DataOutputStream(out)
          controls.add(control)
          try Iterator.continually(read(in)).takeWhile(_.isDefined).flatten.foreach(deliver)
          finally controls.remove(control)
        }
      } catch {
        case _: SocketTimeoutException if !authenticated =>
          refuse(client, s"sent nothing for ${HandshakeMillis / 1000} s")
        case _: EOFException if !authenticated => refuse(client, "closed during the handshake")
        case _: EOFException =>
        case e: IOException if !client.isClosed => log.warn(s"progress channel: $e")
        case _: IOException =>
      } finally {
        clients.remove(client)
        pending.remove(client)
        readers.remove(Thread.currentThread())
        client.close()
      }
    }

    /** Logs the first refused connection of this server (and counts the others). */
    /**
     * Asks the connected tasks (worker 0) to stop training once `iteration` iterations are done
     * (see NativeTrainer.stopAt); returns how many connections were asked.
     */
    def requestStop(iteration: Int): Int = controls.asScala.count { o =>
      try {
        o.synchronized {
          o.writeByte(StopTag)
          o.writeInt(iteration)
          o.flush()
        }
        true
      } catch { case _: IOException => false }
    }

    private def refuse(client: Socket, why: String): Unit =
      if (refused.getAndIncrement() == 0) {
        log.warn(s"progress channel: a connection from ${client.getRemoteSocketAddress} $why; " +
          "closed (later ones are closed without a word)")
      }

    /**
     * Stops accepting once no connection is waiting, then waits up to `drainMillis` for the
     * connected tasks to finish sending (they close their end when done), and closes all.
     */
    def close(drainMillis: Long): Unit = {
      val deadline = System.currentTimeMillis() + drainMillis
      closing = true
      acceptor.join(math.max(1, deadline - System.currentTimeMillis()))
      // Only the tasks of the job get time to finish sending.
      pending.asScala.foreach(_.close())
      readers.asScala.foreach(t => t.join(math.max(1, deadline - System.currentTimeMillis())))
      socket.close()
      clients.asScala.foreach(_.close())
      acceptor.join()
    }

    override def close(): Unit = close(10000)
  }

  object Server {

    /** A server on the driver of `conf`'s SparkContext. */
    def start(conf: org.apache.spark.SparkConf, deliver: TrainingEvent => Unit): Server = {
      val host = conf.getOption("spark.driver.host")
        .getOrElse(InetAddress.getLocalHost.getHostAddress)
      val bind = conf.getOption("spark.driver.bindAddress").getOrElse(host)
      new Server(host, bind, deliver)
    }
  }

  /**
   * The task's end. Sends each event at once; after a failed connection (or a failed write)
   * it keeps the events not sent, for the task's result.
   */
  final class Client(address: Option[Address], connectTimeoutMillis: Int = 5000,
      onStop: Int => Unit = _ => ()) extends AutoCloseable {
    private val kept = ArrayBuffer.empty[TrainingEvent]
    private var out: Option[(Socket, DataOutputStream)] = address.flatMap { a =>
      try {
        val s = new Socket()
        s.connect(new InetSocketAddress(a.host, a.port), connectTimeoutMillis)
        s.setTcpNoDelay(true)
        s.setSoTimeout(connectTimeoutMillis)
        val nonce = new Array[Byte](NonceBytes)
        new DataInputStream(s.getInputStream).readFully(nonce)
        s.setSoTimeout(0)
        val o = new DataOutputStream(new BufferedOutputStream(s.getOutputStream))
        o.write(mac(a.token, nonce))
        o.flush()
        listen(s)
        Some((s, o))
      } catch {
        case e: IOException =>
          log.warn(s"progress channel: cannot reach the driver at ${a.host}:${a.port} ($e); " +
            "the training log reaches the driver when the task ends")
          None
      }
    }

    def send(event: TrainingEvent): Unit = synchronized(out match {
      case Some((socket, o)) =>
        try {
          write(o, event)
          o.flush()
        } catch {
          case NonFatal(e) =>
            log.warn(s"progress channel: sending failed ($e); the rest of the training log " +
              "reaches the driver when the task ends")
            socket.close()
            out = None
            kept += event
        }
      case None => kept += event
    })

    /** Reads the driver's requests (a stop at an iteration) on a thread of its own. */
    private def listen(socket: Socket): Unit = {
      val in = new DataInputStream(new BufferedInputStream(socket.getInputStream))
      val reader = new Thread(() =>
        try {
          var open = true
          while (open) {
            in.read() match {
              case StopTag => onStop(in.readInt())
              case _ => open = false
            }
          }
        } catch { case _: IOException => }, "cortado-progress-requests")
      reader.setDaemon(true)
      reader.start()
    }

    /** Events that did not reach the driver. */
    def unsent: Seq[TrainingEvent] = synchronized(kept.toList)

    override def close(): Unit = {
      out.foreach { case (socket, o) =>
        try o.flush()
        catch { case NonFatal(_) => }
        socket.close()
      }
      out = None
    }
  }
}
