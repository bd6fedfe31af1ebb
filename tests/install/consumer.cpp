// SPDX-License-Identifier: Apache-2.0
// A program built against an installed Cortado (headers, libcortado, cortado.pc) the way a user
// builds one: runs a tiny net forward and prints its output.
#include <cstdio>

#include "core/context.hpp"
#include "net/net.hpp"
#include "proto/caffe.pb.h"

int main() {
  caffe::NetParameter param;
  param.set_name("tiny");
  caffe::LayerParameter* input = param.add_layer();
  input->set_name("data");
  input->set_type("Input");
  input->add_top("data");
  caffe::BlobShape* shape = input->mutable_input_param()->add_shape();
  shape->add_dim(1);
  shape->add_dim(3);
  caffe::LayerParameter* power = param.add_layer();
  power->set_name("twice");
  power->set_type("Power");
  power->add_bottom("data");
  power->add_top("twice");
  power->mutable_power_param()->set_scale(2.0f);
  cortado::Context ctx;
  cortado::Net net(param, &ctx);
  float* data = net.blob_by_name("data")->mutable_cpu_data();
  for (int i = 0; i < 3; ++i) data[i] = static_cast<float>(i + 1);
  net.Forward();
  const float* out = net.blob_by_name("twice")->cpu_data();
  std::printf("%g %g %g\n", out[0], out[1], out[2]);
  return out[0] == 2.0f && out[1] == 4.0f && out[2] == 6.0f ? 0 : 1;
}
