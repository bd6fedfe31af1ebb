#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the benchmark nets that are too long to keep by hand: CaffeNet (AlexNet as Caffe's
reference model lays it out, batch 256), ResNet-50 (batch 64, the torchvision layout: stride
on the 3x3 convolution of each bottleneck) and MobileNet v1 (batch 32). All take their data from Input layers, so one
training iteration is what they measure.

    python3 bench/models/make_models.py   # rewrites caffenet_train.prototxt, resnet50_train.prototxt, mobilenet_v1_train.prototxt
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def conv(name, bottom, out, kernel, stride=1, pad=0, group=1, bias=True, filler="gaussian",
         std=0.01):
    weight = f'weight_filler {{ type: "{filler}"' + (f" std: {std}" if filler == "gaussian" else "") + " }"
    extra = f" group: {group}" if group > 1 else ""
    bias_part = ' bias_filler { type: "constant" value: 0.1 }' if bias else " bias_term: false"
    params = "param { lr_mult: 1 decay_mult: 1 }" + (" param { lr_mult: 2 decay_mult: 0 }" if bias else "")
    return (f'layer {{ name: "{name}" type: "Convolution" bottom: "{bottom}" top: "{name}" {params}\n'
            f"  convolution_param {{ num_output: {out} kernel_size: {kernel} stride: {stride} "
            f"pad: {pad}{extra}{bias_part}\n    {weight} }} }}\n")


def relu(name, blob):
    return f'layer {{ name: "{name}" type: "ReLU" bottom: "{blob}" top: "{blob}" }}\n'


def pool(name, bottom, kind, kernel=3, stride=2, global_pool=False):
    if global_pool:
        spec = f"pool: {kind} global_pooling: true"
    else:
        spec = f"pool: {kind} kernel_size: {kernel} stride: {stride}"
    return (f'layer {{ name: "{name}" type: "Pooling" bottom: "{bottom}" top: "{name}"\n'
            f"  pooling_param {{ {spec} }} }}\n")


def fc(name, bottom, out, std=0.005):
    return (f'layer {{ name: "{name}" type: "InnerProduct" bottom: "{bottom}" top: "{name}"\n'
            f"  param {{ lr_mult: 1 decay_mult: 1 }} param {{ lr_mult: 2 decay_mult: 0 }}\n"
            f'  inner_product_param {{ num_output: {out} weight_filler {{ type: "gaussian" std: {std} }}\n'
            f'    bias_filler {{ type: "constant" value: 0.1 }} }} }}\n')


def inputs(batch, channels, size):
    return (f'layer {{ name: "data" type: "Input" top: "data" top: "label"\n'
            f"  input_param {{ shape {{ dim: {batch} dim: {channels} dim: {size} dim: {size} }} "
            f"shape {{ dim: {batch} }} }} }}\n")


def loss(bottom):
    return (f'layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "{bottom}" bottom: "label" '
            f'top: "loss" }}\n')


def caffenet(batch=256):
    text = ("# CaffeNet (AlexNet as laid out by Caffe's reference model) in training form with\n"
            "# Input layers, batch 256: written by make_models.py.\n"
            'name: "CaffeNet"\n' + inputs(batch, 3, 227))
    text += conv("conv1", "data", 96, 11, stride=4) + relu("relu1", "conv1")
    text += pool("pool1", "conv1", "MAX")
    text += ('layer { name: "norm1" type: "LRN" bottom: "pool1" top: "norm1"\n'
             "  lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 } }\n")
    text += conv("conv2", "norm1", 256, 5, pad=2, group=2) + relu("relu2", "conv2")
    text += pool("pool2", "conv2", "MAX")
    text += ('layer { name: "norm2" type: "LRN" bottom: "pool2" top: "norm2"\n'
             "  lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 } }\n")
    text += conv("conv3", "norm2", 384, 3, pad=1) + relu("relu3", "conv3")
    text += conv("conv4", "conv3", 384, 3, pad=1, group=2) + relu("relu4", "conv4")
    text += conv("conv5", "conv4", 256, 3, pad=1, group=2) + relu("relu5", "conv5")
    text += pool("pool5", "conv5", "MAX")
    text += fc("fc6", "pool5", 4096) + relu("relu6", "fc6")
    text += ('layer { name: "drop6" type: "Dropout" bottom: "fc6" top: "fc6" '
             "dropout_param { dropout_ratio: 0.5 } }\n")
    text += fc("fc7", "fc6", 4096) + relu("relu7", "fc7")
    text += ('layer { name: "drop7" type: "Dropout" bottom: "fc7" top: "fc7" '
             "dropout_param { dropout_ratio: 0.5 } }\n")
    text += fc("fc8", "fc7", 1000, std=0.01) + loss("fc8")
    return text


