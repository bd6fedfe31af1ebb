#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks an exported ONNX model and runs it with an independent runtime.

    run_onnx.py [--tolerance T] DIR[:no-runtime] ...

Each DIR holds model.onnx, and inputs.txt and outputs.txt: one line per blob, "name file d0 d1 ...",
the file raw little-endian float32 (what Cortado fed and computed). The model must pass ONNX's
checker (full check: strict shape inference), every output's inferred shape must be the blob's
(a symbolic axis matches any length), and OpenCV's dnn module (cv2.dnn.readNetFromONNX), given the
same inputs, must compute every output within T of Cortado's, relative to the output's largest
magnitude (not run for a DIR given as DIR:no-runtime). Each folder's report ends with a line
"== DIR: passed" or "== DIR: FAILED". Exit status 0 when all holds; 2 when onnx or cv2 cannot be
imported.
"""
import argparse
import os
import sys

try:
    import numpy as np
    import onnx
    from onnx import shape_inference
except ImportError as e:  # pragma: no cover - the caller skips with this reason
    print(f"cannot import onnx: {e}")
    sys.exit(2)


def read_blobs(path, directory):
    blobs = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields:
                continue
            name, file, dims = fields[0], fields[1], [int(d) for d in fields[2:]]
            data = np.fromfile(os.path.join(directory, file), dtype="<f4").reshape(dims)
            blobs.append((name, data))
    return blobs


def shape_of(value_info):
    dims = []
    for d in value_info.type.tensor_type.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else d.dim_param or "?")
    return dims


def check(directory, runtime, tolerance):
    path = os.path.join(directory, "model.onnx")
    inputs = read_blobs(os.path.join(directory, "inputs.txt"), directory)
    expected = read_blobs(os.path.join(directory, "outputs.txt"), directory)

    onnx.checker.check_model(path, full_check=True)  # the file, with strict shape inference
    # The outputs' shapes, inferred again without the weights' bytes (which inference never
    # reads; holding them makes it copy hundreds of MB for CaffeNet).
    model = onnx.load(path)
    for tensor in model.graph.initializer:
        if tensor.data_type == onnx.TensorProto.FLOAT:
            tensor.ClearField("raw_data")
    inferred = shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    shapes = {o.name: shape_of(o) for o in inferred.graph.output}
    failures = []
    names = [o.name for o in model.graph.output]
    if sorted(names) != sorted(n for n, _ in expected):
        failures.append(f"outputs {names}, expected {[n for n, _ in expected]}")
    for name, data in expected:
        got = shapes.get(name)
        if got is None or len(got) != data.ndim or any(
                isinstance(g, int) and g != d for g, d in zip(got, data.shape)):
            failures.append(f"{name}: inferred shape {got}, Cortado's {list(data.shape)}")
    print(f"checker: passed; outputs {', '.join(f'{n} {shapes.get(n)}' for n in names)}")
    if not runtime or failures:
        print("\n".join(failures))
        return 1 if failures else 0

    import cv2
    net = cv2.dnn.readNetFromONNX(path)
    for name, data in inputs:
        net.setInput(np.ascontiguousarray(data), name)
    outs = net.forward([n for n, _ in expected])
    for (name, want), got in zip(expected, outs):
        got = np.asarray(got, dtype=np.float32)
        if got.size != want.size:
            failures.append(f"{name}: OpenCV gave shape {list(got.shape)}, Cortado {list(want.shape)}")
            continue
        got = got.reshape(want.shape)
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        diff = float(np.max(np.abs(got - want))) if want.size else 0.0
        ok = np.all(np.isfinite(got)) and diff <= tolerance * max(scale, 1e-30)
        print(f"opencv {cv2.__version__}: {name} max |diff| {diff:.3g}, max |value| {scale:.3g}"
              f"{'' if ok else '  FAILED'}")
        if not ok:
            failures.append(f"{name}: max |diff| {diff:.3g} > {tolerance} x {scale:.3g}")
    print("\n".join(failures))
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directories", nargs="+")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    try:
        import cv2  # noqa: F401
    except ImportError as e:
        print(f"cannot import cv2: {e}")
        return 2
    status = 0
    for arg in args.directories:
        directory, _, flag = arg.partition(":")
        try:
            result = check(directory, flag != "no-runtime", args.tolerance)
        except Exception as e:  # the checker's and OpenCV's errors, reported per folder
            print(f"{type(e).__name__}: {e}")
            result = 1
        print(f"== {directory}: {'passed' if result == 0 else 'FAILED'}", flush=True)
        status = status or result
    return status


if __name__ == "__main__":
    sys.exit(main())
