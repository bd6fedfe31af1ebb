#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A performance model of one data-parallel training iteration of Cortado over N ranks.

    python3 bench/scaling/model.py                     # the tables of docs/scaling.md
    python3 bench/scaling/model.py --self-test         # hand-computed checks; exit 1 on a mismatch
    python3 bench/scaling/model.py --plot out.png      # efficiency against ranks, and the
                                                       # validation points (needs matplotlib)
    python3 bench/scaling/model.py --validate FILE     # model against measured iterations (CSV)
    python3 bench/scaling/model.py --compare-allreduce # model against the measured allreduce times

The model (docs/scaling.md explains it):
  * one allreduce of n wire bytes (n32 of float32) over N ranks, link rate R, achieved fraction
    e, step cost alpha, p the largest power of two <= N, k = log2 p:
        ring      2 (N - 1) alpha + 2 (N - 1) / N * n / (e R)
        doubling  k (alpha + n32 / (e R)) + fold
        halving   2 k alpha + 1.2 * 2 (p - 1) / p * n / (e R) + fold
        fold      2 (alpha + n32 / (e R)) when N > p, else 0
    (doubling and the fold always send float32, even on a 16-bit wire; halving sends the wire's
    values, as the ring does; 1.2 = kHalvingByteCost);
    the communicator (--allreduce=auto) takes the cheapest of the three by Choose() of
    cpp/comm/tcp/tcp_communicator.cpp, each step costing L plus its bytes:
        ring      2 (N - 1) (L + n / N)
        doubling  k (L + n32) + 2 (L + n32) [N > p],  only if n32 <= 1 MiB
        halving   2 k L + 1.2 * 2 (p - 1) / p * n + 2 (L + n32) [N > p],  never at N = 2
    with L = --latency_kb: by default here alpha * R of each link (what the option should be set
    to there), or one value for every link with --latency-kb (the code's default is 32);
  * the gradients go in buckets of 25 MiB of float32 values (--bucket_mb), cut at parameter
    boundaries from the last layer to the first, exactly as cpp/parallel/gradient_exchange.cpp
    cuts them; each bucket is one allreduce, one after another on one thread;
  * overlap: iteration = compute + max(exchange - f * backward, last bucket) + statistics,
    backward = 2/3 of compute, f the overlappable fraction measured with bench/comm/overlap.sh;
  * weak-scaling efficiency = compute time (1 rank) / iteration time (N ranks), batch per rank
    fixed.

Only the standard library is needed; matplotlib only for --plot (imported when asked for).
"""
import argparse
import csv
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")
sys.path.insert(0, os.path.join(HERE, ".."))
from prototxt import first, parse  # noqa: E402

# =================================================================================================
# PARAMETERS: every number the model uses, with where it comes from. "RESULTS.md" is the
# benchmark history, bench/history/ (its README.md names the file of each section; the latest
# figures are in bench/RESULTS.md); the section names are its headings.
# =================================================================================================

GBIT = 1e9 / 8  # bytes per second in one Gbit/s (tc's "1gbit" is 10^9 bit/s)


class Link:
    def __init__(self, name, gbit, alpha, efficiency, backend, source):
        self.name = name
        self.gbit = gbit
        self.rate = gbit * GBIT  # bytes/s on the wire
        self.alpha = alpha  # seconds: the fixed cost of one step of an allreduce
        self.efficiency = efficiency  # fraction of the rate the ring reaches on large buffers
        self.backend = backend  # "tcp" (16-bit wire; ring, doubling or halving; hierarchy of
        # hosts) or "ucx" (the same without the hierarchy)
        self.source = source

    @property
    def bandwidth(self):  # bytes/s the ring moves per link and direction on large buffers
        return self.rate * self.efficiency

    @property
    def latency_bytes(self):  # L = alpha * rate: what --latency_kb should be for this link
        return self.alpha * self.rate


LINKS = [
    # Measured: RESULTS.md "Recursive doubling for small allreduces": the
    # crossovers of ring and doubling give a step cost of 12-40 us at 1 Gbit/s and 18-24 us at
    # 10 Gbit/s ("about 20 us here whatever the rate"). Efficiency: "Two ranks share one
    # connection; what this machine's sockets can carry": our tcp 94.4-95.2% of 1 Gbit/s and
    # 92.3-93.0% of 10 Gbit/s with 2 ranks, 16-64 MiB; 92.8-93.6% of 1 Gbit/s with 4 ranks
    # ("The tcp ring retries before it sleeps"). TCP's payload ceiling at MTU 1500 is 95.6%.
    Link("1GbE", 1, 20e-6, 0.94, "tcp", "measured (namespaces, tbf)"),
    Link("10GbE", 10, 20e-6, 0.93, "tcp", "measured (namespaces, tbf, 2 ranks)"),
    # Assumed: nothing faster than 10 Gbit/s was measured. The step cost is the kernel's TCP path
    # and a thread's wake-up, not the wire, so the measured 20 us is kept; the efficiency is the
    # one measured at 10 Gbit/s with cores to spare. See HOST_CEILING for what a rank's one
    # communication thread may limit it to.
    Link("25GbE", 25, 20e-6, 0.93, "tcp", "assumed (alpha and efficiency of 10GbE)"),
    Link("100GbE", 100, 20e-6, 0.93, "tcp", "assumed (alpha and efficiency of 10GbE)"),
    # InfiniBand HDR (200 Gbit/s, 25 GB/s) through the ucx backend, which carries the tcp
    # backend's ring, doubling and halving (float32 or 16-bit) but not its hierarchy
    # (docs/distributed.md, "Backends"). Achievable bandwidth:
    # 21.1-21.3 GB/s, osu_bw over UCX 1.15 between two ConnectX-6 HDR hosts on PCIe Gen4 x16,
    # https://github.com/openucx/ucx/issues/8852 -> efficiency 21.3 / 25 = 0.85.
    # Step cost: assumed 3 us. UCX's own estimate of an HCA's latency is 1.36 us
    # (`ucx_info` output in https://github.com/openucx/ucx/issues/7946); a ring step also pays
    # for UCX's progress and our thread, which nobody has measured here (no RDMA device: RESULTS.md
    # "RDMA devices and network namespaces ...").
    Link("HDR-IB", 200, 3e-6, 0.85, "ucx", "published bandwidth; alpha assumed"),
]
# For --validate only (not in the tables): 100 Mbit/s between namespaces, where even 8 ranks' compute
# on this machine's 2 cores leaves the link the slower part. Assumed: 1GbE's step cost and
# efficiency; the validation tests them.
VALIDATION_LINKS = [Link("100MbE", 0.1, 20e-6, 0.94, "tcp", "assumed (alpha and efficiency of 1GbE)")]
LINK_BY_NAME = {link.name: link for link in LINKS + VALIDATION_LINKS}
LINK_BY_GBIT = {link.gbit: link for link in LINKS + VALIDATION_LINKS}

# What one rank's single communication thread can move, in bytes of float32 gradients per second
# of busbw, when the link is not the limit. Measured on loopback (two ranks on the 2-core machine,
# 16-64 MiB; RESULTS.md "Two ranks share one connection" and "Gradients in 16 bits on the wire"):
# float32 2.7-3.4 GB/s, float16 wire 3.3-4.0 GB/s of float32 (the conversions cost about as much
# as the bytes saved). Used only where asked for (--host-ceiling, and the "ceiling" column of the
# deployment table), and to the tcp backend only (the kernel's copies are what it measures; UCX over
# RDMA does not make them). Hosts with faster cores may do better; nobody has measured one.
HOST_CEILING = {"float32": 3.0e9, "float16": 3.3e9}

# Loopback between ranks of one host (the hierarchical allreduce's first and last stages):
# the same 3 GB/s (float32, 2 ranks, RESULTS.md as above) and the 20 us step cost (assumed).
LOOPBACK_BANDWIDTH = 3.0e9
LOOPBACK_ALPHA = 20e-6

# Gradients to and from host memory on a GPU (the tcp backend exchanges host memory): float32
# bytes each way through pinned memory. Assumed 40 GB/s (PCIe Gen5 x16 is 64 GB/s each way); not
# measured here.
PCIE_BANDWIDTH = 40e9
# Replicas of one process (--gpu=0,...,7) sum their gradients through NCCL first (docs/
# distributed.md). Assumed 300 GB/s of busbw over NVLink among 8 H200s; not measured here.
NVLINK_BANDWIDTH = 300e9

BUCKET_BYTES = 25 << 20  # --bucket_mb=25: bucket_bytes = 25 << 20, counted in float32 values
DOUBLING_MAX_BYTES = 1 << 20  # CommOptions::doubling_max_bytes (float32 bytes)
# kHalvingByteCost of cpp/comm/tcp/tcp_communicator.cpp: recursive halving's bytes cost 1.2 times
# the ring's, in the code's choice and in the model's time alike. Measured (RESULTS.md "Recursive
# halving then doubling against the ring, large buffers on 4 and 8 ranks"): halving / ring time
# 1.13-1.23 at 1 Gbit/s on 8 ranks from 1 MiB up (each level's transfer ends before the next
# begins, where the ring's pieces flow on); 0.99-1.16 at 1 Gbit/s on 4 ranks; 0.80-1.22 at
# 10 Gbit/s, where 4 and 8 ranks on 2 cores are CPU-bound.
HALVING_BYTE_COST = 1.2
# --allreduce: "auto" (the code's default: the cheapest by the cost model), or one algorithm for
# every allreduce: "ring", "doubling", "halving" (the ring at N = 2, as in the code).
ALLREDUCE = "auto"
DEFAULT_LATENCY_BYTES = 32 << 10  # --latency_kb=32, the communicator's default
# The --latency_kb the model's communicator decides with: None = alpha * rate of each link (what
# the option should be set to there); --latency-kb sets one value for every link, e.g. 32.
LATENCY_BYTES = None

# Overlap with backward (RESULTS.md "Overlap of the gradient exchange with backward", 2026-11-25,
# two ranks on 1 Gbit/s, CaffeNet batch 32): compute 0.773 s, allreduce alone 2.083 s, overlap on
# 2.498 s. Hidden: 0.773 + 2.083 - 2.498 = 0.358 s of a backward of 0.596 * 0.773 = 0.461 s
# (BACKWARD_SHARE below), so f = 0.78. Both ranks shared two cores between backward and the ring's
# copies. (CaffeNet at batch 8 hid 0.058 s of 0.49 * 0.273 = 0.134 s in the same runs: f = 0.43.)
OVERLAP_FRACTION = 0.78
# The share of a whole iteration (forward, backward, update) that is backward: the window the
# exchange can overlap. Measured with bench/scaling/backward_share.sh (one process, `cortado time`
# against `cortado train`, 2026-12-03, dev-2c; bench/history/collectives-scaling.md "Backward's
# share of an iteration"): LeNet 64 with 2 threads 0.544, CaffeNet 32 with 1 thread (as its
# compute figure below) 0.596, ResNet-50 8 with 2 threads 0.643, CIFAR-10 quick 100 with 1 thread
# 0.550. GPU: ResNet-50 float16 on the H200 0.62 of forward + backward (RESULTS.md "Where
# ResNet-50's float16 time goes": 19.8 ms forward, 32.0 ms backward per layer sums; its update is
# not in those sums); LeNet and CaffeNet on the GPU: not measured, 2/3 assumed.
BACKWARD_SHARE = {
    ("cpu", "LeNet"): 0.544, ("cpu", "CaffeNet"): 0.596, ("cpu", "ResNet-50"): 0.643,
    ("cpu", "CIFAR-10 quick"): 0.550, ("gpu", "ResNet-50"): 0.62,
}
ASSUMED_BACKWARD_SHARE = 2.0 / 3.0

# Compute per iteration (forward + backward + update), one rank, ms, and the batch per rank.
# GPU: one NVIDIA H200 (RESULTS.md):
#   LeNet 64, float32: 104,225 images/s -> 0.614 ms ("GPU: TF32, the cuDNN search's scratch ...",
#     "On the H200, the same bench script's float32 table"); float16 not measured: the float32
#     time is used for both.
#   CaffeNet 256, float32: 10,336 images/s -> 24.8 ms (same section, first table); float16 with
#     16-bit blobs: 21,727.3 images/s -> 11.8 ms ("16-bit InnerProduct, LRN and Dropout", call 2).
#   ResNet-50 128, float32: 1,019.8 images/s -> 125.5 ms (same section, the PyTorch AMP table);
#     float16: 5,368.2 images/s -> 23.8 ms (23.87 / 23.90 ms per iteration; "ResNet-50 float16 on
#     an H200: the sums folded by default ...", call 3).
# CPU: the 2-core development machine, 2 threads, `cortado time` (forward + backward):
#   LeNet 64: 10.26 ms and ResNet-50 8: 922.6 ms ("CPU training on shared cores", no busy loop,
#     2026-12-02). CaffeNet 32: 773 ms, one thread per rank with a second process on the other
#     core ("Overlap of the gradient exchange with backward", compute alone, 2026-11-25): no
#     2-thread CaffeNet figure exists.
COMPUTE_MS = {
    ("gpu", "LeNet", "float32"): 64 / 104225 * 1e3,
    ("gpu", "LeNet", "float16"): 64 / 104225 * 1e3,
    ("gpu", "CaffeNet", "float32"): 256 / 10336 * 1e3,
    ("gpu", "CaffeNet", "float16"): 256 / 21727.3 * 1e3,
    ("gpu", "ResNet-50", "float32"): 128 / 1019.8 * 1e3,
    ("gpu", "ResNet-50", "float16"): 128 / 5368.2 * 1e3,
    ("cpu", "LeNet", "float32"): 10.26,
    ("cpu", "CaffeNet", "float32"): 773.0,
    ("cpu", "ResNet-50", "float32"): 922.6,
}
BATCH = {
    ("gpu", "LeNet"): 64, ("gpu", "CaffeNet"): 256, ("gpu", "ResNet-50"): 128,
    ("cpu", "LeNet"): 64, ("cpu", "CaffeNet"): 32, ("cpu", "ResNet-50"): 8,
}
NET_FILES = {"LeNet": "lenet_train.prototxt", "CaffeNet": "caffenet_train.prototxt",
             "ResNet-50": "resnet50_train.prototxt",
             "CIFAR-10 quick": "cifar10_quick_train.prototxt"}  # the last for --validate only
# The learnable blobs of each net, as the Net counts them (BatchNorm's mean, variance and factor
# included: they sit in the flat gradient buffer too), if the prototxt cannot be read.
FALLBACK_PARAMS = {"LeNet": 431080, "CaffeNet": 60965224, "ResNet-50": 25610205,
                   "CIFAR-10 quick": 145578}

RANKS = [2, 4, 8, 16, 32, 64, 128, 256, 512]
GOAL = 0.90  # the project's goal at 512 ranks (Horovod publishes 90% for 512 GPUs)

# =================================================================================================
# The nets' parameters, read from bench/models (bench/prototxt.py reads the text format).
# =================================================================================================


def net_params(path):
    """The learnable blobs in net order: [(count, layer index)], and BatchNorm's channels."""
    net = parse(open(path).read())
    shapes = {}
    params = []
    bn_channels = 0
    for index, layer in enumerate(net.get("layer", [])):
        kind = first(layer, "type")
        bottoms = layer.get("bottom", [])
        tops = layer.get("top", [])
        shape = shapes.get(bottoms[0]) if bottoms else None
        if kind == "Input":
            for top, s in zip(tops, first(layer, "input_param")["shape"]):
                dims = [int(v) for v in s["dim"]] + [1, 1, 1]
                shapes[top] = tuple(dims[1:4])
            continue
        if kind == "Convolution":
            p = first(layer, "convolution_param")
            c, h, w = shape
            k = int(first(p, "kernel_size"))
            stride = int(first(p, "stride", 1))
            pad = int(first(p, "pad", 0))
            group = int(first(p, "group", 1))
            out = int(first(p, "num_output"))
            params.append((out * (c // group) * k * k, index))
            if first(p, "bias_term", "true") != "false":
                params.append((out, index))
            shapes[tops[0]] = (out, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1)
        elif kind == "Pooling":
            p = first(layer, "pooling_param")
            c, h, w = shape
            if first(p, "global_pooling") == "true":
                shapes[tops[0]] = (c, 1, 1)
            else:
                k = int(first(p, "kernel_size"))
                stride = int(first(p, "stride", 1))
                pad = int(first(p, "pad", 0))
                size = []
                for x in (h, w):  # Caffe rounds pooled sizes up
                    o = int(math.ceil((x + 2 * pad - k) / stride)) + 1
                    if pad > 0 and (o - 1) * stride >= x + pad:
                        o -= 1
                    size.append(o)
                shapes[tops[0]] = (c, size[0], size[1])
        elif kind == "InnerProduct":
            p = first(layer, "inner_product_param")
            out = int(first(p, "num_output"))
            params.append((out * shape[0] * shape[1] * shape[2], index))
            if first(p, "bias_term", "true") != "false":
                params.append((out, index))
            shapes[tops[0]] = (out, 1, 1)
        elif kind == "BatchNorm":
            params += [(shape[0], index), (shape[0], index), (1, index)]
            bn_channels += shape[0]
            shapes[tops[0]] = shape
        elif kind == "Scale":
            p = first(layer, "scale_param", {})
            params.append((shape[0], index))
            if first(p, "bias_term", "false") == "true":
                params.append((shape[0], index))
            shapes[tops[0]] = shape
        elif tops and shape is not None:
            shapes[tops[0]] = shape
    return params, bn_channels


def buckets_of(params, bucket_bytes=BUCKET_BYTES):
    """Bucket sizes in floats, in the order they are exchanged (last layers first), cut as
    GradientExchange's constructor cuts them: a parameter that would take a bucket holding
    something past bucket_bytes starts the next one; a larger parameter is a bucket alone."""
    offsets, at = [], 0
    for count, _ in params:
        offsets.append(at)
        at += count
    bucket_floats = max(bucket_bytes // 4, 1)
    buckets, end, holds = [], at, False
    for i in reversed(range(len(params))):
        if holds and end - offsets[i] > bucket_floats:
            begin = offsets[i + 1]
            buckets.append(end - begin)
            end, holds = begin, False
        holds = True
    if params:
        buckets.append(end)
    return buckets


class Net:
    def __init__(self, name):
        self.name = name
        path = os.path.join(MODELS, NET_FILES[name])
        try:
            params, bn_channels = net_params(path)
            self.source = os.path.relpath(path, os.path.join(HERE, "..", ".."))
        except (OSError, KeyError, IndexError, TypeError, ValueError):
            params, bn_channels = [(FALLBACK_PARAMS[name], 0)], 0
            self.source = "fallback figure"
        self.params = params
        self.count = sum(c for c, _ in params)  # floats in the flat gradient buffer
        # BatchNorm's mean and variance are averaged after the gradients, in float32
        # (GradientExchange::AverageStatistics).
        self.statistics = 2 * bn_channels

    def buckets(self, bucket_bytes=BUCKET_BYTES):
        return buckets_of(self.params, bucket_bytes)


# =================================================================================================
# The model.
# =================================================================================================

WIRE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def doubling_steps(n):
    p, steps = 1, 0
    while p * 2 <= n:
        p *= 2
        steps += 1
    return steps + (2 if p < n else 0)


def ring_time(nbytes, n, link, bandwidth=None):
    if n <= 1 or nbytes == 0:
        return 0.0
    bw = bandwidth or link.bandwidth
    return 2 * (n - 1) * link.alpha + 2 * (n - 1) / n * nbytes / bw


def doubling_time(nbytes32, n, link, bandwidth=None):
    if n <= 1 or nbytes32 == 0:
        return 0.0
    bw = bandwidth or link.bandwidth
    return doubling_steps(n) * (link.alpha + nbytes32 / bw)


def halving_time(nbytes, n, link, bandwidth=None, nbytes32=None, fold_bandwidth=None):
    """Reduce-scatter by recursive halving, all-gather by recursive doubling (HalvingDoubling of
    the tcp backend): 2 log2 p steps moving 2 (p - 1) / p of the wire's bytes (nbytes) in all,
    each byte at HALVING_BYTE_COST times the ring's time, plus two steps of the whole buffer in
    float32 (nbytes32, default nbytes) to fold the ranks past p in and out (as doubling's), at
    fold_bandwidth (default: bandwidth; under the host ceiling, the float32 one)."""
    if n <= 1 or nbytes == 0:
        return 0.0
    bw = bandwidth or link.bandwidth
    fold_bw = fold_bandwidth or bw
    nbytes32 = nbytes if nbytes32 is None else nbytes32
    p, k = 1, 0
    while p * 2 <= n:
        p, k = p * 2, k + 1
    t = 2 * k * link.alpha + HALVING_BYTE_COST * 2 * (p - 1) / p * nbytes / bw
    if p < n:
        t += 2 * (link.alpha + nbytes32 / fold_bw)
    return t


def choose(n, ring_bytes, float32_bytes, latency_bytes, doubling_max_bytes=DOUBLING_MAX_BYTES,
           algorithm="auto"):
    """Choose() of cpp/comm/tcp/tcp_communicator.cpp: "ring", "doubling" or "halving"."""
    if n <= 1 or algorithm == "ring":
        return "ring"
    if algorithm == "halving" and n == 2:
        return "ring"  # the same steps
    if algorithm != "auto":
        return algorithm
    levels, power = 0, 1
    while power * 2 <= n:
        power *= 2
        levels += 1
    lb, b = float(latency_bytes), float(float32_bytes)
    fold = 2 * (lb + b) if power < n else 0.0
    ring = 2.0 * (n - 1) * (lb + ring_bytes / n)
    doubling = math.inf if float32_bytes > doubling_max_bytes else levels * (lb + b) + fold
    halving = (math.inf if n == 2
               else 2.0 * levels * lb + HALVING_BYTE_COST * 2.0 * (power - 1) / power * ring_bytes
               + fold)
    if doubling <= halving and doubling < ring:
        return "doubling"
    if halving < ring:
        return "halving"
    return "ring"


def flat_allreduce(count, wire, n, link, latency_bytes=None, ceiling=False, algorithm=None):
    """(algorithm, seconds) of one AllReduceAs of `count` floats over n ranks, flat.
    latency_bytes: the communicator's --latency_kb in bytes (None: alpha * rate of the link);
    algorithm: its --allreduce (None: ALLREDUCE, "auto" unless --allreduce says otherwise)."""
    nbytes = count * WIRE_BYTES[wire]
    nbytes32 = count * 4
    ring_bw = float32_bw = link.bandwidth
    if ceiling and link.backend == "tcp":
        # HOST_CEILING is busbw counted in float32 bytes; a 16-bit ring or halving moves half as
        # many bytes for the same values. Doubling always sends float32.
        ring_bw = min(ring_bw, HOST_CEILING["float32" if wire == "float32" else "float16"]
                      * nbytes / nbytes32)
        float32_bw = min(float32_bw, HOST_CEILING["float32"])
    lb = link.latency_bytes if latency_bytes is None else latency_bytes
    how = choose(n, nbytes, nbytes32, lb, algorithm=algorithm or ALLREDUCE)
    if how == "doubling":
        return how, doubling_time(nbytes32, n, link, float32_bw)
    if how == "halving":
        return how, halving_time(nbytes, n, link, ring_bw, nbytes32, float32_bw)
    return how, ring_time(nbytes, n, link, ring_bw)


def loopback_stages(count, n, link, ranks_per_host=1, machine_hosts=1):
    """Seconds of allreduce()'s stages within a host (0 when flat): CPU copies, not the link."""
    g = ranks_per_host
    if g <= 1 or n <= g or link.backend != "tcp":
        return 0.0
    loop = Link("loopback", 0, LOOPBACK_ALPHA, 1.0, "tcp", "")
    loopback = LOOPBACK_BANDWIDTH / max(machine_hosts, 1)
    return (ring_time(count * 4, g, loop, loopback) + count * 4 / loopback
            + (g - 1) * LOOPBACK_ALPHA)


def allreduce(count, wire, n, link, ranks_per_host=1, latency_bytes=None, ceiling=False,
              algorithm=None, machine_hosts=1):
    """Seconds of one allreduce, flat or hierarchical (ranks_per_host > 1, the tcp backend's three
    stages: a float32 ring within each host over loopback, the hosts' ring, doubling or halving
    as chosen for that many hosts, a float32 broadcast within each host). machine_hosts: hosts
    sharing one machine, whose loopback stages share its LOOPBACK_BANDWIDTH (Scenario)."""
    g = ranks_per_host
    if g <= 1 or n <= g or link.backend != "tcp":
        return flat_allreduce(count, wire, n, link, latency_bytes, ceiling, algorithm)[1]
    across = flat_allreduce(count, wire, n // g, link, latency_bytes, ceiling, algorithm)[1]
    return loopback_stages(count, n, link, g, machine_hosts) + across


class Scenario:
    """How the gradients are exchanged.
    mode "overlap": buckets overlapped with backward (the CPU path: one replica per process).
    mode "after":   the whole buffer in one allreduce after backward (the GPU path with tcp or ucx
                    today: docs/distributed.md, "Gradient buckets and overlap"), through host
                    memory (PCIe both ways) on a GPU.
    replicas:       GPUs per process, summed through NCCL first (the ranks are then the processes).
    ranks_per_host: hierarchical allreduce among ranks that share a host (tcp only).
    latency_bytes:  the communicator's --latency_kb, in bytes (None: LATENCY_BYTES, which is
                    alpha * rate of each link unless --latency-kb sets one value).
    algorithm:      the communicator's --allreduce (None: ALLREDUCE, "auto" unless --allreduce).
    backward_share: backward's share of the compute (None: BACKWARD_SHARE of the net).
    machine_hosts:  hosts that share one machine's cores (--validate: network namespaces on one
                    machine): their loopback stages run at once, each at 1 / machine_hosts of
                    LOOPBACK_BANDWIDTH, which is the whole machine's rate.
    """

    def __init__(self, mode="overlap", replicas=1, ranks_per_host=1, ceiling=False,
                 overlap_fraction=None, latency_bytes=None, bucket_bytes=BUCKET_BYTES,
                 algorithm=None, label=None, backward_share=None, machine_hosts=1):
        self.mode = mode
        self.backward_share = backward_share
        self.machine_hosts = machine_hosts
        self.replicas = replicas
        self.ranks_per_host = ranks_per_host
        self.ceiling = ceiling
        self.overlap_fraction = OVERLAP_FRACTION if overlap_fraction is None else overlap_fraction
        self.algorithm = ALLREDUCE if algorithm is None else algorithm
        self.latency_bytes = LATENCY_BYTES if latency_bytes is None else latency_bytes
        self.bucket_bytes = bucket_bytes
        self.label = label or mode


def iteration(net, platform, wire, gpus, link, scenario=None, compute_ms=None):
    """Predicted iteration of one rank; `gpus` ranks (or GPUs) in all, batch per GPU fixed."""
    sc = scenario or Scenario()
    compute = (compute_ms if compute_ms is not None else COMPUTE_MS[(platform, net.name, wire)]) / 1e3
    ranks = max(gpus // sc.replicas, 1)

    def ar(count):
        return allreduce(count, wire, ranks, link, sc.ranks_per_host, sc.latency_bytes, sc.ceiling,
                         sc.algorithm, sc.machine_hosts)

    local = 0.0
    if platform == "gpu" and sc.replicas > 1:
        # The replicas' sum into root (an allreduce's bytes) and the result back to them.
        local += (2 * (sc.replicas - 1) / sc.replicas + 1) * net.count * 4 / NVLINK_BANDWIDTH
    if ranks <= 1:
        return {"compute": compute, "exchange": local, "exposed": local, "total": compute + local,
                "efficiency": compute / (compute + local), "buckets": 0, "algorithm": "-"}
    stats = allreduce(net.statistics, "float32", ranks, link, sc.ranks_per_host,
                      sc.latency_bytes, sc.ceiling, sc.algorithm,
                      sc.machine_hosts) if net.statistics else 0.0
    calls = net.buckets(sc.bucket_bytes) if sc.mode == "overlap" else [net.count]
    if sc.mode == "overlap":
        times = [ar(b) for b in calls]
        exchange = sum(times)
        share = (sc.backward_share if sc.backward_share is not None
                 else BACKWARD_SHARE.get((platform, net.name), ASSUMED_BACKWARD_SHARE))
        backward = share * compute
        exposed = max(exchange - sc.overlap_fraction * backward, times[-1]) + stats
        nb = len(times)
    else:
        exchange = ar(net.count)
        if platform == "gpu":
            exchange += 2 * net.count * 4 / PCIE_BANDWIDTH  # to host memory and back, float32
        exposed = exchange + stats
        nb = 1
    exposed += local
    total = compute + exposed
    # How each gradient call goes, e.g. "3 ring, 2 halving" (for the hierarchy: between hosts).
    hierarchical = 1 < sc.ranks_per_host < ranks and link.backend == "tcp"
    across = ranks // sc.ranks_per_host if hierarchical else ranks
    hows = [flat_allreduce(c, wire, across, link, sc.latency_bytes, sc.ceiling, sc.algorithm)[0]
            for c in calls]
    algorithm = ", ".join(f"{hows.count(h)} {h}" for h in ("ring", "doubling", "halving")
                          if h in hows)
    return {"compute": compute, "exchange": exchange + stats + local, "exposed": exposed,
            "total": total, "efficiency": compute / total, "buckets": nb, "algorithm": algorithm,
            "loopback": sum(loopback_stages(c, ranks, link, sc.ranks_per_host, sc.machine_hosts)
                            for c in calls)}


# =================================================================================================
# Output.
# =================================================================================================

NETS_ORDER = ["LeNet", "CaffeNet", "ResNet-50"]


def gpu_rows():
    return [(name, wire) for name in NETS_ORDER for wire in ("float32", "float16")]


def fmt_ms(ms):
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


def wire_label(link, wire):
    return f"{wire} (ucx)" if link.backend == "ucx" else wire


def table(platform, rows, links, ranks, scenario):
    nets = {name: Net(name) for name in NETS_ORDER}
    head = "| net | batch | wire | compute ms | link | " + " | ".join(f"N={n}" for n in ranks) + " |"
    out = [head, "|" + " --- |" * (5 + len(ranks))]
    for name, wire in rows:
        for link in links:
            cells = []
            for n in ranks:
                r = iteration(nets[name], platform, wire, n, link, scenario)
                cells.append(f"{fmt_ms(r['total'] * 1e3)} / {r['efficiency'] * 100:.0f}%")
            out.append(f"| {name} | {BATCH[(platform, name)]} | {wire_label(link, wire)} | "
                       f"{COMPUTE_MS[(platform, name, wire)]:.3g} | {link.name} | "
                       + " | ".join(cells) + " |")
    return "\n".join(out)


def efficiencies(name, platform, wire, link, scenario, ranks):
    net = Net(name)
    return {n: iteration(net, platform, wire, n, link, scenario)["efficiency"] for n in [1] + ranks}


def rule_row(name, platform, wire, link, scenario, ranks=RANKS, share=0.5):
    """(largest N with efficiency >= 90%, the same for 50%, the knee, the gain per added rank
    past it, the best speed-up over one rank and where)."""
    eff = efficiencies(name, platform, wire, link, scenario, ranks)
    n90 = max([n for n in ranks if eff[n] >= 0.90], default=1)
    n50 = max([n for n in ranks if eff[n] >= 0.50], default=1)
    seq = [1] + ranks
    knee = gain = None
    for a, b in zip(seq, seq[1:]):
        g = (b * eff[b] - a * eff[a]) / (b - a)  # throughput added per added rank, in ranks
        if g < share:
            knee, gain = a, g
            break
    best = max(seq, key=lambda n: n * eff[n])
    return n90, n50, knee, gain, best * eff[best], best, eff[ranks[-1]]


def rules(scenario, platform, cases, links, ranks=RANKS):
    out = ["| net | wire | link | >= 90% up to | >= 50% up to | K, and what each rank added past K "
           f"adds (share of one rank's throughput) | best speed-up over 1 rank (at N) | efficiency at {ranks[-1]} |",
           "|" + " --- |" * 8]
    for name, wire in cases:
        for link in links:
            n90, n50, knee, gain, speedup, at, last = rule_row(name, platform, wire, link, scenario, ranks)
            if knee is None:
                k = f"none up to {ranks[-1]}"
            elif gain < 0 and knee == 1:
                k = f"1: 2 ranks together are slower than 1 ({1 + gain:.2f}x its throughput)"
            else:
                k = f"{knee}: {gain * 100:.0f}%"
            out.append(f"| {name} | {wire_label(link, wire)} | {link.name} | "
                       f"{n90 if n90 > 1 else '-'} | {n50 if n50 > 1 else '-'} | {k} | "
                       f"{speedup:.1f}x ({at}) | {last * 100:.0f}% |")
    return "\n".join(out)


DEPLOYMENTS = [
    ("A", "flat, one rank per GPU, 25 MiB buckets overlapped, --latency_kb = alpha * rate of the "
     "link (the model's default)", dict()),
    ("B", "A with 100 MiB buckets (--bucket_mb=100)", dict(bucket_bytes=100 << 20)),
    ("C", "A with perfect overlap (f = 1)", dict(overlap_fraction=1.0)),
    ("D", "flat, one rank per GPU, whole buffer after backward via host memory (the code's GPU path)",
     dict(mode="after")),
    ("E", "8 ranks per host, hierarchical (loopback within hosts), buckets overlapped (tcp only)",
     dict(ranks_per_host=8)),
    ("F", "8 GPUs per process (NCCL within), one rank per host, after backward (the code's GPU path)",
     dict(mode="after", replicas=8)),
    ("G", "F with buckets overlapped (not in the code for GPUs)", dict(replicas=8)),
    ("H", "A with the code's default --latency_kb=32", dict(latency_bytes=DEFAULT_LATENCY_BYTES)),
    ("I", "D with the code's default --latency_kb=32", dict(mode="after",
                                                             latency_bytes=DEFAULT_LATENCY_BYTES)),
    ("J", "G with the code's default --latency_kb=32", dict(replicas=8,
                                                             latency_bytes=DEFAULT_LATENCY_BYTES)),
    ("K", "A with --allreduce=ring (no doubling or halving)", dict(algorithm="ring")),
]


def deployments(net_name="ResNet-50", wire="float16", links=("25GbE", "100GbE", "HDR-IB")):
    net = Net(net_name)
    out = ["| case | how | link | 64 GPUs | 512 GPUs | 512 GPUs, host ceiling 3 GB/s | "
           "gradient calls at 512 GPUs |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, label, kw in DEPLOYMENTS:
        for name in links:
            link = LINK_BY_NAME[name]
            if link.backend != "tcp" and kw.get("ranks_per_host", 1) > 1:
                continue  # the ucx backend has no hierarchy
            cells = []
            for n, ceiling in ((64, False), (512, False), (512, True)):
                if ceiling and link.backend != "tcp":
                    cells.append("- (tcp only)")
                    continue
                r = iteration(net, "gpu", wire, n, link, Scenario(ceiling=ceiling, **kw))
                cells.append(f"{r['efficiency'] * 100:.0f}% ({r['total'] * 1e3:.1f} ms)")
            cells.append(iteration(net, "gpu", wire, 512, link, Scenario(**kw))["algorithm"])
            out.append(f"| {key} | {label} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def print_parameters():
    print("## Parameters\n")
    print("| link | rate GB/s | step cost alpha | efficiency | L = alpha * rate | backend | source |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for link in LINKS:
        print(f"| {link.name} | {link.rate / 1e9:.3g} | {link.alpha * 1e6:.0f} us | "
              f"{link.efficiency:.2f} | {link.latency_bytes / 1024:.1f} KiB | {link.backend} | "
              f"{link.source} |")
    print()
    print("| net | parameters read from | floats exchanged | float32 MB | float16 MB | "
          "buckets of 25 MiB (floats, in order) | BatchNorm statistics (floats) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in NETS_ORDER:
        net = Net(name)
        b = ", ".join(f"{x:,}" for x in net.buckets())
        print(f"| {name} | {net.source} | {net.count:,} | {net.count * 4 / 1e6:.1f} | "
              f"{net.count * 2 / 1e6:.1f} | {b} | {net.statistics:,} |")
    print()
    shares = ", ".join(
        f"{platform} {name} {BACKWARD_SHARE.get((platform, name), ASSUMED_BACKWARD_SHARE):.2f}"
        + ("" if (platform, name) in BACKWARD_SHARE else " (assumed)")
        for platform in ("cpu", "gpu") for name in NETS_ORDER)
    print(f"overlap fraction f = {OVERLAP_FRACTION}; backward's share of compute: {shares}; "
          f"bucket = {BUCKET_BYTES >> 20} MiB of float32, PCIe {PCIE_BANDWIDTH / 1e9:.0f} GB/s, "
          f"NVLink busbw {NVLINK_BANDWIDTH / 1e9:.0f} GB/s, host ceiling "
          f"{HOST_CEILING['float32'] / 1e9:.1f} GB/s (float32) / {HOST_CEILING['float16'] / 1e9:.1f} "
          f"GB/s of float32 (float16 wire)\n")


def headline():
    net = Net("ResNet-50")
    link = LINK_BY_NAME["100GbE"]
    lines = []
    for key, label, kw in DEPLOYMENTS:
        r = iteration(net, "gpu", "float16", 512, link, Scenario(**kw))
        c = iteration(net, "gpu", "float16", 512, link, Scenario(ceiling=True, **kw))
        lines.append(f"- {key}: {r['efficiency'] * 100:.1f}% ({r['total'] * 1e3:.1f} ms per iteration "
                     f"against {r['compute'] * 1e3:.1f} ms of compute; {c['efficiency'] * 100:.0f}% "
                     f"with the host ceiling): {label}")
    return ("ResNet-50 float16, one H200 per GPU, 100GbE, 512 GPUs, goal "
            f"{GOAL * 100:.0f}%:\n" + "\n".join(lines))


def print_tables(ceiling=False):
    print_parameters()
    sc = Scenario("overlap", ceiling=ceiling)
    note = ", host ceiling on" if ceiling else ""
    lb = ("--latency_kb = alpha * rate of each link" if LATENCY_BYTES is None
          else f"--latency_kb={LATENCY_BYTES / 1024:g}")
    print("## GPU (one H200 per rank): iteration ms / weak-scaling efficiency\n")
    print(f"Flat, N ranks, 25 MiB buckets overlapped with backward, ring, doubling or halving as "
          f"the tcp backend chooses with {lb}{note}.\n")
    print(table("gpu", gpu_rows(), LINKS, RANKS, sc))
    print()
    if LATENCY_BYTES is None:
        sc32 = Scenario("overlap", ceiling=ceiling, latency_bytes=DEFAULT_LATENCY_BYTES)
        print("## GPU, the code's default --latency_kb=32 on every link\n")
        print(table("gpu", [("CaffeNet", "float16"), ("ResNet-50", "float32"),
                            ("ResNet-50", "float16")],
                    [LINK_BY_NAME[x] for x in ("10GbE", "25GbE", "100GbE")], RANKS, sc32))
        print()
    print("## CPU (one 2-core development machine per rank): iteration ms / efficiency\n")
    cpu_rows = [("LeNet", "float32"), ("CaffeNet", "float32"), ("ResNet-50", "float32")]
    cpu_links = [LINK_BY_NAME[x] for x in ("1GbE", "10GbE", "25GbE")]
    print(table("cpu", cpu_rows, cpu_links, [2, 8, 32, 128, 512], sc))
    print()
    print("## Rules of thumb, GPU (default scenario)\n")
    print(rules(sc, "gpu", [("LeNet", "float32"), ("CaffeNet", "float16"), ("ResNet-50", "float16"),
                            ("ResNet-50", "float32")], LINKS))
    print()
    print("## Rules of thumb, CPU (default scenario)\n")
    print(rules(sc, "cpu", cpu_rows, cpu_links))
    print()
    print("## ResNet-50 float16 on the H200: how the exchange is run\n")
    print(deployments())
    print()
    print("## Headline\n")
    print(headline())


# --- validation against measurements ---------------------------------------------------------

# RESULTS.md "Recursive doubling for small allreduces": microseconds per
# allreduce, (doubling, ring), namespaces on one bridge, tbf-shaped links, dev-2c (2 cores).
MEASURED_ALLREDUCE_US = {
    (1, 2): [(12, 23), (69, 61), (274, 276), (549, 550), (1097, 1098), (2194, 2195), (8777, 8862), (35453, 35151)],
    (1, 4): [(54, 251), (134, 226), (549, 415), (1105, 826), (2209, 1647), (4389, 3300), (19177, 13220), (86880, 53066)],
    (1, 8): [(198, 1012), (228, 1780), (821, 1231), (4041, 1358), (3717, 1929), (9244, 3843), (43193, 15683), (159818, 64793)],
    (10, 2): [(12, 30), (15, 45), (21, 45), (49, 50), (109, 106), (269, 300), (1038, 1193), (4152, 4440)],
    (10, 4): [(56, 214), (65, 235), (78, 249), (107, 259), (218, 290), (889, 516), (4139, 3690), (17782, 13735)],
    (10, 8): [(189, 1053), (254, 995), (572, 1327), (440, 1515), (665, 1810), (1467, 1489), (11521, 9440), (49227, 33331)],
}
MEASURED_SIZES = [1 << 10, 8 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20, 4 << 20]

# RESULTS.md "Recursive halving then doubling against the ring, large buffers on 4 and 8 ranks":
# time of halving / the ring's (--algorithm=halving, then ring; float32; 15 calls per size), one
# rank per namespace, tbf-shaped links, dev-2c (2 cores for 4 or 8 ranks).
MEASURED_HALVING_SIZES = [256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20,
                          32 << 20, 64 << 20]
MEASURED_HALVING_RATIO = {
    (1, 4): [1.07, 1.00, 0.99, 1.04, 1.04, 1.16, 1.05, 1.08, 0.99],
    (1, 8): [0.71, 1.09, 1.14, 1.19, 1.22, 1.13, 1.17, 1.23, 1.18],
    (10, 4): [2.02, 0.90, 0.86, 1.22, 1.13, 1.19, 1.15, 1.06, 1.02],
    (10, 8): [3.05, 0.94, 0.81, 0.80, 0.95, 0.93, 0.98, 0.96, 1.03],
}


def compare_allreduce():
    print("Model against the measured allreduce times (bench/history/collectives-scaling.md, "
          "\"Recursive doubling for small allreduces\"): us, model / measured (ratio). The ranks "
          "shared 2 cores.\n")
    print("| link | ranks | algorithm | " + " | ".join(_size(s) for s in MEASURED_SIZES) + " |")
    print("|" + " --- |" * (3 + len(MEASURED_SIZES)))
    worst = {}
    for (gbit, n), values in MEASURED_ALLREDUCE_US.items():
        link = LINK_BY_GBIT[gbit]
        for a, name in ((0, "doubling"), (1, "ring")):
            cells = []
            for size, pair in zip(MEASURED_SIZES, values):
                if name == "ring":
                    model = ring_time(size, n, link)
                else:
                    model = doubling_time(size, n, link)
                ratio = model * 1e6 / pair[a]
                worst.setdefault((gbit, n, name), []).append((size, ratio))
                cells.append(f"{model * 1e6:,.0f} / {pair[a]:,} ({ratio:.2f})")
            print(f"| {gbit} Gbit/s | {n} | {name} | " + " | ".join(cells) + " |")
    print()
    print("| link | ranks | algorithm | model / measured below 256 KiB | from 256 KiB |")
    print("| --- | --- | --- | --- | --- |")
    for (gbit, n, name), ratios in sorted(worst.items()):
        small = [r for size, r in ratios if size < 256 << 10]
        large = [r for size, r in ratios if size >= 256 << 10]
        print(f"| {gbit} Gbit/s | {n} | {name} | {min(small):.2f}-{max(small):.2f} | "
              f"{min(large):.2f}-{max(large):.2f} |")
    print()
    print("Halving / ring time, model against measured (bench/history/collectives-scaling.md, "
          "\"Recursive halving then "
          f"doubling against the ring\"; float32; halving's bytes at {HALVING_BYTE_COST} times "
          "the ring's in the model):\n")
    print("| link | ranks | " + " | ".join(_size(s) for s in MEASURED_HALVING_SIZES) + " |")
    print("|" + " --- |" * (2 + len(MEASURED_HALVING_SIZES)))
    for (gbit, n), ratios in sorted(MEASURED_HALVING_RATIO.items()):
        link = LINK_BY_GBIT[gbit]
        cells = [f"{halving_time(size, n, link) / ring_time(size, n, link):.2f} / {m:.2f}"
                 for size, m in zip(MEASURED_HALVING_SIZES, ratios)]
        print(f"| {gbit} Gbit/s | {n} | " + " | ".join(cells) + " |")


def _size(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"


def validation_points(path, link_bound=1.5):
    """The points of a measured CSV with the model's iteration for each. Columns: net,ranks,
    link_gbit,measured_ms, then optionally platform (gpu|cpu, default gpu), wire (float32|float16|
    bfloat16, default float32), compute_ms (the one-rank time to use instead of the model's, e.g.
    for another batch or thread count), mode (overlap|after, default overlap), ranks_per_host
    (default 1), backward_share (backward's share of compute_ms; default the net's
    BACKWARD_SHARE), machine_hosts (hosts sharing one machine's cores, as network namespaces on
    one machine; default 1). Lines starting with # are skipped.
    A point is link-bound when the model's iteration is at least link_bound times its compute
    (the exchange is a third of the time or more) and the link, not the stages within a host
    (CPU copies), takes most of the exchange."""
    with open(path) as f:
        rows = list(csv.DictReader(line for line in f if line.strip() and not line.startswith("#")))
    points = []
    for row in rows:
        net = Net(row["net"].strip())
        n = int(row["ranks"])
        link = LINK_BY_GBIT[float(row["link_gbit"]) if "." in row["link_gbit"] else int(row["link_gbit"])]
        platform = (row.get("platform") or "gpu").strip()
        wire = (row.get("wire") or "float32").strip()
        compute = row.get("compute_ms")
        compute = float(compute) if compute not in (None, "") else None
        if compute is None and (platform, net.name, wire) not in COMPUTE_MS:
            sys.exit(f"{path}: no compute time for {net.name} ({platform}, {wire}): "
                     "give compute_ms")
        mode = (row.get("mode") or "overlap").strip()
        g = int(row.get("ranks_per_host") or 1)
        share = row.get("backward_share")
        share = float(share) if share not in (None, "") else None
        machine_hosts = int(row.get("machine_hosts") or 1)
        r = iteration(net, platform, wire, n, link,
                      Scenario(mode, ranks_per_host=g, backward_share=share,
                               machine_hosts=machine_hosts), compute)
        measured = float(row["measured_ms"]) / 1e3
        points.append({"net": net.name, "ranks": n, "ranks_per_host": g, "link": link.name,
                       "platform": platform, "wire": wire, "mode": mode,
                       "compute": r["compute"], "model": r["total"], "measured": measured,
                       "error": (r["total"] - measured) / measured,
                       "link_bound": r["total"] >= link_bound * r["compute"]
                       and r["loopback"] <= 0.5 * r["exchange"]})
    return points


def validate(path, link_bound=1.5):
    """The model against the measured iterations of a CSV (validation_points); the summary is
    given for every point and for the link-bound ones."""
    points = validation_points(path, link_bound)
    print("| net | ranks | ranks per host | link | platform | wire | mode | compute ms | model ms | "
          "measured ms | error | link-bound |")
    print("|" + " --- |" * 12)
    for p in points:
        print(f"| {p['net']} | {p['ranks']} | {p['ranks_per_host']} | {p['link']} | "
              f"{p['platform']} | {p['wire']} | {p['mode']} | {p['compute'] * 1e3:.2f} | "
              f"{p['model'] * 1e3:.2f} | {p['measured'] * 1e3:.2f} | {p['error'] * 100:+.1f}% | "
              f"{'yes' if p['link_bound'] else 'no'} |")
    errors = [abs(p["error"]) for p in points]
    bound_errors = [abs(p["error"]) for p in points if p["link_bound"]]
    for label, errs in (("every point", errors),
                        (f"link-bound (model >= {link_bound} x compute, the link most of the "
                         "exchange)", bound_errors)):
        if errs:
            within = sum(e <= 0.15 for e in errs)
            print(f"\n{label}: {len(errs)} points, mean |error| {sum(errs) / len(errs) * 100:.1f}%, "
                  f"largest {max(errs) * 100:.1f}%, {within} within 15%", end="")
    print()


VALIDATION_CSV = os.path.join(HERE, "validation-dev2c.csv")


def plot(path, validation=VALIDATION_CSV):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (apt-get install python3-matplotlib, then run this script "
              "with /usr/bin/python3)", file=sys.stderr)
        return 2
    net = Net("ResNet-50")
    ranks = [1] + RANKS
    points = validation_points(validation) if validation and os.path.exists(validation) else []
    if points:
        fig, (ax, vax) = plt.subplots(2, 1, figsize=(8, 8.4), dpi=100,
                                      gridspec_kw={"height_ratios": [1, 1]})
    else:
        fig, ax = plt.subplots(figsize=(8, 4.2), dpi=100)
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    sc32 = Scenario(latency_bytes=DEFAULT_LATENCY_BYTES)
    for colour, link in zip(colours, LINKS):
        for wire, style in (("float16", "-"), ("float32", ":")):
            eff = [iteration(net, "gpu", wire, n, link)["efficiency"] * 100 for n in ranks]
            label = f"{link.name}: {wire} ({COMPUTE_MS[('gpu', 'ResNet-50', wire)]:.0f} ms compute)"
            ax.plot(ranks, eff, style, color=colour, marker="o", markersize=3, label=label)
        if link.name == "100GbE":  # the code's default --latency_kb, not tuned to the link
            eff = [iteration(net, "gpu", "float16", n, link, sc32)["efficiency"] * 100
                   for n in ranks]
            ax.plot(ranks, eff, "--", color=colour, marker="o", markersize=3,
                    label=f"{link.name}: float16, --latency_kb=32")
    ax.axhline(GOAL * 100, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks)
    ax.set_xticklabels([str(n) for n in ranks])
    ax.set_ylim(0, 102)
    ax.set_xlabel("ranks (one H200 each), batch 128 per rank")
    ax.set_ylabel("weak-scaling efficiency, %")
    ax.set_title("ResNet-50, modelled: 25 MiB buckets overlapped with backward; ring, doubling or\n"
                 "halving as the tcp backend chooses them, --latency_kb = alpha * rate of the link "
                 "unless marked", fontsize=8)
    ax.grid(True, linewidth=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    if points:
        plot_validation(vax, points, os.path.basename(validation))
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")
    return 0


def plot_validation(ax, points, source):
    """The measured points: efficiency (compute / iteration) measured (filled) and modelled
    (hollow, joined to it), ranks on x, one colour per net and link, squares where two ranks
    share a namespace."""
    series = []
    for p in points:
        key = (p["net"], p["link"])
        if key not in series:
            series.append(key)
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
    width = 0.5 / max(len(series), 1)
    for i, key in enumerate(series):
        colour = colours[i % len(colours)]
        labelled = False
        for p in points:
            if (p["net"], p["link"]) != key:
                continue
            # Ranks on a log2 axis, the series side by side around each rank count.
            x = p["ranks"] * 2 ** ((i - (len(series) - 1) / 2) * width)
            measured = p["compute"] / p["measured"] * 100
            model = p["compute"] / p["model"] * 100
            marker = "s" if p["ranks_per_host"] > 1 else "o"
            ax.plot([x, x], [measured, model], "-", color=colour, linewidth=0.8)
            ax.plot(x, model, marker, markerfacecolor="none", color=colour, markersize=5)
            ax.plot(x, measured, marker, color=colour, markersize=5,
                    label=None if labelled else f"{key[0]}, {key[1]}"
                    + ("" if any(q["link_bound"] for q in points if (q["net"], q["link"]) == key)
                       else " (compute-bound)"))
            labelled = True
    ax.set_xscale("log", base=2)
    ticks = sorted({p["ranks"] for p in points})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    # A measured iteration can beat its compute (measured apart, by as many processes at once).
    top = max(max(p["compute"] / p["measured"], p["compute"] / p["model"]) for p in points)
    ax.set_ylim(0, max(102, top * 100 + 5))
    ax.set_xlabel("ranks: CPU, one thread each, in network namespaces of one 2-core machine\n"
                  "(squares: 2 ranks per namespace)", fontsize=8)
    ax.set_ylabel("efficiency, %: compute / iteration")
    ax.set_title(f"Validation ({source}): measured (filled) against modelled (hollow)",
                 fontsize=8)
    ax.grid(True, linewidth=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))


# --- self-test ----------------------------------------------------------------------------------


def self_test():
    failures = []

    def check(what, got, want, rel=1e-9):
        ok = abs(got - want) <= rel * max(abs(want), 1e-30)
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {got!r} (want {want!r})")
        if not ok:
            failures.append(what)

    link = Link("test", 8, 10e-6, 1.0, "tcp", "")  # 1 GB/s exactly, 10 us a step
    # Ring, N = 2, n = 1 MB: 2 steps of alpha plus 2 (N - 1) / N * n / B = 1 ms.
    check("ring N=2, 1 MB, alpha 10 us, 1 GB/s", ring_time(1e6, 2, link), 20e-6 + 1e-3)
    # Ring, N = 4, n = 4 MB: 6 alpha + 1.5 * 4 ms.
    check("ring N=4, 4 MB", ring_time(4e6, 4, link), 60e-6 + 6e-3)
    # Doubling, N = 8: 3 steps of (alpha + n / B); N = 6: log2 4 = 2 steps + 2 for the fold.
    check("doubling N=8, 8 KB", doubling_time(8e3, 8, link), 3 * (10e-6 + 8e-6))
    check("doubling steps N=6", doubling_steps(6), 4)
    check("doubling steps N=512", doubling_steps(512), 9)
    # Halving, N = 8, 8 MB: 6 steps of alpha + 1.2 * 2 * 7/8 * 8 ms; N = 6: 2 levels (4 alpha,
    # 1.2 * 2 * 3/4 of the bytes) + 2 (alpha + n / B) for the fold.
    check("halving N=8, 8 MB", halving_time(8e6, 8, link), 60e-6 + 1.2 * 1.75 * 8e-3)
    check("halving N=6, 4 MB", halving_time(4e6, 6, link),
          40e-6 + 1.2 * 1.5 * 4e-3 + 2 * (10e-6 + 4e-3))
    # The three-way choice at N = 8, L = 64 KiB, float32 wire (b = 4 * floats):
    #   doubling 3 (L + b) <= halving 6 L + 1.2 * 2 * 7/8 b = 6 L + 2.1 b  <=>  b <= 10/3 L
    #     = 218,453.3 bytes: up to 54,613 floats;
    #   halving < ring 14 (L + b / 8) = 14 L + 1.75 b  <=>  0.35 b < 8 L  <=>  b < 22.857 L
    #     = 1,497,965.7 bytes: up to 374,491 floats; the ring above.
    lb = 64 << 10
    for floats, want in ((54613, "doubling"), (54614, "halving"), (374491, "halving"),
                         (374492, "ring")):
        got = choose(8, 4 * floats, 4 * floats, lb)
        check(f"N=8, L=64 KiB, {floats:,} floats: {want}", float(got == want), 1.0)
    # N = 4, L = 1000: doubling 2 (L + b) beats the ring 6 L + 1.5 b below b = 8 L; halving
    # 4 L + 1.8 b beats the ring only below 6.67 L, where doubling is cheaper still.
    check("N=4 picks doubling just below 8 L",
          float(choose(4, 7999, 7999, 1000) == "doubling"), 1.0)
    check("N=4 picks the ring just above 8 L", float(choose(4, 8001, 8001, 1000) == "ring"), 1.0)
    # N = 2: never halving (it is the ring), however large the buffer or L.
    check("N=2, 64 MB, L = 1 MiB: the ring",
          float(choose(2, 64 << 20, 64 << 20, 1 << 20) == "ring"), 1.0)
    check("N=2, --allreduce=halving: the ring",
          float(choose(2, 1 << 20, 1 << 20, 32 << 10, algorithm="halving") == "ring"), 1.0)
    # Never doubling above 1 MiB of float32, however large L (halving then, as the ring's 1,022
    # steps cost more); but --allreduce=doubling forces it.
    check("no doubling above 1 MiB",
          float(choose(512, 2 << 20, 2 << 20, 1 << 30) == "halving"), 1.0)
    check("--allreduce=doubling above 1 MiB",
          float(choose(512, 2 << 20, 2 << 20, 32 << 10, algorithm="doubling") == "doubling"), 1.0)
    # N = 512, L = 32 KiB, a 25 MiB bucket (6,553,600 floats): ring 1022 (L + n / 512) against
    # halving 18 L + 1.2 * 2 * 511/512 * 26,214,400. float32 wire: 85.8e6 > 63.4e6, halving;
    # float16 wire (n = 13,107,200): the ring's 59.7e6 > halving's 0.59e6 + 31.4e6, halving
    # (it sends the wire's values too).
    b25 = 25 << 20
    check("N=512, L=32 KiB, 25 MiB float32: halving",
          float(choose(512, b25, b25, 32 << 10) == "halving"), 1.0)
    check("N=512, L=32 KiB, 25 MiB on a float16 wire: halving",
          float(choose(512, b25 // 2, b25, 32 << 10) == "halving"), 1.0)
    # N = 6 (p = 4): doubling and halving both pay the fold's 2 (L + b). L = 1000: at b = 100,
    # ring 10 (L + b / 6) = 10,167, doubling 4 (L + b) = 4,400, halving 4 L + 1.8 b + 2 (L + b)
    # = 6,380: doubling; at b = 1 MiB, ring 1.758e6, halving 3.991e6, doubling 4.198e6: the ring.
    check("N=6, 100 bytes: doubling", float(choose(6, 100, 100, 1000) == "doubling"), 1.0)
    check("N=6, 1 MiB: the ring", float(choose(6, 1 << 20, 1 << 20, 1000) == "ring"), 1.0)
    # The model times what the code chooses, halving in float16 bytes on a float16 wire: 25 MiB
    # of float32 (a 12.5 MiB float16 bucket) on 512 ranks of 100GbE: halving with L = alpha *
    # rate (244 KiB) and with L = 32 KiB.
    l100 = LINK_BY_NAME["100GbE"]
    how, t = flat_allreduce(b25 // 4, "float16", 512, l100)
    check("100GbE, 512, L = alpha * rate: halving", float(how == "halving"), 1.0)
    check("  its time, float16 bytes", t, halving_time(b25 // 2, 512, l100))
    how, t = flat_allreduce(b25 // 4, "float16", 512, l100, latency_bytes=32 << 10)
    check("100GbE, 512, L = 32 KiB: halving", float(how == "halving"), 1.0)
    check("  its time, float16 bytes", t, halving_time(b25 // 2, 512, l100))
    # Under the host ceiling a float16 wire's halving moves its bytes at the float16 figure
    # (3.3 GB/s of float32, 1.65 GB/s of wire bytes) and folds at the float32 one (3.0 GB/s):
    # N = 6, 10^6 floats, 100GbE: 4 alpha + 1.2 * 2 * 3/4 * 2 MB / 1.65 GB/s + 2 (alpha + 4 MB /
    # 3.0 GB/s).
    how, t = flat_allreduce(10**6, "float16", 6, l100, ceiling=True, algorithm="halving")
    check("host ceiling, N=6, float16 halving: the fold at the float32 figure", t,
          4 * l100.alpha + 1.2 * 1.5 * 2e6 / (HOST_CEILING["float16"] / 2)
          + 2 * (l100.alpha + 4e6 / HOST_CEILING["float32"]))
    # Buckets: parameters of 3, 3, 3 floats with a bucket of 5 floats (20 bytes): one each;
    # 1, 1, 1, 10 with 12 bytes (3 floats): [10] then [1, 1, 1].
    check("buckets 3,3,3 / 5", float(buckets_of([(3, 0), (3, 1), (3, 2)], 20) == [3, 3, 3]), 1.0)
    check("buckets 1,1,1,10 / 3", float(buckets_of([(1, 0), (1, 1), (1, 2), (10, 3)], 12) == [10, 3]), 1.0)
    # The nets' parameter counts (Caffe's layouts; BatchNorm's three blobs per layer included).
    for name, want in (("LeNet", 431080), ("CaffeNet", 60965224), ("ResNet-50", 25610205)):
        check(f"{name} parameters", float(Net(name).count), float(want))
    # Overlap: iteration = compute + max(exchange - f * backward, last bucket).
    lenet = Net("LeNet")  # one bucket of 1.72 MB: nothing to overlap
    r = iteration(lenet, "cpu", "float32", 2, LINK_BY_NAME["1GbE"], compute_ms=10.0)
    want = 0.010 + ring_time(431080 * 4, 2, LINK_BY_NAME["1GbE"])
    check("LeNet, 2 ranks, 1GbE: compute + the whole ring", r["total"], want)
    # Overlap hides f * backward, backward = share * compute: CaffeNet's buckets on 2 ranks of
    # 1GbE, compute 300 ms, share 0.5: compute + exchange - 0.78 * 150 ms (the last bucket's
    # allreduce is shorter than what is left).
    caffenet = Net("CaffeNet")
    g1 = LINK_BY_NAME["1GbE"]
    exchange = sum(flat_allreduce(b, "float32", 2, g1)[1] for b in caffenet.buckets())
    r = iteration(caffenet, "cpu", "float32", 2, g1, Scenario(backward_share=0.5), compute_ms=300.0)
    check("CaffeNet, 2 ranks, 1GbE, share 0.5: compute + exchange - f * share * compute",
          r["total"], 0.3 + exchange - OVERLAP_FRACTION * 0.5 * 0.3)
    # Hierarchy on a machine of 2 hosts (namespaces): the loopback ring and broadcast of 2 ranks
    # at half of LOOPBACK_BANDWIDTH. 4 ranks, 10^6 floats, 1GbE: 2 hosts' ring + within (2 steps
    # of alpha + 4 MB / 1.5 GB/s) + back (4 MB / 1.5 GB/s + alpha).
    t = allreduce(10**6, "float32", 4, g1, ranks_per_host=2, machine_hosts=2)
    check("hierarchy, 2 hosts on one machine: loopback at half the rate", t,
          flat_allreduce(10**6, "float32", 2, g1)[1] + 2 * LOOPBACK_ALPHA + 4e6 / 1.5e9
          + 4e6 / 1.5e9 + LOOPBACK_ALPHA)
    # Efficiency of one rank is 1.
    check("1 rank", iteration(lenet, "gpu", "float32", 1, LINK_BY_NAME["10GbE"])["efficiency"], 1.0)
    if failures:
        print(f"\n{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("\nall checks passed")
    return 0


def main():
    global OVERLAP_FRACTION, LATENCY_BYTES, ALLREDUCE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="check hand-computed values")
    ap.add_argument("--plot", metavar="PNG",
                    help="efficiency against ranks, ResNet-50 on the GPU, and below it the "
                         "validation points (--validate's CSV if given, else "
                         "bench/scaling/validation-dev2c.csv)")
    ap.add_argument("--validate", metavar="CSV", help="model against measured iterations")
    ap.add_argument("--link-bound", type=float, default=1.5,
                    help="--validate: a point is link-bound when the model's iteration is at "
                         "least this many times its compute (default 1.5)")
    ap.add_argument("--compare-allreduce", action="store_true",
                    help="model against the allreduce times measured between namespaces")
    ap.add_argument("--host-ceiling", action="store_true",
                    help="limit each rank's exchange to the loopback rate measured here")
    ap.add_argument("--alpha-us", type=float, metavar="US",
                    help="step cost of the Ethernet (tcp) links instead of 20 us")
    ap.add_argument("--latency-kb", type=float, metavar="K",
                    help="the communicator's --latency_kb for every link, with which it "
                         "chooses ring, doubling or halving (default: alpha * rate of each link; "
                         f"the code's default is {DEFAULT_LATENCY_BYTES >> 10})")
    ap.add_argument("--allreduce", choices=("auto", "ring", "doubling", "halving"),
                    help="the communicator's --allreduce for the tcp links (default auto: the "
                         "cheapest by its cost model)")
    ap.add_argument("--overlap", type=float, metavar="F",
                    help=f"overlappable fraction of backward instead of {OVERLAP_FRACTION}")
    args = ap.parse_args()
    if args.overlap is not None:
        OVERLAP_FRACTION = args.overlap
    if args.latency_kb is not None:
        LATENCY_BYTES = args.latency_kb * 1024
    if args.allreduce is not None:
        ALLREDUCE = args.allreduce
    if args.alpha_us is not None:
        for link in LINKS:
            if link.backend == "tcp":
                link.alpha = args.alpha_us * 1e-6
    if args.self_test:
        return self_test()
    if args.plot:
        return plot(args.plot, args.validate or VALIDATION_CSV)
    if args.validate:
        validate(args.validate, args.link_bound)
        return 0
    if args.compare_allreduce:
        compare_allreduce()
        return 0
    print_tables(ceiling=args.host_ceiling)
    return 0


if __name__ == "__main__":
    sys.exit(main())
