// SPDX-License-Identifier: Apache-2.0
// .caffemodel files (binary NetParameter, and HDF5 by content, as Net::CopyTrainedLayersFrom
// reads them): parsing, Caffe's upgrades of old formats, and copying the weights into a net by
// layer name with its shape checks.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/context.hpp"
#include "fuzz/fixed_net.hpp"
#include "fuzz/fuzz_util.hpp"
#include "io/proto_io.hpp"
#include "net/net.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cortado::fuzz::SetUpOnce();
  static cortado::Context ctx(cortado::Device::Cpu(), 1);
  static const std::unique_ptr<cortado::Net> net = [] {
    caffe::NetParameter param;
    cortado::io::ReadProtoFromTextString(cortado::fuzz::kFixedNet, "fixed", &param);
    return std::make_unique<cortado::Net>(param, &ctx);
  }();
  static cortado::fuzz::InputFile file("model.caffemodel");
  const std::string& path = file.Write(data, size);
  cortado::fuzz::ExpectErrorsOnly([&] { net->CopyTrainedLayersFrom(path); });
  return 0;
}
