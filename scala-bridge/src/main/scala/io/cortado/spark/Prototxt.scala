// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import scala.collection.mutable.ArrayBuffer

/**
 * A protobuf text-format message read without its schema: fields in order, each value a raw
 * scalar token (strings unquoted) or a nested message. The driver uses it for the few solver
 * and net fields it needs (net path, max_iter, display, the feed layers' column names and
 * transforms); the native parser (NativeLib.validate*) has already checked the syntax and the
 * schema, so this reader is lenient and never the one that reports a bad file.
 *
 * @param text the message's own text (between its braces), valid prototxt of the same type
 */
final case class Prototxt(fields: Vector[(String, Either[String, Prototxt])], text: String) {

  def all(name: String): Seq[String] = fields.collect { case (`name`, Left(v)) => v }
  def get(name: String): Option[String] = all(name).lastOption
  def messages(name: String): Seq[Prototxt] = fields.collect { case (`name`, Right(m)) => m }
  def message(name: String): Option[Prototxt] = messages(name).lastOption

  def int(name: String, default: Int): Int = get(name).map(_.toInt).getOrElse(default)
  def float(name: String, default: Float): Float = get(name).map(_.toFloat).getOrElse(default)
  def bool(name: String, default: Boolean): Boolean = get(name).map(_ == "true").getOrElse(default)
}

object Prototxt {

  def parse(text: String): Prototxt = new Reader(text).message(0, end = None)

  private val Delimiters = "{}<>:,;#[]\"'"

  private final class Reader(s: String) {
    private var pos = 0

    private def skip(): Unit = {
      var more = true
      while (more && pos < s.length) {
        val c = s.charAt(pos)
        if (c == '#') { while (pos < s.length && s.charAt(pos) != '\n') pos += 1 }
        else if (c.isWhitespace || c == ',' || c == ';') pos += 1
        else more = false
      }
    }

    private def token(): String = {
      val start = pos
      while (pos < s.length && !s.charAt(pos).isWhitespace && !Delimiters.contains(s.charAt(pos))) {
        pos += 1
      }
      s.substring(start, pos)
    }

    private def quoted(): String = {
      val out = new StringBuilder
      while (pos < s.length && (s.charAt(pos) == '"' || s.charAt(pos) == '\'')) {
        val q = s.charAt(pos)
        pos += 1
        while (pos < s.length && s.charAt(pos) != q) {
          if (s.charAt(pos) == '\\' && pos + 1 < s.length) pos += 1
          out += s.charAt(pos)
          pos += 1
        }
        pos += 1
        skip()
      }
      out.toString
    }

    private def scalar(): String = {
      skip()
      if (pos < s.length && (s.charAt(pos) == '"' || s.charAt(pos) == '\'')) quoted() else token()
    }

    def message(start: Int, end: Option[Char]): Prototxt = {
      val fields = ArrayBuffer.empty[(String, Either[String, Prototxt])]
      var done = false
      while (!done) {
        skip()
        if (pos >= s.length) done = true
        else if (end.contains(s.charAt(pos))) { done = true }
        else {
          val name = token()
          if (name.isEmpty) {
            throw new IllegalArgumentException(s"prototxt: unexpected '${s.charAt(pos)}' at $pos")
          }
          skip()
          if (pos < s.length && s.charAt(pos) == ':') { pos += 1; skip() }
          if (pos < s.length && (s.charAt(pos) == '{' || s.charAt(pos) == '<')) {
            val close = if (s.charAt(pos) == '{') '}' else '>'
            pos += 1
            fields += name -> Right(message(pos, Some(close)))
            pos += 1
          } else if (pos < s.length && s.charAt(pos) == '[') {
            pos += 1
            skip()
            while (pos < s.length && s.charAt(pos) != ']') {
              fields += name -> Left(scalar())
              skip()
            }
            pos += 1
          } else {
            fields += name -> Left(scalar())
          }
        }
      }
      Prototxt(fields.toVector, s.substring(start, math.min(pos, s.length)))
    }
  }
}
