"""The manifest: a compiled model's metadata as JSON, shared by the directory and .rai forms.

::

    {"format": "copyless.compiled-model", "format_version": 1, "name": "...",
     "batch_size": 1, "metadata": {...},
     "inputs":  [{"name", "cpu": info, "hw": info, "quant": null | {...},
                  "dynamic": false, "dynamic_dims": []}, ...],
     "outputs": [...],
     "intermediates": [{"name", "info"}, ...],
     "partitions": [{"name": "par_0", "target": "npu", "inputs": [...], "outputs": [...],
                     "blob": {...container-specific location and checksum...}}, ...]}

:func:`model_from_manifest` checks the whole structure (and each partition graph's
boundary names) and raises only :class:`ModelLoadError`, whatever the JSON holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx

from ..types import (
    ModelLoadError,
    TensorDirection,
    TensorType,
    info_from_dict,
    info_to_dict,
    quant_from_dict,
    quant_to_dict,
)
from ._compiled import CompiledModel, Intermediate, Partition, TensorSpec
from ._graph import PARSE_ERRORS

FORMAT = "copyless.compiled-model"
FORMAT_VERSION = 1
TARGETS = ("npu", "cpu")
_A = onnx.AttributeProto
_NESTING = frozenset((_A.TENSOR, _A.TENSORS, _A.SPARSE_TENSOR, _A.SPARSE_TENSORS, _A.GRAPH,
                      _A.GRAPHS))  # fmt: skip


def manifest_of(model: CompiledModel, blobs: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON-able manifest; ``blobs[i]`` locates partition i in its container."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": model.name,
        "batch_size": model.batch_size,
        "metadata": dict(model.metadata),
        "inputs": [_spec_to_dict(s) for s in model.inputs],
        "outputs": [_spec_to_dict(s) for s in model.outputs],
        "intermediates": [
            {"name": m.name, "info": info_to_dict(m.info)} for m in model.intermediates
        ],
        "partitions": [
            {
                "name": p.name,
                "target": p.target,
                "inputs": list(p.inputs),
                "outputs": list(p.outputs),
                "blob": blob,
            }
            for p, blob in zip(model.partitions, blobs, strict=True)
        ],
    }


def _spec_to_dict(spec: TensorSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "cpu": info_to_dict(spec.cpu),
        "hw": info_to_dict(spec.hw),
        "quant": quant_to_dict(spec.quant),
        "dynamic": spec.dynamic,
        "dynamic_dims": list(spec.dynamic_dims),
    }


def check_header(data: Any, where: str) -> list[dict[str, Any]]:
    """Check format name and version; return the partition entries."""
    if not isinstance(data, dict):
        raise ModelLoadError(f"{where}: manifest is not a JSON object")
    if data.get("format") != FORMAT:
        raise ModelLoadError(f"{where}: not a copyless manifest (format {data.get('format')!r})")
    version = data.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise ModelLoadError(f"{where}: bad format_version {version!r}")
    if version > FORMAT_VERSION:
        raise ModelLoadError(
            f"{where}: format version {version} is newer than this copyless supports "
            f"({FORMAT_VERSION}); upgrade copyless"
        )
    parts = data.get("partitions")
    if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
        raise ModelLoadError(f"{where}: manifest lists no partitions")
    return parts


def model_from_manifest(
    data: dict[str, Any], read_blob: Callable[[int, Any], bytes], where: str
) -> CompiledModel:
    """Build and validate a CompiledModel. ``read_blob(i, blob_entry)`` returns partition
    i's ONNX bytes (and raises ModelLoadError itself when they are missing or corrupt)."""
    parts = check_header(data, where)
    try:
        model = _build(data, parts, read_blob)
    except ModelLoadError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise ModelLoadError(f"{where}: malformed manifest: {type(exc).__name__}: {exc}") from exc
    _validate(model, where)
    return model


def _build(
    data: dict[str, Any], parts: list[dict[str, Any]], read_blob: Callable[[int, Any], bytes]
) -> CompiledModel:
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise TypeError("metadata is not an object")
    batch = data["batch_size"]
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch_size {batch!r}")
    return CompiledModel(
        name=str(data["name"]),
        inputs=tuple(_spec_from_dict(s) for s in _list(data["inputs"])),
        outputs=tuple(_spec_from_dict(s) for s in _list(data["outputs"])),
        partitions=tuple(
            Partition(
                name=str(p["name"]),
                target=str(p["target"]),
                onnx_bytes=read_blob(i, p.get("blob")),
                inputs=tuple(str(n) for n in _list(p["inputs"])),
                outputs=tuple(str(n) for n in _list(p["outputs"])),
            )
            for i, p in enumerate(parts)
        ),
        intermediates=tuple(
            Intermediate(str(m["name"]), info_from_dict(m["info"]))
            for m in _list(data.get("intermediates", []))
        ),
        batch_size=batch,
        format_version=int(data["format_version"]),
        metadata={str(k): str(v) for k, v in metadata.items()},
    )


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _spec_from_dict(data: Any) -> TensorSpec:
    if not isinstance(data, dict):
        raise TypeError("tensor spec is not an object")
    dims = data.get("dynamic_dims", [])
    return TensorSpec(
        name=str(data["name"]),
        cpu=info_from_dict(data["cpu"]),
        hw=info_from_dict(data["hw"]),
        quant=quant_from_dict(data.get("quant")),
        dynamic=bool(data.get("dynamic", False)),
        dynamic_dims=tuple(int(d) for d in _list(dims)),
    )


