// SPDX-License-Identifier: Apache-2.0
package io.cortado.ml

import java.nio.charset.StandardCharsets
import java.security.MessageDigest

import org.apache.spark.{TaskContext, TaskKilledException}
import org.apache.spark.ml.linalg.Vectors
import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.expressions.GenericRow
import org.apache.spark.sql.types.StructType

import io.cortado.CortadoConfigException
import io.cortado.data.{RowConverter, TopSpec}
import io.cortado.jni.{DataLayerInfo, NativeLib, NativeNet}

/**
 * A trained net as transform ships it to the executors: the net prototxt (its TEST phase runs),
 * the .caffemodel bytes (named `weightsName` in messages) and the device (-1: the CPU).
 */
private[ml] final case class ModelData(netText: String, netSource: String, weights: Array[Byte],
    weightsName: String, device: Int) {

  /** What identifies the net an executor builds from this: a digest of text, weights, device. */
  lazy val key: String = {
    val digest = MessageDigest.getInstance("SHA-256")
    digest.update(netText.getBytes(StandardCharsets.UTF_8))
    digest.update(weights)
    digest.update(device.toString.getBytes(StandardCharsets.UTF_8))
    digest.digest().map(b => f"${b & 0xff}%02x").mkString
  }
}

/**
 * How rows reach the TEST net and what comes out: through the feed layer `feedLayer` ("TEST/data",
 * batches of `batchSize`, each top reading its spec's column), or else by setting the Input blob
 * `inputBlob` from `featuresColumn`; then the class scores `scores` and the further `blobs` are read.
 */
private[ml] final case class InferencePlan(
    feedLayer: Option[String],
    batchSize: Int,
    specs: Seq[TopSpec],
    inputBlob: String,
    featuresColumn: String,
    scores: String,
    blobs: Seq[String]) {

  /** The blobs read after each forward. */
  def keep: Seq[String] = (scores +: blobs).distinct
}

/** Which DataFrame column each top of a feed layer reads, for fit and for transform. */
private[ml] object FeedTops {

  /**
   * The column each top of `feed` reads, in top order: `featuresTop` (empty: the first top)
   * reads `featuresColumn`, `labelTop` (empty: the other top, when there are exactly two) reads
   * `labelColumn`. Throws, naming `source`, for a named top the layer lacks, or a top neither
   * fills (`verb` says who fills them: "fit", "transform").
   */
  def columns(feed: DataLayerInfo, source: String, verb: String, featuresTop: String,
      labelTop: String, featuresColumn: String, labelColumn: String): Seq[String] = {
    val tops = feed.tops.toSeq
    def pick(given: String, what: String, default: => Option[String]): Option[String] =
      if (given.nonEmpty) {
        if (!tops.contains(given)) {
          throw new CortadoConfigException(s"$source: $what '$given' is not a top of feed " +
            s"layer '${feed.name}' (its tops: ${tops.mkString(", ")})")
        }
        Some(given)
      } else default
    val features = pick(featuresTop, "featuresTop", tops.headOption).get
    val label = pick(labelTop, "labelTop", if (tops.length == 2) tops.find(_ != features) else None)
    tops.map { top =>
      if (top == features) featuresColumn
      else if (label.contains(top)) labelColumn
      else throw new CortadoConfigException(s"$source: feed layer '${feed.name}' has tops " +
        s"${tops.mkString(", ")}; $verb fills featuresTop '$features'" +
        label.map(l => s" and labelTop '$l'").getOrElse("") + s", not '$top'")
    }
  }
}

/** One layer of a net as [[NativeLib.layers]] describes it. */
private[ml] final case class LayerSummary(name: String, kind: String, bottoms: Seq[String],
    tops: Seq[String])

private[ml] object LayerSummary {

  def all(netText: String, netSource: String, phase: Int): Seq[LayerSummary] =
    NativeLib.layers(netText, netSource, phase).toSeq.map { line =>
      val f = line.split("\t", -1)
      val nb = f(2).toInt
      val nt = f(3 + nb).toInt
      LayerSummary(f(0), f(1), f.slice(3, 3 + nb).toSeq, f.slice(4 + nb, 4 + nb + nt).toSeq)
    }
}

