"""A refusal repeated in a loop is logged once, then as a count: a caller submitting on an
output a job still writes, thousands of times, gets a few log lines, not one per submit."""

from __future__ import annotations

import logging
import re
import sys

import onnx
import pytest

import copyless as cl
from copyless.model import CompiledModel
from copyless.runner import RunnerFactory
from copyless.runner import _log as runner_log

S = cl.StatusCode
HW = cl.TensorType.HW


def _busy_output_refusals(
    tiny: tuple[onnx.ModelProto, CompiledModel], submits: int
) -> list[S]:
    """``submits`` submits, in one burst, on the output of a job still in flight. (The burst
    holds the GIL, so the job cannot finish in between: a long switch interval stands for a
    slow model, as in the catalogue's over-capacity case.)"""
    _, compiled = tiny
    with RunnerFactory.from_compiled(compiled, {"max_concurrent_runs": 4}) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, HW)
        (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, HW)
        x, y = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)
        assert runner.execute([[x]], [[y]]) is S.SUCCESS  # the plan built before the burst
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1.0)
        try:
            held = runner.execute_async([[x]], [[y]])
            statuses = [runner.execute_async([[x]], [[y]]).status for _ in range(submits)]
        finally:
            sys.setswitchinterval(interval)
        assert runner.wait(held, -1) is S.SUCCESS
    return statuses


def test_a_repeated_refusal_is_logged_once_then_counted(tiny, caplog) -> None:
    caplog.set_level(logging.ERROR, logger="copyless.runner")
    statuses = _busy_output_refusals(tiny, 3000)
    # (the GIL may still change hands once or twice in the burst: a job then finishes and
    # the next submit is admitted, its output busy in turn)
    refused = statuses.count(S.INVALID_OUTPUT)
    assert refused > 2900
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("copyless.runner")]
    assert len(lines) == 2, lines
    assert re.match(r"output memory is bound to job \d+ still in flight \(repeats", lines[0])
    assert lines[1] == f"{refused - 1} more busy-output refusal(s) were not logged one by one"


def test_the_count_is_logged_again_after_the_interval(tiny, caplog, monkeypatch) -> None:
    monkeypatch.setattr(runner_log, "REPEAT_INTERVAL_S", 0.0)  # every record is "late"
    caplog.set_level(logging.ERROR, logger="copyless.runner")
    refused = _busy_output_refusals(tiny, 20).count(S.INVALID_OUTPUT)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("copyless.runner")]
    assert refused >= 15 and len(lines) == refused
    assert all("is bound to job" in line for line in lines)


@pytest.mark.parametrize("level", ["ERROR", "WARNING"])
def test_below_the_runner_log_level_nothing_is_counted(tiny, caplog, level) -> None:
    log = runner_log.RunnerLog(logging.getLogger("copyless.runner.test"), level)
    caplog.set_level(logging.DEBUG, logger="copyless.runner.test")
    for _ in range(5):
        log.repeated(logging.INFO, "kind", "refused %d", 7)
    log.flush()
    assert caplog.records == []
