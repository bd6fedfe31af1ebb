// SPDX-License-Identifier: Apache-2.0
#include <google/protobuf/text_format.h>

#include "io/proto_io.hpp"
#include "support/gradient_checker.hpp"

namespace cortado::testing {

caffe::LayerParameter LayerParam(const std::string& text) {
  caffe::LayerParameter param;
  if (!google::protobuf::TextFormat::ParseFromString(text, &param)) {
    ADD_FAILURE() << "cannot parse LayerParameter text: " << text;
  }
  return param;
}

caffe::NetParameter NetParam(const std::string& text) {
  caffe::NetParameter param;
  io::ReadProtoFromTextString(text, "<test>", &param);
  return param;
}

}  // namespace cortado::testing
