// SPDX-License-Identifier: Apache-2.0
package io.cortado.api

import org.scalatest.funsuite.AnyFunSuite

import io.cortado.Arm.withResource
import io.cortado.CortadoConfigException
import io.cortado.jni.NativeNetSuite

class NetSuite extends AnyFunSuite {

  test("Net: forward with hand-computed values, and calls after close throw") {
    val net = Net(NativeNetSuite.TinyNet, "tiny.prototxt")
    withResource(net) { net =>
      assert(net.blobNames === Seq("data", "ip"))
      // 0.5 * (1 + 2 + 3) + 1 = 4 for both outputs
      net.setBlob("data", Net.floatBuffer(Array(1f, 2f, 3f)), Some(Seq(1, 3)))
      net.forward()
      assert(net.blobData("ip").toSeq === Seq(4f, 4f))
    }
    net.close() // a second close does nothing
    val e = intercept[CortadoConfigException](net.forward())
    assert(e.getMessage.contains("null handle"), e.getMessage)
  }
}
