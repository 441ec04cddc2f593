"""Rotating K output buffers over M async slots (issue 33 item 1): once ``execute_async``
admits a job, every job submitted ``max_concurrent_runs`` or more before it has finished and
released its tensors, so submit-and-retry over ``K >= max_concurrent_runs`` buffers is never
refused INVALID_OUTPUT, whichever order the worker threads finish in."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np
import pytest
from runner_helpers import tensors

import copyless as cl
from copyless.backends import _onnxruntime, _openvino  # the engines' contexts, to stall one
from copyless.runner import Runner

HW = cl.TensorType.HW
S = cl.StatusCode


def _submit(runner: Runner, x: cl.NpuTensor, y: cl.NpuTensor, seen: dict[str, int]) -> Any:
    """Submit until admitted, counting every answer; RESOURCE_UNAVAILABLE is retried."""
    while True:
        handle = runner.execute_async([[x]], [[y]])
        seen[handle.status.name] = seen.get(handle.status.name, 0) + 1
        if handle.status is not S.RESOURCE_UNAVAILABLE:
            return handle
        time.sleep(0)  # let the workers have the GIL


def _stall_first_job(monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> None:
    """The first async job's engine run waits for ``release`` (an engine stalled, or its
    worker thread descheduled, while later jobs run): the order the race needs, every time."""
    stalled: list[bool] = []
    for context in (_onnxruntime.OrtContext, _openvino.OvContext):
        real = context.run

        def run(self: Any, real: Any = real) -> None:
            if threading.current_thread().name.startswith("copyless-job") and not stalled:
                stalled.append(True)
                assert release.wait(10)
            real(self)

        monkeypatch.setattr(context, "run", run)


def test_a_stalled_job_keeps_later_slots_so_a_rotated_output_is_never_refused(
    tiny, make_runner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Job 1 stalls; jobs 2-4 finish. Before the fix job 2's finish handed its slot back while
    job 1 still held buffer 0, so job 5 (buffer 0 again) was admitted and then refused
    INVALID_OUTPUT. Now capacity comes back in submission order: job 5 waits its turn."""
    _, compiled = tiny
    runner = make_runner(compiled, max_concurrent_runs=2)
    x, _ = tensors(runner, HW)
    x.numpy()[...] = np.random.default_rng(0).standard_normal(x.info.shape)
    outputs = [tensors(runner, HW)[1] for _ in range(4)]
    release = threading.Event()
    _stall_first_job(monkeypatch, release)
    seen: dict[str, int] = {}
    handles = [_submit(runner, x, outputs[0], seen)]
    timer = threading.Timer(0.3, release.set)
    timer.start()
    try:
        with caplog.at_level(logging.ERROR, logger="copyless"):
            handles += [_submit(runner, x, outputs[i % 4], seen) for i in range(1, 12)]
    finally:
        release.set()
        timer.join()
    assert seen.get("INVALID_OUTPUT", 0) == 0, caplog.text
    assert seen["SUCCESS"] == 12 and seen["RESOURCE_UNAVAILABLE"] > 0
    assert [runner.wait(h, 10_000) for h in handles] == [S.SUCCESS] * 12
    expected = outputs[0].numpy().copy()
    for y in outputs[1:]:
        np.testing.assert_array_equal(y.numpy(), expected)
    assert "still in flight" not in caplog.text


@pytest.mark.parametrize(("buffers", "slots"), [(4, 2), (2, 2), (3, 1), (8, 4)])
def test_rotating_buffers_over_slots_under_stress(tiny, make_runner, buffers, slots) -> None:
    """Thousands of submit-and-retry jobs with no wait, inputs and outputs rotated over
    ``buffers >= slots`` sets: no answer but SUCCESS and RESOURCE_UNAVAILABLE, and every
    buffer ends with its own input's answer."""
    _, compiled = tiny
    runner = make_runner(compiled, max_concurrent_runs=slots)
    pairs = [tensors(runner, HW) for _ in range(buffers)]
    rng = np.random.default_rng(1)
    answers = []
    with cl.RunnerFactory.from_compiled(compiled) as reference:
        for x, y in pairs:
            x.numpy()[...] = rng.standard_normal(x.info.shape)
            assert reference.execute([[x]], [[y]]) is S.SUCCESS
            answers.append(y.numpy().copy())
            y.numpy()[...] = 0
    seen: dict[str, int] = {}
    last = [_submit(runner, *pairs[i % buffers], seen) for i in range(3000)][-buffers:]
    assert set(seen) <= {"SUCCESS", "RESOURCE_UNAVAILABLE"}, seen
    assert seen["SUCCESS"] == 3000
    assert [runner.wait(h, 10_000) for h in last] == [S.SUCCESS] * buffers
    for (_, y), answer in zip(pairs, answers, strict=True):
        np.testing.assert_allclose(y.numpy(), answer, rtol=1e-4, atol=1e-4)
