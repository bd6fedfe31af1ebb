// SPDX-License-Identifier: Apache-2.0
// HDF5 inputs: model and solver-state files in Caffe's HDF5 layout, and the data files of an
// HDF5Data layer (opened, checked, read and served as one batch).
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "core/context.hpp"
#include "fuzz/fuzz_util.hpp"
#include "io/hdf5_io.hpp"
#include "io/proto_io.hpp"
#include "net/net.hpp"

namespace {

caffe::NetParameter DataNet(const std::string& list) {
  caffe::NetParameter param;
  cortado::io::ReadProtoFromTextString(
      "layer { name: 'h5' type: 'HDF5Data' top: 'data' top: 'label' "
      "hdf5_data_param { source: '" +
          list + "' batch_size: 2 } }",
      "hdf5 net", &param);
  return param;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cortado::fuzz::SetUpOnce();
  static cortado::fuzz::InputFile file("input.h5");
  static cortado::fuzz::InputFile list("list.txt");
  static const caffe::NetParameter net_param = [] {
    std::ofstream(list.path()) << file.path() << "\n";
    return DataNet(list.path());
  }();
  const std::string& path = file.Write(data, size);
  cortado::fuzz::ExpectErrorsOnly([&] { cortado::io::ReadNetParameterHdf5(path); });
  cortado::fuzz::ExpectErrorsOnly([&] { cortado::io::ReadSolverStateHdf5(path); });
  cortado::fuzz::ExpectErrorsOnly([&] {
    cortado::Context ctx(cortado::Device::Cpu(), 1);
    cortado::Net net(net_param, &ctx);
    net.Forward();
  });
  return 0;
}
