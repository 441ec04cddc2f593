"""Capacities the compiler derives for data-dependent outputs, checked op by op against
what onnxruntime actually produces: random inputs never exceed them, and the worst-case
inputs reach them (a bound, and a tight one). Then ``output_capacity``, and the -1s."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

import copyless as cl
from copyless.apps.compile import main as compile_main
from copyless.model import compile_to_memory, load_model
from copyless.model._directory import write_directory

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
Feeds = Callable[[np.random.Generator, bool], dict[str, np.ndarray]]


def model(nodes, inputs: dict, outputs: dict, inits: dict | None = None) -> onnx.ModelProto:
    """inputs/outputs: name -> (elem type, shape or None); inits: name -> array."""
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [oh.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()],
    )
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    m.ir_version = 10
    return m


def node(op: str, ins: list[str], outs: list[str], **attrs) -> onnx.NodeProto:
    return oh.make_node(op, ins, outs, **attrs)


def mask(shape, rng, worst) -> np.ndarray:
    """Zeros and ones, at least one one (an empty NonZero result would make some of these
    graphs invalid): every element non-zero in the worst case."""
    if worst:
        return np.ones(shape, np.float32)
    ones = (rng.random(shape) < 0.4).astype(np.float32)
    ones.flat[rng.integers(ones.size)] = 1.0
    return ones


#: The shape-driving prefix most cases share: nz = NonZero(x [3,4]); n = its column count.
NZ = [
    node("NonZero", ["x"], ["nz"]),
    node("Shape", ["nz"], ["nz_shape"]),
    node("Gather", ["nz_shape", "one"], ["n"], axis=0),
]
NZ_INITS = {"one": np.array(1, np.int64), "one1": np.array([1], np.int64)}


def nz_feeds(rng, worst):
    return {"x": mask((3, 4), rng, worst)}


def boxes(rng, worst, n=10, classes=3):
    """n boxes: disjoint squares in the worst case (nothing suppressed), random otherwise."""
    if worst:
        corner = np.arange(n, dtype=np.float32)[:, None] * 10
        b = np.concatenate([corner, corner, corner + 5, corner + 5], axis=1)
        scores = np.full((1, classes, n), 0.9, np.float32)
    else:
        xy = rng.random((n, 2)).astype(np.float32) * 20
        b = np.concatenate([xy, xy + 1 + rng.random((n, 2)).astype(np.float32) * 10], axis=1)
        scores = rng.random((1, classes, n)).astype(np.float32)
    return {"boxes": b[None], "scores": scores}


@dataclass
class Case:
    name: str
    graph: onnx.ModelProto
    feeds: Feeds
    capacity: dict[str, tuple[int, ...]]  # expected info shape per output
    dynamic: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _cases() -> list[Case]:
    nms_in = {"boxes": (F, [1, 10, 4]), "scores": (F, [1, 3, 10])}
    nms_out = {"sel": (I64, None)}
    nz_in = {"x": (F, [3, 4])}
    return [
        Case("nonzero", model(NZ[:1], nz_in, {"nz": (I64, None)}), nz_feeds,
             {"nz": (2, 12)}, {"nz": (1,)}),
        Case("nms-constant-k",
             model([node("NonMaxSuppression", ["boxes", "scores", "k", "iou"], ["sel"])],
                   nms_in, nms_out, {"k": np.array([4], np.int64), "iou": np.float32([0.5])}),
             boxes, {"sel": (12, 3)}, {"sel": (0,)}),
        Case("detector-postprocess",  # NMS, then boxes, scores and classes of the kept ones
             model([node("NonMaxSuppression", ["boxes", "scores", "k"], ["sel"]),
                    node("Gather", ["sel", "two"], ["box_index"], axis=1),
                    node("Squeeze", ["boxes", "zero1"], ["all_boxes"]),
                    node("Gather", ["all_boxes", "box_index"], ["kept_boxes"], axis=0),
                    node("GatherND", ["scores", "sel"], ["kept_scores"]),
                    node("Unsqueeze", ["kept_scores", "one1"], ["score_column"]),
                    node("Concat", ["kept_boxes", "score_column"], ["dets"], axis=1)],
                   nms_in, {"dets": (F, None)},
                   {"k": np.array([4], np.int64), "two": np.array(2, np.int64),
                    "zero1": np.array([0], np.int64), "one1": np.array([1], np.int64)}),
             boxes, {"dets": (12, 5)}, {"dets": (0,)}),
        Case("nms-k-from-input",
             model([node("NonMaxSuppression", ["boxes", "scores", "k"], ["sel"])],
                   {**nms_in, "k": (I64, [1])}, nms_out),
             lambda rng, worst: {**boxes(rng, worst), "k": np.array([100], np.int64)},
             {"sel": (30, 3)}, {"sel": (0,)}),
        Case("nms-no-k", model([node("NonMaxSuppression", ["boxes", "scores"], ["sel"])],
                               nms_in, nms_out), boxes, {"sel": (0, 3)}),
        Case("topk-k-from-input",
             model([node("TopK", ["x", "k"], ["v", "i"], axis=1)],
                   {"x": (F, [2, 5]), "k": (I64, [1])}, {"v": (F, None), "i": (I64, None)}),
             lambda rng, worst: {"x": rng.random((2, 5)).astype(np.float32),
                                 "k": np.array([5 if worst else rng.integers(0, 6)], np.int64)},
             {"v": (2, 5), "i": (2, 5)}, {"v": (1,), "i": (1,)}),
        Case("compress-axis",
             model([node("Compress", ["x", "keep"], ["y"], axis=1)],
                   {"x": (F, [3, 4]), "keep": (B, [4])}, {"y": (F, None)}),
             lambda rng, worst: {"x": rng.random((3, 4)).astype(np.float32),
                                 "keep": np.ones(4, bool) if worst else rng.random(4) < 0.5},
             {"y": (3, 4)}, {"y": (1,)}),
        Case("compress-flat",
             model([node("Compress", ["x", "keep"], ["y"])],
                   {"x": (F, [3, 4]), "keep": (B, [5])}, {"y": (F, None)}),
             lambda rng, worst: {"x": rng.random((3, 4)).astype(np.float32),
                                 "keep": np.ones(5, bool) if worst else rng.random(5) < 0.5},
             {"y": (5,)}, {"y": (0,)}),
        Case("unique",
             model([node("Unique", ["x"], ["y", "idx", "inv", "counts"])],
                   {"x": (F, [6])},
                   {"y": (F, None), "idx": (I64, None), "inv": (I64, None), "counts": (I64, None)}),
             lambda rng, worst: {"x": (np.arange(6) if worst else rng.integers(0, 3, 6))
                                 .astype(np.float32)},
             {"y": (6,), "idx": (6,), "inv": (6,), "counts": (6,)},
             {"y": (0,), "idx": (0,), "counts": (0,)}),
        Case("expand-from-nonzero",
             model([*NZ, node("Unsqueeze", ["n", "zero1"], ["n1"]),
                    node("Concat", ["n1", "three"], ["target"], axis=0),
                    node("Expand", ["v", "target"], ["y"])],
                   nz_in, {"y": (F, None)},
                   {**NZ_INITS, "zero1": np.array([0], np.int64), "three": np.array([3], np.int64),
                    "v": np.ones((1, 3), np.float32)}),
             nz_feeds, {"y": (12, 3)}, {"y": (0,)}),
        Case("constant-of-shape", model([*NZ, node("ConstantOfShape", ["nz_shape"], ["y"])],
                                        nz_in, {"y": (F, None)}, NZ_INITS),
             nz_feeds, {"y": (2, 12)}, {"y": (1,)}),
        Case("range-of-size",
             model([node("NonZero", ["x"], ["nz"]), node("Size", ["nz"], ["n"]),
                    node("Range", ["zero", "n", "step"], ["y"])],
                   nz_in, {"y": (I64, None)},
                   {"zero": np.array(0, np.int64), "step": np.array(2, np.int64)}),
             nz_feeds, {"y": (12,)}, {"y": (0,)}),
        Case("tile-by-count",
             model([*NZ, node("Unsqueeze", ["n", "zero1"], ["reps"]),
                    node("Tile", ["v", "reps"], ["y"])],
                   nz_in, {"y": (F, None)},
                   {**NZ_INITS, "zero1": np.array([0], np.int64), "v": np.ones(2, np.float32)}),
             nz_feeds, {"y": (24,)}, {"y": (0,)}),
        Case("gather-picked",
             model([node("NonZero", ["x"], ["nz"]), node("Gather", ["nz", "one"], ["cols"], axis=0),
                    node("Gather", ["table", "cols"], ["y"], axis=1)],
                   nz_in, {"y": (F, None)},
                   {"one": np.array(1, np.int64), "table": np.ones((5, 4), np.float32)}),
             nz_feeds, {"y": (5, 12)}, {"y": (1,)}),
        Case("reshape-from-input",
             model([node("Reshape", ["x", "s"], ["y"])],
                   {"x": (F, [3, 4]), "s": (I64, [2])}, {"y": (F, None)}),
             lambda rng, worst: {"x": np.ones((3, 4), np.float32),
                                 "s": np.array([12, 1] if worst else [2, 6], np.int64)},
             {"y": (12, 12)}, {"y": (0, 1)}),
        Case("slice-from-input",
             model([node("Slice", ["x", "start", "end"], ["y"])],
                   {"x": (F, [3, 4]), "start": (I64, [2]), "end": (I64, [2])}, {"y": (F, None)}),
             lambda rng, worst: {"x": np.ones((3, 4), np.float32),
                                 "start": np.array([0, 0] if worst else [1, 2], np.int64),
                                 "end": np.array([9, 9], np.int64)},
             {"y": (3, 4)}, {"y": (0, 1)}),
        Case("pad-by-count",
             model([*NZ, node("Unsqueeze", ["n", "zero1"], ["n1"]),
                    node("Concat", ["zero1", "n1"], ["pads"], axis=0),
                    node("Pad", ["v", "pads"], ["y"])],
                   nz_in, {"y": (F, None)},
                   {**NZ_INITS, "zero1": np.array([0], np.int64), "v": np.ones(2, np.float32)}),
             nz_feeds, {"y": (14,)}, {"y": (0,)}),
        Case("onehot-depth",
             model([node("NonZero", ["x"], ["nz"]), node("Size", ["nz"], ["depth"]),
                    node("OneHot", ["idx", "depth", "vals"], ["y"])],
                   nz_in, {"y": (F, None)},
                   {"idx": np.array([0, 1, 2], np.int64), "vals": np.array([0, 1], np.float32)}),
             nz_feeds, {"y": (3, 24)}, {"y": (1,)}),
        Case("sequence-of-dynamic-pieces",
             model([node("NonZero", ["x"], ["nz"]),
                    node("SplitToSequence", ["nz"], ["seq"], axis=1, keepdims=1),
                    node("ConcatFromSequence", ["seq"], ["y"], axis=0)],
                   nz_in, {"y": (I64, None)}),
             nz_feeds, {"y": (24, 1)}, {"y": (0,)}),
        Case("unbounded",
             model([node("ConstantOfShape", ["s"], ["y"])], {"s": (I64, [2])}, {"y": (F, None)}),
             lambda rng, worst: {"s": np.array([2, 7], np.int64)}, {"y": (-1, -1)}, {"y": (0, 1)}),
    ]  # fmt: skip


CASES = _cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_capacity_holds_what_onnxruntime_produces(case: Case) -> None:
    compiled = compile_to_memory(case.graph)
    specs = {s.name: s for s in compiled.outputs}
    assert {n: s.cpu.shape for n, s in specs.items()} == case.capacity
    assert {n: s.dynamic_dims for n, s in specs.items() if s.dynamic} == case.dynamic
    session = ort.InferenceSession(
        case.graph.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    reached = {n: False for n in names}
    rng = np.random.default_rng(0)
    for trial in range(12):
        worst = trial == 0
        for name, got in zip(names, session.run(None, case.feeds(rng, worst)), strict=True):
            info = specs[name].cpu
            assert got.ndim == len(info.shape), f"{name}: rank {got.ndim} vs {info.shape}"
            for i, (real, cap) in enumerate(zip(got.shape, info.shape, strict=True)):
                if i in specs[name].dynamic_dims:
                    assert cap == -1 or real <= cap, f"{name}: {got.shape} exceeds {info.shape}"
                else:
                    assert real == cap, f"{name}: static dim {i} is {real}, not {cap}"
            reached[name] |= worst and got.shape == info.shape
    bounded = [n for n in names if specs[n].cpu.bounded and specs[n].dynamic and n != "idx"]
    tight = [n for n in bounded if case.name not in ("reshape-from-input", "pad-by-count")]
    assert all(reached[n] for n in tight), f"worst case below the capacity: {reached}"


def test_output_capacity_sets_the_dims_the_compiler_cannot(tmp_path) -> None:
    unbounded = next(c for c in CASES if c.name == "unbounded").graph
    compiled = compile_to_memory(unbounded, output_capacity={"y": (4, 8)})
    (spec,) = compiled.outputs
    assert spec.cpu.shape == spec.hw.shape == (4, 8) and spec.dynamic_dims == (0, 1)
    onnx.save(unbounded, str(tmp_path / "u.onnx"))
    out = tmp_path / "u.rai"
    assert (
        compile_main([str(tmp_path / "u.onnx"), "-o", str(out), "--output-capacity", "y=4x8"]) == 0
    )
    assert load_model(out).outputs[0].cpu.shape == (4, 8)
    nms = next(c for c in CASES if c.name == "nms-constant-k").graph
    (spec,) = compile_to_memory(nms, output_capacity={"sel": (100, 3)}).outputs
    assert spec.cpu.shape == (100, 3)  # more than derived: the caller's choice


@pytest.mark.parametrize(
    ("capacity", "message"),
    [
        ({"nope": (2, 3)}, "'nope', not an output"),
        ({"sel": (100,)}, "rank 1"),
        ({"sel": (100, 4)}, "dim 1 is 4; the output fixes it to 3"),
        ({"sel": (-1, 3)}, "negative dimension"),
    ],
)
def test_output_capacity_errors(capacity, message) -> None:
    nms = next(c for c in CASES if c.name == "nms-constant-k").graph
    with pytest.raises(cl.OptionError, match=message):
        compile_to_memory(nms, output_capacity=capacity)


def test_output_capacity_of_a_static_output_is_an_error() -> None:
    graph = model([node("Relu", ["x"], ["y"])], {"x": (F, [3])}, {"y": (F, [3])})
    with pytest.raises(cl.OptionError, match="static shape"):
        compile_to_memory(graph, output_capacity={"y": (5,)})


@pytest.mark.parametrize(
    ("kind", "make"),
    [
        ("sequence", lambda: oh.make_tensor_sequence_value_info("y", F, None)),
        ("optional", lambda: oh.make_value_info("y", oh.make_optional_type_proto(
            oh.make_tensor_type_proto(F, None)))),
        ("string", lambda: oh.make_tensor_value_info("y", TensorProto.STRING, None)),
    ],
)  # fmt: skip
def test_outputs_that_cannot_be_described_are_refused_by_name(kind, make) -> None:
    op = {"sequence": "SequenceConstruct", "optional": "Optional", "string": "Cast"}[kind]
    attrs = {"to": TensorProto.STRING} if kind == "string" else {}
    graph = model([node(op, ["x"], ["y"], **attrs)], {"x": (F, [3])}, {})
    graph.graph.output.append(make())
    with pytest.raises(cl.UnsupportedError, match="'y'"):
        compile_to_memory(graph)


def test_a_manifest_with_minus_one_elsewhere_is_refused(tmp_path) -> None:
    unbounded = next(c for c in CASES if c.name == "unbounded").graph
    out = write_directory(compile_to_memory(unbounded), tmp_path / "m")
    assert load_model(out).outputs[0].cpu.shape == (-1, -1)  # as compiled: loads
    manifest_path = out / "vaiml_par_0" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["outputs"][0]["dynamic_dims"] = [0]  # dim 1 is -1 but no longer data-dependent
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(cl.ModelLoadError, match="-1 dims"):
        load_model(out)


@pytest.mark.parametrize(
    ("nodes", "inputs", "outputs", "shapes"),
    [
        (  # onnxruntime's static inference squeezes every 1-dim when axes is an input
            [node("Squeeze", ["x", "axes"], ["y"])],
            {"x": (F, [1, 3, 1, 5]), "axes": (I64, [1])}, {"y": (F, None)}, {"y": (-1,)},
        ),
        (  # ... and splits in equal parts when the sizes are an input
            [node("Split", ["x", "sizes"], ["a", "b"])],
            {"x": (F, [6]), "sizes": (I64, [2])}, {"a": (F, None), "b": (F, None)},
            {"a": (6,), "b": (6,)},
        ),
    ],
    ids=["squeeze", "split"],
)  # fmt: skip
def test_shapes_set_by_an_input_s_values_are_not_guessed(nodes, inputs, outputs, shapes) -> None:
    """Such an output is data-dependent (a capacity, or -1), never the shape onnxruntime's
    inference guessed: with that shape the run failed on both engines."""
    compiled = compile_to_memory(model(nodes, inputs, outputs))
    for spec in compiled.outputs:
        assert spec.dynamic and spec.cpu.shape == shapes[spec.name], spec
