// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path => JPath}
import java.util.Comparator
import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.hdfs.MiniDFSCluster
import org.apache.spark.sql.SparkSession
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.{CortadoException, CortadoIOException}
import io.cortado.Arm.withResource
import io.cortado.api.Solver
import io.cortado.jni.{NativeLib, NativeLmdbSuite, NativeTrainerSuite}
import io.cortado.ml.CortadoClassificationModel
import io.cortado.storage.{HadoopFiles, Snapshots}

/**
 * Storage and training against a real HDFS: a MiniDFSCluster (one namenode, one datanode, in a
 * temporary directory) in this JVM, and a local[2] SparkSession whose fs.defaultFS is that
 * cluster. Data, prototxt, snapshots and models all live on HDFS.
 */
object HdfsSuite {

  /**
   * Sets `conf` for a MiniDFSCluster of one datanode under `baseDir`: loopback only, ephemeral
   * ports for every service, no permission checks for the test user.
   */
  def configureMiniDfs(conf: Configuration, baseDir: String): Unit = {
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, baseDir)
    conf.set("dfs.replication", "1")
    conf.set("dfs.namenode.http-address", "127.0.0.1:0")
    conf.set("dfs.datanode.address", "127.0.0.1:0")
    conf.set("dfs.datanode.http.address", "127.0.0.1:0")
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0")
    conf.setBoolean("dfs.permissions.enabled", false)
  }
}

class HdfsSuite extends AnyFunSuite with BeforeAndAfterAll with PerTest {
  import CortadoSuite._

  private var baseDir: JPath = _
  private var cluster: MiniDFSCluster = _
  /** hdfs://host:port of the cluster's namenode. */
  private var uri: String = _

  private def dfsConf: Configuration = {
    val conf = new Configuration()
    conf.set("fs.defaultFS", uri)
    conf.set("dfs.replication", "1")
    conf
  }

  override def beforeAll(): Unit = {
    super.beforeAll()
    baseDir = Files.createTempDirectory("cortado-hdfs")
    val conf = new Configuration()
    HdfsSuite.configureMiniDfs(conf, baseDir.toString)
    try {
      cluster = new MiniDFSCluster.Builder(conf).numDataNodes(1).format(true).build()
      cluster.waitActive()
    } catch {
      case t: Throwable =>
        val message = s"MiniDFSCluster (one datanode under $baseDir) could not start: $t"
        if (cluster != null) cluster.shutdown()
        cluster = null
        deleteBaseDir()
        throw new IllegalStateException(message, t)
    }
    uri = cluster.getURI.toString.stripSuffix("/")
  }

  override def afterAll(): Unit = {
    try {
      if (cluster != null) cluster.shutdown(true)
      deleteBaseDir()
    } finally super.afterAll()
  }

  /** shutdown(true) removes the cluster's directories; whatever is left goes here. */
  private def deleteBaseDir(): Unit = if (baseDir != null && Files.exists(baseDir)) {
    val paths = Files.walk(baseDir)
    try paths.sorted(Comparator.reverseOrder[JPath]()).forEach(p => p.toFile.delete())
    finally paths.close()
  }

  override protected def sparkSessionBuilder: SparkSession.Builder =
    super.sparkSessionBuilder
      .config("spark.hadoop.fs.defaultFS", uri)
      .config("spark.hadoop.dfs.replication", "1")

  private def writeText(path: String, text: String): String = {
    HadoopFiles.writeBytesAtomic(path, text.getBytes(StandardCharsets.UTF_8), dfsConf)
    path
  }

  private def modificationTime(path: String): Long =
    new Path(path).getFileSystem(dfsConf).getFileStatus(new Path(path)).getModificationTime

  private def snapshotIters(dir: String, name: String): Seq[(Int, String)] = {
    val pattern = (java.util.regex.Pattern.quote(name) + """_iter_(\d+)\.(caffemodel|solverstate|sha256)""").r
    HadoopFiles.listNames(dir, dfsConf).map {
      case pattern(iter, ext) => iter.toInt -> ext
      case other => fail(s"unexpected file $other in $dir")
    }.sorted
  }

  /** Each snapshot's model, state and digests. */
  private def both(iters: Int*): Seq[(Int, String)] =
    iters.flatMap(i => Seq(i -> "caffemodel", i -> "sha256", i -> "solverstate"))

  test("the cluster is HDFS and Spark's default file system") {
    assert(uri.startsWith("hdfs://"), uri)
    assert(new Path("/").getFileSystem(ss.sparkContext.hadoopConfiguration).getUri.toString ===
      uri)
  }

