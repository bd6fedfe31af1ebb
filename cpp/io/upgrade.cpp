// SPDX-License-Identifier: Apache-2.0
// Placeholder until the upgrade pass lands: files in the current format pass through.
#include "io/upgrade.hpp"

#include "core/error.hpp"

namespace cortado::io {

bool NetNeedsUpgrade(const caffe::NetParameter& param) {
  return param.layers_size() > 0 || param.input_size() > 0;
}

bool UpgradeNetAsNeeded(const std::string& source, caffe::NetParameter* param) {
  if (NetNeedsUpgrade(*param)) {
    CORTADO_THROW(kUnimplemented, "{}: old-format nets are not upgraded yet", source);
  }
  return false;
}

bool SolverNeedsUpgrade(const caffe::SolverParameter& param) { return param.has_solver_type(); }

bool UpgradeSolverAsNeeded(const std::string&, caffe::SolverParameter*) { return false; }

}  // namespace cortado::io
