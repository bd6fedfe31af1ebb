// SPDX-License-Identifier: Apache-2.0
package io.cortado.spark

import io.cortado.cli.Options

/**
 * What [[Cortado]] needs besides the data, as CaffeOnSpark's Config carries it. Paths are
 * Hadoop paths (`file:`, `hdfs:`, or plain paths on the default file system).
 *
 * @param solverFile the solver prototxt (-conf); its `net` names the net prototxt, read from
 *                   that path, or from the solver's directory when relative and absent there
 * @param model      where train() writes the trained .caffemodel, and what test() and
 *                   features() read (-model)
 * @param weights    a .caffemodel to start training from (-weights): fine-tuning, or with
 *                   `snapshot` the model of the snapshot to resume
 * @param snapshot   a .solverstate to resume training from (-snapshot; needs `weights`)
 * @param devices    devices per executor (-devices); only 1 so far
 * @param idColumn   the column features() copies into its output as the row id; when the
 *                   DataFrame lacks it, the id is the row's number (a long) in the data
 */
final case class Config(
    solverFile: String,
    model: String = "",
    weights: String = "",
    snapshot: String = "",
    devices: Int = 1,
    idColumn: String = "id")

object Config {

  /** The Config of CaffeOnSpark's command line flags. */
  def fromOptions(o: Options): Config =
    Config(o.conf, model = o.model, weights = o.weights, snapshot = o.snapshot,
      devices = o.devices)
}
