"""``--device cuda`` in the apps: one clear line where there is no GPU, real runs on one."""

from __future__ import annotations

import re

import pytest

from copyless.apps import detect, infer_async, zerocopy
from copyless.apps._models import builtin_classifier
from copyless.model import zoo
from cuda_helpers import CUDA_MISSING, requires_cuda

CAT_CLASSES = {281, 282, 285}


def _runs(tmp_path) -> dict[str, tuple]:
    page, model = str(zoo.photo_path("page")), str(builtin_classifier(progress=False))
    return {
        "zerocopy": (zerocopy.main, ["-i", str(zoo.photo_path("chelsea.jpg"))]),
        "detect": (detect.main, ["-i", page, "-o", str(tmp_path / "b.png")]),
        "infer-async": (infer_async.main, ["--model-path", model, "--dry-run"]),
    }


@pytest.mark.skipif(CUDA_MISSING is None, reason="a GPU is usable here")
@pytest.mark.parametrize("app", ["zerocopy", "detect", "infer-async"])
def test_device_cuda_without_a_gpu_is_one_line_and_exit_2(tmp_path, capsys, app) -> None:
    main, argv = _runs(tmp_path)[app]
    assert main([*argv, "--device", "cuda"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {CUDA_MISSING}\n"  # one line, no traceback
    assert captured.out == ""


@pytest.mark.cuda
@requires_cuda
def test_zerocopy_and_detect_preprocess_on_the_gpu(tmp_path, capsys) -> None:
    photo = str(zoo.photo_path("chelsea.jpg"))
    assert zerocopy.main(["-i", photo, "-n", "3", "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    top1 = re.search(r"^top-1: (\d+) ", out, re.M)
    assert top1 is not None and int(top1.group(1)) in CAT_CLASSES
    assert re.search(r"^infer {19}\d+\.\d{3} ms / frame$", out, re.M)
    png = tmp_path / "boxes.png"
    assert detect.main(["-i", str(zoo.photo_path("page")), "-o", str(png), "--device", "cuda"]) == 0
    count = re.search(r"^text boxes: (\d+)$", capsys.readouterr().out, re.M)
    assert count is not None and int(count.group(1)) >= 5 and png.is_file()


@pytest.mark.cuda
@requires_cuda
def test_infer_async_on_the_gpu(capsys) -> None:
    model = str(builtin_classifier(progress=False))
    argv = ["--model-path", model, "--dry-run", "-n", "8", "--benchmark", "--device", "cuda"]
    assert infer_async.main(argv) == 0
    out = capsys.readouterr().out
    assert "Batches completed: 8 / 8" in out and "[INFO] sync infer pass" in out
