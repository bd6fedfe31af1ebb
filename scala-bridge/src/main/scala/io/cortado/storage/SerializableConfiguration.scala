// SPDX-License-Identifier: Apache-2.0
package io.cortado.storage

import java.io.{ObjectInputStream, ObjectOutputStream}

import org.apache.hadoop.conf.Configuration

/**
 * A Hadoop Configuration that travels in a Spark closure (Configuration is Writable, not
 * Serializable), so that an executor reaches the same file systems as the driver: fs.defaultFS,
 * HDFS name services, credentials providers set through `spark.hadoop.*`.
 */
final class SerializableConfiguration(@transient var value: Configuration) extends Serializable {

  private def writeObject(out: ObjectOutputStream): Unit = {
    out.defaultWriteObject()
    value.write(out)
  }

  private def readObject(in: ObjectInputStream): Unit = {
    in.defaultReadObject()
    value = new Configuration(false)
    value.readFields(in)
  }
}
