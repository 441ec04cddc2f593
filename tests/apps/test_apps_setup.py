"""The image apps' shared setup: the timed loop and the runner/argument checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import copyless as cl
from copyless.apps._checks import model_task
from copyless.apps._setup import (
    EXIT_USAGE,
    benchmark_block,
    builtin_name,
    image_parser,
    parse_image_args,
    run_image_app,
    timed_runs,
)
from copyless.model import compile_model, compile_to_memory
from copyless.runner import RunnerFactory
from model_helpers import conv_net


def test_timed_runs_warms_up_once_then_times_every_run() -> None:
    x0 = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    with RunnerFactory.from_compiled(compile_to_memory(conv_net())) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        x, y = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)
        calls: list[int] = []

        def preprocess() -> int:
            x.numpy()[...] = x0 * (len(calls) + 1)
            calls.append(len(calls))
            return calls[-1]

        done = timed_runs(runner, x, y, 3, preprocess, lambda n: (n, y.numpy().copy()))
        assert done is not None
        (last, logits), times = done
        assert calls == [0, 1, 2, 3] and last == 3  # one untimed warm-up, three timed runs
        stages = times.snapshot()
        assert [stages[s].count for s in ("preprocess", "infer", "postprocess")] == [3, 3, 3]
        assert stages["infer"].p50 > 0
        block = benchmark_block(times)
        assert block[1] == f"{'infer':<24}{stages['infer'].mean * 1e3:.3f} ms / frame"
        assert x.numpy().tolist() == (x0 * 4).tolist()
        assert logits.shape == (1, 10) and np.isfinite(logits).all()


def test_timed_runs_ends_after_the_round_running_once_a_signal_came() -> None:
    """The interruption run_image_app hands the app: rounds stop, the ones done are kept."""
    from copyless.apps._signals import Interruption

    interruption = Interruption("app")
    with RunnerFactory.from_compiled(compile_to_memory(conv_net())) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        x, y = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)
        rounds: list[int] = []

        def preprocess() -> None:
            rounds.append(len(rounds))
            if len(rounds) == 3:  # the second timed round: a signal arrives
                interruption.note(2)

        done = timed_runs(runner, x, y, 100, preprocess, lambda _: None, interruption)
    assert done is not None
    assert rounds == [0, 1, 2] and done[1].snapshot()["infer"].count == 2


def test_timed_runs_stops_on_a_failed_execute(capsys: pytest.CaptureFixture[str]) -> None:
    with RunnerFactory.from_compiled(compile_to_memory(conv_net())) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        x = runner.allocate_npu_tensor(i)
        calls: list[None] = []
        # The input tensor as the output: the runner refuses it with a status.
        assert timed_runs(runner, x, x, 5, lambda: calls.append(None), lambda _: 0) is None
    assert len(calls) == 1
    assert "error: execute returned INVALID_OUTPUT" in capsys.readouterr().err


def test_run_image_app_checks_paths_before_opening_a_runner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = image_parser("app", "test app", "model")
    image = tmp_path / "photo.png"
    opened: list[str] = []

    def builtin() -> Path:
        opened.append("builtin")
        return compile_model(conv_net(), tmp_path / "m.rai")

    def run(args: list[str]) -> int:
        return run_image_app(parse_image_args(parser, args), builtin, lambda *_: 0)

    assert run(["-i", str(image)]) == EXIT_USAGE
    assert "no image at" in capsys.readouterr().err
    image.write_bytes(b"not an image")
    assert run(["-i", str(image), "-m", str(tmp_path / "none")]) == EXIT_USAGE
    assert "no model at" in capsys.readouterr().err
    assert run(["-i", str(image)]) == EXIT_USAGE  # undecodable: before the model is built
    assert opened == []
    with pytest.raises(SystemExit) as info:
        parse_image_args(parser, ["-i", str(image), "-n", "0"])
    assert info.value.code == 2


def test_image_apps_spin_within_runs_unless_told_not_to(tmp_path: Path) -> None:
    """One synchronous stream (the VART-ML samples): spinning as onnxruntime's default."""
    parser = image_parser("app", "test app", "model")
    image = tmp_path / "photo.png"
    Image.new("RGB", (8, 8)).save(image)
    model = compile_model(conv_net(), tmp_path / "m.rai")
    seen: list[bool] = []

    def app(runner: object, *_: object) -> int:
        seen.append(runner.options.engine_spinning)  # type: ignore[attr-defined]
        return 0

    for extra, want in (([], True), (["--no-spin"], False)):
        args = parse_image_args(parser, ["-i", str(image), "-m", str(model), *extra])
        assert run_image_app(args, lambda: model, app) == 0
        assert seen[-1] is want


def test_m_takes_a_built_in_name_or_a_path(tmp_path: Path, monkeypatch) -> None:
    parser = image_parser("t", "t", "model")
    parser.add_argument("--model")
    args = parse_image_args(parser, ["-i", "a.png", "-m", "face"])
    builtin_name(args, ("text", "face"))
    assert (args.model, args.model_dir) == ("face", None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "face").mkdir()  # a compiled directory of that name wins
    args = parse_image_args(parser, ["-i", "a.png", "--model-dir", "face"])
    builtin_name(args, ("text", "face"))
    assert (args.model, args.model_dir) == (None, "face")


def test_the_task_comes_from_the_models_record() -> None:
    assert model_task(compile_to_memory(conv_net())) == "classifier"  # [N, 10]
