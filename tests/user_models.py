"""Users' own models, exported as their users export them (imported by basename).

torchvision architectures with ``weights=None`` through ``torch.onnx.export`` (opset 17, the
TorchScript exporter), ultralytics' YOLOv8n / YOLO11n built from their yaml (random weights,
no download) through ``model.export(format="onnx")``. Each export is made once per machine
and cached under the user cache root's ``exports/`` (shared with the test sessions, see
tests/conftest.py), keyed by the package versions. Small input sizes where the architecture
allows (CI has two cores); torchvision's 320 detectors keep their 320.

Random weights give degenerate outputs, so two changes a trained model would not need:
Faster R-CNN keeps boxes of any score (``box_score_thresh=0``: a random 91-class softmax is
~0.011, under its 0.05), the torchvision detectors' class logits are spread, and the YOLOs'
batch-norm statistics are measured on real photos and
their class logits spread (``_spread_yolo``), else every anchor scores the same 0.00016.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from copyless.model import zoo
from copyless.model.zoo._cache import cached_file

#: ultralytics must never reach the network (no settings sync, no pip installs)
YOLO_ENV = {"YOLO_OFFLINE": "1", "YOLO_AUTOINSTALL": "false", "YOLO_VERBOSE": "false"}


@dataclass(frozen=True, slots=True)
class UserModel:
    """One row of docs/guides/your-model.md's table."""

    name: str
    task: str
    size: tuple[int, int]  # the exported input's (H, W)
    outputs: tuple[str, ...]
    batched: bool = True  # False: torchvision's [3, H, W] detection export


MODELS: dict[str, UserModel] = {
    m.name: m
    for m in (
        UserModel("resnet18", "classify", (96, 96), ("logits",)),
        UserModel("mobilenet_v3_small", "classify", (96, 96), ("logits",)),
        UserModel("vit_b_16", "classify", (64, 64), ("logits",)),
        UserModel("lraspp_mobilenet_v3_large", "segment", (128, 128), ("out",)),
        UserModel("deeplabv3_mobilenet_v3_large", "segment", (128, 128), ("out",)),
        UserModel("ssdlite320_mobilenet_v3_large", "detect", (320, 320),
                  ("boxes", "scores", "labels"), batched=False),
        UserModel("fasterrcnn_mobilenet_v3_large_320_fpn", "detect", (320, 320),
                  ("boxes", "labels", "scores"), batched=False),
        UserModel("yolov8n", "detect", (320, 320), ("output0",)),
        UserModel("yolo11n", "detect", (320, 320), ("output0",)),
    )
}  # fmt: skip


def need_torch() -> Any:
    """torch, or the test is skipped (the test extra installs it on x86_64)."""
    return pytest.importorskip("torch")


def ultralytics_version() -> str:
    """ultralytics' version (never imported in the test process: see :func:`_yolo`); the
    test is skipped when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version("ultralytics")
    except metadata.PackageNotFoundError:
        pytest.skip("needs ultralytics (the test extra)")
        raise  # pytest.skip raises: for the type checker


def exports_root() -> Path:
    return zoo.cache_root() / "exports"


def export(name: str) -> Path:
    """The ONNX file of model ``name`` (exported once per machine, then a cache hit)."""
    torch = need_torch()
    spec = MODELS[name]
    if name.startswith("yolo"):
        version = f"u{ultralytics_version()}-t{torch.__version__}"
    else:
        torchvision = pytest.importorskip("torchvision")
        version = f"tv{torchvision.__version__}-t{torch.__version__}"
    h, w = spec.size
    path = exports_root() / f"{name}-{h}x{w}-{version}-v4.onnx".replace("+", "_")
    maker = _yolo if name.startswith("yolo") else _torchvision
    cached_file(path, lambda: maker(spec))
    return path


def _torchvision(spec: UserModel) -> bytes:
    torch = need_torch()
    model = torchvision_model(spec.name)
    h, w = spec.size
    args = (torch.rand(1, 3, h, w),) if spec.batched else ([torch.rand(3, h, w)],)
    with _temporary(".onnx") as out, _quiet_warnings():
        torch.onnx.export(model, args, str(out), input_names=["images"],
                          output_names=list(spec.outputs), opset_version=17,
                          dynamo=False)  # fmt: skip
        return out.read_bytes()


def torchvision_model(name: str) -> Any:
    """The torchvision module :func:`export` exports (seeded: the same weights each time).

    The detectors' class logits are spread (x3): a random 91-class softmax gives every box
    about 1/91, and which 300 of thousands of equal scores survive is then up to rounding;
    a trained model's scores are distinct."""
    torch = need_torch()
    from torchvision import models
    from torchvision.models import detection, segmentation

    torch.manual_seed(0)
    spec = MODELS[name]
    if spec.task == "classify":
        kwargs = {"image_size": spec.size[0]} if name == "vit_b_16" else {}
        return getattr(models, name)(weights=None, **kwargs).eval()
    if spec.task == "segment":
        return getattr(segmentation, name)(weights=None, weights_backbone=None).eval()
    extra = {"box_score_thresh": 0.0} if name.startswith("fasterrcnn") else {}
    model = getattr(detection, name)(weights=None, weights_backbone=None, **extra).eval()
    _measure_batch_norms(model, [_tensor(p, spec.size) for p in photos().values()])
    with torch.no_grad():
        if name.startswith("fasterrcnn"):
            model.roi_heads.box_predictor.cls_score.weight.mul_(3.0)
        else:
            for module in model.head.classification_head.modules():
                if isinstance(module, torch.nn.Conv2d) and module.out_channels % 91 == 0:
                    module.weight.mul_(3.0)
    return model


