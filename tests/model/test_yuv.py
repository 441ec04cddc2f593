"""``input_format="i420" | "nv12"``: the decoder's planes are the graph inputs; the graph's
colour conversion matches libswscale's, and the labels match the RGB path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from compiler_support import run_compiled

from copyless.model import compile_to_memory, zoo
from copyless.types import DataType, OptionError, TensorType, UnsupportedError
from copyless.vision._video import VideoSource
from video_helpers import EXPECTED, identity_net, make_clip

NORM = {"mean": (127, 127, 127), "std": (128, 128, 128)}


def _flat(y: int, u: int, v: int, fmt: str, size: int = 4) -> dict[str, np.ndarray]:
    half = size // 2
    luma = np.full((1, size, size), y, np.uint8)
    if fmt == "nv12":
        return {"x_y": luma, "x_uv": np.tile(np.array([u, v], np.uint8), (1, half, half, 1))}
    return {"x_y": luma, "x_u": np.full((1, half, half), u, np.uint8),
            "x_v": np.full((1, half, half), v, np.uint8)}  # fmt: skip


@pytest.mark.parametrize("fmt", ["i420", "nv12"])
@pytest.mark.parametrize(
    ("options", "yuv", "rgb"),
    [  # the standard colour bars' red and green, and limited-range black and white
        ({}, (81, 90, 240), (255, 0, 0)),
        ({}, (145, 54, 34), (0, 255, 0)),
        ({}, (16, 128, 128), (0, 0, 0)),
        ({}, (235, 128, 128), (255, 255, 255)),
        ({"yuv_matrix": "BT.709"}, (63, 102, 240), (255, 0, 0)),
        ({"yuv_matrix": "bt709"}, (173, 42, 26), (0, 255, 0)),
        ({"yuv_range": "full"}, (76, 85, 255), (255, 0, 0)),
        ({"yuv_range": "full"}, (0, 128, 128), (0, 0, 0)),
    ],
)
def test_colour_matrices_and_ranges(
    fmt: str, options: dict[str, str], yuv: tuple[int, int, int], rgb: tuple[int, int, int]
) -> None:
    compiled = compile_to_memory(identity_net(4, 4), input_format=fmt, **options)
    got = run_compiled(compiled, _flat(*yuv, fmt))["rgb"][0]
    np.testing.assert_allclose(got.mean(axis=(1, 2)), rgb, atol=3.0)
    assert got.min() >= 0.0 and got.max() <= 255.0  # clipped like swscale


def test_an_opset_12_model_resizes_too() -> None:
    """The resize's ops (Slice, Gather, MatMul, Transpose) exist at every fold opset."""
    model = identity_net(4, 4, opset=12)
    compiled = compile_to_memory(model, input_format="nv12", input_size="8x8")
    got = run_compiled(compiled, _flat(81, 90, 240, "nv12", size=8))["rgb"][0]
    np.testing.assert_allclose(got.mean(axis=(1, 2)), (255, 0, 0), atol=3.0)


def test_planes_are_the_graph_inputs_with_equal_views() -> None:
    compiled = compile_to_memory(identity_net(8, 8), input_format="i420", input_size=(97, 131))
    assert [(s.name, s.hw.shape) for s in compiled.inputs] == [
        ("x_y", (1, 97, 131)), ("x_u", (1, 49, 66)), ("x_v", (1, 49, 66))]  # fmt: skip
    for spec in compiled.inputs:
        assert spec.hw.data_type is DataType.UINT8 and spec.cpu.tensor_type is TensorType.CPU
        assert (spec.cpu.shape, spec.cpu.memory_layout) == (spec.hw.shape, spec.hw.memory_layout)
    nv12 = compile_to_memory(identity_net(8, 8), input_format="nv12", input_size=(97, 131))
    assert [s.hw.shape for s in nv12.inputs] == [(1, 97, 131), (1, 49, 66, 2)]


