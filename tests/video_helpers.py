"""Test clips encoded at test time from real photos (PyAV, H.264): one definition, imported
by basename from tests and benchmarks (this folder is on ``sys.path`` under pytest; scripts
add it themselves, see benchmarks/video.py).

A clip is a sequence of scenes, each one photo from ``skimage.data`` shown for
``frames_per_scene`` frames, slightly panned frame to frame so the encoder sees motion.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import av
import numpy as np
import onnx
import skimage.data
from onnx import TensorProto, helper
from PIL import Image

CATS = {281, 282, 285}  # tabby, tiger cat, Egyptian cat
ESPRESSO = 967
EXPECTED = {"chelsea": CATS, "coffee": {ESPRESSO}}


def scene(name: str, height: int, width: int, shift: int = 0) -> np.ndarray:
    """Photo ``name`` as an ``height x width`` RGB frame, panned ``shift`` pixels."""
    photo = Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
    pad = 16
    big = photo.resize((width + 2 * pad, height + 2 * pad), Image.BILINEAR)
    x = pad + (shift % (2 * pad)) - pad // 2
    return np.asarray(big.crop((x, pad, x + width, pad + height)))


def make_clip(
    path: Path,
    height: int = 120,
    width: int = 160,
    frames_per_scene: int = 4,
    scenes: Sequence[str] = ("chelsea", "coffee"),
    codec: str = "libx264",
    rate: int = 25,
    pix_fmt: str = "yuv420p",
) -> Path:
    """Encode the scenes to ``path`` (container from its suffix: .mp4, .mkv, .ts ...)."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        for name in scenes:
            for i in range(frames_per_scene):
                frame = av.VideoFrame.from_ndarray(scene(name, height, width, i), format="rgb24")
                for packet in stream.encode(frame):
                    out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def reference_labels(clip: Path, model: str = "efficientnet-lite0") -> list[int]:
    """Top-1 per frame of the reference pipeline: FFmpeg's rgb24 frames, PIL bilinear resize
    of the short side to 256, centre crop 224, fp32 onnxruntime on the zoo's plain model."""
    import onnxruntime as ort

    from copyless.model import zoo

    prep = zoo.preprocessing(model)
    session = ort.InferenceSession(
        str(zoo.build(model, progress=False)), providers=["CPUExecutionProvider"]
    )
    mean, std = np.asarray(prep.mean, np.float32), np.asarray(prep.std, np.float32)
    labels = []
    with av.open(str(clip)) as container:
        for frame in container.decode(video=0):
            image = Image.fromarray(frame.to_ndarray(format="rgb24"))
            w, h = image.size
            size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
            left, top = round((size[0] - 224) / 2), round((size[1] - 224) / 2)
            crop = image.resize(size, Image.BILINEAR).crop((left, top, left + 224, top + 224))
            x = ((np.asarray(crop, np.float32) - mean) / std).transpose(2, 0, 1)[None]
            labels.append(int(session.run(None, {session.get_inputs()[0].name: x})[0].argmax()))
    return labels


def scene_of(index: int, frames_per_scene: int, scenes: Sequence[str]) -> str:
    return scenes[index // frames_per_scene]


def identity_net(height: int, width: int, channels: int = 3, opset: int = 17) -> onnx.ModelProto:
    """x [1, C, h, w] -> rgb = x: compiled with a pixel or YUV format, its output is the
    graph's converted input."""
    shape = [1, channels, height, width]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["rgb"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("rgb", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model
