"""End-to-end runs of the reference apps on real photos and real models."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from copyless.apps import detect, infer_async, zerocopy
from copyless.apps._models import builtin_classifier
from copyless.model import zoo

CAT_CLASSES = {281, 282, 285}
BLOCK = [
    r"^preprocess {14}\d+\.\d{3} ms / frame$",
    r"^infer {19}\d+\.\d{3} ms / frame$",
    r"^postprocess {13}\d+\.\d{3} ms / frame$",
    r"^total {19}\d+\.\d{3} ms / frame$",
    r"^throughput \(infer\) {6}\d+\.\d{3} FPS$",
    r"^throughput \(pipeline\) {3}\d+\.\d{3} FPS$",
]


def _top1(out: str) -> int:
    match = re.search(r"^top-1: (\d+) .+ (\d\.\d{3})$", out, re.M)
    assert match, out
    return int(match.group(1))


@pytest.mark.parametrize("mode", [[], ["-c"]], ids=["zero-copy", "non-zero-copy"])
@pytest.mark.parametrize(("photo", "classes"), [("chelsea.jpg", CAT_CLASSES), ("coffee", {967})])
def test_zerocopy_labels_real_photos(capsys, mode, photo, classes) -> None:
    assert zerocopy.main(["-i", str(zoo.photo_path(photo)), "-n", "2", *mode]) == 0
    out = capsys.readouterr().out
    assert _top1(out) in classes
    assert len(re.findall(r"^top-\d: ", out, re.M)) == 5
    lines = out.strip().splitlines()[-6:]
    for pattern, line in zip(BLOCK, lines, strict=True):
        assert re.match(pattern, line), line


def test_zerocopy_console_script_and_errors(tmp_path) -> None:
    exe = Path(sys.executable).with_name("copyless-zerocopy")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "copyless.apps.zerocopy"]
    result = subprocess.run(
        [*command, "-i", str(zoo.photo_path("chelsea.jpg"))],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert _top1(result.stdout) in CAT_CLASSES
    missing = subprocess.run(
        [*command, "-i", str(tmp_path / "none.jpg")], capture_output=True, text=True, check=False
    )
    assert missing.returncode == 2 and "no image" in missing.stderr


def test_zerocopy_rejects_bad_files(tmp_path, capsys) -> None:
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"not a jpeg at all")
    assert zerocopy.main(["-i", str(junk)]) == 2
    assert zerocopy.main(["-i", str(zoo.photo_path("coffee")), "-m", str(tmp_path / "x")]) == 2
    assert "error" in capsys.readouterr().err


def test_infer_async_dry_run_and_benchmark(capsys) -> None:
    model = str(builtin_classifier(progress=False))
    assert infer_async.main(["--model-path", model, "--dry-run", "-n", "6"]) == 0
    assert "Batches completed: 6 / 6" in capsys.readouterr().out
    assert infer_async.main(["--model-path", model, "--dry-run", "-n", "4", "--benchmark"]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^\[INFO\] async infer pass: \d+\.\d{3} ms \(\d+\.\d{3} ms/frame\)$", out, re.M
    )
    assert re.search(
        r"^\[INFO\] sync infer pass: \d+\.\d{3} ms \(\d+\.\d{3} ms/frame\)$", out, re.M
    )
    assert "Batches completed: 4 / 4" in out  # the async pass ran every submission once


def test_infer_async_benchmark_times_its_passes_the_one_way(monkeypatch, capsys) -> None:
    """The two passes go through copyless.types.round_medians (alternating rounds), each
    submission counted once: 7 iterations in 3 rounds are 3 + 2 + 2 per pass."""
    from copyless.types import round_medians

    seen: list[str] = []

    def spy(calls, runs, more, **kw):  # type: ignore[no-untyped-def]
        def logged(key):  # type: ignore[no-untyped-def]
            def call() -> None:
                calls[key]()
                seen.append(key)

            return call

        return round_medians({key: logged(key) for key in calls}, runs, more, **kw)

    monkeypatch.setattr(infer_async, "round_medians", spy)
    model = str(builtin_classifier(progress=False))
    assert infer_async.main(["--model-path", model, "--dry-run", "-n", "7", "--benchmark",
                             "--rounds", "3"]) == 0  # fmt: skip
    assert seen == ["async", "sync", "sync", "async", "async", "sync"]
    assert "Batches completed: 7 / 7" in capsys.readouterr().out


def test_infer_async_input_binary_writes_outputs(tmp_path, monkeypatch, capsys) -> None:
    model = str(builtin_classifier(progress=False))
    with Image.open(zoo.photo_path("chelsea")) as photo:
        image = photo.convert("RGB").resize((224, 224))
    rgbx = np.zeros((1, 224, 224, 4), np.uint8)
    rgbx[0, :, :, :3] = np.asarray(image)
    ifm = tmp_path / "ifm.bin"
    ifm.write_bytes(rgbx.tobytes())
    monkeypatch.chdir(tmp_path)
    assert infer_async.main(["--model-path", model, "--input-binary", str(ifm), "-n", "3"]) == 0
    assert "Batches completed: 3 / 3" in capsys.readouterr().out
    # Named by frame: the last completed submission is the third (frame 2).
    assert sorted(p.name for p in tmp_path.glob("output_*.bin")) == ["output_f2_0.bin"]
    logits = np.fromfile(tmp_path / "output_f2_0.bin", dtype=np.float32)
    assert logits.shape == (1000,) and int(logits.argmax()) in CAT_CLASSES
    # --dry-run with --input-binary (as the seed's sample): random IFM, no file read or written
    assert infer_async.main(["--model-path", model, "--input-binary", str(tmp_path / "none.bin"),
                             "--dry-run", "-n", "2"]) == 0  # fmt: skip
    assert "Batches completed: 2 / 2" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.glob("output_*.bin")) == ["output_f2_0.bin"]
    short = tmp_path / "short.bin"
    short.write_bytes(b"\0" * 1000)
    assert infer_async.main(["--model-path", model, "--input-binary", str(short)]) == 2
    assert "1000 bytes" in capsys.readouterr().err
    assert infer_async.main(["--model-path", str(tmp_path / "none.rai"), "--dry-run"]) == 2


def test_detect_finds_the_text_lines_of_a_page(tmp_path, capsys) -> None:
    out_png = tmp_path / "boxes.png"
    assert detect.main(["-i", str(zoo.photo_path("page")), "-o", str(out_png)]) == 0
    out = capsys.readouterr().out
    count = int(re.search(r"^text boxes: (\d+)$", out, re.M).group(1))  # type: ignore[union-attr]
    assert count >= 5
    with Image.open(out_png) as picture, Image.open(zoo.photo_path("page")) as source:
        assert picture.size == source.size


def test_infer_async_names_each_frame_of_a_batch(tmp_path, monkeypatch, capsys) -> None:
    """Batch 4, 2 submissions: the last one holds frames 4..7, one file per frame, each the
    logits of its own input frame."""
    import onnxruntime as ort

    from copyless.model import compile_model
    from model_helpers import conv_net

    net = conv_net(batch="N")
    model = compile_model(net, tmp_path / "b4.rai", batch_size=4)
    frames = np.random.default_rng(3).standard_normal((4, 3, 16, 16)).astype(np.float32)
    ifm = tmp_path / "ifm.bin"
    ifm.write_bytes(frames.tobytes())
    monkeypatch.chdir(tmp_path)
    assert infer_async.main(["--model-path", str(model), "--input-binary", str(ifm),
                             "-n", "2"]) == 0  # fmt: skip
    session = ort.InferenceSession(net.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"input": frames})[0]
    names = sorted(p.name for p in tmp_path.glob("output_*.bin"))
    assert names == [f"output_f{f}_0.bin" for f in range(4, 8)]
    for b in range(4):
        got = np.fromfile(tmp_path / f"output_f{4 + b}_0.bin", dtype=np.float32)
        np.testing.assert_allclose(got, expected[b], rtol=1e-4, atol=1e-5)


def test_infer_async_host_work_and_argument_errors(capsys) -> None:
    model = str(builtin_classifier(progress=False))
    assert infer_async.main(["--model-path", model, "--dry-run", "-n", "4", "--benchmark",
                             "--host-work-ms", "1"]) == 0  # fmt: skip
    assert "[INFO] sync infer pass" in capsys.readouterr().out
    for bad in (["--model-path", model], ["--model-path", model, "--dry-run", "-n", "0"],
                ["--model-path", model, "--dry-run", "--host-work-ms", "-1"]):  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            infer_async.main(bad)
        assert exit_info.value.code == 2


def test_infer_async_writes_what_a_data_dependent_output_produced(
    tmp_path, monkeypatch, capsys
) -> None:
    """NonZero of x [3, 4]: capacity [2, 12] (derived), the file holds the [2, k] produced."""
    from copyless.model import compile_model
    from model_helpers import nonzero_net, unknown_rank_model, with_nonzeros

    model = compile_model(nonzero_net(), tmp_path / "nz.rai")
    x = np.zeros((3, 4), np.float32)
    expected = with_nonzeros(x, 5, seed=3)
    ifm = tmp_path / "ifm.bin"
    ifm.write_bytes(x.tobytes())
    monkeypatch.chdir(tmp_path)
    assert infer_async.main(["--model-path", str(model), "--input-binary", str(ifm),
                             "-n", "2"]) == 0  # fmt: skip
    assert "Batches completed: 2 / 2" in capsys.readouterr().out
    # the model's batch is 1: the second submission is frame 1
    written = np.fromfile(tmp_path / "output_f1_0.bin", dtype=np.int64)
    np.testing.assert_array_equal(written.reshape(2, -1), expected)  # 80 bytes, not 192
    relu = np.fromfile(tmp_path / "output_f1_1.bin", dtype=np.float32)
    np.testing.assert_array_equal(relu, np.maximum(x, 0).reshape(-1))
    # No bound at all (rank known only at run time): refused with what to do
    unbounded = compile_model(unknown_rank_model(), tmp_path / "unknown.rai")
    assert infer_async.main(["--model-path", str(unbounded), "--dry-run"]) == 2
    assert "--output-capacity" in capsys.readouterr().err


@pytest.mark.parametrize("input_format", ["rgbx_fp16", "rgbx_bf16", "rgbp_fp16", "rgbp"])
def test_zerocopy_takes_every_input_format_the_compiler_writes(
    tmp_path, capsys, input_format
) -> None:
    """Models compiled with --input-format rgbx_fp16|rgbx_bf16|rgbp_fp16|rgbp: the photo is
    preprocessed straight into that format and the cat is found (was: LayoutError)."""
    from copyless.apps import compile as compile_app

    model = tmp_path / f"lite0-{input_format}.rai"
    source = zoo.build("efficientnet-lite0", progress=False)
    argv = [str(source), "-o", str(model), "--input-format", input_format,
            "--mean", "127,127,127", "--std", "128,128,128", "--resize", "crop:0.875"]  # fmt: skip
    assert compile_app.main(argv) == 0
    capsys.readouterr()
    photo = str(zoo.photo_path("chelsea.jpg"))
    assert zerocopy.main(["-i", photo, "-m", str(model), "-n", "2"]) == 0
    captured = capsys.readouterr()
    assert _top1(captured.out) in CAT_CLASSES
    assert "no image input" not in captured.err and "engine: " in captured.err


def test_zerocopy_names_a_user_models_classes_from_labels(tmp_path, capsys) -> None:
    """A model of the user's own (no names recorded, not the zoo's): ``class N`` by default,
    the ``--labels FILE`` names with it; a file that does not fit is one error line, exit 2."""
    from copyless.model import compile_model
    from model_helpers import conv_net

    model = compile_model(conv_net(), tmp_path / "mine.rai")  # [N, 10] logits
    photo = str(zoo.photo_path("chelsea.jpg"))
    assert zerocopy.main(["-i", photo, "-m", str(model)]) == 0
    assert re.search(r"^top-1: (\d) class \1 \d\.\d{3}$", capsys.readouterr().out, re.M)
    names = tmp_path / "names.txt"
    names.write_text("".join(f"kind {i}\n" for i in range(10)))
    assert zerocopy.main(["-i", photo, "-m", str(model), "--labels", str(names)]) == 0
    tops = re.findall(r"^top-\d: (\d) (.+) \d\.\d{3}$", capsys.readouterr().out, re.M)
    assert len(tops) == 5 and all(label == f"kind {i}" for i, label in tops)
    names.write_text("cat\ndog\n")
    assert zerocopy.main(["-i", photo, "-m", str(model), "--labels", str(names)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: {names} has 2 names; conv_net has 10 classes"