private[ml] object InferencePlan {

  /** Layer types whose first bottom is the class scores. */
  private val ScoreReaders = Set("SoftmaxWithLoss", "Softmax", "Accuracy")

  /**
   * The plan for `model`'s TEST net: the features fill `featuresTop` (empty: the feed layer's
   * first top, or the first Input), the labels `labelTop` (empty: a feed layer's other top when
   * it has two) from `labelColumn`; the scores are `scoresBlob` (empty: the first bottom of the
   * first SoftmaxWithLoss, Softmax or Accuracy layer, else the last layer's top). Throws
   * CortadoConfigException naming the net and what is wrong.
   */
  def make(model: ModelData, featuresColumn: String, labelColumn: String, featuresTop: String,
      labelTop: String, scoresBlob: String, blobs: Seq[String]): InferencePlan = {
    val source = model.netSource
    val text = model.netText
    val layers = LayerSummary.all(text, source, NativeNet.TEST)
    val blobNames = NativeLib.blobNames(text, source, NativeNet.TEST).toSeq
    val feeds = NativeLib.dataLayers(text, source, NativeNet.TEST).toSeq.filter(_.feed)
    if (feeds.size > 1) {
      throw new CortadoConfigException(s"$source: the TEST net has ${feeds.size} feed layers " +
        s"(${feeds.map(_.name).mkString(", ")}); transform fills one")
    }
    val scores =
      if (scoresBlob.nonEmpty) scoresBlob
      else layers.find(l => ScoreReaders(l.kind) && l.bottoms.nonEmpty).map(_.bottoms.head)
        .orElse(layers.lastOption.filter(_.tops.nonEmpty).map(_.tops.head))
        .getOrElse(throw new CortadoConfigException(s"$source: the TEST net has no layers"))
    (scores +: blobs).foreach { b =>
      if (!blobNames.contains(b)) {
        throw new CortadoConfigException(s"$source: the TEST net has no blob '$b' (it has: " +
          s"${blobNames.mkString(", ")})")
      }
    }
    feeds.headOption match {
      case Some(feed) =>
        val columns = FeedTops.columns(feed, source, "transform", featuresTop, labelTop,
          featuresColumn, labelColumn)
        val specs = feed.tops.indices.map { i =>
          TopSpec(feed.name, feed.tops(i), columns(i), feed.sampleShapes(i).toSeq)
        }
        InferencePlan(Some(s"TEST/${feed.name}"), feed.batchSize, specs, "", featuresColumn,
          scores, blobs)
      case None =>
        val inputs = layers.filter(_.kind == "Input").flatMap(_.tops)
        if (inputs.isEmpty) {
          throw new CortadoConfigException(s"$source: the TEST net has neither a feed layer " +
            "(CoSData, or MemoryData with source_class) nor Input layers (a deploy net's " +
            "`input`): nothing to fill with the features")
        }
        val input = if (featuresTop.nonEmpty) featuresTop else inputs.head
        if (!inputs.contains(input)) {
          throw new CortadoConfigException(s"$source: featuresTop '$input' is not an input of " +
            s"the net (its inputs: ${inputs.mkString(", ")})")
        }
        if (inputs.length > 1) {
          throw new CortadoConfigException(s"$source: the net has ${inputs.length} inputs " +
            s"(${inputs.mkString(", ")}); transform fills one")
        }
        InferencePlan(None, 0, Seq.empty, input, featuresColumn, scores, blobs)
    }
  }
}

