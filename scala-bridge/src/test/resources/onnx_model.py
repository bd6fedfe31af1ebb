#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What the ScalaTest suites ask of an exported ONNX model, answered by ONNX's and OpenCV's own
Python packages (Debian: python3-onnx, python3-opencv), so that the model is judged by readers
that are not Cortado.

    onnx_model.py check MODEL
        onnx.checker.check_model(full_check=True) (which runs ONNX's strict shape inference),
        then prints one JSON line: the opset, the graph's name, and its inputs and outputs in
        order, each with its name and shape (a dimension is an int, or its symbolic name).
    onnx_model.py predict MODEL INPUT IMAGES SCALE OUT [BATCH]
        Runs the model with OpenCV's dnn module (cv2.dnn.readNetFromONNX) on every image of the
        IDX file IMAGES (gzipped or not, uint8, N x H x W): graph input INPUT gets the pixels
        times SCALE (what the net's data layer hands its first layer: Caffe's transform_param
        scale), as float32 N x 1 x H x W, BATCH images at a time (default 100). Writes the
        predicted class (the index of the largest value of the first graph output) of every
        image to OUT, one a line in image order, and prints the count.
"""
import gzip
import json
import sys

import numpy as np


def read_idx_images(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if data[0:2] != b"\0\0" or data[2] != 0x08:
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    offset = 4 + 4 * len(dims)
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def dims_of(value_info):
    return [d.dim_param if d.HasField("dim_param") else d.dim_value
            for d in value_info.type.tensor_type.shape.dim]


def check(model_path):
    import onnx

    model = onnx.load(model_path)
    onnx.checker.check_model(model, full_check=True)
    opsets = {o.domain: o.version for o in model.opset_import}
    print(json.dumps({
        "opset": opsets.get("", opsets.get("ai.onnx")),
        "graph": model.graph.name,
        "inputs": [{"name": i.name, "shape": dims_of(i)} for i in model.graph.input],
        "outputs": [{"name": o.name, "shape": dims_of(o)} for o in model.graph.output],
    }))


def predict(model_path, input_name, images_path, scale, out_path, batch):
    import cv2

    images = read_idx_images(images_path)
    net = cv2.dnn.readNetFromONNX(model_path)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
    predictions = []
    for start in range(0, len(images), batch):
        chunk = images[start:start + batch].astype(np.float32) * np.float32(scale)
        net.setInput(chunk[:, np.newaxis, :, :], input_name)
        scores = net.forward()
        scores = scores.reshape(scores.shape[0], -1)
        if scores.shape[0] != len(chunk):
            raise SystemExit(f"{len(chunk)} images gave {scores.shape[0]} rows of scores")
        predictions.extend(int(k) for k in scores.argmax(axis=1))
    with open(out_path, "w") as out:
        out.write("".join(f"{k}\n" for k in predictions))
    print(f"{len(predictions)} predictions written to {out_path}")


def main(argv):
    if len(argv) == 3 and argv[1] == "check":
        check(argv[2])
    elif len(argv) in (7, 8) and argv[1] == "predict":
        predict(argv[2], argv[3], argv[4], float(argv[5]), argv[6],
                int(argv[7]) if len(argv) == 8 else 100)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
