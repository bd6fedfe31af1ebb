// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import org.apache.spark.SparkException
import org.scalatest.funsuite.AnyFunSuite

import io.cortado.CortadoConfigException
import io.cortado.jni.{NativeNet, NativeNetSuite}

class NativeOnExecutorsSuite extends AnyFunSuite with PerTest {

  test("NativeNet forward runs inside mapPartitions on the executors") {
    val rows = ss.sparkContext.parallelize(0 until 8, numSlices = 4)
    val results = rows
      .mapPartitions { part =>
        val values = part.toSeq
        // Input row i is (i, i, i): ip = 0.5 * 3i + 1 for both outputs.
        val input = values.flatMap(i => Seq.fill(3)(i.toFloat))
        NativeNetSuite.withNet(NativeNetSuite.TinyNet) { net =>
          val out = NativeNetSuite.forwardIp(net, input)
          values.zip(out.grouped(2).toSeq).iterator
        }
      }
      .collect()
    assert(results.length === 8)
    results.foreach { case (i, out) =>
      assert(out === Seq(1.5f * i + 1, 1.5f * i + 1), s"row $i")
    }
  }

  test("a native error in a task arrives as the Java exception with the native message") {
    val e = intercept[SparkException] {
      ss.sparkContext
        .parallelize(0 until 2, numSlices = 2)
        .map { _ =>
          NativeNet.create("layer { name: 'x' type: 'Frobnicate' }", "task.prototxt",
            NativeNet.TEST, -1, 1)
        }
        .collect()
    }
    val cause = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null)
      .collectFirst { case c: CortadoConfigException => c }
    // In local mode the task's exception object itself comes back as the cause.
    assert(cause.isDefined || e.getMessage.contains("CortadoConfigException"), e.getMessage)
    assert(e.getMessage.contains("task.prototxt: layer 'x': unknown layer type 'Frobnicate'"),
      e.getMessage)
    // The session (and the JVM) still work.
    assert(ss.sparkContext.parallelize(1 to 3).sum() === 6)
  }
}
