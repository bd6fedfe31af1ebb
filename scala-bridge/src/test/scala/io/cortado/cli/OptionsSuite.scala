// SPDX-License-Identifier: Apache-2.0
package io.cortado.cli

import org.scalatest.funsuite.AnyFunSuite

class OptionsSuite extends AnyFunSuite {

  private def parse(line: String): Either[String, Options] = Options.parse(line.split(" ").toSeq)

  test("a CaffeOnSpark training line parses, with CaffeOnSpark's defaults") {
    val o = parse("-train -persistent -conf lenet_solver.prototxt -model hdfs:///m/lenet.model " +
      "-devices 2 -connection ethernet -clusterSize 3").toOption.get
    assert(o === Options(conf = "lenet_solver.prototxt", train = true, persistent = true,
      model = "hdfs:///m/lenet.model", devices = 2, connection = "ethernet", clusterSize = 3))
    assert(o.output === "output" && o.outputFormat === "json" && !o.resize)
    // Without -clusterSize and -connection: automatic worker count, the tcp backend.
    val d = parse("-train -conf s.prototxt -model m").toOption.get
    assert(d.clusterSize === 0 && d.connection === "" && d.comm === "")
    assert(parse("-train -conf s.prototxt -model m -comm mpi").toOption.get.comm === "mpi")
    assert(d.exchangePrecision === "auto")
    assert(parse("-train -conf s.prototxt -model m -exchangePrecision bfloat16").toOption.get
      .exchangePrecision === "bfloat16")
    val rdma = parse("-train -conf s.prototxt -model m -connection InfiniBand " +
      "-connectionFallback Ethernet").toOption.get
    assert(rdma.connection === "infiniband" && rdma.connectionFallback === "ethernet")
    assert(d.connectionFallback === "")
  }

  test("-allreduce, -latencyKb and -hierarchical: as cortado train's, with its defaults") {
    val d = parse("-train -conf s.prototxt -model m").toOption.get
    assert(d.allreduce === "auto" && d.latencyKb === 32 && d.hierarchical)
    Seq("auto", "ring", "doubling", "halving").foreach { a =>
      assert(parse(s"-train -conf s.prototxt -model m -allreduce $a").toOption.get.allreduce === a)
    }
    val o = parse("-train -conf s.prototxt -model m -clusterSize 4 -allreduce doubling " +
      "-latencyKb 3 -hierarchical false").toOption.get
    assert(o.allreduce === "doubling" && o.latencyKb === 3 && !o.hierarchical)
    assert(parse("-train -conf s.prototxt -model m -hierarchical TRUE").toOption.get.hierarchical)
    // What the Spark API gets.
    val config = io.cortado.spark.Config.fromOptions(o)
    assert(config.allreduce === "doubling" && config.latencyKb === 3 && !config.hierarchical)
    val defaults = io.cortado.spark.Config.fromOptions(d)
    assert(defaults.allreduce === "auto" && defaults.latencyKb === 32 && defaults.hierarchical)
    assert(defaults === io.cortado.spark.Config("s.prototxt", model = "m"))
  }

  test("features with a label; features replace test, as in CaffeOnSpark") {
    val o = parse("-features accuracy,ip1,ip2 -label label -test -conf s.prototxt -model m " +
      "-outputFormat parquet --output out").toOption.get
    assert(o.featureBlobs === Seq("accuracy", "ip1", "ip2", "label"))
    assert(o.extractFeatures && !o.runTest)
    assert(o.outputFormat === "parquet" && o.output === "out")
  }

  test("-exportOnnx: after -train, or from -model alone") {
    val alone = parse("-conf s.prototxt -model m.caffemodel -exportOnnx hdfs:///m/lenet.onnx")
    assert(alone.toOption.get.exportOnnx === "hdfs:///m/lenet.onnx")
    assert(!alone.toOption.get.train && !alone.toOption.get.test)
    assert(parse("-train -conf s.prototxt -model m -exportOnnx m.onnx").toOption.get
      .exportOnnx === "m.onnx")
    assert(parse("-train -conf s.prototxt -model m").toOption.get.exportOnnx === "")
    assert(parse("-conf s.prototxt -model m -exportOnnx").left.toOption.get ===
      "-exportOnnx needs a value")
    assert(parse("-conf s.prototxt -exportOnnx m.onnx").left.toOption.get === "-model is required")
  }

