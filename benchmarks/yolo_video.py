"""A user's own detector on video, frames/s: ``copyless-video`` against ultralytics' own predict
loop (``YOLO("model.onnx").predict(clip, stream=True)``) over the same clip, both as whole
processes, interleaved.

The model: a YOLOv8n built from ultralytics' yaml (random weights, no download) whose batch
norms are measured on real photos and whose class logits are spread, so that it finds boxes
as a trained model does (scikit-image's photos; as tests/user_models.py), exported by
ultralytics (``model.export(format="onnx", imgsz=SIDE)``). ultralytics runs that ONNX file
with onnxruntime; copyless runs it compiled for RGBx images (``--input-format rgbx --mean
0,0,0 --std 255,255,255``: the YOLO head's decoding and NMS folded into the graph, the
frames letterboxed as ultralytics letterboxes them).

The clip is encoded once from real photos (H.264, ``--size``, ``--frames`` frames). Each
round starts one process of each (alternating which goes first) and takes its wall time from
start to exit, start-up and model loading included; frames/s = frames / wall. The ratio is
the median over rounds of each round's copyless / ultralytics. Both print every frame's
boxes; the share of ultralytics' boxes copyless also finds (IoU >= 0.9, same class) is
printed beside the speed (the resize filters differ: OpenCV's INTER_LINEAR there, PIL's
antialiased filter here, so a random model's boxes move a little).

Run: ``python benchmarks/yolo_video.py [--frames 120] [--size 480x640] [--side 640]
[--rounds 3] [--conf 0.25]`` (needs ultralytics: the test extra). The last line is
``yolo_video: copyless N frames/s, ultralytics M frames/s, ratio R.RRx, boxes matched P%``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ENV = {**os.environ, "YOLO_OFFLINE": "1", "YOLO_AUTOINSTALL": "false", "YOLO_VERBOSE": "false"}

PEER = """
import json, sys
from ultralytics import YOLO
model = YOLO(sys.argv[1], task="detect")
for r in model.predict(sys.argv[2], stream=True, conf=float(sys.argv[3]), iou=0.7,
                       imgsz=int(sys.argv[4]), verbose=False):
    print(json.dumps({"boxes": r.boxes.xyxy.numpy().round(1).tolist(),
                      "classes": r.boxes.cls.numpy().astype(int).tolist()}))
