"""copyless-infer-async's ``-o KEY=VALUE`` runner options: passed to the runner, validated
there (a bad key or value is one line and exit 2)."""

from __future__ import annotations

import pytest

from copyless.apps import infer_async
from copyless.apps._models import builtin_classifier


def test_runner_options_reach_the_runner(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(builtin_classifier(progress=False))
    args = ["--model-path", model, "--dry-run", "-n", "4", "--runner", "openvino"]
    assert infer_async.main([*args, "-o", "native_async=true", "-o", "num_threads=1"]) == 0
    assert "Batches completed: 4 / 4" in capsys.readouterr().out
    for bad, says in (("bogus=1", "unknown option 'bogus'"), ("native_async=7", "native_async"),
                      ("novalue", "expected KEY=VALUE")):  # fmt: skip
        assert infer_async.main([*args, "-o", bad]) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") <= 2, err
