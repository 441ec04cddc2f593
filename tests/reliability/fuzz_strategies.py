"""Hypothesis strategies that mutate a real compiled model, at every level of the format.

* raw bytes of the whole file (CRCs left stale: the container checks must catch them)
* the partition's ONNX bytes, resealed (valid CRCs: reaches the ONNX parser and onnxruntime)
* structural edits of the ONNX graph (parses, then onnxruntime must refuse or run it)
* JSON edits of the manifest: wrong types, missing keys, negative/huge shapes, bad enum names,
  blob entries outside the file, resealed; and raw manifest text (not JSON, deep nesting)
* header fields (huge declared lengths, versions), with a valid header CRC
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import onnx
from hypothesis import strategies as st

Op = tuple[Any, ...]
Path_ = tuple[Any, ...]

_pos = st.integers(0, 1 << 32)
BYTE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), _pos, st.integers(0, 7)),
        st.tuples(st.just("truncate"), _pos),
        st.tuples(st.just("insert"), _pos, st.binary(min_size=1, max_size=64)),
        st.tuples(st.just("delete"), _pos, st.integers(1, 512)),
        st.tuples(st.just("overwrite"), _pos, st.binary(min_size=1, max_size=16)),
        st.tuples(st.just("huge"), _pos, st.sampled_from([0xFF, 0x7F, 0x80])),
    ),
    min_size=1,
    max_size=4,
)


def apply_byte_ops(data: bytes, ops: list[Op]) -> bytes:
    buf = bytearray(data)
    for op in ops:
        at = op[1] % (len(buf) + 1)
        if op[0] == "flip" and at < len(buf):
            buf[at] ^= 1 << op[2]
        elif op[0] == "truncate":
            del buf[at:]
        elif op[0] == "insert":
            buf[at:at] = op[2]
        elif op[0] == "delete":
            del buf[at : at + op[2]]
        elif op[0] == "overwrite":
            buf[at : at + len(op[2])] = op[2]
        elif op[0] == "huge":  # an 8-byte little-endian length turned enormous
            buf[at : at + 8] = bytes([0xFF] * 7 + [op[2]])
    return bytes(buf)


# -- manifest JSON ------------------------------------------------------------------------
ENUM_WORDS = ["FLOAT32", "INT8", "BF16", "UNKNOWN", "NCHW", "NHWC4", "HCWNC4", "GENERIC", "HW",
              "CPU", "INPUT", "OUTPUT", "npu", "cpu", "par_0", "par_1", "input", "logits",
              "float32", "Nchw", "BOGUS", "", "ROUND_TOWARD_ZERO"]  # fmt: skip
WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 64), 1 << 64),
    st.sampled_from([-1, 0, 1, 2**31, 2**63 - 1, 2**63, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(ENUM_WORDS),
    st.text(max_size=12),
    st.lists(st.integers(-(1 << 63), 1 << 63), max_size=6),
    st.lists(st.sampled_from([-1, 0, 1, 3, 8, 2**20, 2**40]), max_size=6),
    st.builds(list),  # a fresh object per example: st.just([]) shares one across examples
    st.builds(dict),
    st.dictionaries(st.sampled_from(["name", "shape", "offset", "size", "path"]), st.integers()),
)
INTERESTING_KEYS = {"shape", "data_type", "memory_layout", "tensor_type", "direction", "strides",
                    "memory_layout_order", "blob", "offset", "size", "crc32", "path", "name",
                    "inputs", "outputs", "partitions", "batch_size", "quant", "scale",
                    "zero_point", "dynamic", "dynamic_dims", "format_version", "target",
                    "intermediates"}  # fmt: skip


def json_paths(obj: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    yield prefix
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from json_paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from json_paths(value, (*prefix, index))


def manifest_edits(manifest: dict[str, Any]) -> st.SearchStrategy[list[Op]]:
    """Lists of (action, path, value) edits; half of the paths end in a key the loader reads."""
    paths = [p for p in json_paths(manifest) if p]
    interesting = [p for p in paths if str(p[-1]) in INTERESTING_KEYS]
    path = st.one_of(st.sampled_from(interesting), st.sampled_from(paths))
    edit = st.one_of(
        st.tuples(st.just("delete"), path, st.none()),
        st.tuples(st.just("set"), path, WEIRD),
        st.tuples(st.just("append"), path, WEIRD),
        st.tuples(st.just("duplicate"), path, st.none()),
    )
    return st.lists(edit, min_size=1, max_size=3)


def apply_manifest_edits(ops: list[Op]) -> Callable[[dict[str, Any]], None]:
    def edit(manifest: dict[str, Any]) -> None:
        for action, path, shared in ops:
            value = copy.deepcopy(shared)  # never the same object twice (no self-containment)
            parent: Any = manifest
            try:
                for key in path[:-1]:
                    parent = parent[key]
                key = path[-1]
                if action == "delete":
                    del parent[key]
                elif action == "set":
                    parent[key] = value
                elif action == "append" and isinstance(parent[key], list):
                    parent[key].append(value)
                elif action == "duplicate" and isinstance(parent, list):
                    parent.append(json.loads(json.dumps(parent[key])))
            except (KeyError, IndexError, TypeError):
                pass  # an earlier edit removed the path: nothing to do

    return edit


RAW_MANIFEST = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=100).map(str.encode),
    st.integers(1, 200_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 200_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=10,
    ).map(lambda v: json.dumps(v).encode()),
)

HEADER_LIES = st.fixed_dictionaries(
    {},
    optional={
        "version": st.sampled_from([0, 2, 0xFFFFFFFF]),
        "header": st.sampled_from([0, 48, 63, 65, 0xFFFFFFFF]),
        "total": st.sampled_from([0, 63, 64, 2**31, 2**63, 2**64 - 1]),
        "man_off": st.sampled_from([0, 8, 63, 64, 2**32, 2**63, 2**64 - 1]),
        "man_size": st.sampled_from([0, 1, 2**31, 2**63, 2**64 - 1]),
        "man_crc": st.integers(0, 2**32 - 1),
    },
).filter(bool)


# -- ONNX graph edits (the proto still parses) ---------------------------------------------
OPS = ["Conv", "Relu", "Gemm", "Reshape", "Add", "MatMul", "Loop", "If", "Resize", "NoSuchOp",
       "", "Identity", "Slice", "Gather", "Expand", "Tile", "ConstantOfShape"]  # fmt: skip
GRAPH_EDITS = st.lists(
    st.one_of(
        st.tuples(st.just("op_type"), _pos, st.sampled_from(OPS)),
        st.tuples(st.just("drop_node"), _pos, st.none()),
        st.tuples(st.just("drop_init"), _pos, st.none()),
        st.tuples(st.just("dim"), _pos, st.sampled_from([-1, 0, 1, 2, 7, 2**31, 2**40])),
        st.tuples(st.just("elem_type"), _pos, st.integers(0, 30)),
        st.tuples(st.just("init_type"), _pos, st.integers(0, 30)),
        st.tuples(st.just("raw_cut"), _pos, st.integers(0, 64)),
        st.tuples(st.just("init_dims"), _pos, st.sampled_from([-5, 0, 1, 2**40])),
        st.tuples(st.just("attr_int"), _pos, st.integers(-(2**63), 2**63 - 1)),
        st.tuples(st.just("swap_io"), _pos, st.text(max_size=8)),
        st.tuples(st.just("opset"), _pos, st.sampled_from([0, 1, 7, 21, 22, 99, 2**40])),
        st.tuples(st.just("ir"), _pos, st.sampled_from([0, 1, 3, 10, 11, 14, 99])),
    ),
    min_size=1,
    max_size=3,
)


def apply_graph_edits(onnx_bytes: bytes, ops: list[Op]) -> bytes:
    model = onnx.ModelProto.FromString(onnx_bytes)
    g = model.graph
    for kind, at, value in ops:
        nodes, inits = g.node, g.initializer
        if kind == "op_type" and nodes:
            nodes[at % len(nodes)].op_type = value
        elif kind == "drop_node" and nodes:
            del nodes[at % len(nodes)]
        elif kind == "drop_init" and inits:
            del inits[at % len(inits)]
        elif kind == "dim":
            vis = [*g.input, *g.output]
            dims = vis[at % len(vis)].type.tensor_type.shape.dim
            if dims:
                dims[at % len(dims)].dim_value = value
        elif kind == "elem_type":
            vis = [*g.input, *g.output]
            vis[at % len(vis)].type.tensor_type.elem_type = value
        elif kind == "init_type" and inits:
            inits[at % len(inits)].data_type = value
        elif kind == "raw_cut" and inits:
            init = inits[at % len(inits)]
            init.raw_data = init.raw_data[:value]
        elif kind == "init_dims" and inits:
            init = inits[at % len(inits)]
            if init.dims:
                init.dims[at % len(init.dims)] = value
        elif kind == "attr_int":
            attrs = [a for n in nodes for a in n.attribute if a.ints or a.type == a.INT]
            if attrs:
                attr = attrs[at % len(attrs)]
                if attr.ints:
                    attr.ints[at % len(attr.ints)] = value
                else:
                    attr.i = value
        elif kind == "swap_io" and nodes:
            node = nodes[at % len(nodes)]
            if node.input:
                node.input[at % len(node.input)] = value
        elif kind == "opset":
            model.opset_import[0].version = value
        elif kind == "ir":
            model.ir_version = value
    return model.SerializeToString()