def bn(name, blob):
    return (f'layer {{ name: "{name}_bn" type: "BatchNorm" bottom: "{blob}" top: "{blob}" }}\n'
            f'layer {{ name: "{name}_scale" type: "Scale" bottom: "{blob}" top: "{blob}" '
            f"scale_param {{ bias_term: true }} }}\n")


def conv_bn(name, bottom, out, kernel, stride=1, pad=0, activation=True):
    text = conv(name, bottom, out, kernel, stride, pad, bias=False, filler="msra") + bn(name, name)
    if activation:
        text += relu(f"{name}_relu", name)
    return text


def resnet50(batch=64):
    text = ("# ResNet-50 (torchvision's layout: stride on each bottleneck's 3x3 convolution) in\n"
            "# training form with Input layers, batch 64: written by make_models.py.\n"
            'name: "ResNet-50"\n' + inputs(batch, 3, 224))
    text += conv_bn("conv1", "data", 64, 7, stride=2, pad=3)
    text += pool("pool1", "conv1", "MAX")
    bottom, channels = "pool1", 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=2):
        for block in range(blocks):
            name = f"res{stage}{chr(ord('a') + block)}"
            stride = 2 if block == 0 and stage > 2 else 1
            out = width * 4
            text += conv_bn(f"{name}_branch2a", bottom, width, 1)
            text += conv_bn(f"{name}_branch2b", f"{name}_branch2a", width, 3, stride=stride, pad=1)
            text += conv_bn(f"{name}_branch2c", f"{name}_branch2b", out, 1, activation=False)
            shortcut = bottom
            if block == 0:
                text += conv_bn(f"{name}_branch1", bottom, out, 1, stride=stride, activation=False)
                shortcut = f"{name}_branch1"
            text += (f'layer {{ name: "{name}" type: "Eltwise" bottom: "{shortcut}" '
                     f'bottom: "{name}_branch2c" top: "{name}" }}\n')
            text += relu(f"{name}_relu", name)
            bottom, channels = name, out
    text += pool("pool5", bottom, "AVE", global_pool=True)
    text += fc("fc1000", "pool5", 1000, std=0.01) + loss("fc1000")
    return text


def mobilenet_v1(batch=32):
    text = ("# MobileNet v1 (width 1.0, 224x224) in training form with Input layers, batch 32:\n"
            "# a 3x3 stride-2 convolution, 13 depthwise-separable blocks (depthwise 3x3 and\n"
            "# pointwise 1x1 convolutions, each with BatchNorm + Scale + ReLU), global average\n"
            "# pooling and the classifier. Written by make_models.py.\n"
            'name: "MobileNet-v1"\n' + inputs(batch, 3, 224))
    text += conv_bn("conv1", "data", 32, 3, stride=2, pad=1)
    bottom, channels = "conv1", 32
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + \
        [(1024, 2), (1024, 1)]
    for i, (out, stride) in enumerate(blocks, start=2):
        dw = f"conv{i}_dw"
        text += (conv(dw, bottom, channels, 3, stride=stride, pad=1, group=channels, bias=False,
                      filler="msra") + bn(dw, dw) + relu(f"{dw}_relu", dw))
        text += conv_bn(f"conv{i}_pw", dw, out, 1)
        bottom, channels = f"conv{i}_pw", out
    text += pool("pool6", bottom, "AVE", global_pool=True)
    text += fc("fc7", "pool6", 1000, std=0.01) + loss("fc7")
    return text


if __name__ == "__main__":
    for name, text in [("caffenet_train.prototxt", caffenet()),
                       ("resnet50_train.prototxt", resnet50()),
                       ("mobilenet_v1_train.prototxt", mobilenet_v1())]:
        with open(os.path.join(HERE, name), "w") as f:
            f.write(text)
        print("wrote", name)
