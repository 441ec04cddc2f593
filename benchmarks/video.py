"""Video classification, frames/s: ``copyless-video`` against the plain PyAV + PIL + numpy +
onnxruntime loop a user would write, both as whole processes, interleaved.

The clip is encoded once from real photos (H.264, ``--size``, ``--frames`` frames: chelsea
then coffee). Both sides classify every frame with EfficientNet-Lite0 (the zoo's ONNX model;
copyless runs it compiled for RGBx input, the default of ``copyless-video``) and print one
line per frame:

* plain: ``container.decode`` (FFmpeg threads on, as for copyless) -> ``to_ndarray(format=
  "rgb24")`` -> PIL resize short side 256 + centre crop 224 -> numpy ``(x - 127) / 128`` and
  NCHW -> ``InferenceSession.run`` -> top-1.
* copyless: ``copyless-video -i CLIP`` (each frame's planes written into the input by
  ``vision.classify_frame``: the plain loop's pixels, one C pass; normalisation in the graph;
  async slots overlap decode and inference).

Timing: each round starts one process of each (alternating which goes first) and takes its
wall time from start to exit, start-up and model loading included; frames/s = frames / wall.
The ratio is the median over rounds of each round's copyless / plain (the two processes of
a round ran back to back, so load that drifts on a shared machine cancels best there).
Both compiled/exported models are built and cached before the first round. The per-frame
labels of both must agree (same top-1 on at least 95% of frames, the scene's label on every
frame of copyless) or the run fails.

With ``--streams N`` (N > 1) copyless is one ``copyless-video -i CLIP`` x N process (one
runner, frames batched across the streams: ``--batch``, ``--batch-wait``), against the better
of the two plain arrangements, each timed in the same round: N plain processes side by side
(wall time until the last ends) and one plain process taking the N streams in turn (frame 0
of each stream, then frame 1...). frames/s counts every stream's frames; the per-stream
decode-to-result p50/p99 are copyless's closing lines (medians over the rounds).

``--tuned`` adds N plain processes tuned by hand (one onnxruntime thread each, spinning off)
side by side, among the plain arrangements the ratio takes the best of; ``--before SRC``
times another source tree's copyless-video (an earlier commit's worktree, C extensions
built in place) in the same rounds: both print the median ratio of the paired rounds.

After the rounds (``--no-limits`` to skip), each stage alone on the same frames: the decode,
the preprocess (``vision.classify_frame``) and the engine at the app's ``--slots`` jobs in
flight; the slowest is the limit, and copyless-video's pace is given against it.

``--precision int8|fastest`` runs copyless-video on the zoo's EfficientNet-Lite0 compiled
at that precision (``-m``; calibrated on real photos, cached: see ``_app_precision``) against
the same plain fp32 arrangements. The gate becomes what INT8 is allowed to change: every
frame present, in order, on each side, and at least :data:`REDUCED_FLOOR` of them agreeing
(less means a broken pipeline, not a precision); the agreement with the plain fp32 top-1
(all frames, and those fp32 is sure of) is printed beside the speed, in every mode.

Run: ``python benchmarks/video.py [--frames 300] [--size 480x640] [--rounds 5] [--streams N]
[--batch B] [--batch-wait MS] [--runner openvino] [--slots N] [--tuned] [--before SRC]
[--precision fp32|int8|fastest [--max-drop PCT]] [--quick]``
The last lines are one per side and the ratio: ``video copyless (P): N frames/s; top-1 as
the plain fp32 on ...``, ``video plain fp32: M frames/s (...)``, ``video: copyless P N
frames/s, plain fp32 M frames/s, ratio R.RRx ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _app_precision import Agreement

SCENES = ("chelsea", "coffee")
#: at a reduced precision, the least share of frames whose top-1 must be the plain fp32's
REDUCED_FLOOR = 0.8
#: the plain arrangements the ratio takes the best of (each timed in the same round)
PLAINS = ("plain", "plain side by side", "plain tuned side by side")


def _limits(clip: str, streams: int, runner: str, slots: int, compiled: Path | None
            ) -> dict[str, float]:  # fmt: skip
    """Frames/s of each stage alone on the same frames (``streams`` x the clip): the decode
    (PyAV, FFmpeg's threads, every stream in turn), the preprocess (``vision.classify_frame``
    of each decoded frame into one RGBx tensor) and the engine alone at the app's concurrency
    (a Pipeline over blank tensors whose prepare and finish do nothing: copyless-video's
    model (``compiled``, or its built-in one), runner and ``--slots``, its jobs overlapped as
    the app's are)."""
    import av

    import copyless as cl
    from copyless import vision
    from copyless.apps.builtins import CLASSIFIER, builtin_model, video_engine

    alone: dict[str, float] = {}
    frames = []
    began = time.perf_counter()
    for _ in range(streams):
        with av.open(clip) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            frames.extend(container.decode(stream))
    alone["decode"] = len(frames) / (time.perf_counter() - began)
    options, kind = video_engine(runner, slots)  # the app's options
    path = compiled or builtin_model(CLASSIFIER, progress=False)
    with cl.RunnerFactory.create_runner(path, options, kind) as model:
        info = model.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)[0]
        tensor = model.allocate_npu_tensor(info)
        planes = [_plane_views(frame) for frame in frames]  # PyAV's planes, no copy
        began = time.perf_counter()
        for each in planes:
            vision.classify_frame(each, tensor)
        alone["preprocess"] = len(frames) / (time.perf_counter() - began)
        pipeline = cl.Pipeline(model, lambda item, inputs: None, lambda item, outputs: None,
                               slots=slots)  # fmt: skip
        with pipeline:
            for _ in pipeline.map(range(20)):  # the engines started, as the app's warm-up
                pass
            began = time.perf_counter()
            done = sum(1 for result in pipeline.map(range(len(frames))) if result.ok)
            alone[f"engine ({slots} jobs in flight)"] = done / (time.perf_counter() - began)
    return alone


