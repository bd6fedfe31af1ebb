// SPDX-License-Identifier: Apache-2.0
// Inserts a Split layer after every top that feeds more than one bottom (or feeds a bottom and
// carries a loss weight), so each consumer gets its own diff to write (Caffe's InsertSplits).
// Split layers are named "<blob>_<layer>_<top index>_split" and their tops
// "<blob>_<layer>_<top index>_split_<j>", as in Caffe.
#pragma once

#include "proto/caffe.pb.h"

namespace cortado {

caffe::NetParameter InsertSplits(const caffe::NetParameter& param);

}  // namespace cortado