def _validate(model: CompiledModel, where: str) -> None:
    def fail(msg: str) -> None:
        raise ModelLoadError(f"{where}: {msg}")

    for direction, specs in ((TensorDirection.INPUT, model.inputs),
                             (TensorDirection.OUTPUT, model.outputs)):  # fmt: skip
        for s in specs:
            if s.cpu.name != s.name or s.hw.name != s.name:
                fail(f"tensor {s.name!r}: view names differ from the spec name")
            if (s.cpu.tensor_type, s.hw.tensor_type) != (TensorType.CPU, TensorType.HW):
                fail(f"tensor {s.name!r}: views are not CPU and HW")
            if s.cpu.direction is not direction or s.hw.direction is not direction:
                fail(f"tensor {s.name!r}: direction is not {direction.name}")
            _check_capacity(s, fail)
    names = [s.name for s in (*model.inputs, *model.outputs)]
    if len(set(names)) != len(names):
        fail("duplicate tensor names among inputs/outputs")
    available = {s.name for s in model.inputs}
    between = {m.name for m in model.intermediates}
    produced: set[str] = set()
    for i, part in enumerate(model.partitions):
        if part.name != f"par_{i}":
            fail(f"partition {i} is named {part.name!r}, expected 'par_{i}'")
        if part.target not in TARGETS:
            fail(f"{part.name}: unknown target {part.target!r}")
        if i == 0 and set(part.inputs) != available:
            fail("par_0 does not take exactly the model inputs")
        if i > 0 and not set(part.inputs) <= (produced & between):
            fail(f"{part.name} reads tensors no earlier partition produces")
        produced.update(part.outputs)
        _check_graph(part, fail)
    missing = {s.name for s in model.outputs} - produced
    if missing:
        fail(f"no partition produces output(s) {sorted(missing)}")
    if not between <= produced:
        fail("an intermediate is produced by no partition")


def _check_capacity(spec: TensorSpec, fail: Callable[[str], None]) -> None:
    """-1 (no known bound) only in the data-dependent dims of an output."""
    for view in (spec.cpu, spec.hw):
        unknown = {i for i, d in enumerate(view.shape) if d == -1}
        if spec.dynamic != bool(spec.dynamic_dims) or not unknown <= set(spec.dynamic_dims):
            fail(f"tensor {spec.name!r}: -1 dims {sorted(unknown)} are not its data-dependent "
                 f"dims {list(spec.dynamic_dims)}")  # fmt: skip
        if any(not 0 <= i < len(view.shape) for i in spec.dynamic_dims):
            fail(f"tensor {spec.name!r}: data-dependent dims {list(spec.dynamic_dims)} "
                 f"outside its shape {list(view.shape)}")  # fmt: skip
    if spec.dynamic and spec.cpu.direction is TensorDirection.INPUT:
        fail(f"input {spec.name!r} cannot have data-dependent dims")


def _check_graph(part: Partition, fail: Callable[[str], None]) -> None:
    try:
        proto = onnx.ModelProto.FromString(part.onnx_bytes)
    except PARSE_ERRORS as exc:
        fail(f"{part.name}: ONNX graph does not parse: {exc}")
        return
    graph = proto.graph
    external = _external_tensor(proto)
    if external is not None:
        # An engine would read that file relative to its working directory: a model from
        # someone else could make the runner read (and return) any file this user can read.
        fail(
            f"{part.name}: tensor {external[0]!r} points to external data file "
            f"{external[1]!r}; a compiled model holds its weights inside: refused (not read)"
        )
    inits = {t.name for t in graph.initializer}
    ins = tuple(vi.name for vi in graph.input if vi.name not in inits)
    outs = tuple(vi.name for vi in graph.output)
    if ins != part.inputs or outs != part.outputs:
        fail(
            f"{part.name}: graph boundary {list(ins)} -> {list(outs)} does not match the "
            f"manifest {list(part.inputs)} -> {list(part.outputs)}"
        )


def _external_tensor(model: onnx.ModelProto) -> tuple[str, str] | None:
    """(name, file) of the first tensor anywhere in ``model`` (initializers, sparse ones,
    node attributes, subgraphs, functions) whose data lives in an external file."""
    graphs: list[onnx.GraphProto] = [model.graph]
    nodes: list[onnx.NodeProto] = [n for f in model.functions for n in f.node]
    while graphs or nodes:
        if graphs:
            graph = graphs.pop()
            tensors = [*graph.initializer]
            for sparse in graph.sparse_initializer:
                tensors += [sparse.values, sparse.indices]
            nodes.extend(graph.node)
        else:
            tensors = []
            for attr in nodes.pop().attribute:
                if attr.type not in _NESTING:
                    continue  # ints, floats, strings: nothing inside
                tensors += [attr.t, *attr.tensors]
                for sparse in [attr.sparse_tensor, *attr.sparse_tensors]:
                    tensors += [sparse.values, sparse.indices]
                graphs += [attr.g, *attr.graphs]
        for tensor in tensors:
            if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
                where = {e.key: e.value for e in tensor.external_data}.get("location", "?")
                return tensor.name, where
    return None
