// SPDX-License-Identifier: Apache-2.0
// The `cortado` subcommands. Each returns the process exit code; errors propagate as
// cortado::Error and main() prints them.
#pragma once

#include <string>
#include <vector>

#include "core/context.hpp"
#include "net/net.hpp"
#include "proto/caffe.pb.h"

namespace cortado::tools {

// cortado train --solver=S [--snapshot=X.solverstate | --weights=A.caffemodel[,B...]]
//               [--iterations=N] [--sigint_effect=stop] [--sighup_effect=snapshot]
//               [--gpu=0 | --gpu=0,1 | --gpu=all]
//               [--world=N --rank=R --peers=h:p,... | under mpirun] [--comm=tcp|mpi|nccl]
int TrainCommand(int argc, char** argv);
// cortado test --model=NET --weights=W [--iterations=50] [--gpu=0]
int TestCommand(int argc, char** argv);

// cortado time --model=NET --iterations=N [--phase=TRAIN|TEST] [--level] [--stage] [--gpu=0]
int TimeCommand(int argc, char** argv);
// cortado device_query
int DeviceQueryCommand(int argc, char** argv);
// cortado convert_idx --images=F --labels=F --out=DIR [--shuffle] [--backend=lmdb] [--overwrite]
int ConvertIdxCommand(int argc, char** argv);
// cortado plot LOG [--output=PNG] [--width=1200 --height=900] [--smooth=N]
int PlotCommand(int argc, char** argv);
// `cortado export`: a net and its weights as an ONNX model.
int ExportCommand(int argc, char** argv);

// Helpers shared by the commands.
// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitList(const std::string& text);
// Reads a .caffemodel (binary or HDF5); when it belongs to a snapshot with a .sha256 beside it
// (<prefix>_iter_N.sha256), checks it against its digest first (snapshot::CheckDigestIfPresent).
caffe::NetParameter ReadWeightsFile(const std::string& path);
// Copies the weights of ReadWeightsFile(path) into `net`; errors name the file.
void CopyWeightsFromFile(const std::string& path, Net* net);

}  // namespace cortado::tools