def _tensor(photo: np.ndarray, size: tuple[int, int]) -> Any:
    """A photo as torch's float [3, H, W] in 0..1 at ``size``."""
    torch = need_torch()
    from PIL import Image

    pixels = np.asarray(Image.fromarray(photo).resize(size[::-1], Image.BILINEAR))
    return torch.from_numpy(pixels.transpose(2, 0, 1).astype(np.float32) / 255)


def _measure_batch_norms(model: Any, images: list[Any]) -> None:
    """Set every batch norm's statistics from ``images`` (the model stays in eval mode):
    random init leaves SSDLite's features near zero, so every box scores exactly 1/91."""
    torch = need_torch()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for norm in norms:
        norm.train()
        norm.momentum = None
    with torch.no_grad(), _quiet_warnings():
        model(images)
    for norm in norms:
        norm.eval()


def _yolo(spec: UserModel) -> bytes:
    """ultralytics' export, in a child process: importing ultralytics patches
    ``PIL.Image.open`` for the whole process (a HEIF opener it tries to pip-install), which
    would change what every later test of this process sees."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "model.onnx"
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                f"import user_models; user_models.yolo_in_child({spec.name!r}, {str(out)!r})")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, **YOLO_ENV}, cwd=folder, check=False)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"ultralytics' export of {spec.name} failed: {done.stderr[-3000:]}")
        return out.read_bytes()


def yolo_in_child(name: str, out: str) -> None:
    """The export itself (run by :func:`_yolo` in its child process)."""
    torch = need_torch()
    spec = MODELS[name]
    with _quiet_warnings():
        from ultralytics import YOLO

        torch.manual_seed(0)
        model = YOLO(f"{spec.name}.yaml")
        _spread_yolo(model.model, spec.size)
        exported = model.export(format="onnx", imgsz=list(spec.size), verbose=False)
        Path(exported).replace(out)


def yolo_predict(onnx_path: Path, photos: list[Path], conf: float, iou: float,
                 side: int) -> list[tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """``YOLO(onnx_path).predict`` on each photo, in a child process (see :func:`_yolo`):
    ``(boxes [n, 4], class ids [n])`` per photo."""
    code = """
import json, sys
from ultralytics import YOLO
model = YOLO(sys.argv[1], task="detect")
for photo in sys.argv[5:]:
    r = model.predict(photo, conf=float(sys.argv[2]), iou=float(sys.argv[3]),
                      imgsz=int(sys.argv[4]), verbose=False)[0]
    print(json.dumps([r.boxes.xyxy.numpy().tolist(), r.boxes.cls.numpy().tolist()]))
"""
    args = [str(onnx_path), str(conf), str(iou), str(side), *map(str, photos)]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, **YOLO_ENV}, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"ultralytics' predict failed: {done.stderr[-3000:]}")
    results = []
    for line in done.stdout.splitlines():
        if line.startswith("["):
            boxes, classes = json.loads(line)
            results.append((np.asarray(boxes, np.float32).reshape(-1, 4),
                            np.asarray(classes, np.int64)))  # fmt: skip
    return results


def _spread_yolo(net: Any, size: tuple[int, int]) -> None:
    """Batch-norm statistics of three real photos (as training would measure them), class
    logits spread around a low bias, box regressions spread: boxes of varied sizes and
    scores (none saturated at 1.0: no ties), from none to about a thousand anchors above 0.1
    per photo."""
    torch = need_torch()
    from PIL import Image

    batch = torch.stack([
        torch.from_numpy(np.array(Image.fromarray(photo).resize(size[::-1]))).permute(2, 0, 1)
        for photo in photos().values()
    ]).float() / 255  # fmt: skip
    net.train()
    for module in net.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None  # the plain average of what it sees
    with torch.no_grad():
        net(batch)
        head = net.model[-1]
        for conv in head.cv3:
            conv[-1].weight.mul_(1.5)
            conv[-1].bias.fill_(-2.5)
        for conv in head.cv2:
            conv[-1].weight.mul_(3.0)
    net.eval()


def photos() -> dict[str, np.ndarray]:
    """Real photos of several sizes (scikit-image's, in its wheel)."""
    from skimage import data

    return {"chelsea": data.chelsea(), "coffee": data.coffee(), "astronaut": data.astronaut()}


@contextlib.contextmanager
def _yolo_env() -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in YOLO_ENV}
    os.environ.update(YOLO_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


yolo_env = _yolo_env


@contextlib.contextmanager
def _temporary(suffix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / f"model{suffix}"


@contextlib.contextmanager
def _quiet_warnings() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` [n, 4] with every box of ``b`` [m, 4] (x0, y0, x1, y1)."""
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    out: np.ndarray = np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0)
    return out


def matched(ref_boxes: np.ndarray, ref_classes: np.ndarray, boxes: np.ndarray,
            classes: np.ndarray, threshold: float = 0.9) -> float:  # fmt: skip
    """The fraction of reference boxes with a box of the same class at IoU >= threshold."""
    if len(ref_boxes) == 0:
        return 1.0 if len(boxes) == 0 else 0.0
    if len(boxes) == 0:
        return 0.0
    overlap = iou(ref_boxes, boxes)
    same = ref_classes[:, None] == classes[None, :]
    return float(((overlap >= threshold) & same).any(axis=1).mean())
