# SPDX-License-Identifier: Apache-2.0
"""A small reader of Caffe's text format (prototxt) for the benchmark scripts: nested dicts in
which each key maps to the list of its values (strings, quotes removed) or blocks (dicts)."""
import re


def parse(text):
    """The prototxt `text` as nested dicts; comments are skipped, quoted strings kept whole."""
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|[{}:]|[^\s{}:"#]+|#[^\n]*', text)
    tokens = [t for t in tokens if not t.startswith("#")]
    pos = 0

    def block():
        nonlocal pos
        out = {}
        while pos < len(tokens) and tokens[pos] != "}":
            name = tokens[pos]
            pos += 1
            if tokens[pos] == ":":
                pos += 1
            if tokens[pos] == "{":
                pos += 1
                value = block()
                pos += 1  # the "}"
            else:
                value = tokens[pos].strip('"')
                pos += 1
            out.setdefault(name, []).append(value)
        return out

    return block()


def first(d, key, default=None):
    """The first value of `key` in block `d`, or `default`."""
    v = d.get(key)
    return v[0] if v else default
