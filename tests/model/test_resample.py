"""The in-graph frame resize (``input_size``/``input_crop``): PIL's bilinear on torchvision's
resize + centre-crop coordinates, the same on onnxruntime and OpenVINO (whose own Resize
ignores ``antialias``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
import pytest
import skimage.data
from PIL import Image

from copyless.model import CompiledModel, compile_to_memory
from copyless.model._resample import bilinear_weights, source_box
from copyless.model._yuv import colour_matrix
from video_helpers import identity_net

ENGINES = ("onnxruntime", "openvino")


def _run(compiled: CompiledModel, feeds: dict[str, np.ndarray], engine: str) -> np.ndarray:
    """The compiled graph straight on one engine (OpenVINO at f32); its ``rgb`` output."""
    graph = compiled.partitions[0].onnx_bytes
    if engine == "onnxruntime":
        session = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
        return np.asarray(session.run(["rgb"], feeds)[0])
    core = ov.Core()
    model = core.compile_model(
        core.read_model(model=bytes(graph)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    return np.asarray(model([feeds[i.get_any_name()] for i in model.inputs])[0])


def _photo(height: int, width: int) -> np.ndarray:
    image = Image.fromarray(skimage.data.astronaut()).resize((width, height), Image.LANCZOS)
    return np.asarray(image)


def _pil_float(planes: np.ndarray, frame: tuple[int, int], crop: float | None) -> np.ndarray:
    """torchvision's Resize(256) + CenterCrop(224) (or a stretch to 224) of float planes
    ``[C, H, W]`` with PIL's own float resampler (mode "F": no rounding): ``[C, 224, 224]``."""
    out = []
    for plane in planes:
        image = Image.fromarray(plane.astype(np.float32), mode="F")
        if crop is None:
            out.append(np.asarray(image.resize((224, 224), Image.BILINEAR)))
            continue
        h, w = frame
        size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
        left, top = round((size[0] - 224) / 2), round((size[1] - 224) / 2)
        resized = image.resize(size, Image.BILINEAR)
        out.append(np.asarray(resized.crop((left, top, left + 224, top + 224))))
    return np.stack(out)


@pytest.mark.parametrize(
    ("frame", "crop"),
    [((480, 640), 0.875), ((480, 640), None), ((97, 131), 0.875), ((720, 405), 0.875)],
)
def test_rgbx_frames_resize_as_pil_on_both_engines(
    frame: tuple[int, int], crop: float | None
) -> None:
    rgb = _photo(*frame)
    compiled = compile_to_memory(
        identity_net(224, 224), input_format="rgbx", input_size=frame, input_crop=crop
    )
    graph = onnx.load_from_string(compiled.partitions[0].onnx_bytes)
    assert "Resize" not in {n.op_type for n in graph.graph.node}
    x = np.zeros((1, *frame, 4), np.uint8)
    x[0, ..., :3] = rgb
    x[0, ..., 3] = 200  # the 4th byte is ignored
    want = _pil_float(rgb.transpose(2, 0, 1), frame, crop)
    got = {engine: _run(compiled, {"x": x}, engine)[0] for engine in ENGINES}
    for engine in ENGINES:  # whole levels, as PIL's uint8 resize gives
        np.testing.assert_array_equal(got[engine], np.round(got[engine]))
        np.testing.assert_allclose(got[engine], want, atol=0.5 + 2e-3, err_msg=engine)
        assert np.mean(got[engine] != np.round(want)) < 0.01, engine
    # the same levels, but for float ties at .5 (summation order)
    assert np.mean(got["onnxruntime"] != got["openvino"]) < 0.001
    assert np.abs(got["onnxruntime"] - got["openvino"]).max() <= 1.0


def _to_yuv(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BT.601 limited-range I420 planes of ``rgb`` (chroma: 2x2 means)."""
    m, b = colour_matrix("bt601", False)
    yuv = (rgb.reshape(-1, 3).astype(np.float64) - b) @ np.linalg.inv(m).T
    yuv = np.clip(np.round(yuv), 0, 255).reshape(*rgb.shape[:2], 3)
    h, w = rgb.shape[:2]
    chroma = yuv[..., 1:].reshape(h // 2, 2, w // 2, 2, 2).mean(axis=(1, 3)).round()
    return (yuv[..., 0].astype(np.uint8), chroma[..., 0].astype(np.uint8),
            chroma[..., 1].astype(np.uint8))  # fmt: skip


@pytest.mark.parametrize("fmt", ["i420", "nv12"])
def test_yuv_frames_resize_as_pil_after_nearest_chroma_on_both_engines(fmt: str) -> None:
    """Resizing the planes then converting equals converting (chroma upsampled nearest, as
    swscale's yuv420p -> rgb24) then PIL's resize + crop; both engines alike."""
    frame = (480, 640)
    y, u, v = _to_yuv(_photo(*frame))
    compiled = compile_to_memory(
        identity_net(224, 224), input_format=fmt, input_size=frame, input_crop=0.875
    )
    if fmt == "i420":
        feeds = {"x_y": y[None], "x_u": u[None], "x_v": v[None]}
    else:
        feeds = {"x_y": y[None], "x_uv": np.stack([u, v], axis=-1)[None]}
    m, b = colour_matrix("bt601", False)
    up = [p.repeat(2, axis=0).repeat(2, axis=1) for p in (u, v)]
    rgb = (np.stack([y, *up], axis=-1).astype(np.float64) @ m.T + b).transpose(2, 0, 1)
    want = np.clip(_pil_float(rgb, frame, 0.875), 0, 255)
    got = {engine: _run(compiled, feeds, engine)[0] for engine in ENGINES}
    for engine in ENGINES:
        np.testing.assert_allclose(got[engine], want, atol=0.55, err_msg=engine)
        assert np.mean(got[engine] != np.round(want)) < 0.01, engine
    assert np.mean(got["onnxruntime"] != got["openvino"]) < 0.001


def test_source_box_is_torchvisions_resize_then_crop() -> None:
    # 640x480 -> Resize(256) gives 341x256; CenterCrop(224) starts at (58, 16)
    x0, y0, x1, y1 = source_box((480, 640), (224, 224), 0.875)
    assert (x0, y0) == pytest.approx((58 * 640 / 341, 16 * 480 / 256))
    assert (x1 - x0, y1 - y0) == pytest.approx((224 * 640 / 341, 224 * 480 / 256))
    assert source_box((480, 640), (224, 224), None) == (0.0, 0.0, 640.0, 480.0)


def test_bilinear_weights_rows_sum_to_one_and_widen_with_the_reduction() -> None:
    shrink = bilinear_weights(640, 224, 0.0, 640.0)
    grow = bilinear_weights(97, 224, 0.0, 97.0)
    np.testing.assert_allclose(shrink.sum(axis=1), 1.0)
    np.testing.assert_allclose(grow.sum(axis=1), 1.0)
    assert (shrink[100] > 0).sum() == 6  # support 2 x 640/224 = 5.7 samples
    assert (grow[100] > 0).sum() == 2  # upscaling interpolates two neighbours
