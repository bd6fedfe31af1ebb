#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The peer of cortado_gpu_bench: the same nets, batch sizes and SGD step in PyTorch, cuDNN
autotuning on (Cortado times cuDNN's candidates too). Prints one line per net in
cortado_gpu_bench's format, the mode last.

    python3 bench/gpu/pytorch_train.py [--mode=float32|tf32|amp] [--batch=N] [NET ...]

Modes: float32 (TF32 off, as Cortado computes by default), tf32 (TF32 on for convolutions and
matrix products, as Cortado's `precision: TF32`), amp (automatic mixed precision: autocast to
float16 with a GradScaler, the model and data in channels_last). NETs: lenet, cifar10_quick,
caffenet, resnet50 (default: all); --batch overrides each net's batch size.
"""
import sys
import time

import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = True


def lenet():
    return nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2, ceil_mode=True),
        nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2, ceil_mode=True), nn.Flatten(),
        nn.Linear(800, 500), nn.ReLU(inplace=True), nn.Linear(500, 10)), (64, 1, 28, 28)


def cifar10_quick():
    return nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2), nn.MaxPool2d(3, 2, ceil_mode=True), nn.ReLU(inplace=True),
        nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(inplace=True),
        nn.AvgPool2d(3, 2, ceil_mode=True),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(inplace=True),
        nn.AvgPool2d(3, 2, ceil_mode=True), nn.Flatten(),
        nn.Linear(64 * 4 * 4, 64), nn.Linear(64, 10)), (100, 3, 32, 32)


def caffenet():
    return nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
        nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, ceil_mode=True), nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, ceil_mode=True), nn.Flatten(),
        nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 1000)), (256, 3, 227, 227)


def resnet50():
    import torchvision
    return torchvision.models.resnet50(), (64, 3, 224, 224)


NETS = {"lenet": lenet, "cifar10_quick": cifar10_quick, "caffenet": caffenet,
        "resnet50": resnet50}


def run(name, mode="float32", batch=None, iterations=50, warmup=10):
    tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    amp = mode == "amp"
    model, shape = NETS[name]()
    if batch:
        shape = (batch,) + shape[1:]
    model = model.cuda().train()
    classes = 1000 if name in ("caffenet", "resnet50") else 10
    data = torch.rand(shape, device="cuda")
    if amp:
        model = model.to(memory_format=torch.channels_last)
        data = data.contiguous(memory_format=torch.channels_last)
    label = (torch.arange(shape[0], device="cuda") % 10).long()
    assert label.max() < classes
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler("cuda", enabled=amp)

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = loss_fn(model(data), label)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(iterations):
        loss = step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**20
    print(f"pytorch-{name} batch {shape[0]} ms/iter {1000 * seconds / iterations:.3f} "
          f"images/s {shape[0] * iterations / seconds:.1f} peak_MiB {peak:.1f} "
          f"loss {loss.item():g} run_peak_MiB - {mode}", flush=True)


if __name__ == "__main__":
    mode, batch, nets = "float32", None, []
    for arg in sys.argv[1:]:
        if arg.startswith("--mode="):
            mode = arg.split("=", 1)[1]
            assert mode in ("float32", "tf32", "amp"), mode
        elif arg.startswith("--batch="):
            batch = int(arg.split("=", 1)[1])
        else:
            nets.append(arg)
    for net in nets or list(NETS):
        run(net, mode, batch)