@pytest.mark.parametrize(
    ("codec", "pix_fmt", "suffix", "yuv_range"),
    [("libx264", "yuv420p", "mp4", "limited"), ("mjpeg", "yuvj420p", "mkv", "full")],
)
def test_conversion_matches_swscale_on_a_decoded_frame(
    tmp_path: Path, codec: str, pix_fmt: str, suffix: str, yuv_range: str
) -> None:
    clip = make_clip(tmp_path / f"c.{suffix}", 64, 96, 1, codec=codec, pix_fmt=pix_fmt)
    with VideoSource(clip) as source:
        assert source.info.yuv_range == yuv_range
        compiled = compile_to_memory(identity_net(64, 96), input_format="i420", yuv_range=yuv_range)
        frame = next(source.frames())
        feeds = {f"x_{p}": plane[None] for p, plane in zip("yuv", frame.planes, strict=True)}
        got = run_compiled(compiled, feeds)["rgb"][0].transpose(1, 2, 0)
        swscale = frame.frame.to_ndarray(format="rgb24").astype(np.float32)
    diff = np.abs(got - swscale)
    # swscale repeats chroma samples, the graph interpolates them: edges differ a little.
    assert diff.mean() < 2.0 and np.percentile(diff, 95) < 8.0


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("yuv") / "clip.mp4", 240, 320, frames_per_scene=2)


@pytest.fixture(scope="module")
def effnet() -> Path:
    return zoo.build("efficientnet-lite0", progress=False)


def _rgb_logits(effnet: Path, frames: list[np.ndarray]) -> list[np.ndarray]:
    rgbx = compile_to_memory(
        effnet, input_format="rgbx", input_size=(240, 320), input_crop=0.875, **NORM
    )
    pad = np.zeros((240, 320, 1), np.uint8)
    return [
        run_compiled(rgbx, {"input": np.concatenate([f, pad], axis=-1)[None]})["logits"][0]
        for f in frames
    ]


@pytest.mark.parametrize("fmt", ["i420", "nv12"])
def test_yuv_views_give_the_rgb_paths_labels(effnet: Path, clip: Path, fmt: str) -> None:
    compiled = compile_to_memory(
        effnet, input_format=fmt, input_size=(240, 320), input_crop=0.875, **NORM
    )
    names = [s.name for s in compiled.inputs]
    with VideoSource(clip, planes=fmt) as source:
        frames = list(source.frames())
        logits = [
            run_compiled(compiled, {n: p[None] for n, p in zip(names, f.planes, strict=True)})
            for f in frames
        ]
        rgb = [f.frame.to_ndarray(format="rgb24") for f in frames]
    # NV12 planes are PyAV's reformat of the decoder's I420 (tests/vision/test_video.py).
    reference = _rgb_logits(effnet, rgb)
    for index, (ours, theirs) in enumerate(zip(logits, reference, strict=True)):
        label = int(ours["logits"][0].argmax())
        assert label == int(theirs.argmax())
        assert label in EXPECTED["chelsea" if index < 2 else "coffee"]


def test_yuv_options_are_checked() -> None:
    with pytest.raises(UnsupportedError, match=r"needs a float \[N,3,H,W\] input"):
        compile_to_memory(identity_net(4, 4, channels=1), input_format="nv12")
    with pytest.raises(OptionError, match="input_layout"):
        compile_to_memory(identity_net(4, 4), input_format="i420", input_layout="NHWC")


@pytest.mark.parametrize(("fmt", "lines"), [("i420", (128, 64)), ("nv12", (128, 128))])
@pytest.mark.parametrize("crop", [None, 0.875])
def test_padded_lines_give_what_compact_planes_give(
    fmt: str, lines: tuple[int, int], crop: float | None
) -> None:
    options = {"input_format": fmt, "input_size": (48, 72), "input_crop": crop}
    compact = compile_to_memory(identity_net(16, 16), **options)
    padded = compile_to_memory(identity_net(16, 16), input_line_sizes=lines, **options)
    rng = np.random.default_rng(7)
    feeds, padded_feeds = {}, {}
    for small, big in zip(compact.inputs, padded.inputs, strict=True):
        data = rng.integers(0, 256, big.hw.shape, np.uint8)  # padding bytes are noise
        padded_feeds[big.name] = data
        feeds[small.name] = np.ascontiguousarray(data[:, :, : small.hw.shape[2]])
    assert [s.hw.shape[2] for s in padded.inputs] == ([128, 64, 64] if fmt == "i420" else [128, 64])
    np.testing.assert_array_equal(
        run_compiled(padded, padded_feeds)["rgb"], run_compiled(compact, feeds)["rgb"]
    )


def test_line_sizes_too_small_are_refused() -> None:
    with pytest.raises(OptionError, match=r"luma >= 72, chroma >= 72, even"):
        compile_to_memory(identity_net(8, 8), input_format="nv12", input_size=(48, 72),
                          input_line_sizes="128,70")  # fmt: skip
    with pytest.raises(OptionError, match="need input_format='i420' or 'nv12'"):
        compile_to_memory(identity_net(8, 8), input_format="rgbx", input_line_sizes=(8, 4))