/** What a partition of transform computes: per row, the scores and blobs of its sample. */
private[ml] object Inference {

  /**
   * The rows of `rows` (of `schema`), each followed by: the scores as a vector (with
   * `raw`), their softmax as a vector (with `probability`), the argmax as a double (with
   * `prediction`), then each of `plan.blobs` as a vector: the row's sample of a blob whose
   * first axis is the batch, or the whole blob (an aggregate) repeated on each row.
   */
  def run(model: ModelData, plan: InferencePlan, schema: StructType, rows: Iterator[Row],
      raw: Boolean, probability: Boolean, prediction: Boolean): Iterator[Row] = {
    if (!rows.hasNext) return Iterator.empty
    val key = s"${model.key}|${plan.hashCode}"
    val net = NetPool.borrow(key, model, plan)
    var done = false
    def giveBack(failed: Boolean): Unit = if (!done) {
      done = true
      if (failed) net.dispose() else NetPool.giveBack(key, net)
    }
    val context = Option(TaskContext.get())
    context.foreach { c =>
      c.addTaskFailureListener((_: TaskContext, _: Throwable) => giveBack(failed = true))
      c.addTaskCompletionListener[Unit]((_: TaskContext) => giveBack(failed = false))
    }
    net.specs.foreach(s => fieldIndex(schema, s.column))
    val converter = RowConverter.inPlace(schema, net.specs)
    val width = schema.length
    val outputs = Seq(raw, probability, prediction).count(identity) + plan.blobs.length
    // A feed layer runs whole batches (the last one padded); an Input runs the rows it is given.
    val wholeBatches = plan.feedLayer.isDefined
    new Iterator[Row] {
      // The rows of the batch in the net (their samples were written straight into its input),
      // how many, and how many of them were returned; the index of the last row read.
      private val batch = new Array[Row](net.batchSize)
      private var filled = 0
      private var emitted = 0
      private var index = -1L
      // The batch's scores (one row of `classes` per sample) and further blobs.
      private var scoreShape: Array[Int] = null
      private var scoreValues: Array[Float] = null
      private var classes = 0
      private var extra: Seq[(Array[Int], Array[Float])] = Nil

      def hasNext: Boolean = {
        val more = emitted < filled || nextBatch()
        if (!more && context.isEmpty) giveBack(failed = false)
        more
      }

      def next(): Row = {
        if (!hasNext) throw new NoSuchElementException("no more rows")
        emitted += 1
        output(emitted - 1)
      }

      // Reads the next batch of rows into the net and runs it; false at the end of the rows.
      private def nextBatch(): Boolean = {
        filled = 0
        emitted = 0
        while (filled == 0 && rows.hasNext) {
          // A cancelled job stops between batches.
          if (context.exists(_.isInterrupted())) throw new TaskKilledException("cancelled")
          while (filled < net.batchSize && rows.hasNext) {
            val row = rows.next()
            index += 1
            if (converter.into(row, index, net.batch, filled)) {
              batch(filled) = row
              filled += 1
            }
          }
        }
        if (filled == 0) return false
        try net.forward(filled)
        catch { case e: Throwable => giveBack(failed = true); throw e }
        val (shape, values) = net.blob(plan.scores)
        if (shape.headOption.getOrElse(0) != (if (wholeBatches) net.batchSize else filled)) {
          throw new CortadoConfigException(s"${model.netSource}: the scores blob " +
            s"'${plan.scores}' has shape ${shape.mkString(" ")}, not one row per sample: set " +
            "scoresBlob")
        }
        scoreShape = shape
        scoreValues = values
        classes = values.length / shape.head
        extra = plan.blobs.map(net.blob)
        true
      }

      // Row `i` of the batch followed by its outputs.
      private def output(i: Int): Row = {
        val row = batch(i)
        batch(i) = null
        val columns = new Array[Any](width + outputs)
        var c = 0
        while (c < width) { columns(c) = row.get(c); c += 1 }
        def add(value: Any): Unit = { columns(c) = value; c += 1 }
        val from = i * classes
        if (raw) add(Vectors.dense(doubles(scoreValues, from, classes)))
        if (probability) add(Vectors.dense(softmax(scoreValues, from, classes)))
        if (prediction) add(argmax(scoreValues, from, classes).toDouble)
        extra.foreach { case (shape, values) =>
          if (shape.headOption.contains(scoreShape.head)) {
            val size = values.length / shape.head
            add(Vectors.dense(doubles(values, i * size, size)))
          } else add(Vectors.dense(doubles(values, 0, values.length)))
        }
        new GenericRow(columns)
      }
    }
  }

  private def fieldIndex(schema: StructType, column: String): Int =
    schema.fieldNames.indexOf(column) match {
      case -1 => throw new CortadoConfigException(s"column '$column' is missing (the data has: " +
        s"${schema.fieldNames.mkString(", ")})")
      case i => i
    }

  /** Values `from` until `from + n` of `values`, as doubles. */
  private def doubles(values: Array[Float], from: Int, n: Int): Array[Double] = {
    val out = new Array[Double](n)
    var j = 0
    while (j < n) { out(j) = values(from + j).toDouble; j += 1 }
    out
  }

  /**
   * The softmax of the `n` scores from `from` of `scores` (shifted by their maximum, so that it
   * cannot overflow).
   */
  def softmax(scores: Array[Float], from: Int, n: Int): Array[Double] = {
    var max = Float.NegativeInfinity
    var j = 0
    while (j < n) { if (scores(from + j) > max) max = scores(from + j); j += 1 }
    val e = new Array[Double](n)
    var sum = 0.0
    j = 0
    while (j < n) {
      e(j) = math.exp((scores(from + j) - max).toDouble)
      sum += e(j)
      j += 1
    }
    j = 0
    while (j < n) { e(j) /= sum; j += 1 }
    e
  }

  /** The index of the largest of the `n` scores from `from` (the first, on ties). */
  def argmax(scores: Array[Float], from: Int, n: Int): Int = {
    var best = 0
    var i = 1
    while (i < n) {
      if (scores(from + i) > scores(from + best)) best = i
      i += 1
    }
    best
  }
}
