#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The CPU peer of `cortado time`: builds the net of a Caffe training prototxt (Input layers) in
PyTorch, layer by layer, and times training steps (forward, backward and an SGD update with
momentum) on random inputs. Prints one line:

    torch <net> threads=<T> batch=<B> ms_per_iter=<mean> ms_min=<best> iters=<N>

    /usr/bin/python3 bench/cpu/torch_net.py NET.prototxt [--iters=N] [--warmup=N] [--threads=T]
        [--channels-last]

Layers: Input, Convolution, Pooling (Caffe's ceil rounding), InnerProduct, ReLU, BatchNorm +
Scale (one BatchNorm2d with affine weights when Scale follows in place; BatchNorm alone without),
Eltwise (SUM), Concat, Dropout, LRN, Softmax, SoftmaxWithLoss; anything else is refused by name.
"""
import argparse
import os
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from prototxt import first as one  # noqa: E402
from prototxt import parse  # noqa: E402


def num(d, key, default):
    v = one(d, key)
    return default if v is None else (float(v) if "." in v or "e" in v else int(v))


def pool_out(size, k, s, p):
    """Caffe's pooled size: ceil rounding, the last window starting inside the padded input."""
    out = -(-(size + 2 * p - k) // s) + 1
    if p > 0 and (out - 1) * s >= size + p:
        out -= 1
    return out


class CaffeNet(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.steps = []
        self.inputs = []
        shapes = {}
        layers = net.get("layer", [])
        skip = set()
        for i, layer in enumerate(layers):
            if i in skip:
                continue
            kind, name = one(layer, "type"), one(layer, "name")
            bottoms, tops = layer.get("bottom", []), layer.get("top", [])
            if kind == "Input":
                for top, shape in zip(tops, one(layer, "input_param")["shape"]):
                    shapes[top] = [int(x) for x in shape["dim"]]
                    self.inputs.append((top, shapes[top]))
                continue
            if kind == "Convolution":
                p = one(layer, "convolution_param")
                k, s, pad = num(p, "kernel_size", 1), num(p, "stride", 1), num(p, "pad", 0)
                c = shapes[bottoms[0]]
                m = nn.Conv2d(c[1], num(p, "num_output", 1), k, s, pad, groups=num(p, "group", 1),
                              bias=one(p, "bias_term", "true") == "true")
                shapes[tops[0]] = [c[0], m.out_channels, (c[2] + 2 * pad - k) // s + 1,
                                   (c[3] + 2 * pad - k) // s + 1]
            elif kind == "Pooling":
                p = one(layer, "pooling_param")
                c = shapes[bottoms[0]]
                if one(p, "global_pooling") == "true":
                    k, s, pad = c[2], 1, 0
                else:
                    k, s, pad = num(p, "kernel_size", 1), num(p, "stride", 1), num(p, "pad", 0)
                h, w = pool_out(c[2], k, s, pad), pool_out(c[3], k, s, pad)
                if one(p, "pool", "MAX") == "MAX":
                    m = nn.MaxPool2d(k, s, pad, ceil_mode=True)
                else:
                    m = nn.AvgPool2d(k, s, pad, ceil_mode=True, count_include_pad=True)
                shapes[tops[0]] = [c[0], c[1], h, w]
            elif kind == "InnerProduct":
                p = one(layer, "inner_product_param")
                c = shapes[bottoms[0]]
                fan_in = 1
                for d in c[1:]:
                    fan_in *= d
                lin = nn.Linear(fan_in, num(p, "num_output", 1),
                                bias=one(p, "bias_term", "true") == "true")
                m = nn.Sequential(nn.Flatten(), lin)
                shapes[tops[0]] = [c[0], lin.out_features]
            elif kind == "ReLU":
                m = nn.ReLU(inplace=bottoms[0] == tops[0])
                shapes[tops[0]] = shapes[bottoms[0]]
            elif kind == "BatchNorm":
                c = shapes[bottoms[0]]
                nxt = layers[i + 1] if i + 1 < len(layers) else {}
                affine = one(nxt, "type") == "Scale" and nxt.get("bottom") == tops
                if affine:
                    skip.add(i + 1)
                m = nn.BatchNorm2d(c[1], affine=affine)
                shapes[tops[0]] = c
            elif kind == "Eltwise":
                p = one(layer, "eltwise_param", {})
                if one(p, "operation", "SUM") != "SUM":
                    raise SystemExit(f"layer {name}: only Eltwise SUM is built here")
                m = None
                shapes[tops[0]] = shapes[bottoms[0]]
            elif kind == "Concat":
                m = None
                c = list(shapes[bottoms[0]])
                c[1] = sum(shapes[b][1] for b in bottoms)
                shapes[tops[0]] = c
            elif kind == "Dropout":
                p = one(layer, "dropout_param", {})
                m = nn.Dropout(num(p, "dropout_ratio", 0.5))
                shapes[tops[0]] = shapes[bottoms[0]]
            elif kind == "LRN":
                p = one(layer, "lrn_param", {})
                m = nn.LocalResponseNorm(num(p, "local_size", 5), num(p, "alpha", 1.0),
                                         num(p, "beta", 0.75), num(p, "k", 1.0))
                shapes[tops[0]] = shapes[bottoms[0]]
            elif kind in ("Softmax", "SoftmaxWithLoss", "Accuracy"):
                m = None
                if tops:
                    shapes[tops[0]] = [1]
            else:
                raise SystemExit(f"layer {name}: type {kind} is not built by torch_net.py")
            if m is not None:
                self.add_module(re.sub(r"\W", "_", name), m)
            self.steps.append((kind, m, bottoms, tops))

    def forward(self, blobs):
        blobs = dict(blobs)
        loss = None
        for kind, m, bottoms, tops in self.steps:
            if kind == "Eltwise":
                out = blobs[bottoms[0]]
                for b in bottoms[1:]:
                    out = out + blobs[b]
            elif kind == "Concat":
                out = torch.cat([blobs[b] for b in bottoms], 1)
            elif kind == "SoftmaxWithLoss":
                loss = F.cross_entropy(blobs[bottoms[0]], blobs[bottoms[1]].long())
                out = loss
            elif kind == "Softmax":
                out = F.softmax(blobs[bottoms[0]], 1)
            elif kind == "Accuracy":
                continue
            else:
                out = m(blobs[bottoms[0]])
            if tops:
                blobs[tops[0]] = out
        return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("net")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    with open(a.net) as f:
        model = CaffeNet(parse(f.read()))
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    blobs = {}
    for name, shape in model.inputs:
        if len(shape) == 4:
            blobs[name] = torch.randn(shape).to(memory_format=fmt)
        else:
            classes = 10
            for kind, m, _, _ in model.steps:
                if isinstance(m, nn.Sequential) and isinstance(m[-1], nn.Linear):
                    classes = m[-1].out_features
            blobs[name] = torch.randint(0, classes, shape)
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9, weight_decay=0.0005)
    times = []
    for i in range(a.warmup + a.iters):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = model(blobs)
        loss.backward()
        opt.step()
        if i >= a.warmup:
            times.append(1000 * (time.perf_counter() - start))
    batch = model.inputs[0][1][0]
    print(f"torch {a.net} threads={torch.get_num_threads()} batch={batch} "
          f"ms_per_iter={sum(times) / len(times):.3f} ms_min={min(times):.3f} iters={len(times)}")


if __name__ == "__main__":
    sys.exit(main())
