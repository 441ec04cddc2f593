"""prefix: what the preprocessing folded into a compiled graph costs, node by node.

    copyless-bench prefix [--model all|efficientnet-lite0|resnet50|ppocr-det] [--runs 20]
        [--threads 1] [--engines ort,ov]

For each model, the RGBx graph the peers suite runs (normalisation folded, HW input packed
uint8 RGBx) and the model's own float graph (the engine alone) run ``--runs`` times on each
engine with its per-node profiler on: onnxruntime's profiler (``enable_profiling``, kernel
time per node) and OpenVINO's performance counters (``PERF_COUNT``, real time per executed
layer). Each node's figure is its minimum over the runs, which a shared machine's noise
hardly moves; the graph's figure is the sum of its nodes' minima. The prefix is every node
the compiler added (named ``copyless/...``; in OpenVINO also the reorders it put after
them). One engine thread by default: per-node times of one thread add up. Printed per model
and engine: the RGBx graph's and the engine-alone graph's sums, their difference (what the
fold costs, within the sums' noise) and the prefix nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...model import load_model, zoo
from .._output import Output, add_output_arguments
from .models import MODELS, Config, copyless_model

PREFIX = "copyless/"


@dataclass(frozen=True, slots=True)
class Profile:
    """Per-node minimum microseconds of one graph on one engine, in execution order."""

    nodes: dict[str, float]
    kinds: dict[str, str]

    @property
    def total_us(self) -> float:
        return sum(self.nodes.values())

    def prefix(self) -> dict[str, float]:
        return {k: v for k, v in self.nodes.items() if PREFIX in k}


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="copyless-bench prefix", description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=[*MODELS, "all"], default="all")
    p.add_argument("--runs", type=int, default=20, help="profiled runs per graph (minima)")
    p.add_argument("--threads", type=int, default=1, help="engine threads (default 1)")
    p.add_argument("--engines", default="ort,ov", help="ort,ov")
    add_output_arguments(p, quiet=False)
    args = p.parse_args(list(argv))
    if args.runs < 1 or args.threads < 1:
        p.error("--runs and --threads must be >= 1")
    bad = sorted(set(args.engines.split(",")) - {"ort", "ov"})
    if bad:
        p.error(f"unknown --engines {bad}; choose from ort, ov")
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    names = list(MODELS) if args.model == "all" else [args.model]
    out = Output.from_args(args)
    out.say(f"{'model':<20}{'engine':<8}{'rgbx ms':>9}{'alone ms':>10}{'extra ms':>10}"
            f"{'prefix ms':>11}  prefix nodes (us)")  # fmt: skip
    for name in names:
        compiled = load_model(copyless_model(Config(name, "fp32", 1)))
        folded = compiled.partitions[0].onnx_bytes
        source = _source_graph(name)
        x_u8 = np.random.default_rng(0).integers(0, 256, compiled.inputs[0].hw.shape, np.uint8)
        x_f32 = np.random.default_rng(0).standard_normal(compiled.inputs[0].cpu.shape)
        for engine in args.engines.split(","):
            run = _ort_profile if engine == "ort" else _ov_profile
            rgbx = run(folded, x_u8, args.runs, args.threads)
            alone = run(source, x_f32, args.runs, args.threads)
            _print(out, name, engine, rgbx, alone)
    out.summary(models=names, engines=args.engines.split(","), runs=args.runs,
                threads=args.threads)  # fmt: skip
    return 0


def _source_graph(name: str) -> bytes:
    """The zoo model's own graph with the benchmark's fixed input shape."""
    import onnx

    model = onnx.load(str(zoo.build(name, progress=False)))
    shape = MODELS[name]
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, value in zip(dims, (1, 3, shape.size, shape.size), strict=True):
        dim.ClearField("dim_param")
        dim.dim_value = value
    return bytes(model.SerializeToString())


def _print(out: Output, name: str, engine: str, rgbx: Profile, alone: Profile) -> None:
    prefix = rgbx.prefix()
    nodes = ", ".join(f"{rgbx.kinds[k]} {v:.0f}" for k, v in prefix.items())
    extra = (rgbx.total_us - alone.total_us) / 1e3
    out.say(f"{name:<20}{engine:<8}{rgbx.total_us / 1e3:9.3f}{alone.total_us / 1e3:10.3f}"
            f"{extra:+10.3f}{sum(prefix.values()) / 1e3:11.3f}  {nodes}")  # fmt: skip
    out.record("graph", model=name, engine=engine, rgbx_ms=round(rgbx.total_us / 1e3, 4),
               alone_ms=round(alone.total_us / 1e3, 4), extra_ms=round(extra, 4),
               prefix_ms=round(sum(prefix.values()) / 1e3, 4),
               prefix_nodes_us={rgbx.kinds[k]: round(v, 1) for k, v in prefix.items()})  # fmt: skip


def _ort_profile(graph: bytes, x: npt.NDArray[Any], runs: int, threads: int) -> Profile:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as folder:
        options.profile_file_prefix = os.path.join(folder, "profile")
        session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: x.astype(_ort_dtype(session))}
        for _ in range(runs + 1):
            session.run(None, feed)
        with open(session.end_profiling(), encoding="utf-8") as handle:
            events = json.load(handle)
    nodes: dict[str, float] = {}
    kinds: dict[str, str] = {}
    seen_first = set()
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node = name[: -len("_kernel_time")]
        if node not in seen_first:  # the first run warms up: not counted
            seen_first.add(node)
            continue
        nodes[node] = min(nodes.get(node, float("inf")), float(event["dur"]))
        kinds[node] = str(event.get("args", {}).get("op_name", "?"))
    return Profile(nodes, kinds)


def _ort_dtype(session: Any) -> Any:
    return np.uint8 if session.get_inputs()[0].type == "tensor(uint8)" else np.float32


def _ov_profile(graph: bytes, x: npt.NDArray[Any], runs: int, threads: int) -> Profile:
    import openvino as ov

    core = ov.Core()
    model = core.read_model(graph, b"")
    dtype = np.uint8 if model.inputs[0].element_type == ov.Type.u8 else np.float32
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32",
              "INFERENCE_NUM_THREADS": threads, "PERF_COUNT": True}  # fmt: skip
    request = core.compile_model(model, "CPU", config).create_infer_request()
    data = np.ascontiguousarray(x.astype(dtype))
    request.infer({0: data})  # warm-up
    nodes: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for _ in range(runs):
        request.infer({0: data})
        for info in request.profiling_info:
            us = info.real_time.total_seconds() * 1e6
            nodes[info.node_name] = min(nodes.get(info.node_name, float("inf")), us)
            kinds[info.node_name] = f"{info.node_type}"
    return Profile(nodes, kinds)
