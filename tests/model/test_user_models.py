"""Users' own models, each exported as its users export it (tests/user_models.py), compiled
with their preprocessing folded into an RGBx input and checked against their reference:
torch itself for torchvision's, ultralytics' own predict for the YOLOs
(tests/apps/test_yolo_peer.py). One row each of docs/guides/your-model.md's table.

The reference and copyless see the same pixels: the photo is prepared once (uint8 RGB at the
model's input size) and given to torch as float ``pixels / 255`` (normalised as the model
expects), to copyless as RGBx bytes (normalisation in the graph)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import copyless as cl
from copyless.model import compile_model, task_of
from user_models import MODELS, export, matched, need_torch, photos, torchvision_model

pytestmark = pytest.mark.slow

_IMAGENET = ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375))
#: the normalisation each model's users give it: ImageNet's for torchvision's classifiers
#: and segmenters; torchvision's detectors take 0..1 pixels (their transform normalises)
_PIXELS = ((0.0, 0.0, 0.0), (255.0, 255.0, 255.0))


def normalisation(name: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    return _PIXELS if MODELS[name].task == "detect" else _IMAGENET


def compiled(name: str, folder: Path) -> Path:
    """``name`` compiled with its normalisation folded into an RGBx uint8 input."""
    mean, std = normalisation(name)
    extra: dict[str, object] = {"task": MODELS[name].task}  # a segmenter: its argmax folded in
    if name.startswith("yolo"):
        extra["score_threshold"] = 0.1
    return compile_model(export(name), folder / f"{name}.rai", input_format="rgbx", mean=mean,
                         std=std, **extra)  # fmt: skip


def frames(name: str) -> list[np.ndarray]:
    """The real photos resized to the model's input: uint8 [H, W, 3]."""
    h, w = MODELS[name].size
    return [np.asarray(Image.fromarray(p).resize((w, h), Image.BILINEAR)) for p in
            photos().values()]  # fmt: skip


def run_copyless(model: Path, frame: np.ndarray, runner_type: cl.RunnerType
                 ) -> dict[str, np.ndarray]:  # fmt: skip
    """The outputs (produced rows only) of ``model`` on one RGB frame, by name."""
    with cl.RunnerFactory.create_runner(model, runner_type=runner_type) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        outs = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        x = runner.allocate_npu_tensor(i)
        x.numpy()[0, :, :, :3] = frame
        ys = [runner.allocate_npu_tensor(o) for o in outs]
        assert runner.execute([[x]], [ys]) is cl.StatusCode.SUCCESS
        result = {}
        for info, y in zip(outs, ys, strict=True):
            shape = y.produced_shape or info.shape
            result[info.name] = y.numpy().reshape(-1)[: int(np.prod(shape))].reshape(shape).copy()
        return result


def run_torch(name: str, frame: np.ndarray) -> object:
    torch = need_torch()
    mean, std = normalisation(name)
    x = (frame.astype(np.float32) - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    tensor = torch.from_numpy(x.transpose(2, 0, 1).copy())
    with torch.no_grad():
        if MODELS[name].task == "detect":
            return torchvision_model(name)([tensor])[0]
        return torchvision_model(name)(tensor[None])


ENGINES = [cl.RunnerType.ONNXRUNTIME, cl.RunnerType.OPENVINO]
TORCHVISION = [n for n in MODELS if not n.startswith("yolo")]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("user-models")


@pytest.mark.parametrize("name", TORCHVISION)
def test_a_torchvision_export_compiles_with_its_task_recorded(name: str, folder: Path) -> None:
    spec = MODELS[name]
    record = task_of(compiled(name, folder))
    assert record.task == spec.task
    assert record.batch_added is (not spec.batched)
    expected = {"classify": "logits", "segment": "mask", "detect": "decoded"}[spec.task]
    assert record.head == expected
    assert record.preprocessing.normalization == "graph" and not record.preprocessing.missing()


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name.lower())
@pytest.mark.parametrize("name", TORCHVISION)
def test_a_torchvision_model_matches_torch(name: str, engine: cl.RunnerType,
                                           folder: Path) -> None:  # fmt: skip
    spec = MODELS[name]
    model = compiled(name, folder)
    if engine is cl.RunnerType.OPENVINO and spec.task == "detect":
        pytest.skip("torchvision's detection exports: OpenVINO refuses their run-time Tile "
                    "(copyless says so and runs them on onnxruntime)")
    for frame in frames(name):
        ours = run_copyless(model, frame, engine)
        ref = run_torch(name, frame)
        if spec.task == "classify":
            logits = ref.numpy()  # type: ignore[attr-defined]
            got = ours["logits"]
            assert got.argmax() == logits.argmax()
            assert np.abs(got - logits).max() <= 2e-3 * max(1.0, float(np.abs(logits).max()))
        elif spec.task == "segment":
            want = ref["out"].numpy()[0].argmax(0)  # type: ignore[index]
            assert (ours["mask"][0] == want).mean() >= 0.995
        else:
            boxes = ref["boxes"].numpy()  # type: ignore[index]
            labels = ref["labels"].numpy()  # type: ignore[index]
            assert len(boxes) > 0 and abs(len(ours["boxes"]) - len(boxes)) <= 0.02 * len(boxes)
            assert matched(boxes, labels, ours["boxes"], ours["labels"]) >= 0.95
