#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the C++ folders depend on each other only in the directions docs/dev/map.md
draws: every `#include "<folder>/..."` in cpp/<folder> and jni/ must name a folder allowed below
(or be one of the few single-file exceptions, each with its reason). Prints every include that
breaks the rule, with its file and line, and exits 1; exits 0 when there is none.

    check_layering.py [ROOT]        check the tree at ROOT (default: this file's repository)
    check_layering.py --self-test   check that a forbidden include is found (a made-up tree)
"""
import os
import re
import sys
import tempfile

# What each folder may include, besides itself. Lower folders never include higher ones.
ALLOWED = {
    "core": {"proto"},
    "math": {"core"},
    "io": {"core", "proto"},
    "layers": {"core", "math", "io", "proto"},
    "data": {"core", "math", "io", "proto", "layers"},
    "net": {"core", "math", "io", "proto", "layers"},
    "solvers": {"core", "math", "io", "proto", "net"},
    "comm": {"core", "math"},
    "parallel": {"core", "math", "io", "proto", "data", "net", "solvers", "comm"},
    "plot": {"core", "io"},
    # ONNX export: a built net and its layers' parameters, written as ONNX's messages.
    "onnx": {"core", "io", "proto", "net", "layers"},
    "tools": {"core", "io", "proto", "data", "net", "solvers", "comm", "parallel", "plot",
              "onnx"},
    # The JNI shim talks to the training session (parallel), nets, files (io, data's databases
    # and image codec, solver files), communicators handed to a session, and plots: never to
    # layers or kernels. ONNX export takes a built net.
    "jni": {"core", "io", "proto", "data", "net", "solvers", "comm", "parallel", "plot", "onnx"},
}

# Single files that reach past their folder's rule, and why.
EXCEPTIONS = {
    # Tensor's 16-bit copies use the header-only float<->half conversion.
    ("cpp/core/tensor.cpp", "math"),
    # The recurrent layers run an unrolled net inside the layer, as Caffe's do.
    ("cpp/layers/recurrent_layer.cpp", "net"),
    # The layer registry: which layer types exist, checked before a net is built.
    ("cpp/parallel/session_info.cpp", "layers"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z_]+)/')
SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".h")


def folder_of(relpath):
    parts = relpath.split("/")
    if parts[0] == "jni":
        return "jni"
    if parts[0] == "cpp" and len(parts) > 2:
        return parts[1]
    return None


def check(root, exceptions=EXCEPTIONS):
    problems = []
    used = set()
    for top in ("cpp", "jni"):
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                folder = folder_of(rel)
                if folder is None:
                    continue
                if folder not in ALLOWED:
                    problems.append(f"{rel}: folder '{folder}' has no rule in check_layering.py")
                    continue
                with open(path, encoding="utf-8", errors="replace") as source:
                    for number, line in enumerate(source, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        target = match.group(1)
                        if target == folder or target not in ALLOWED and target != "proto":
                            continue  # its own folder, or a generated header such as io_cortado_*
                        if target in ALLOWED[folder]:
                            continue
                        if (rel, target) in exceptions:
                            used.add((rel, target))
                            continue
                        problems.append(f"{rel}:{number}: {folder}/ includes {target}/ "
                                        f"({line.strip()}), which docs/dev/map.md does not allow")
    for rel, target in sorted(exceptions - used):
        problems.append(f"{rel}: listed as an exception for {target}/ but no longer includes it "
                        "(remove it from EXCEPTIONS)")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for rel, text in {
            "cpp/net/net.cpp": '#include "layers/layer.hpp"\n#include "core/error.hpp"\n',
            "jni/native_x_jni.cpp":
                '#include "parallel/trainer.hpp"\n#include "layers/layer.hpp"\n',
            "cpp/core/bad.hpp": '#include "net/net.hpp"\n',
        }.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as out:
                out.write(text)
        found = check(root, exceptions=set())
        expected = ["cpp/core/bad.hpp:1: core/ includes net/",
                    "jni/native_x_jni.cpp:2: jni/ includes layers/"]
        missing = [e for e in expected if not any(p.startswith(e) for p in found)]
        if missing or len(found) != len(expected):
            print("self-test failed: found", found, "expected", expected)
            return 1
    print("self-test: the two forbidden includes were found, the allowed ones passed")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..")
    problems = check(os.path.abspath(root))
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} include(s) against the layering of docs/dev/map.md")
        return 1
    print("every include of cpp/ and jni/ follows docs/dev/map.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