def _plane_views(frame: Any) -> list[Any]:
    """A yuv420p frame's three planes as uint8 arrays over PyAV's memory (padded lines cut)."""
    import numpy as np

    h, w = frame.height, frame.width
    sizes = [(h, w), ((h + 1) // 2, (w + 1) // 2), ((h + 1) // 2, (w + 1) // 2)]
    return [np.frombuffer(p, np.uint8).reshape(-1, p.line_size)[:rows, :cols]
            for p, (rows, cols) in zip(frame.planes, sizes, strict=True)]  # fmt: skip


def plain(model: str, labels_json: str, *clips: str, tuned: bool = False) -> None:
    """The loop a user writes without copyless (run in its own process, copyless not
    imported); several clips are taken in turn, a frame of each. ``tuned``: onnxruntime set
    by hand for N such processes side by side (one intra-op thread, no spinning)."""
    import av
    import numpy as np
    import onnxruntime as ort
    from PIL import Image

    settings = ort.SessionOptions()
    if tuned:
        settings.intra_op_num_threads = 1
        settings.inter_op_num_threads = 1
        settings.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model, settings, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    labels = json.loads(Path(labels_json).read_text())
    containers = [av.open(clip) for clip in clips]
    decoders = []
    for container in containers:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        decoders.append(container.decode(stream))
    index, live = 0, list(range(len(decoders)))
    while live:
        for s in list(live):
            frame = next(decoders[s], None)
            if frame is None:
                live.remove(s)
                continue
            prefix = f"stream {s} " if len(clips) > 1 else ""
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
            print(f"{prefix}frame {index}: {top1} {labels[top1]} {prob:.3f}")
        index += 1
    for container in containers:
        container.close()


def _timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{command[:3]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, done.stdout


def _side_by_side(command: list[str], count: int) -> tuple[float, str]:
    """``count`` copies of ``command`` started together; the wall time until the last ends,
    their outputs as streams 0.. of one output."""
    start = time.perf_counter()
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(count)]  # fmt: skip
    outputs = [proc.communicate() for proc in procs]
    wall = time.perf_counter() - start
    lines = []
    for s, (proc, (out, err)) in enumerate(zip(procs, outputs, strict=True)):
        if proc.returncode != 0:
            raise SystemExit(f"{command[:3]} failed ({proc.returncode}):\n{err[-2000:]}")
        lines += [f"stream {s} {line}" for line in out.splitlines() if line.startswith("frame ")]
    return wall, "\n".join(lines)


def _per_stream(out: str, streams: int) -> dict[tuple[int, int], tuple[int, float]]:
    """(top-1 class id, its probability) per (stream, frame) from either side's frame lines
    (``[stream S ]frame N: ID LABEL P``; a label may hold spaces, P is the last word)."""
    found: dict[tuple[int, int], tuple[int, float]] = {}
    for line in out.splitlines():
        words = line.split()
        if streams > 1 and line.startswith("stream ") and words[2] == "frame":
            key, rest = (int(words[1]), int(words[3].rstrip(":"))), words[4:]
        elif streams == 1 and line.startswith("frame "):
            key, rest = (0, int(words[1].rstrip(":"))), words[2:]
        else:
            continue
        found[key] = (int(rest[0]), float(rest[-1]))
    return found


def _check(copyless: str, plain_out: str, frames: int, streams: int, strict: bool
           ) -> tuple[Agreement, int]:  # fmt: skip
    """copyless's frames against a plain fp32 run's: every frame on both sides, then
    (``strict``, fp32) the scene's label on every copyless frame and the same top-1 on 95%
    of frames, or (a reduced precision) the same top-1 on :data:`REDUCED_FLOOR` of them.
    Returns the agreement and the copyless frames off their scene's labels."""
    from _app_precision import Agreement
    from video_helpers import EXPECTED

    ours, theirs = _per_stream(copyless, streams), _per_stream(plain_out, streams)
    per_scene = frames // len(SCENES)
    for s in range(streams):
        have = (sum(key[0] == s for key in ours), sum(key[0] == s for key in theirs))
        if have != (frames, frames):
            raise SystemExit(f"stream {s} frame lines: copyless {have[0]}, plain {have[1]}, "
                             f"want {frames}")  # fmt: skip
    off = sorted(key for key, (c, _) in ours.items()
                 if c not in EXPECTED[SCENES[key[1] // per_scene]])  # fmt: skip
    if off and strict:
        raise SystemExit(f"copyless labels wrong on (stream, frame) {off[:10]}")
    agree = Agreement.of({key: c for key, (c, _) in ours.items()}, theirs)
    if agree.share < (0.95 if strict else REDUCED_FLOOR):
        raise SystemExit(f"copyless and plain agree on only {agree.share:.0%} of frames")
    return agree, len(off)


def _latencies(out: str) -> list[tuple[float, float]]:
    """(p50, p99) ms per stream from copyless-video's closing lines."""
    found = re.findall(r"^stream \d+: .* latency p50 ([\d.]+) ms p99 ([\d.]+) ms", out, re.M)
    return [(float(a), float(b)) for a, b in found]



def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--size", default="480x640", help="HxW of the clip")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", type=int, default=1, help="streams on one copyless runner")
    parser.add_argument("--batch", type=int, help="copyless-video --batch")
    parser.add_argument("--batch-wait", type=float, help="copyless-video --batch-wait (ms)")
    parser.add_argument("--runner", default="onnxruntime",
                        choices=["onnxruntime", "openvino", "vaiml"])
    parser.add_argument("--slots", type=int, default=2, help="copyless-video --slots")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "int8", "fastest"],
                        help="copyless's classifier: the built-in fp32 one, or the zoo's "
                        "compiled at this precision (calibrated on real photos, cached); "
                        "the plain peers stay fp32")  # fmt: skip
    parser.add_argument("--max-drop", type=float, metavar="PCT", help="with --precision int8: "
                        "accuracy control (points of top-1 agreement with fp32)")
    parser.add_argument("--calibration", type=int, default=128, metavar="N", help="with "
                        "--precision int8|fastest: calibration photos (seeded variants of "
                        "real photos)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="100 frames, 3 rounds")
    parser.add_argument("--limits", action=argparse.BooleanOptionalAction, default=True,
                        help="after the rounds, time each stage alone on the same frames "
                        "(decode, preprocess, the engine at --slots jobs): the limit")
    parser.add_argument("--tuned", action="store_true", help="with --streams N: also N plain "
                        "processes tuned by hand (one onnxruntime thread each, no spinning)")
    parser.add_argument("--before", metavar="SRC", help="also time the copyless-video of "
                        "another source tree (its src/ folder, C extensions built in place) "
                        "in the same rounds, e.g. a worktree of an earlier commit")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the figures "
                        "as a benchmark record (docs/benchmarks/data's format: command, date, "
                        "machine, load, rows)")  # fmt: skip
    parser.add_argument("--plain", nargs="+", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--plain-tuned", nargs="+", metavar="PATH", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    if args.plain or args.plain_tuned:
        plain(*(args.plain or args.plain_tuned), tuned=bool(args.plain_tuned))
        return
    if args.max_drop is not None and args.precision == "fp32":
        parser.error("--max-drop needs --precision int8 or fastest")
    # the plain process runs this file too: it must not pay for these imports
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _app_precision import classifier, record_line
    from _bytecode import compile_trees
    from copyless.model import zoo

    compile_trees(str(Path(zoo.__file__).parents[2]), *([args.before] if args.before else []))
    from video_helpers import make_clip

    model = str(zoo.build("efficientnet-lite0", progress=False))
    # the reduced model for the app's batch (a compiled model runs at its own batch size)
    reduced = classifier(args.precision, batch_size=args.batch or 1, max_drop=args.max_drop,
                         calibration=args.calibration)  # fmt: skip
    print(record_line(reduced))
    if args.quick:
        args.frames, args.rounds = 100, 3
    height, width = (int(v) for v in args.size.lower().split("x"))
    per_scene = args.frames // len(SCENES)
    n = args.streams
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        clip = str(make_clip(Path(tmp) / "clip.mp4", height, width, per_scene, SCENES))
        frames = per_scene * len(SCENES)
        ours_cmd = [sys.executable, "-m", "copyless.apps.video", *(["-i", clip] * n),
                    "--runner", args.runner, "--slots", str(args.slots)]  # fmt: skip
        if reduced is not None:
            ours_cmd += ["-m", str(reduced)]
        if args.batch is not None:
            ours_cmd += ["--batch", str(args.batch)]
        if args.batch_wait is not None:
            ours_cmd += ["--batch-wait", str(args.batch_wait)]
        labels = Path(tmp) / "labels.json"
        labels.write_text(json.dumps(zoo.labels()))
        plain_one = [sys.executable, __file__, "--plain", model, str(labels), clip]
        plain_tuned = [sys.executable, __file__, "--plain-tuned", model, str(labels), clip]
        commands = {"copyless": ours_cmd, "plain": [*plain_one, *([clip] * (n - 1))],
                    "plain one": plain_one, "plain tuned": plain_tuned}  # fmt: skip
        _timed([*ours_cmd, "-n", "2"])  # builds and caches the compiled model
        _timed(plain_one)
        options = " ".join(ours_cmd[ours_cmd.index("--runner") :])
        print(f"clip {width}x{height}, {frames} frames x {n} streams, copyless-video {options}; "
              f"load {os.getloadavg()[0]:.2f}")  # fmt: skip
        run = _rounds(args, commands, frames)
        # each stage alone on the rounds' own clip (its folder still open)
        alone = _limits(clip, n, args.runner, args.slots, reduced) if args.limits else {}
    load = f"{load_before:.2f} -> {os.getloadavg()[0]:.2f}"
    _summary(args, run, frames, alone, load)


class _Run:
    """The rounds' figures: frames/s of copyless and of the best plain arrangement of each
    round (and which it was), their ratios, copyless's agreement with the plain fp32 and
    its frames off their scene's labels, latencies, and the other ratios (``--tuned``,
    ``--before``) by name. (A plain class: tests load this file without registering it as
    a module, which a dataclass needs.)"""

    def __init__(self, extra: list[str]) -> None:
        self.ours_fps: list[float] = []
        self.plain_fps: list[float] = []
        self.best: list[str] = []
        self.ratios: list[float] = []
        self.agreements: list[Agreement] = []
        self.off_scene: list[int] = []
        self.latencies: list[list[tuple[float, float]]] = []
        self.extra: dict[str, list[float]] = {name: [] for name in extra}


def _rounds(args: argparse.Namespace, commands: dict[str, list[str]], frames: int) -> _Run:
    """``args.rounds`` rounds of every contender, the order reversed every other round."""
    n, strict = args.streams, args.precision == "fp32"
    before_env = None
    if args.before:
        before_env = {**os.environ, "PYTHONPATH": str(Path(args.before).resolve())}
        _timed([*commands["copyless"], "-n", "2"], before_env)  # its own compiled model
    run = _Run(extra=["plain tuned side by side", "copyless before"])
    for r in range(args.rounds):
        pair = [("copyless", lambda: _timed(commands["copyless"])),
                ("plain", lambda: _timed(commands["plain"]))]  # fmt: skip
        if n > 1:
            pair.append(("plain side by side", lambda: _side_by_side(commands["plain one"], n)))
        if n > 1 and args.tuned:
            pair.append(("plain tuned side by side",
                         lambda: _side_by_side(commands["plain tuned"], n)))  # fmt: skip
        if before_env is not None:
            pair.append(("copyless before", lambda: _timed(commands["copyless"], before_env)))
        order = pair if r % 2 == 0 else pair[::-1]
        results = {name: go() for name, go in order}
        agree, off = _check(results["copyless"][1], results["plain"][1], frames, n, strict)
        run.agreements.append(agree)
        run.off_scene.append(off)
        for name in results:  # the other plain arrangements: the same fp32 labels
            if name in PLAINS and name != "plain":
                _check(results["plain"][1], results[name][1], frames, n, strict=False)
        run.latencies.append(_latencies(results["copyless"][1]))
        total = frames * n
        run.ours_fps.append(total / results["copyless"][0])
        for name in run.extra:
            if name in results:
                run.extra[name].append(run.ours_fps[-1] / (total / results[name][0]))
        plains = {name: total / wall for name, (wall, _) in results.items() if name in PLAINS}
        run.best.append(max(plains, key=lambda k: plains[k]))
        run.plain_fps.append(plains[run.best[-1]])
        run.ratios.append(run.ours_fps[-1] / run.plain_fps[-1])
        shown = ", ".join(f"{k} {total / wall:.1f} frames/s" for k, (wall, _) in results.items()
                          if k != "copyless")  # fmt: skip
        print(f"round {r}: copyless {ours_label(args)} {run.ours_fps[-1]:.1f} frames/s, {shown} "
              f"({run.ratios[-1]:.2f}x the best plain), same top-1 as plain on "
              f"{agree.share:.1%}")  # fmt: skip
    return run


def ours_label(args: argparse.Namespace) -> str:
    """copyless's precision as the lines name it (with ``--max-drop``, the drop allowed)."""
    drop = "" if args.max_drop is None else f", max drop {args.max_drop}"
    return f"{args.precision}{drop}"


def _summary(args: argparse.Namespace, run: _Run, frames: int, alone: dict[str, float],
             load: str) -> None:  # fmt: skip
    """The closing lines: the other ratios, latencies, the stages' limit, then one line per
    side and the ratio."""
    from _app_precision import worst

    for name, values in run.extra.items():
        if values:
            print(f"copyless / {name}: {statistics.median(values):.2f}x (median of the "
                  f"paired rounds; {', '.join(f'{v:.2f}' for v in values)})")  # fmt: skip
    n = args.streams
    for s in range(n):
        p50 = statistics.median(lat[s][0] for lat in run.latencies)
        p99 = statistics.median(lat[s][1] for lat in run.latencies)
        print(f"stream {s}: latency p50 {p50:.1f} ms, p99 {p99:.1f} ms (medians of the rounds)")
    ours, theirs = statistics.median(run.ours_fps), statistics.median(run.plain_fps)
    if alone:
        slowest = min(alone, key=lambda k: alone[k])
        print("each stage alone, frames/s: " + ", ".join(f"{k} {v:.1f}" for k, v in alone.items())
              + f"; limit: {slowest}; copyless-video runs at {ours / alone[slowest]:.2f}x the "
              "limit's pace")  # fmt: skip
    print(f"load after: {load.split(' -> ')[-1]}")
    agree, ratio = worst(run.agreements), statistics.median(run.ratios)
    off = f"; {max(run.off_scene)} frames off their scene's labels" if max(run.off_scene) else ""
    best = ", ".join(f"{name} in {run.best.count(name)}" for name in PLAINS if name in run.best)
    what = f"{frames} frames x {n} stream(s)"
    print(f"video copyless ({ours_label(args)}): {ours:.1f} frames/s; "
          f"{agree.line('frames')}{off}")  # fmt: skip
    print(f"video plain fp32: {theirs:.1f} frames/s (the best plain arrangement of each round: "
          f"{best} of {len(run.best)})")  # fmt: skip
    print(f"video: copyless {args.precision} {ours:.1f} frames/s, plain fp32 {theirs:.1f} "
          f"frames/s, ratio {ratio:.2f}x (median of the paired rounds) at "
          f"{100 * agree.share:.1f}% top-1 agreement, {what}")  # fmt: skip
    if args.json:
        _write_record(args.json, what, ours, theirs, run.ratios, load,
                      precision=ours_label(args), agreement=agree)  # fmt: skip


def _write_record(path: Path, clip: str, ours: float, theirs: float, ratios: list[float],
                  load: str, *, precision: str = "fp32", agreement: Agreement | None = None
                  ) -> None:  # fmt: skip
    """The run as one record of docs/benchmarks/data (see docs/hooks/benchmarks.py); with
    ``agreement``, copyless's precision and its agreement with the plain fp32 as columns."""
    from copyless.apps.bench.report import machine

    facts = machine()
    record = {
        "title": "Video: copyless-video against the PyAV + PIL + onnxruntime loop",
        "benchmark": "video",
        "command": " ".join(["python benchmarks/video.py", *sys.argv[1:]]),
        "date": facts["date"][:10],
        "machine": facts,
        "load": load,
        "source": "benchmarks/video.py --json",
        "rows": [{"clip": clip, "copyless frames/s": round(ours, 1),
                  "plain frames/s": round(theirs, 1),
                  "ratio": round(statistics.median(ratios), 2),
                  "rounds": f"{min(ratios):.2f}-{max(ratios):.2f}x"}],
    }  # fmt: skip
    if agreement is not None:
        record["rows"] = [{"copyless precision": precision, **record["rows"][0],
                           **agreement.figures()}]  # fmt: skip
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
