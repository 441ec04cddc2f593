"""Video classification, frames/s: ``copyless-video`` against the plain PyAV + PIL + numpy +
onnxruntime loop a user would write, both as whole processes, interleaved.

The clip is encoded once from real photos (H.264, ``--size``, ``--frames`` frames: chelsea
then coffee). Both sides classify every frame with EfficientNet-Lite0 (the zoo's ONNX model;
copyless runs it compiled for the clip's I420 planes, the default of ``copyless-video``) and
print one line per frame:

* plain: ``container.decode`` (FFmpeg threads on, as for copyless) -> ``to_ndarray(format=
  "rgb24")`` -> PIL resize short side 256 + centre crop 224 -> numpy ``(x - 127) / 128`` and
  NCHW -> ``InferenceSession.run`` -> top-1.
* copyless: ``copyless-video -i CLIP`` (decoder planes bound in place, colour conversion,
  crop, resize and normalisation in the graph, async slots overlap decode and inference).

Timing: each round starts one process of each (alternating which goes first) and takes its
wall time from start to exit, start-up and model loading included; frames/s = frames / wall.
The ratio is the median over rounds of each round's copyless / plain (the two processes of
a round ran back to back, so load that drifts on a shared machine cancels best there).
Both compiled/exported models are built and cached before the first round. The per-frame
labels of both must agree (same top-1 on at least 95% of frames, the scene's label on every
frame of copyless) or the run fails.

Run: ``copyless-bench video [--frames 300] [--size 480x640] [--rounds 5]
[--runner openvino] [--slots N] [--quick]``
The last line is ``video: copyless N frames/s, plain M frames/s, ratio R.RRx``.
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

SCENES = ("chelsea", "coffee")


def plain(clip: str, model: str, labels_json: str) -> None:
    """The loop a user writes without copyless (run in its own process, copyless not
    imported)."""
    import av
    import numpy as np
    import onnxruntime as ort
    from PIL import Image

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    labels = json.loads(Path(labels_json).read_text())
    with av.open(clip) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for index, frame in enumerate(container.decode(stream)):
            image = Image.fromarray(frame.to_ndarray(format="rgb24"))
            scale = 256 / min(image.size)
            image = image.resize(
                (round(image.width * scale), round(image.height * scale)), Image.BILINEAR
            )
            left, top = (image.width - 224) // 2, (image.height - 224) // 2
            image = image.crop((left, top, left + 224, top + 224))
            x = ((np.asarray(image, np.float32) - 127.0) / 128.0).transpose(2, 0, 1)[None]
            logits = session.run(None, {name: np.ascontiguousarray(x)})[0][0]
            top1 = int(logits.argmax())
            prob = float(1.0 / np.exp(logits - logits[top1]).sum())
            print(f"frame {index}: {top1} {labels[top1]} {prob:.3f}")


def _timed(command: list[str]) -> tuple[float, list[str]]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{command[:3]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, [line for line in done.stdout.splitlines() if line.startswith("frame ")]


def _labels(lines: list[str]) -> list[int]:
    return [int(line.split()[2]) for line in lines]


def _check(copyless: list[str], plain_lines: list[str], frames: int) -> float:
    from video_helpers import EXPECTED

    ours, theirs = _labels(copyless), _labels(plain_lines)
    if len(ours) != frames or len(theirs) != frames:
        raise SystemExit(f"frame lines: copyless {len(ours)}, plain {len(theirs)}, want {frames}")
    per_scene = frames // len(SCENES)
    wrong = [i for i, c in enumerate(ours) if c not in EXPECTED[SCENES[i // per_scene]]]
    if wrong:
        raise SystemExit(f"copyless labels wrong on frames {wrong[:10]}")
    same = sum(a == b for a, b in zip(ours, theirs, strict=True)) / frames
    if same < 0.95:
        raise SystemExit(f"copyless and plain agree on only {same:.0%} of frames")
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--size", default="480x640", help="HxW of the clip")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runner", default="onnxruntime", choices=["onnxruntime", "openvino"])
    parser.add_argument("--slots", type=int, default=2, help="copyless-video --slots")
    parser.add_argument("--quick", action="store_true", help="100 frames, 3 rounds")
    parser.add_argument("--plain", nargs=3, metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain:
        plain(*args.plain)
        return
    # the plain process runs this file too: it must not pay for these imports
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from copyless.model import zoo
    from video_helpers import make_clip

    model = str(zoo.build("efficientnet-lite0", progress=False))
    if args.quick:
        args.frames, args.rounds = 100, 3
    height, width = (int(v) for v in args.size.lower().split("x"))
    per_scene = args.frames // len(SCENES)
    with tempfile.TemporaryDirectory() as tmp:
        clip = str(make_clip(Path(tmp) / "clip.mp4", height, width, per_scene, SCENES))
        frames = per_scene * len(SCENES)
        ours_cmd = [sys.executable, "-m", "copyless.apps.video", "-i", clip,
                    "--runner", args.runner, "--slots", str(args.slots)]  # fmt: skip
        labels = Path(tmp) / "labels.json"
        labels.write_text(json.dumps(zoo.labels()))
        plain_cmd = [sys.executable, __file__, "--plain", clip, model, str(labels)]
        _timed([*ours_cmd, "-n", "2"])  # builds and caches the compiled model
        _timed(plain_cmd)
        print(f"clip {width}x{height}, {frames} frames, copyless --runner {args.runner} "
              f"--slots {args.slots}; load {os.getloadavg()[0]:.2f}")  # fmt: skip
        ours_fps, plain_fps, ratios = [], [], []
        for r in range(args.rounds):
            pair = [("copyless", ours_cmd), ("plain", plain_cmd)]
            order = pair if r % 2 == 0 else pair[::-1]
            results = {name: _timed(cmd) for name, cmd in order}
            same = _check(results["copyless"][1], results["plain"][1], frames)
            ours_fps.append(frames / results["copyless"][0])
            plain_fps.append(frames / results["plain"][0])
            ratios.append(ours_fps[-1] / plain_fps[-1])
            print(f"round {r}: copyless {ours_fps[-1]:.1f} frames/s, plain {plain_fps[-1]:.1f} "
                  f"frames/s ({ratios[-1]:.2f}x), same top-1 on {same:.0%}")  # fmt: skip
    ours, theirs = statistics.median(ours_fps), statistics.median(plain_fps)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    print(f"video: copyless {ours:.1f} frames/s, plain {theirs:.1f} frames/s, "
          f"ratio {statistics.median(ratios):.2f}x (median of the paired rounds)")  # fmt: skip


if __name__ == "__main__":
    main()
