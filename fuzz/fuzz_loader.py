"""Coverage-guided fuzzing of the compiled-model loader with atheris (long runs; not in CI).

Each input is turned into a ``.rai`` file and loaded; a loaded model is turned into a Runner
and executed once on runner-allocated tensors. Contract checked:

* ``load_model`` gives a CompiledModel or raises ModelLoadError, nothing else;
* ``RunnerFactory.from_compiled`` gives a Runner or raises a CopylessError;
* ``execute`` returns a StatusCode (it never raises);
* nothing crashes the process (libFuzzer reports a signal as a crash with the input).

Inputs are interpreted in one of three modes (first byte), so the fuzzer gets past the
checksums instead of only exercising them:

* ``0``: the bytes are the whole ``.rai`` file (container parsing);
* ``1``: the bytes are partition 0's ONNX graph, sealed into a valid container with the
  real manifest (ONNX parser, onnxruntime session creation, execute);
* ``2``: the bytes are the manifest text, sealed with the real graph (JSON and manifest
  validation).

Run (atheris is not a dependency of copyless)::

    .venv/bin/pip install atheris
    mkdir -p fuzz/corpus && .venv/bin/python fuzz/fuzz_loader.py --seed-corpus fuzz/corpus
    .venv/bin/python fuzz/fuzz_loader.py fuzz/corpus -max_total_time=3600 -rss_limit_mb=4096 \\
        -timeout=30 -fork=2

The seed corpus holds a real compiled model in each mode. A crash leaves ``crash-<sha1>``
in the working directory; replay it with ``.venv/bin/python fuzz/fuzz_loader.py crash-...``.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh

import copyless as cl
from copyless.model import compile_model, load_model
from copyless.model._archive import ALIGN, HEADER_SIZE, MAGIC, VERSION
from copyless.runner import RunnerFactory

_HEADER = struct.Struct("<8sIIQQQII")
MAX_TENSOR_BYTES = 64 << 20
WORK = Path(tempfile.mkdtemp(prefix="copyless-fuzz-"))


def small_net() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = [
        onh.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        onh.from_array(rng.standard_normal(4).astype(np.float32), "b"),
    ]
    nodes = [
        oh.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c"], ["logits"]),
    ]
    graph = oh.make_graph(
        nodes,
        "fuzz_net",
        [oh.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [oh.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _base() -> tuple[bytes, dict[str, Any], bytes]:
    data = compile_model(small_net(), WORK / "base.rai").read_bytes()
    _m, _v, _h, _s, man_off, man_size, _c, _hc = _HEADER.unpack(data[: _HEADER.size])
    manifest = json.loads(data[man_off : man_off + man_size])
    blob = manifest["partitions"][0]["blob"]
    return data, manifest, data[blob["offset"] : blob["offset"] + blob["size"]]


BASE_RAI, BASE_MANIFEST, BASE_GRAPH = _base()


def seal(manifest: dict[str, Any] | None, graph: bytes, manifest_text: bytes | None) -> bytes:
    """A .rai with valid checksums around ``graph`` and the manifest (or raw text)."""
    start = -(-HEADER_SIZE // ALIGN) * ALIGN
    if manifest is not None:
        manifest = json.loads(json.dumps(manifest))
        manifest["partitions"][0]["blob"] = {
            "offset": start, "size": len(graph), "crc32": zlib.crc32(graph)
        }  # fmt: skip
        manifest_text = json.dumps(manifest).encode()
    assert manifest_text is not None
    man_off = -(-(start + len(graph)) // ALIGN) * ALIGN
    total = man_off + len(manifest_text)
    head = _HEADER.pack(MAGIC, VERSION, HEADER_SIZE, total, man_off, len(manifest_text),
                        zlib.crc32(manifest_text), 0)[:-4]  # fmt: skip
    head = (head + struct.pack("<I", zlib.crc32(head))).ljust(HEADER_SIZE, b"\0")
    body = graph.ljust(man_off - start, b"\0")
    return head + b"\0" * (start - HEADER_SIZE) + body + manifest_text


def as_file(data: bytes) -> bytes:
    mode, rest = (data[0] % 3, data[1:]) if data else (0, b"")
    if mode == 1:
        return seal(BASE_MANIFEST, rest, None)
    if mode == 2:
        return seal(None, BASE_GRAPH, rest)
    return rest


def check(data: bytes) -> None:
    path = WORK / "input.rai"
    path.write_bytes(as_file(data))
    try:
        model = load_model(path)
    except cl.ModelLoadError:
        return
    try:
        runner = RunnerFactory.from_compiled(model, {"log_level": "ERROR"})
    except cl.CopylessError:
        return
    with runner:
        infos = [runner.get_tensors_info(d, cl.TensorType.HW) for d in cl.TensorDirection]
        if sum(i.size_in_bytes for group in infos for i in group) > MAX_TENSOR_BYTES:
            return
        try:
            ins, outs = ([runner.allocate_npu_tensor(i) for i in group] for group in infos)
        except cl.CopylessError:
            return
        status = runner.execute([ins], [outs])
        if not isinstance(status, cl.StatusCode):
            raise TypeError(f"execute returned {status!r}")


def write_seeds(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    manifest_text = json.dumps(BASE_MANIFEST).encode()
    for mode, payload in ((0, BASE_RAI), (1, BASE_GRAPH), (2, manifest_text)):
        (folder / f"seed-{mode}").write_bytes(bytes([mode]) + payload)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--seed-corpus":
        write_seeds(Path(sys.argv[2]))
        return
    import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]

    logging.disable(logging.CRITICAL)
    atheris.instrument_all()
    atheris.Setup(sys.argv, check)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    atheris.Fuzz()


if __name__ == "__main__":
    main()
