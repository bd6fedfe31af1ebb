// SPDX-License-Identifier: Apache-2.0
// The upgrades Caffe applies to old model and solver files, so that they load unchanged:
// V0 layer definitions (`layers { layer { ... } }`) to V1, V1 (`layers { type: CONVOLUTION }`)
// to the current `layer { type: "Convolution" }`, the deprecated net-level `input:` /
// `input_dim:` / `input_shape:` fields to an Input layer, data-layer transform parameters to
// transform_param, BatchNorm's old param specs, and the solver's `solver_type` enum.
// `source` names the file in messages. Each returns true when it changed anything.
#pragma once

#include <string>

#include "proto/caffe.pb.h"

namespace cortado::io {

bool NetNeedsUpgrade(const caffe::NetParameter& param);
bool UpgradeNetAsNeeded(const std::string& source, caffe::NetParameter* param);
bool SolverNeedsUpgrade(const caffe::SolverParameter& param);
bool UpgradeSolverAsNeeded(const std::string& source, caffe::SolverParameter* param);

}  // namespace cortado::io
