// SPDX-License-Identifier: Apache-2.0
package io.cortado.caffeonspark.tools

import scala.collection.mutable

import org.apache.spark.sql.{DataFrame, SQLContext}
import org.apache.spark.sql.types.StringType
import org.slf4j.{Logger, LoggerFactory}

import io.cortado.CortadoConfigException
import io.cortado.storage.HadoopFiles

/**
 * CaffeOnSpark's vocabulary constants: the indices caption embeddings use besides the words'.
 *
 * A vocabulary's words are numbered by their place in it, from 0: [[UNKNOWN_TOKEN]] is always
 * first (index 0), then the words, most frequent first. In an embedding, [[START_END_ID]] (0)
 * marks the start of the input sentence and the end of the target sentence, [[NO_TOKEN]] (-1)
 * fills the places after the caption, and a word not in the vocabulary is [[UNKNOWN_ID]] (1).
 * As in CaffeOnSpark, index 0 thus stands for the start or end rather than for
 * [[UNKNOWN_TOKEN]], and [[UNKNOWN_ID]] is also the most frequent word's index: an unknown word
 * reads back as that word (see [[Conversions.Embedding2Caption]]). Embeddings and vocabularies
 * are kept so, as models trained on them expect.
 */
object Vocab {

  /** The vocabulary's first entry (index 0). */
  val UNKNOWN_TOKEN: String = "UNK"

  /** The index a word not in the vocabulary is embedded as. */
  val UNKNOWN_ID: Int = 1

  /** The index marking the start of an input sentence and the end of a target sentence. */
  val START_END_ID: Int = 0

  /** The index of the first word of the vocabulary after [[UNKNOWN_TOKEN]]. */
  val VALID_TOKEN_INDEX: Int = 1

  /** The value of the places of an embedding after the caption. */
  val NO_TOKEN: Int = -1
}

/**
 * CaffeOnSpark's caption vocabulary: the words of a DataFrame's captions ([[genFromData]]),
 * saved as text, one word a line ([[save]], [[load]]), and the word-index maps that
 * [[Conversions.ImageCaption2Embedding]] and [[Conversions.Embedding2Caption]] use.
 *
 * Differences from CaffeOnSpark: [[genFromData]] fills the maps too (CaffeOnSpark's were empty
 * until [[load]]); words of equal count are in alphabetical order (CaffeOnSpark left their
 * order to Spark's sort); [[load]] replaces the maps rather than adding to them; an empty
 * vocabulary, a missing file, a repeated word and an existing [[save]] path fail with
 * CortadoConfigException or CortadoIOException naming them. Thread-safe.
 *
 * @param sqlContext the application's SQLContext
 */
class Vocab(val sqlContext: SQLContext) {

  @transient private lazy val log: Logger = LoggerFactory.getLogger(classOf[Vocab])

  /** The words in index order, UNK first; empty until generated or loaded. */
  private var words: Array[String] = Array.empty
  private var wordIndex: Map[String, Int] = Map.empty
  private var indexWord: Map[Int, String] = Map.empty

  /**
   * Makes the vocabulary of the captions in `dataset`'s string column `columnName`, split into
   * words by [[Conversions.sentence2Words]]: [[Vocab.UNKNOWN_TOKEN]], then the words by count
   * (most frequent first; equal counts alphabetically), the `vocabSize` most frequent when
   * `vocabSize` is positive, else all. Null captions are skipped.
   *
   * @throws CortadoConfigException when the column is missing or not strings, or holds no word
   */
  def genFromData(dataset: DataFrame, columnName: String, vocabSize: Int = -1): Unit = {
    val field = dataset.schema.fields.find(_.name == columnName).getOrElse(
      throw new CortadoConfigException(s"no column '$columnName' to make a vocabulary of: the " +
        s"DataFrame has ${dataset.columns.mkString(", ")}"))
    if (field.dataType != StringType) {
      throw new CortadoConfigException(s"column '$columnName' holds " +
        s"${field.dataType.simpleString}, not the strings (captions) a vocabulary is made of")
    }
    val counts = dataset.select(columnName).rdd.flatMap { row =>
      if (row.isNullAt(0)) Array.empty[String] else Conversions.sentence2Words(row.getString(0))
    }.map(word => (word, 1L)).reduceByKey(_ + _)
    val order = Ordering.by[(String, Long), (Long, String)] { case (word, n) => (-n, word) }
    val top = if (vocabSize > 0) counts.takeOrdered(vocabSize)(order) else counts.collect()
    if (top.isEmpty) {
      throw new CortadoConfigException(s"column '$columnName' holds no words: the vocabulary " +
        "would be empty")
    }
    set(Vocab.UNKNOWN_TOKEN +: top.sorted(order).map(_._1), s"column '$columnName'")
  }