"""


def _export(folder: Path, side: int) -> Path:
    """The YOLOv8n export (see the module docstring)."""
    os.environ.update({k: ENV[k] for k in ("YOLO_OFFLINE", "YOLO_AUTOINSTALL", "YOLO_VERBOSE")})
    import torch
    from PIL import Image
    from skimage import data
    from ultralytics import YOLO

    torch.manual_seed(0)
    model = YOLO("yolov8n.yaml")
    net = model.model
    photos = [data.chelsea(), data.coffee(), data.astronaut()]
    batch = torch.stack([torch.from_numpy(np.array(Image.fromarray(p).resize((side, side))))
                         .permute(2, 0, 1) for p in photos]).float() / 255  # fmt: skip
    net.train()
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None
    with torch.no_grad():
        net(batch)
        for conv in net.model[-1].cv3:
            conv[-1].weight.mul_(1.5)
            conv[-1].bias.fill_(-2.5)
        for conv in net.model[-1].cv2:
            conv[-1].weight.mul_(3.0)
    net.eval()
    here = os.getcwd()
    os.chdir(folder)
    try:
        return Path(model.export(format="onnx", imgsz=side, verbose=False)).resolve()
    finally:
        os.chdir(here)


def _clip(path: Path, frames: int, height: int, width: int) -> Path:
    import av
    from PIL import Image
    from skimage import data

    scenes = [np.asarray(Image.fromarray(p).resize((width + 32, height + 32)))
              for p in (data.chelsea(), data.coffee(), data.astronaut())]  # fmt: skip
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            scene = scenes[(i * len(scenes)) // frames]
            shift = i % 32
            frame = np.ascontiguousarray(scene[16:16 + height, shift:shift + width])
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        out.mux(stream.encode())
    return path


def _run(command: list[str]) -> tuple[float, list[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=ENV, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed: {done.stderr[-2000:]}")
    return wall, done.stdout.splitlines()


def _matched(ours: list[dict[str, object]], theirs: list[dict[str, object]]) -> float:
    """The share of ultralytics' boxes with a copyless box of its class at IoU >= 0.9."""
    found = total = 0
    for mine, ref in zip(ours, theirs, strict=True):
        rb = np.asarray(ref["boxes"], np.float64).reshape(-1, 4)
        rc = np.asarray(ref["classes"], np.int64)
        ob = np.asarray([[d["x0"], d["y0"], d["x1"], d["y1"]] for d in mine["detections"]],
                        np.float64).reshape(-1, 4)  # type: ignore[union-attr]  # fmt: skip
        oc = np.asarray([d["class_id"] for d in mine["detections"]], np.int64)  # type: ignore[union-attr]
        total += len(rb)
        if len(rb) and len(ob):
            x0 = np.maximum(rb[:, None, 0], ob[None, :, 0])
            y0 = np.maximum(rb[:, None, 1], ob[None, :, 1])
            x1 = np.minimum(rb[:, None, 2], ob[None, :, 2])
            y1 = np.minimum(rb[:, None, 3], ob[None, :, 3])
            inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
            area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])  # noqa: E731
            iou = inter / np.maximum(area(rb)[:, None] + area(ob)[None, :] - inter, 1e-9)
            found += int(((iou >= 0.9) & (rc[:, None] == oc[None, :])).any(axis=1).sum())
    return found / total if total else 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--size", default="480x640", help="the clip's HxW")
    parser.add_argument("--side", type=int, default=640, help="the model's input side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conf", type=float, default=0.25)
    args = parser.parse_args(argv)
    height, width = (int(v) for v in args.size.lower().split("x"))
    import copyless as cl

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        onnx_path = _export(folder, args.side)
        rai = cl.compile_model(onnx_path, folder / "yolo.rai", input_format="rgbx",
                               mean=(0, 0, 0), std=(255, 255, 255), score_threshold=args.conf,
                               iou_threshold=0.7)  # fmt: skip
        clip = _clip(folder / "clip.mp4", args.frames, height, width)
        ours_cmd = [sys.executable, "-m", "copyless.apps.video", "-i", str(clip), "-m",
                    str(rai), "--json"]  # fmt: skip
        peer_cmd = [sys.executable, "-c", PEER, str(onnx_path), str(clip), str(args.conf),
                    str(args.side)]  # fmt: skip
        _run(ours_cmd)  # warm: the engine choice measured and cached, files in the page cache
        ratios, ours_fps, peer_fps = [], [], []
        matched = 0.0
        for round_ in range(args.rounds):
            order = [("ours", ours_cmd), ("peer", peer_cmd)]
            if round_ % 2:
                order.reverse()
            walls, outputs = {}, {}
            for name, command in order:
                walls[name], outputs[name] = _run(command)
            ours_fps.append(args.frames / walls["ours"])
            peer_fps.append(args.frames / walls["peer"])
            ratios.append(ours_fps[-1] / peer_fps[-1])
            frames = [json.loads(x) for x in outputs["ours"] if x.startswith("{")]
            mine = [f for f in frames if f.get("type") == "frame"]
            theirs = [json.loads(x) for x in outputs["peer"] if x.startswith("{")]
            matched = _matched(mine, theirs)
            print(f"round {round_}: copyless {ours_fps[-1]:.2f} frames/s, ultralytics "
                  f"{peer_fps[-1]:.2f} frames/s, ratio {ratios[-1]:.2f}x, boxes matched "
                  f"{matched:.1%}", flush=True)  # fmt: skip
    print(f"yolo_video: copyless {statistics.median(ours_fps):.2f} frames/s, ultralytics "
          f"{statistics.median(peer_fps):.2f} frames/s, ratio {statistics.median(ratios):.2f}x, "
          f"boxes matched {matched:.1%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
