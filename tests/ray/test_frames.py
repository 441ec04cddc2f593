"""The decode stage: paths in, RGBx frames out, exactly what the fused preprocessing writes
into a runner's tensor; bad files give an error message and a zero frame."""

from __future__ import annotations

import numpy as np
import pytest

from model_helpers import conv_net

pytest.importorskip("ray")

import copyless as cl
from copyless.model import compile_to_memory
from copyless.ray import FrameSpec, decode_frames
from copyless.vision import classify_preprocess, decode


def test_frame_spec_follows_the_model(batch_model) -> None:
    assert FrameSpec.for_model(batch_model) == FrameSpec(224, 256)
    small = compile_to_memory(conv_net("N", size=32), input_format="rgbx")
    assert FrameSpec.for_model(small) == FrameSpec(32, 37)
    with pytest.raises(cl.UnsupportedError, match="--input-format rgbx"):
        FrameSpec.for_model(compile_to_memory(conv_net("N", size=32)))
    with pytest.raises(ValueError, match="size <= resize_short"):
        FrameSpec(256, 224)


def test_frames_match_the_fused_preprocessing(photo_folder, tmp_path) -> None:
    _, expected = photo_folder
    paths = sorted(expected)[:3]
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff" + bytes(100))
    missing = tmp_path / "missing.png"
    batch = {"path": np.array([*paths, str(bad), str(missing)], dtype=object), "id": np.arange(5)}
    spec = FrameSpec(224, 256)
    out = decode_frames(batch, spec)
    assert out["pixels"].shape == (5, 224, 224, 4) and out["pixels"].dtype == np.uint8
    assert list(out["id"]) == [0, 1, 2, 3, 4] and out["path"] is batch["path"]
    for i, path in enumerate(paths):
        reference = np.zeros((1, 224, 224, 4), np.uint8)
        image = decode(path, min_size=(512, 512))  # DECODE_HEADROOM x resize_short
        classify_preprocess(image, (reference, spec.info(1)), resize_short=256, crop=224)
        np.testing.assert_array_equal(out["pixels"][i], reference[0])
        assert out["error"][i] == ""
        assert out["pixels"][i, ..., 3].max() == 0 and out["pixels"][i, ..., :3].std() > 10
    assert str(bad) in out["error"][3] and "not a decodable image" in out["error"][3]
    assert out["error"][4] == f"{missing}: No such file or directory"
    assert not out["pixels"][3:].any()


def test_an_image_past_the_memory_bound_is_an_error_row(photo_folder, tmp_path) -> None:
    """Issue 40: ``max_image_bytes`` (copyless-batch sets it from --max-memory and the free
    memory) refuses an image from its header, before any pixel is decoded; the others in
    the batch are read as without it."""
    from PIL import Image

    _, expected = photo_folder
    small = sorted(expected)[0]
    big = tmp_path / "big.png"
    Image.new("RGB", (4000, 3000), (10, 20, 30)).save(big)
    batch = {"path": np.array([str(big), small], dtype=object)}
    out = decode_frames(batch, FrameSpec(224, 256, max_image_bytes=50 << 20))
    assert "big.png: not decoded: a 4000x3000 image needs about" in out["error"][0]
    assert not out["pixels"][0].any() and out["error"][1] == ""
    np.testing.assert_array_equal(
        out["pixels"][1],
        decode_frames({"path": np.array([small], dtype=object)}, FrameSpec(224, 256))["pixels"][0],
    )
