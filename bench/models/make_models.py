#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the benchmark nets that are too long to keep by hand: CaffeNet (AlexNet as Caffe's
reference model lays it out, batch 256), ResNet-50 (batch 64, the torchvision layout: stride
on the 3x3 convolution of each bottleneck), MobileNet v1 (batch 32), GoogLeNet (Inception v1
as Caffe's bvlc_googlenet lays it out, without the auxiliary classifiers, batch 32) and
SqueezeNet v1.1 (batch 32). All take their data from Input layers, so one training iteration
is what they measure.

    python3 bench/models/make_models.py   # rewrites the *_train.prototxt files listed at the end
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def conv(name, bottom, out, kernel, stride=1, pad=0, group=1, bias=True, filler="gaussian",
         std=0.01, bias_value=0.1):
    weight = f'weight_filler {{ type: "{filler}"' + (f" std: {std}" if filler == "gaussian" else "") + " }"
    extra = f" group: {group}" if group > 1 else ""
    bias_part = f' bias_filler {{ type: "constant" value: {bias_value} }}' if bias else " bias_term: false"
    params = "param { lr_mult: 1 decay_mult: 1 }" + (" param { lr_mult: 2 decay_mult: 0 }" if bias else "")
    return (f'layer {{ name: "{name}" type: "Convolution" bottom: "{bottom}" top: "{name}" {params}\n'
            f"  convolution_param {{ num_output: {out} kernel_size: {kernel} stride: {stride} "
            f"pad: {pad}{extra}{bias_part}\n    {weight} }} }}\n")


def relu(name, blob):
    return f'layer {{ name: "{name}" type: "ReLU" bottom: "{blob}" top: "{blob}" }}\n'


def pool(name, bottom, kind, kernel=3, stride=2, pad=0, global_pool=False):
    if global_pool:
        spec = f"pool: {kind} global_pooling: true"
    else:
        spec = f"pool: {kind} kernel_size: {kernel} stride: {stride}" + (f" pad: {pad}" if pad else "")
    return (f'layer {{ name: "{name}" type: "Pooling" bottom: "{bottom}" top: "{name}"\n'
            f"  pooling_param {{ {spec} }} }}\n")


def fc(name, bottom, out, std=0.005, filler="gaussian", bias_value=0.1):
    weight = f'type: "{filler}"' + (f" std: {std}" if filler == "gaussian" else "")
    return (f'layer {{ name: "{name}" type: "InnerProduct" bottom: "{bottom}" top: "{name}"\n'
            f"  param {{ lr_mult: 1 decay_mult: 1 }} param {{ lr_mult: 2 decay_mult: 0 }}\n"
            f"  inner_product_param {{ num_output: {out} weight_filler {{ {weight} }}\n"
            f'    bias_filler {{ type: "constant" value: {bias_value} }} }} }}\n')


def inputs(batch, channels, size):
    return (f'layer {{ name: "data" type: "Input" top: "data" top: "label"\n'
            f"  input_param {{ shape {{ dim: {batch} dim: {channels} dim: {size} dim: {size} }} "
            f"shape {{ dim: {batch} }} }} }}\n")


def loss(bottom, name="loss"):
    return (f'layer {{ name: "{name}" type: "SoftmaxWithLoss" bottom: "{bottom}" bottom: "label" '
            f'top: "{name}" }}\n')


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
    bottom = "pool1"
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
            bottom = name
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


def lrn(name, bottom):
    return (f'layer {{ name: "{name}" type: "LRN" bottom: "{bottom}" top: "{name}"\n'
            "  lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 } }\n")


def dropout(name, blob, ratio):
    return (f'layer {{ name: "{name}" type: "Dropout" bottom: "{blob}" top: "{blob}" '
            f"dropout_param {{ dropout_ratio: {ratio} }} }}\n")


def concat(name, bottoms):
    return (f'layer {{ name: "{name}" type: "Concat" '
            + "".join(f'bottom: "{b}" ' for b in bottoms) + f'top: "{name}" }}\n')


def googlenet_conv(name, bottom, out, kernel, stride=1, pad=0, relu_name=None):
    """A bvlc_googlenet convolution (xavier weights, bias 0.2) and its in-place ReLU."""
    return (conv(name, bottom, out, kernel, stride, pad, filler="xavier", bias_value=0.2)
            + relu(relu_name, name))


def inception(name, bottom, n1x1, n3x3_reduce, n3x3, n5x5_reduce, n5x5, pool_proj):
    text = googlenet_conv(f"{name}/1x1", bottom, n1x1, 1, relu_name=f"{name}/relu_1x1")
    text += googlenet_conv(f"{name}/3x3_reduce", bottom, n3x3_reduce, 1,
                           relu_name=f"{name}/relu_3x3_reduce")
    text += googlenet_conv(f"{name}/3x3", f"{name}/3x3_reduce", n3x3, 3, pad=1,
                           relu_name=f"{name}/relu_3x3")
    text += googlenet_conv(f"{name}/5x5_reduce", bottom, n5x5_reduce, 1,
                           relu_name=f"{name}/relu_5x5_reduce")
    text += googlenet_conv(f"{name}/5x5", f"{name}/5x5_reduce", n5x5, 5, pad=2,
                           relu_name=f"{name}/relu_5x5")
    text += pool(f"{name}/pool", bottom, "MAX", stride=1, pad=1)
    text += googlenet_conv(f"{name}/pool_proj", f"{name}/pool", pool_proj, 1,
                           relu_name=f"{name}/relu_pool_proj")
    text += concat(f"{name}/output", [f"{name}/1x1", f"{name}/3x3", f"{name}/5x5", f"{name}/pool_proj"])
    return text


def googlenet(batch=32):
    text = ("# GoogLeNet (Inception v1 as laid out by Caffe's bvlc_googlenet, without the auxiliary\n"
            "# classifiers) in training form with Input layers, batch 32: written by make_models.py.\n"
            'name: "GoogleNet"\n' + inputs(batch, 3, 224))
    text += googlenet_conv("conv1/7x7_s2", "data", 64, 7, stride=2, pad=3, relu_name="conv1/relu_7x7")
    text += pool("pool1/3x3_s2", "conv1/7x7_s2", "MAX")
    text += lrn("pool1/norm1", "pool1/3x3_s2")
    text += googlenet_conv("conv2/3x3_reduce", "pool1/norm1", 64, 1, relu_name="conv2/relu_3x3_reduce")
    text += googlenet_conv("conv2/3x3", "conv2/3x3_reduce", 192, 3, pad=1, relu_name="conv2/relu_3x3")
    text += lrn("conv2/norm2", "conv2/3x3")
    text += pool("pool2/3x3_s2", "conv2/norm2", "MAX")
    bottom = "pool2/3x3_s2"
    # The published GoogLeNet widths: #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj.
    widths = {"3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
              "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
              "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
              "4e": (256, 160, 320, 32, 128, 128), "5a": (256, 160, 320, 32, 128, 128),
              "5b": (384, 192, 384, 48, 128, 128)}
    for module, width in widths.items():
        text += inception(f"inception_{module}", bottom, *width)
        bottom = f"inception_{module}/output"
        if module in ("3b", "4e"):
            stage = int(module[0])
            text += pool(f"pool{stage}/3x3_s2", bottom, "MAX")
            bottom = f"pool{stage}/3x3_s2"
    text += pool("pool5/7x7_s1", bottom, "AVE", kernel=7, stride=1)
    text += dropout("pool5/drop_7x7_s1", "pool5/7x7_s1", 0.4)
    text += fc("loss3/classifier", "pool5/7x7_s1", 1000, filler="xavier", bias_value=0)
    text += loss("loss3/classifier", name="loss3/loss3")
    return text


def fire(name, bottom, squeeze, expand):
    def layer(part, below, out, kernel, pad=0):
        return (conv(f"{name}/{part}", below, out, kernel, pad=pad, filler="xavier", bias_value=0)
                + relu(f"{name}/relu_{part}", f"{name}/{part}"))
    text = layer("squeeze1x1", bottom, squeeze, 1)
    text += layer("expand1x1", f"{name}/squeeze1x1", expand, 1)
    text += layer("expand3x3", f"{name}/squeeze1x1", expand, 3, pad=1)
    return text + concat(f"{name}/concat", [f"{name}/expand1x1", f"{name}/expand3x3"])


def squeezenet_v1_1(batch=32):
    text = ("# SqueezeNet v1.1 in training form with Input layers, batch 32: written by\n"
            "# make_models.py.\n"
            'name: "SqueezeNet-v1.1"\n' + inputs(batch, 3, 227))
    text += conv("conv1", "data", 64, 3, stride=2, filler="xavier", bias_value=0)
    text += relu("relu_conv1", "conv1")
    text += pool("pool1", "conv1", "MAX")
    bottom = "pool1"
    sizes = [(16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256), (64, 256)]
    for i, (squeeze, expand) in enumerate(sizes, start=2):
        text += fire(f"fire{i}", bottom, squeeze, expand)
        bottom = f"fire{i}/concat"
        if i in (3, 5):
            text += pool(f"pool{i}", bottom, "MAX")
            bottom = f"pool{i}"
    text += dropout("drop9", bottom, 0.5)
    text += conv("conv10", bottom, 1000, 1, std=0.01, bias_value=0) + relu("relu_conv10", "conv10")
    text += pool("pool10", "conv10", "AVE", global_pool=True)
    return text + loss("pool10")


if __name__ == "__main__":
    for name, text in [("caffenet_train.prototxt", caffenet()),
                       ("resnet50_train.prototxt", resnet50()),
                       ("mobilenet_v1_train.prototxt", mobilenet_v1()),
                       ("googlenet_train.prototxt", googlenet()),
                       ("squeezenet_v1_1_train.prototxt", squeezenet_v1_1())]:
        with open(os.path.join(HERE, name), "w") as f:
            f.write(text)
        print("wrote", name)
