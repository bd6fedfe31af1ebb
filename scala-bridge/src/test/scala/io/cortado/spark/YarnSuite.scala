// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.{File, FileOutputStream}
import java.lang.management.ManagementFactory
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Path => JPath}
import java.util.Comparator
import java.util.concurrent.TimeUnit

import scala.collection.JavaConverters._

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}
import org.apache.hadoop.hdfs.MiniDFSCluster
import org.apache.hadoop.yarn.api.records.{ApplicationId, YarnApplicationState}
import org.apache.hadoop.yarn.client.api.YarnClient
import org.apache.hadoop.yarn.conf.YarnConfiguration
import org.apache.hadoop.yarn.server.MiniYARNCluster
import org.scalatest.{BeforeAndAfterAll, Tag}
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.Arm.withResource
import io.cortado.jni.NativeLmdbSuite

/** The tag of the suites that run after `package` on the packaged jar (see the pom). */
object YarnTest extends Tag("io.cortado.Yarn")

/**
 * Spark on YARN, as CaffeOnSpark's users ran it (its GetStarted_yarn page): `spark-submit
 * --master yarn` in cluster and client deploy mode with the jar this build packaged, the solver
 * and net shipped with `--files` and named by their bare file names, the LMDB data, snapshots,
 * model and features on HDFS. The cluster is Hadoop's own: a MiniDFSCluster and a
 * MiniYARNCluster of three NodeManagers in this JVM, each with room for one container (so the
 * application master and two executors run in three NodeManagers); the containers are JVMs it
 * launches, whose classpath is Cortado's jar (shipped by YARN, natives inside) and the Spark,
 * Scala and Hadoop jars of the build (`spark.yarn.jars`, local to every NodeManager). spark-submit
 * runs as a separate JVM, as a user runs it, with HADOOP_CONF_DIR naming the clusters.
 *
 * The tests run after `package` (the pom's `yarn` execution, `-Dcortado.yarn.skip=true` leaves
 * them out) and are tagged [[YarnTest]].
 */
class YarnSuite extends AnyFunSuite with BeforeAndAfterAll {
  import CaffeOnSparkCommandsSuite.{images, memoryData, LeNetBody, solverText}

  private var baseDir: JPath = _
  private var dfs: MiniDFSCluster = _
  private var yarn: MiniYARNCluster = _
  private var confDir: File = _
  private var yarnClient: YarnClient = _
  /** hdfs://host:port */
  private var dfsUri: String = _

  private def jar: File = new File(sys.props.getOrElse("cortado.jar",
    fail("-Dcortado.jar (the packaged jar) is not set: the pom's yarn execution sets it")))

  /** Spark, Scala and Hadoop's client: the build's compile classpath, one entry per jar. */
  private def sparkClasspath: Seq[String] = {
    val file = new File(sys.props.getOrElse("cortado.spark.classpath",
      fail("-Dcortado.spark.classpath is not set: the pom's yarn execution sets it")))
    new String(Files.readAllBytes(file.toPath), UTF_8).trim.split(File.pathSeparator).toSeq
      .filter(_.nonEmpty)
  }

