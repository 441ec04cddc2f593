"""The small real conv net the runner, backend and reliability tests (and the runner and soak
benchmarks) run, and a runner-allocated tensor pair: one definition, imported by basename.

Under pytest this folder is on ``sys.path`` (the rootdir conftest lives here); scripts and
child processes started elsewhere add it themselves (see runner_helpers, reliability_helpers
and benchmarks/soak.py).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh

import copyless as cl
from copyless.runner import Runner


def conv_net(batch: int | str = 1, size: int = 16, channels: int = 3) -> onnx.ModelProto:
    """Conv(channels->8) + Relu + GlobalAveragePool + Flatten + Gemm(8->10), fixed weights.

    Input ``input`` [batch, channels, size, size] float32, output ``logits`` [batch, 10];
    ``batch`` may be a symbolic name ("N"). IR version 10, opset 17 (onnxruntime 1.31 loads it).
    """
    rng = np.random.default_rng(0)
    weights = onh.from_array(rng.standard_normal((8, channels, 3, 3)).astype(np.float32), "w")
    bias = onh.from_array(rng.standard_normal(8).astype(np.float32), "b")
    fc = onh.from_array(rng.standard_normal((10, 8)).astype(np.float32), "fc")
    fcb = onh.from_array(rng.standard_normal(10).astype(np.float32), "fcb")
    nodes = [
        oh.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c"], ["r"]),
        oh.make_node("GlobalAveragePool", ["r"], ["p"]),
        oh.make_node("Flatten", ["p"], ["f"]),
        oh.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
    ]
    graph = oh.make_graph(
        nodes,
        "conv_net",
        [oh.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [batch, channels, size, size])],
        [oh.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [batch, 10])],
        [weights, bias, fc, fcb],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def tensors(runner: Runner, view: cl.TensorType) -> tuple[cl.NpuTensor, cl.NpuTensor]:
    """One runner-allocated input and output tensor in ``view`` (single-input models)."""
    (in_info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, view)
    (out_info,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, view)
    return runner.allocate_npu_tensor(in_info), runner.allocate_npu_tensor(out_info)


def nonzero_net(batch: int | str = 3, declared: list[int | str] | None = None) -> onnx.ModelProto:
    """x [batch, 4] float -> ``nz`` = NonZero(x) int64 [2, k] (k depends on the data; the
    graph declares ``declared``) and ``r`` = Relu(x) [batch, 4], a fixed output beside it."""
    graph = oh.make_graph(
        [oh.make_node("NonZero", ["x"], ["nz"]), oh.make_node("Relu", ["x"], ["r"])],
        "nonzero",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 4])],
        [
            oh.make_tensor_value_info("nz", onnx.TensorProto.INT64, declared),
            oh.make_tensor_value_info("r", onnx.TensorProto.FLOAT, [batch, 4]),
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def with_nonzeros(x: np.ndarray, count: int, seed: int) -> np.ndarray:
    """Put ``count`` ones at random places of ``x`` (zeros elsewhere), in place; returns
    NonZero's result for it, ``np.stack(np.nonzero(x))``."""
    flat = np.zeros(x.size, x.dtype)
    flat[np.random.default_rng(seed).choice(x.size, count, replace=False)] = 1
    x[...] = flat.reshape(x.shape)
    return np.stack(np.nonzero(x))


def unknown_rank_model() -> onnx.ModelProto:
    """x [3,4], flat bool -> nz: NonZero(x) [2, k], or flattened [2k] when ``flat``: its rank
    is known only at run time."""
    model = nonzero_net()
    del model.graph.node[0]
    model.graph.input.append(oh.make_tensor_value_info("flat", onnx.TensorProto.BOOL, []))
    out = oh.make_tensor_value_info("y", onnx.TensorProto.INT64, None)
    grid = oh.make_graph([oh.make_node("NonZero", ["x"], ["y"])], "grid", [], [out])
    flat = oh.make_graph(
        [
            oh.make_node("NonZero", ["x"], ["z"]),
            oh.make_node("Constant", [], ["minus1"], value_ints=[-1]),
            oh.make_node("Reshape", ["z", "minus1"], ["y"]),
        ],
        "flat",
        [],
        [out],
    )
    model.graph.node.insert(
        0, oh.make_node("If", ["flat"], ["nz"], then_branch=flat, else_branch=grid)
    )
    return model


def calibration_folder(root, count: int = 100, size: int = 96, seed: int = 0):
    """``count`` varied colour photos (JPEG crops of skimage's colour photos at random
    scales and places, some mirrored) in ``root``: a calibration folder (100 is the count
    the INT8 compiler recommends)."""
    from pathlib import Path

    import skimage.data
    from PIL import Image

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = ("chelsea", "coffee", "astronaut", "rocket", "immunohistochemistry")
    photos = [Image.fromarray(getattr(skimage.data, name)()).convert("RGB") for name in names]
    for i in range(count):
        photo = photos[i % len(photos)]
        w, h = photo.size
        side = int(min(w, h) * rng.uniform(0.4, 1.0))
        x0, y0 = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
        crop = photo.crop((x0, y0, x0 + side, y0 + side)).resize((size, size), Image.BILINEAR)
        if rng.integers(0, 2):
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        crop.save(root / f"{i:03d}.jpg", quality=90)
    return root


#: skimage photos bundled in its wheel: colour ones and a greyscale one (camera).
VARIANT_PHOTOS = ("chelsea", "coffee", "astronaut", "rocket", "hubble_deep_field", "retina",
                  "immunohistochemistry", "camera")  # fmt: skip


def photo_variants(root, count: int, seed: int):
    """``count`` JPEG variants of :data:`VARIANT_PHOTOS` in ``root`` (one in eight
    greyscale, as photo collections hold them): a random crop (60-100% of each side), scale
    0.5-2.2x, aspect change 0.8-1.25, mirror (half of them), quality 65-96 (the recipe of
    benchmarks/_accuracy_data.py). Returns ``root``."""
    from pathlib import Path

    import skimage.data
    from PIL import Image

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    photos = [Image.fromarray(getattr(skimage.data, name)()) for name in VARIANT_PHOTOS]
    for i in range(count):
        image = photos[i % len(photos)]
        w, h = image.size
        cw, ch = (max(32, int(side * rng.uniform(0.6, 1.0))) for side in (w, h))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        image = image.crop((x0, y0, x0 + cw, y0 + ch))
        scale, aspect = rng.uniform(0.5, 2.2), rng.uniform(0.8, 1.25)
        size = (max(16, round(cw * scale * aspect**0.5)), max(16, round(ch * scale / aspect**0.5)))
        image = image.resize(size, Image.Resampling.LANCZOS)
        if rng.integers(0, 2):
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        image.save(root / f"{i:04d}.jpg", quality=int(rng.integers(65, 97)))
    return root