  test("Snapshots on hdfs: written with Caffe's names, the latest found, a solver resumed") {
    val prefix = s"$uri/storage/regression"
    def newSolver(): Solver =
      Solver(NativeTrainerSuite.Solver, "solver.prototxt", Some(NativeTrainerSuite.RegressionNet))
    assert(Snapshots.latest(prefix, dfsConf) === None)
    val expected = withResource(newSolver()) { solver =>
      solver.step(5)
      assert(Snapshots.write(solver, prefix, dfsConf) === Snapshots.files(prefix, 5))
      solver.step(3)
      Snapshots.write(solver, prefix, dfsConf)
      solver.step(2)
    }
    assert(snapshotIters(s"$uri/storage", "regression") === both(5, 8))
    val latest = Snapshots.latest(prefix, dfsConf)
    assert(latest === Some(Snapshots.files(prefix, 8)))
    withResource(newSolver()) { solver =>
      solver.restore(Snapshots.read(latest.get, dfsConf))
      assert(solver.iter === 8)
      assert(solver.step(2) === expected)
    }
  }

  test("train from Parquet on HDFS with snapshots, resume, test and features") {
    val base = s"$uri/train"
    writeText(s"$base/conf/net.prototxt", TinyNet)
    // snapshot_prefix is a plain path: it resolves on the default file system, the cluster.
    val solverText = TinySolver.replace("max_iter: 100", "max_iter: 300")
      .replace("display: 25", "display: 50") +
      "snapshot: 100\nsnapshot_prefix: \"/train/snapshots/tiny\"\n"
    val solver = writeText(s"$base/conf/solver.prototxt", solverText)
    val longer = writeText(s"$base/conf/solver_500.prototxt",
      solverText.replace("max_iter: 300", "max_iter: 500"))

    separable(ss, 400, 7).write.parquet(s"$base/data/train.parquet")
    separable(ss, 100, 11).write.parquet("/train/data/test.parquet")
    val trainDF = ss.read.parquet(s"$base/data/train.parquet")
    val testDF = ss.read.parquet(s"$base/data/test.parquet")
    assert(trainDF.inputFiles.forall(_.startsWith(s"$uri/")), trainDF.inputFiles.toSeq)

    val cortado = new Cortado(ss)
    val logged = new ConcurrentLinkedQueue[String]()
    val listener: ProgressListener = {
      case LogEvent(text) => logged.add(text)
      case _ =>
    }
    cortado.addProgressListener(listener)
    val model = s"$base/out/tiny.caffemodel"
    val config = Config(solver, model = model)
    assert(cortado.train(trainDF, config) === model)
    cortado.removeProgressListener(listener)
    val snapshots = s"$base/snapshots"
    assert(snapshotIters(snapshots, "tiny") === both(100, 200, 300))
    val prefix = s"$snapshots/tiny"
    // Caffe's lines for each snapshot the session took, naming the files on HDFS.
    assert(logged.asScala.toSeq.filter(_.startsWith("Snapshotting")) === Seq(100, 200, 300)
      .flatMap(i => Seq(s"Snapshotting to binary proto file ${prefix}_iter_$i.caffemodel",
        s"Snapshotting solver state to binary proto file ${prefix}_iter_$i.solverstate")))
    assert(Snapshots.latest(prefix, dfsConf).map(_.iter) === Some(300))
    val before = Seq(100, 200, 300).map(i => i -> modificationTime(s"${prefix}_iter_$i.solverstate"))

    // Resuming from the latest snapshot continues at 300: the earlier files stay as they are.
    cortado.train(trainDF, Config(longer, model = model, resumeLatest = true))
    assert(snapshotIters(snapshots, "tiny") === both(100, 200, 300, 400, 500))
    assert(before.forall { case (i, t) => modificationTime(s"${prefix}_iter_$i.solverstate") == t })
    assert(HadoopFiles.readBytes(model, dfsConf) ===
      HadoopFiles.readBytes(s"${prefix}_iter_500.caffemodel", dfsConf))
    assert(HadoopFiles.listNames(s"$base/out", dfsConf) === Seq("tiny.caffemodel"))

    // Config.snapshot resumes from a given state; the prefix and interval come from Config.
    val explicit = s"$base/explicit/run"
    cortado.train(trainDF, Config(solver, model = s"$base/out/explicit.caffemodel",
      weights = s"${prefix}_iter_100.caffemodel", snapshot = s"${prefix}_iter_100.solverstate",
      snapshotPrefix = explicit, snapshotInterval = 80))
    assert(snapshotIters(s"$base/explicit", "run") === both(160, 240, 300))

    val metrics = cortado.test(testDF, config)
    assert(metrics("accuracy") >= 0.95, metrics)
    val features = cortado.features(testDF, Seq("ip"), config).collect()
    assert(features.map(_.getLong(0)).sorted.toSeq === (0L until 100L))
    assert(features.forall(_.getSeq[Float](1).length == 2))

    // With no snapshot under the prefix, resumeLatest trains from scratch.
    cortado.train(trainDF, Config(solver, model = s"$base/out/fresh.caffemodel",
      snapshotPrefix = s"$base/fresh/tiny", resumeLatest = true))
    assert(snapshotIters(s"$base/fresh", "tiny") === both(100, 200, 300))
    assert(new File(baseDir.toFile, "data").isDirectory, "the cluster keeps its blocks here")
  }