  override def beforeAll(): Unit = {
    super.beforeAll()
    assert(jar.isFile, s"$jar is missing: the YARN suite runs after `mvn package`")
    baseDir = Files.createTempDirectory("cortado-yarn")
    val conf = new YarnConfiguration()
    HdfsSuite.configureMiniDfs(conf, baseDir.resolve("dfs").toString)
    // One container of 1024 MiB per NodeManager: Spark's executors of 512 MiB (and the
    // application master) take 896 MiB with Spark's 384 MiB overhead, rounded up to 1024.
    conf.setInt(YarnConfiguration.NM_PMEM_MB, 1024)
    conf.setInt(YarnConfiguration.NM_VCORES, 1)
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 256)
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, 1024)
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, 1)
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false)
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false)
    // A nearly full disk must not mark the NodeManagers unhealthy.
    conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f)
    conf.setInt(YarnConfiguration.RM_AM_MAX_ATTEMPTS, 1)
    // The CapacityScheduler's one queue (Hadoop's jars carry no capacity-scheduler.xml); an
    // application master may take half the cluster (the default 10% is less than one container).
    conf.set("yarn.scheduler.capacity.root.queues", "default")
    conf.setInt("yarn.scheduler.capacity.root.default.capacity", 100)
    conf.setInt("yarn.scheduler.capacity.root.default.maximum-capacity", 100)
    conf.setFloat("yarn.scheduler.capacity.root.default.user-limit-factor", 1)
    conf.set("yarn.scheduler.capacity.root.default.state", "RUNNING")
    conf.set("yarn.scheduler.capacity.root.default.acl_submit_applications", "*")
    conf.set("yarn.scheduler.capacity.root.default.acl_administer_queue", "*")
    conf.setFloat("yarn.scheduler.capacity.maximum-am-resource-percent", 0.5f)
    conf.setInt("yarn.scheduler.capacity.node-locality-delay", -1)
    // Containers are killed at once when an application is (no 250 ms grace between TERM and
    // KILL is needed for the assertions, but the default is kept short anyway).
    conf.setLong(YarnConfiguration.NM_SLEEP_DELAY_BEFORE_SIGKILL_MS, 250)
    try {
      dfs = new MiniDFSCluster.Builder(conf).numDataNodes(1).format(true).build()
      dfs.waitActive()
      dfsUri = dfs.getURI.toString.stripSuffix("/")
      conf.set("fs.defaultFS", dfsUri)
      yarn = new MiniYARNCluster("cortado-yarn", 3, 1, 1)
      yarn.init(conf)
      yarn.start()
      val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60)
      while (yarn.getResourceManager.getResourceScheduler.getNumClusterNodes < 3 &&
        System.nanoTime() < deadline) Thread.sleep(100)
      assert(yarn.getResourceManager.getResourceScheduler.getNumClusterNodes === 3,
        "the NodeManagers did not register")
      // start() may return before the ResourceManager has written its port into the
      // configuration (still ":0"), which spark-submit would then retry forever.
      while (yarn.getConfig.get(YarnConfiguration.RM_ADDRESS, ":0").endsWith(":0") &&
        System.nanoTime() < deadline) Thread.sleep(100)
      assert(!yarn.getConfig.get(YarnConfiguration.RM_ADDRESS).endsWith(":0"),
        "the ResourceManager did not say its address")
    } catch {
      case t: Throwable =>
        stopClusters()
        throw new IllegalStateException(s"the mini clusters (under $baseDir) did not start: $t", t)
    }
    // The configuration spark-submit reads (HADOOP_CONF_DIR): the RM's real ports, fs.defaultFS.
    confDir = Files.createDirectories(baseDir.resolve("hadoop-conf")).toFile
    val written = new Configuration(yarn.getConfig)
    written.set("fs.defaultFS", dfsUri)
    // MiniDFSCluster's rack mapping is a class of Hadoop's test jars, not of the client's.
    written.unset("net.topology.node.switch.mapping.impl")
    for (name <- Seq("core-site.xml", "yarn-site.xml")) {
      val out = new FileOutputStream(new File(confDir, name))
      try written.writeXml(out)
      finally out.close()
    }
    yarnClient = YarnClient.createYarnClient()
    yarnClient.init(yarn.getConfig)
    yarnClient.start()
  }

  override def afterAll(): Unit = {
    try stopClusters()
    finally super.afterAll()
  }

  private def stopClusters(): Unit = {
    if (yarnClient != null) yarnClient.stop()
    if (yarn != null) yarn.stop()
    if (dfs != null) dfs.shutdown(true)
    if (baseDir != null && Files.exists(baseDir)) {
      val paths = Files.walk(baseDir)
      try paths.sorted(Comparator.reverseOrder[JPath]()).forEach(p => p.toFile.delete())
      finally paths.close()
    }
  }

  private def fs: FileSystem = FileSystem.get(new java.net.URI(dfsUri), yarn.getConfig)

  /**
   * CaffeOnSpark's lenet_memory_solver.prototxt and lenet_memory_train_test.prototxt (small),
   * written to a local directory as a user has them before `--files`, reading LMDB databases
   * of 400 and 100 images that live on HDFS under `hdfsDir`. Returns the two local files.
   */
  private def lenetFiles(name: String, hdfsDir: String, maxIter: Int,
      snapshot: Int): (File, File) = {
    val local = Files.createDirectories(baseDir.resolve(name))
    for ((db, n, seed) <- Seq(("mnist_train_lmdb", 400, 3), ("mnist_test_lmdb", 100, 5))) {
      val (pixels, labels) = images(n, seed)
      val path = NativeLmdbSuite.lmdb(local, db, 8, 8, pixels, labels)
      fs.copyFromLocalFile(new Path(path), new Path(s"$hdfsDir/$db"))
    }
    val net = local.resolve("lenet_memory_train_test.prototxt").toFile
    Files.write(net.toPath, ("name: \"LeNet\"\n" +
      memoryData("TRAIN", 20, s"$dfsUri$hdfsDir/mnist_train_lmdb") +
      memoryData("TEST", 50, s"$dfsUri$hdfsDir/mnist_test_lmdb") + LeNetBody).getBytes(UTF_8))
    val solver = local.resolve("lenet_memory_solver.prototxt").toFile
    Files.write(solver.toPath, solverText("lenet_memory_train_test.prototxt")
      .replace("max_iter: 100", s"max_iter: $maxIter")
      .replace("snapshot: 50", s"snapshot: $snapshot").getBytes(UTF_8))
    (solver, net)
  }

  /** A spark-submit running in its own JVM; its output goes to `log`. */
  private final class Submit(val process: Process, val log: File) extends AutoCloseable {

    /** Ends spark-submit and what it started, if still running. */
    override def close(): Unit = {
      process.descendants().forEach(p => { p.destroyForcibly(); () })
      process.destroyForcibly()
    }

    def output: String = new String(Files.readAllBytes(log.toPath), UTF_8)

    def tail: String = output.linesIterator.toSeq.takeRight(60).mkString("\n")

    /** The exit status, waiting up to `seconds`; fails (and kills it) past that. */
    def exitCode(seconds: Int): Int = {
      if (!process.waitFor(seconds, TimeUnit.SECONDS)) {
        close()
        fail(s"spark-submit did not end within $seconds s; its output ends:\n$tail")
      }
      note(s"spark-submit ended: exit status ${process.exitValue()}")
      process.exitValue()
    }
  }

  /**
   * `spark-submit --master yarn --deploy-mode mode` of Cortado's jar with CaffeOnSpark's
   * `flags`, in directory `cwd`, shipping `files` with --files.
   */
  private def submit(mode: String, cwd: File, files: Seq[File], flags: Seq[String],
      extraConf: Map[String, String] = Map.empty): Submit = {
    // The JVM options this JVM got for Java 17 (Spark needs these --add-opens), for every JVM.
    // Every JVM here is short-lived on a small machine: the quick compiler and the serial
    // collector leave the cores to the training.
    val javaOptions = ManagementFactory.getRuntimeMXBean.getInputArguments.asScala
      .filter(a => a.startsWith("--add-opens") || a.startsWith("-XX:+IgnoreUnrecognized") ||
        a.startsWith("-Djdk.reflect") || a.startsWith("-Dio.netty")) ++
      Seq("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
    val javaHome = sys.props("java.home")
    val conf = Map(
      "spark.yarn.jars" -> sparkClasspath.map("local:" + _).mkString(","),
      "spark.yarn.appMasterEnv.JAVA_HOME" -> javaHome,
      "spark.executorEnv.JAVA_HOME" -> javaHome,
      "spark.executorEnv.CORTADO_LOG_LEVEL" -> "warn",
      "spark.yarn.appMasterEnv.CORTADO_LOG_LEVEL" -> "warn",
      "spark.driver.extraJavaOptions" -> javaOptions.mkString(" "),
      "spark.yarn.am.extraJavaOptions" -> javaOptions.mkString(" "),
      "spark.executor.extraJavaOptions" -> javaOptions.mkString(" "),
      "spark.yarn.submit.waitAppCompletion" -> "true",
      "spark.yarn.report.interval" -> "1s",
      "spark.ui.enabled" -> "false") ++ extraConf
    val command = Seq(s"$javaHome/bin/java", "-Xmx512m") ++ javaOptions ++
      // The configuration directory first, as Spark's launcher puts HADOOP_CONF_DIR.
      Seq("-cp", (confDir.getAbsolutePath +: sparkClasspath).mkString(File.pathSeparator),
        "org.apache.spark.deploy.SparkSubmit",
        "--master", "yarn", "--deploy-mode", mode,
        "--num-executors", "2", "--executor-memory", "512m", "--executor-cores", "1",
        "--driver-memory", "512m",
        "--files", files.map(_.getAbsolutePath).mkString(","),
        "--class", "io.cortado.spark.CortadoOnSpark") ++
      conf.toSeq.sortBy(_._1).flatMap { case (k, v) => Seq("--conf", s"$k=$v") } ++
      Seq(jar.getAbsolutePath) ++ flags
    val log = new File(cwd, s"spark-submit-$mode.log")
    val builder = new ProcessBuilder(command: _*).directory(cwd).redirectErrorStream(true)
      .redirectOutput(log)
    val env = builder.environment()
    env.put("HADOOP_CONF_DIR", confDir.getAbsolutePath)
    env.put("YARN_CONF_DIR", confDir.getAbsolutePath)
    env.remove("SPARK_HOME")
    // A client-mode driver on loopback, where the NodeManagers' containers are.
    env.put("SPARK_LOCAL_IP", "127.0.0.1")
    note(s"spark-submit --deploy-mode $mode ${flags.mkString(" ")}")
    new Submit(builder.start(), log)
  }

  /** The application submitted from `cwd`'s spark-submit (its log names it), waiting for it. */
  private def applicationOf(s: Submit, seconds: Int): ApplicationId = {
    val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds)
    while (System.nanoTime() < deadline) {
      // "Submitted application application_..." (client mode names it earlier).
      "Submitted application (application_\\d+_\\d+)".r.findFirstMatchIn(s.output).foreach { m =>
        return ApplicationId.fromString(m.group(1))
      }
      if (!s.process.isAlive) fail(s"spark-submit ended before submitting:\n${s.tail}")
      Thread.sleep(200)
    }
    fail(s"spark-submit named no application within $seconds s:\n${s.tail}")
  }

  /** The processes of `app`'s containers still running (their command lines name it). */
  private def containerProcesses(app: ApplicationId): Seq[ProcessHandle] =
    ProcessHandle.allProcesses().iterator().asScala.filter { p =>
      p.info().commandLine().orElse("").contains(app.toString) ||
        p.info().arguments().orElse(Array.empty[String]).exists(_.contains(app.toString))
    }.toSeq

  /** The executor JVMs of `app` now running. */
  private def executorProcesses(app: ApplicationId): Seq[ProcessHandle] =
    containerProcesses(app).filter { p =>
      p.info().command().orElse("").endsWith("/java") &&
        p.info().commandLine().orElse("").contains("YarnCoarseGrainedExecutorBackend")
    }

  /** NodeManager index -> the containers of `app` whose logs it holds. */
  private def containersByNode(app: ApplicationId): Map[Int, Seq[String]] =
    (0 until 3).map { i =>
      val dirs = yarn.getNodeManager(i).getConfig.getTrimmedStrings(YarnConfiguration.NM_LOG_DIRS)
      i -> dirs.toSeq.flatMap { d =>
        Option(new File(d, app.toString).listFiles()).map(_.toSeq.map(_.getName)).getOrElse(Nil)
      }
    }.toMap.filter(_._2.nonEmpty)

  /** Every container log of `app` (stdout and stderr), for a failure's message. */
  private def containerLogs(app: ApplicationId): String =
    (0 until 3).flatMap { i =>
      yarn.getNodeManager(i).getConfig.getTrimmedStrings(YarnConfiguration.NM_LOG_DIRS).toSeq
    }.flatMap { d =>
      Option(new File(d, app.toString).listFiles()).map(_.toSeq).getOrElse(Nil)
        .flatMap(c => Option(c.listFiles()).map(_.toSeq).getOrElse(Nil))
    }.map { f =>
      val text = new String(Files.readAllBytes(f.toPath), UTF_8)
      s"== ${f.getParentFile.getName}/${f.getName}\n" + text.linesIterator.toSeq.takeRight(30)
        .mkString("\n")
    }.mkString("\n")

  /** Waits up to 300 s for `path` on HDFS: training is under way and has snapshotted. */
  private def awaitSnapshot(s: Submit, app: ApplicationId, path: String): Unit = {
    val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(300)
    while (!fs.exists(new Path(path)) && System.nanoTime() < deadline && s.process.isAlive) {
      Thread.sleep(200)
    }
    assert(fs.exists(new Path(path)), s"no $path\n${s.tail}\n${containerLogs(app)}")
    note(s"$app: $path written")
  }

  private val started = System.nanoTime()

  /** A line with the seconds since the suite started, so that a slow step shows in the log. */
  private def note(what: String): Unit =
    println(f"YarnSuite +${(System.nanoTime() - started) / 1e9}%.1f s: $what")

  private def hdfsFiles(dir: String): Seq[String] =
    if (!fs.exists(new Path(dir))) Nil
    else fs.listStatus(new Path(dir)).map(_.getPath.getName).toSeq.sorted

  test("cluster mode: CaffeOnSpark's YARN command (--files, bare -conf, data, model and " +
    "features on HDFS) trains on two executors in two NodeManagers", YarnTest) {
    val hdfsDir = "/user/cos/cluster"
    val (solver, net) = lenetFiles("cluster", hdfsDir, maxIter = 100, snapshot = 50)
    // The user's working directory holds neither file: the driver runs in the AM's container.
    val cwd = Files.createDirectories(baseDir.resolve("cluster-submit")).toFile
    withResource(submit("cluster", cwd, Seq(solver, net), Seq("-train", "-features",
      "accuracy,loss", "-label", "label", "-conf", "lenet_memory_solver.prototxt", "-devices", "1",
      "-connection", "ethernet", "-model", s"hdfs://$hdfsDir/mnist.model",
      "-output", s"hdfs://$hdfsDir/mnist_features_result"))) { s =>
      val app = applicationOf(s, 120)
      note(s"submitted $app")
      val code = s.exitCode(400)
      val report = yarnClient.getApplicationReport(app)
      assert(code === 0 && report.getFinalApplicationStatus.toString === "SUCCEEDED",
        s"spark-submit: exit $code, ${report.getFinalApplicationStatus}\n${s.tail}\n" +
          containerLogs(app))
      // Model and snapshots on HDFS, beside the model (CaffeOnSpark's place).
      assert(fs.getFileStatus(new Path(s"$hdfsDir/mnist.model")).getLen > 0)
      assert(hdfsFiles(hdfsDir).contains("mnist_lenet_iter_100.solverstate"), hdfsFiles(hdfsDir))
      // The features: one JSON row per test image with CaffeOnSpark's columns.
      val parts = hdfsFiles(s"$hdfsDir/mnist_features_result").filter(_.startsWith("part-"))
      val rows = parts.flatMap { p =>
        val in = fs.open(new Path(s"$hdfsDir/mnist_features_result/$p"))
        try scala.io.Source.fromInputStream(in, "UTF-8").getLines().toList
        finally in.close()
      }.filter(_.nonEmpty)
      assert(rows.size === 100)
      assert(rows.forall(r => r.contains("\"SampleID\"") && r.contains("\"accuracy\"") &&
        r.contains("\"loss\"") && r.contains("\"label\"")), rows.head)
      // The application master in one NodeManager, the two executors in the other two.
      val byNode = containersByNode(app)
      val executorNodes = byNode.filter(_._2.exists(c => !c.endsWith("_000001"))).keySet
      assert(byNode.values.flatten.size >= 3 && executorNodes.size === 2, byNode)
      // The driver printed CaffeOnSpark's lines in its container's stdout.
      assert(containerLogs(app).contains(s"Features accuracy, loss, label written to " +
        s"hdfs://$hdfsDir/mnist_features_result"), containerLogs(app))
    }
  }

  test("client mode: an executor's container killed mid-training, the job resumes from the " +
    "newest snapshot and finishes", YarnTest) {
    val hdfsDir = "/user/cos/client"
    val (solver, net) = lenetFiles("client", hdfsDir, maxIter = 800, snapshot = 100)
    // The user stands where the files are, as for CaffeOnSpark's client-mode command.
    val cwd = solver.getParentFile
    withResource(submit("client", cwd, Seq(solver, net), Seq("-train", "-conf",
      "lenet_memory_solver.prototxt", "-clusterSize", "2", "-model",
      s"hdfs://$hdfsDir/mnist.model"))) { s =>
      val app = applicationOf(s, 120)
      note(s"submitted $app")
      // Once the first snapshot is on HDFS, kill one executor JVM (its container exits 137).
      awaitSnapshot(s, app, s"$hdfsDir/mnist_lenet_iter_100.solverstate")
      val executors = executorProcesses(app)
      assert(executors.size === 2, executors.map(_.info().commandLine().orElse("")))
      executors.head.destroyForcibly()
      note(s"killed executor ${executors.head.pid()}")
      val code = s.exitCode(400)
      assert(code === 0, s"spark-submit exit $code\n${s.tail}\n${containerLogs(app)}")
      val out = s.output
      // What the driver said of the attempts, for the log.
      out.linesIterator.filter(l => l.contains(" Cortado: ") && (l.contains("ttempt") ||
        l.contains("workers joined"))).foreach(l => note(l.trim.take(300)))
      assert("Attempt 2 resumes from hdfs://[^ ]*mnist_lenet_iter_\\d+\\.solverstate".r
        .findFirstIn(out).isDefined, s.tail)
      assert(out.contains(s"Model written to hdfs://$hdfsDir/mnist.model"), s.tail)
      assert(hdfsFiles(hdfsDir).contains("mnist_lenet_iter_800.solverstate"), hdfsFiles(hdfsDir))
    }
  }

  test("`yarn application -kill` (YarnClient.killApplication) ends every rank and leaves no " +
    "process behind", YarnTest) {
    val hdfsDir = "/user/cos/kill"
    val (solver, net) = lenetFiles("kill", hdfsDir, maxIter = 1000000, snapshot = 100)
    val cwd = Files.createDirectories(baseDir.resolve("kill-submit")).toFile
    withResource(submit("cluster", cwd, Seq(solver, net), Seq("-train", "-conf",
      "lenet_memory_solver.prototxt", "-clusterSize", "2", "-model",
      s"hdfs://$hdfsDir/mnist.model"))) { s =>
      val app = applicationOf(s, 120)
      note(s"submitted $app")
      awaitSnapshot(s, app, s"$hdfsDir/mnist_lenet_iter_100.solverstate")
      assert(executorProcesses(app).size === 2)
      yarnClient.killApplication(app)
      val code = s.exitCode(120)
      assert(code !== 0, "spark-submit reported success for a killed application")
      assert(yarnClient.getApplicationReport(app).getYarnApplicationState ===
        YarnApplicationState.KILLED)
      // Every container's JVM (the driver in the AM, both ranks) is gone within 30 s.
      val gone = System.nanoTime() + TimeUnit.SECONDS.toNanos(30)
      while (containerProcesses(app).nonEmpty && System.nanoTime() < gone) Thread.sleep(200)
      assert(containerProcesses(app).isEmpty,
        containerProcesses(app).map(p => s"${p.pid()}: ${p.info().commandLine().orElse("")}"))
    }
  }
}