  test("unknown, malformed and conflicting flags are errors") {
    val base = "-conf s.prototxt -model m"
    val errors = Seq(
      s"$base -train -frobnicate" -> "unknown flag '-frobnicate'",
      s"$base -train -devices two" -> "-devices must be a positive integer, not 'two'",
      s"$base -train -devices 0" -> "-devices must be a positive integer, not '0'",
      s"$base -test -outputFormat csv" -> "-outputFormat must be json or parquet, not 'csv'",
      s"$base -train -connection carrier-pigeon" -> "-connection must be ethernet or infiniband",
      s"$base -train -comm gloo" -> "-comm must be tcp, ucx, mpi or nccl, not 'gloo'",
      s"$base -train -exchangePrecision fp8" ->
        "-exchangePrecision must be auto, float32, bfloat16 or float16, not 'fp8'",
      s"$base -train -allreduce tree" ->
        "-allreduce must be auto, ring, doubling or halving, not 'tree'",
      s"$base -train -allreduce Ring" ->
        "-allreduce must be auto, ring, doubling or halving, not 'Ring'",
      s"$base -train -allreduce" -> "-allreduce needs a value",
      s"$base -train -latencyKb 0" -> "-latencyKb must be a positive number of KB, not '0'",
      s"$base -train -latencyKb -3" -> "-latencyKb must be a positive number of KB, not '-3'",
      s"$base -train -latencyKb 2.5" -> "-latencyKb must be a positive number of KB, not '2.5'",
      s"$base -train -hierarchical yes" -> "-hierarchical must be true or false, not 'yes'",
      s"$base -train -hierarchical" -> "-hierarchical needs a value",
      s"$base -train -connection infiniband -connectionFallback tcp" ->
        "-connectionFallback must be ethernet (or left out), not 'tcp'",
      s"$base -train -connectionFallback" -> "-connectionFallback needs a value",
      s"$base -train -clusterSize 0" -> "-clusterSize must be a positive integer, not '0'",
      s"$base -train -snapshot s.solverstate" -> "-snapshot needs -weights",
      s"$base -test -snapshot s.solverstate -weights w" -> "-snapshot resumes training",
      s"$base -test -label label" -> "-label adds a blob to -features",
      s"$base -train -features" -> "-features needs a value",
      "-model m -train" -> "-conf (the solver prototxt) is required",
      "-conf s.prototxt -train" -> "-model is required",
      base -> "nothing to do")
    errors.foreach { case (line, expected) =>
      val result = parse(line)
      assert(result.isLeft, s"'$line' parsed")
      assert(result.left.toOption.get.contains(expected), s"'$line': $result")
    }
  }

  test("a repeated flag and a stray argument warn, as CaffeOnSpark's parser let them through") {
    val o = parse("-conf s.prototxt -train stray -model m1 -devices 2 -model m2 -train " +
      "-devices 2 -testDataFrame -testDataFrame").toOption.get
    // The first value counts, as in CaffeOnSpark (commons-cli's getOptionValue).
    assert(o.model === "m1" && o.devices === 2 && o.train && o.testDataFrame)
    assert(o.warnings === Seq("argument 'stray' is not a flag: ignored",
      "-model given twice: 'm1' is used, 'm2' ignored", "-train given twice",
      "-devices given twice", "-testDataFrame given twice"))
    assert(parse("-conf s.prototxt -model m -train").toOption.get.warnings.isEmpty)
    // The repeated value is not used, so not checked; the first must still be usable.
    assert(parse("-conf s -model m -train -devices 2 -devices zero").toOption.get.devices === 2)
    assert(parse("-conf s -model m -train -devices zero -devices 2").left.toOption.get
      .contains("-devices must be a positive integer, not 'zero'"))
    // An unknown flag is still an error, as in CaffeOnSpark.
    assert(parse("-conf s -model m -train -frobnicate").isLeft)
  }

  test("the usage names every flag") {
    Seq("conf", "model", "train", "test", "features", "label", "outputFormat", "output",
      "weights", "snapshot", "devices", "connection", "connectionFallback", "clusterSize", "comm",
      "maxAttempts", "persistent", "resize", "exchangePrecision", "testDataFrame", "allreduce",
      "latencyKb", "hierarchical")
      .foreach(flag => assert(Options.Usage.contains(s"-$flag "), flag))
  }
}
