"""Fuzzing the model loader (.rai and par_0 directory) with mutations of a real compiled model.

Every mutant is loaded in a child process (``load_worker.py``): it must give a CompiledModel
or ModelLoadError, a loaded model must give a Runner or a CopylessError, and a runner's
``execute`` must return a StatusCode. A native crash or a hang of the child fails the test.
"""

from __future__ import annotations

import collections
import itertools
import logging
import shutil
import zlib
from pathlib import Path
from typing import Any

import pytest
from fuzz_strategies import (
    BYTE_OPS,
    GRAPH_EDITS,
    HEADER_LIES,
    RAW_MANIFEST,
    apply_byte_ops,
    apply_graph_edits,
    apply_manifest_edits,
    manifest_edits,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_helpers import LoadChild, pack_rai, parse_rai, write_par_dir

ACCEPTABLE = {"rejected", "loaded", "runner-refused"}
FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Outcomes per test, for the stage-coverage check at the end of the module.
SEEN: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
_names = itertools.count()


@pytest.fixture(scope="module")
def base(rai_path: Path) -> tuple[bytes, dict[str, Any], list[bytes]]:
    data = rai_path.read_bytes()
    manifest, blobs = parse_rai(data)
    return data, manifest, blobs


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mutants")


def _check(child: LoadChild, path: Path, test: str) -> None:
    result = child.load(path)
    SEEN[test][result["outcome"]] += 1
    assert result["outcome"] in ACCEPTABLE, result


def _write(scratch: Path, data: bytes) -> Path:
    path = scratch / "mutant.rai"
    path.write_bytes(data)
    return path


def test_pristine_model_loads_and_runs(load_child: LoadChild, rai_path: Path, base: Any) -> None:
    assert load_child.load(rai_path) == {"outcome": "loaded", "detail": "SUCCESS"}
    _data, manifest, blobs = base
    repacked = rai_path.with_name("repacked.rai")
    repacked.write_bytes(pack_rai(manifest, blobs))
    assert load_child.load(repacked) == {"outcome": "loaded", "detail": "SUCCESS"}


@FUZZ
@given(ops=BYTE_OPS)
def test_raw_byte_mutations(load_child: LoadChild, scratch: Path, base: Any, ops: Any) -> None:
    _check(load_child, _write(scratch, apply_byte_ops(base[0], ops)), "raw")


@FUZZ
@given(ops=BYTE_OPS)
def test_graph_byte_mutations_resealed(
    load_child: LoadChild, scratch: Path, base: Any, ops: Any
) -> None:
    _data, manifest, blobs = base
    mutated = [apply_byte_ops(blobs[0], ops), *blobs[1:]]
    _check(load_child, _write(scratch, pack_rai(manifest, mutated)), "graph-bytes")


@FUZZ
@given(ops=GRAPH_EDITS)
def test_graph_structure_edits_resealed(
    load_child: LoadChild, scratch: Path, base: Any, ops: Any
) -> None:
    _data, manifest, blobs = base
    mutated = [apply_graph_edits(blobs[0], ops), *blobs[1:]]
    _check(load_child, _write(scratch, pack_rai(manifest, mutated)), "graph-structure")


@FUZZ
@given(data=st.data())
def test_manifest_json_edits_resealed(
    load_child: LoadChild, scratch: Path, base: Any, data: st.DataObject
) -> None:
    _raw, manifest, blobs = base
    sealed = pack_rai(manifest, blobs)  # blob entries filled in, so edits can reach them
    ops = data.draw(manifest_edits(parse_rai(sealed)[0]))
    _check(load_child, _write(scratch, pack_rai(manifest, blobs, apply_manifest_edits(ops))),
           "manifest")  # fmt: skip


@settings(FUZZ, max_examples=60)
@given(text=RAW_MANIFEST)
def test_manifest_raw_text_resealed(
    load_child: LoadChild, scratch: Path, base: Any, text: bytes
) -> None:
    _raw, manifest, blobs = base
    _check(load_child, _write(scratch, pack_rai(manifest, blobs, manifest_bytes=text)), "text")


@settings(FUZZ, max_examples=60)
@given(lies=HEADER_LIES)
def test_header_lies_with_valid_checksum(
    load_child: LoadChild, scratch: Path, base: Any, lies: dict[str, int]
) -> None:
    _raw, manifest, blobs = base
    _check(load_child, _write(scratch, pack_rai(manifest, blobs, **lies)), "header")


BLOB_PATHS = st.sampled_from(["../../../../etc/passwd", "/etc/passwd", "par_0", "", ".",
                              "par_0/../par_0/model.onnx", "/proc/self/mem", "/dev/zero",
                              "par_0/model.onnx\0x", "par_1/model.onnx", "../vaiml_par_0",
                              "par_0.onnx/..", "manifest.json"])  # fmt: skip


@FUZZ
@given(data=st.data())
def test_par_directory_mutations(
    load_child: LoadChild, scratch: Path, base: Any, data: st.DataObject
) -> None:
    _raw, manifest, blobs = base
    root = scratch / f"dir{next(_names)}"
    graph = blobs[0]
    if data.draw(st.booleans(), label="mutate graph"):
        graph = apply_byte_ops(graph, data.draw(BYTE_OPS, label="graph ops"))
    ops = data.draw(manifest_edits(manifest), label="manifest edits")
    edit = apply_manifest_edits(ops)
    path_lie = data.draw(st.none() | BLOB_PATHS, label="blob path")

    def edit_all(m: dict[str, Any]) -> None:
        if path_lie is not None:
            m["partitions"][0]["blob"]["path"] = path_lie
        edit(m)

    write_par_dir(root, manifest, graph, edit_all, older=data.draw(st.booleans(), label="older"))
    try:
        _check(load_child, root, "directory")
    finally:
        shutil.rmtree(root)


def test_blob_checksum_catches_a_sealed_graph_swap(
    load_child: LoadChild, scratch: Path, base: Any
) -> None:
    """A blob entry whose crc is right for other bytes: rejected, not run."""
    _raw, manifest, blobs = base

    def lie(m: dict[str, Any]) -> None:
        m["partitions"][0]["blob"]["crc32"] = zlib.crc32(b"other")

    result = load_child.load(_write(scratch, pack_rai(manifest, blobs, lie)))
    assert result["outcome"] == "rejected" and "checksum" in result["detail"], result


def test_each_stage_is_reachable(load_child: LoadChild, scratch: Path, base: Any) -> None:
    """Sealed mutants reach past the container: a graph onnxruntime refuses, a manifest
    edit that still loads and runs."""
    _raw, manifest, blobs = base
    unknown_op = apply_graph_edits(blobs[0], [("op_type", 0, "NoSuchOp")])
    result = load_child.load(_write(scratch, pack_rai(manifest, [unknown_op])))
    assert result["outcome"] == "runner-refused", result
    renamed = apply_manifest_edits([("set", ("name",), "renamed")])
    assert load_child.load(_write(scratch, pack_rai(manifest, blobs, renamed)))["outcome"] == (
        "loaded"
    )


@pytest.fixture(scope="module", autouse=True)
def stage_coverage() -> Any:
    """After the module: when the fuzz tests ran, their mutants got past the checksums (the
    ONNX parser, onnxruntime and execute were exercised, not only the container checks)."""
    yield
    logging.getLogger(__name__).warning("fuzz outcomes: %s", {k: dict(v) for k, v in SEEN.items()})
    if len(SEEN) < 6:  # a -k selection of a few tests: nothing to judge
        return
    total = sum(SEEN.values(), collections.Counter())
    stats = {k: dict(v) for k, v in SEEN.items()}
    assert total["rejected"] > 0 and total["loaded"] > 0, stats
    assert SEEN["graph-structure"]["runner-refused"] > 0, stats
    assert SEEN["manifest"]["loaded"] > 0, stats