  /**
   * Writes the vocabulary to `vocabFilePath` (any Hadoop path) as CaffeOnSpark did: a folder
   * holding one text file, `part-00000`, of one word a line, in index order. Written to a
   * temporary name and renamed.
   *
   * @throws CortadoConfigException when the vocabulary is empty or a word holds a line break
   * @throws CortadoIOException when `vocabFilePath` exists or cannot be written
   */
  def save(vocabFilePath: String): Unit = {
    val current = synchronized(words)
    if (current.isEmpty) {
      throw new CortadoConfigException(s"cannot save the vocabulary to $vocabFilePath: it is " +
        "empty (genFromData or load it first)")
    }
    current.find(w => w.indexOf('\n') >= 0 || w.indexOf('\r') >= 0).foreach { w =>
      throw new CortadoConfigException(s"cannot save the vocabulary to $vocabFilePath: the " +
        s"word '$w' holds a line break, and the file has one word a line")
    }
    val sc = sqlContext.sparkContext
    HadoopFiles.writeAtomically(vocabFilePath, sc.hadoopConfiguration, "the vocabulary") {
      temp => sc.parallelize(current.toSeq, 1).saveAsTextFile(temp)
    }
  }

  /**
   * Reads the vocabulary at `vocabFilePath` (a folder of text files, as [[save]] writes, or one
   * text file): the word on line i (from 0) has index i. Replaces the vocabulary.
   *
   * @throws CortadoIOException when `vocabFilePath` does not exist
   * @throws CortadoConfigException when it holds no word, an empty line or a word twice
   */
  def load(vocabFilePath: String): Unit = {
    val sc = sqlContext.sparkContext
    CocoCaptions.requireExists(vocabFilePath, sc.hadoopConfiguration, "the vocabulary")
    val lines = sc.textFile(vocabFilePath).collect()
    if (lines.isEmpty) {
      throw new CortadoConfigException(s"the vocabulary $vocabFilePath holds no words")
    }
    if (lines(0) != Vocab.UNKNOWN_TOKEN) {
      log.warn(s"the vocabulary $vocabFilePath starts with '${lines(0)}', not " +
        s"${Vocab.UNKNOWN_TOKEN}: its words are numbered from there all the same")
    }
    set(lines, s"the vocabulary $vocabFilePath")
  }

  /** Each word's index (see [[Vocab]]); empty until [[genFromData]] or [[load]]. */
  def word2indexMap(): scala.collection.Map[String, Int] = synchronized(wordIndex)

  /** Each index's word, the inverse of [[word2indexMap]]. */
  def index2wordMap(): scala.collection.Map[Int, String] = synchronized(indexWord)

  /** Makes `list` the vocabulary; `source` names it in errors. */
  private def set(list: Array[String], source: String): Unit = {
    val index = mutable.LinkedHashMap[String, Int]()
    var i = 0
    while (i < list.length) {
      val word = list(i)
      if (word.isEmpty) throw new CortadoConfigException(s"$source: line ${i + 1} is empty")
      index.get(word).foreach { first =>
        throw new CortadoConfigException(
          s"$source: '$word' is on lines ${first + 1} and ${i + 1}: a word may be there once")
      }
      index(word) = i
      i += 1
    }
    val byIndex = index.map { case (word, n) => (n, word) }.toMap
    synchronized {
      words = list.clone()
      wordIndex = index.toMap
      indexWord = byIndex
    }
  }
}