  test("2 workers train from Parquet on HDFS; worker 0 snapshots there and they resume") {
    val base = s"$uri/workers"
    writeText(s"$base/conf/net.prototxt", TinyNet)
    val solverText = TinySolver.replace("max_iter: 100", "max_iter: 120") +
      "snapshot: 60\nsnapshot_prefix: \"/workers/snapshots/tiny\"\n"
    val solver = writeText(s"$base/conf/solver.prototxt", solverText)
    val longer = writeText(s"$base/conf/solver_180.prototxt",
      solverText.replace("max_iter: 120", "max_iter: 180"))
    separable(ss, 400, 7).repartition(2).write.parquet(s"$base/data/train.parquet")
    val trainDF = ss.read.parquet(s"$base/data/train.parquet")
    val cortado = new Cortado(ss)
    val model = s"$base/out/tiny.caffemodel"
    cortado.train(trainDF, Config(solver, model = model, clusterSize = 2))
    assert(snapshotIters(s"$base/snapshots", "tiny") === both(60, 120))
    cortado.train(trainDF, Config(longer, model = model, resumeLatest = true, clusterSize = 2))
    assert(snapshotIters(s"$base/snapshots", "tiny") === both(60, 120, 180))
    assert(HadoopFiles.readBytes(model, dfsConf) ===
      HadoopFiles.readBytes(s"$base/snapshots/tiny_iter_180.caffemodel", dfsConf))
    val metrics = cortado.test(separable(ss, 100, 11), Config(solver, model = model))
    assert(metrics("accuracy") >= 0.95, metrics)
  }

  test("exportOnnx writes to HDFS, from Config (solver and model there) and from a model") {
    val base = s"$uri/onnx"
    val net = writeText(s"$base/conf/net.prototxt", TinyNet)
    val solver = writeText(s"$base/conf/solver.prototxt", TinySolver)
    val cortado = new Cortado(ss)
    val model = cortado.train(separable(ss, 200, 7),
      Config(solver, model = s"$base/tiny.caffemodel"))
    val expected =
      try NativeLib.exportOnnx(TinyNet, net, HadoopFiles.readBytes(model, dfsConf), 13, true)
      catch {
        case e: CortadoException if e.getMessage.contains("needs a build with ONNX") =>
          cancel(e.getMessage)
      }
    cortado.exportOnnx(Config(solver, model = model), s"$base/out/tiny.onnx")
    assert(HadoopFiles.readBytes(s"$base/out/tiny.onnx", dfsConf) === expected)
    // A plain path is on the default file system: the cluster.
    CortadoClassificationModel.fromCaffe(net, model).exportOnnx("/onnx/out/model.onnx")
    assert(HadoopFiles.readBytes(s"$base/out/model.onnx", dfsConf) === expected)
    val refused = intercept[CortadoIOException](
      cortado.exportOnnx(Config(solver, model = model), s"$base/out/tiny.onnx", opset = 17))
    assert(refused.getMessage.contains("already exists"), refused)
    assert(HadoopFiles.listNames(s"$base/out", dfsConf).sorted === Seq("model.onnx", "tiny.onnx"))
  }

  test("an LMDB database on HDFS is copied to every node, as CaffeOnSpark copied it") {
    io.cortado.TestDirs.withTempDir("cortado-hdfs-lmdb") { local =>
      val lmdbs = LmdbSourceSuite
      val (trainImages, trainLabels) = lmdbs.separable(200, seed = 7)
      val (testImages, testLabels) = lmdbs.separable(100, seed = 11)
      val fs = new Path(uri).getFileSystem(dfsConf)
      Seq("train" -> (trainImages, trainLabels), "test" -> (testImages, testLabels)).foreach {
        case (name, (images, labels)) =>
          val db = NativeLmdbSuite.lmdb(local, s"${name}_lmdb", 2, 2, images, labels)
          fs.copyFromLocalFile(new Path(db), new Path(s"$uri/lmdb/${name}_lmdb"))
      }
      val net = writeText(s"$uri/lmdb/conf/net.prototxt", "name: \"toy\"\n" +
        lmdbs.memoryLayer("TRAIN", 8, s"$uri/lmdb/train_lmdb") +
        lmdbs.memoryLayer("TEST", 10, "hdfs:///lmdb/test_lmdb/") + CortadoOnSparkSuite.Body)
      val solver = writeText(s"$uri/lmdb/conf/solver.prototxt",
        TinySolver.replace("net: \"net.prototxt\"", "net: \"" + net + "\""))
      val model = s"$uri/lmdb/out/toy.caffemodel"
      val r = CortadoOnSparkSuite.runMain(ss, Seq("-train", "-test", "-conf", solver,
        "-model", model))
      assert(r.code === 0, r.err)
      val accuracy = r.out.linesIterator.collectFirst {
        case line if line.startsWith("accuracy = ") => line.stripPrefix("accuracy = ").toDouble
      }
      assert(accuracy.exists(_ >= 0.95), r.out)
      assert(HadoopFiles.length(model, dfsConf) > 0)
      // Spark's copies, not the cluster, were read: the databases are in SparkFiles' directory.
      assert(new File(org.apache.spark.SparkFiles.get("train_lmdb"), "data.mdb").isFile)
      assert(new File(org.apache.spark.SparkFiles.get("test_lmdb"), "data.mdb").isFile)
    }
  }
}
