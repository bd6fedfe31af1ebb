// SPDX-License-Identifier: Apache-2.0
// The `cortado` subcommands. Each returns the process exit code; errors propagate as
// cortado::Error and main() prints them.
#pragma once

namespace cortado::tools {

// cortado time --model=NET --iterations=N [--phase=TRAIN|TEST] [--level] [--stage]
int TimeCommand(int argc, char** argv);
// cortado device_query
int DeviceQueryCommand(int argc, char** argv);
// cortado convert_idx --images=F --labels=F --out=DIR [--shuffle] [--backend=lmdb] [--overwrite]
int ConvertIdxCommand(int argc, char** argv);

}  // namespace cortado::tools
