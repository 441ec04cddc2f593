"""SlotPipeline: producer processes -> runner-allocated slots -> execute_async (real model)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import ipc_helpers
import numpy as np
import pytest

from copyless.ipc import SlotPipeline
from copyless.model._compiler import compile_model
from copyless.model.zoo import build
from copyless.runner import Runner, RunnerFactory
from copyless.types import MemoryType, StatusCode, TensorDirection, TensorType

CATS = {281, 282, 285}  # tabby, tiger cat, Egyptian cat
ESPRESSO = 967


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    rai = compile_model(
        build("efficientnet-lite0", progress=False), tmp_path_factory.mktemp("ipc") / "effnet.rai"
    )
    with RunnerFactory.create_runner(rai) as runner:
        yield runner


def _pipeline(runner: Runner, num_slots: int) -> SlotPipeline:
    return SlotPipeline(
        runner,
        runner.get_tensors_info(TensorDirection.INPUT, TensorType.HW),
        runner.get_tensors_info(TensorDirection.OUTPUT, TensorType.HW),
        num_slots,
        max_in_flight=2,
    )


def test_frames_decoded_in_producers_are_classified_by_the_consumer(runner: Runner) -> None:
    with _pipeline(runner, 4) as pipeline:
        assert all(t.memory_type is MemoryType.XRT_BO for s in pipeline.pool.slots for t in s)
        pipeline.start_producer(ipc_helpers.produce_photos, ["chelsea"], 6)
        pipeline.start_producer(ipc_helpers.produce_photos, ["coffee"], 6)
        labels: dict[str, list[int]] = {"chelsea": [], "coffee": []}
        for result in pipeline.results():
            assert result.status is StatusCode.SUCCESS
            labels[result.tag["photo"]].append(int(np.argmax(result.outputs[0].numpy())))
    assert len(labels["chelsea"]) == len(labels["coffee"]) == 6
    assert set(labels["chelsea"]) <= CATS
    assert set(labels["coffee"]) == {ESPRESSO}


def test_pipeline_goes_on_after_a_producer_is_killed(runner: Runner, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with _pipeline(runner, 3) as pipeline:
        doomed = pipeline.start_producer(ipc_helpers.produce_forever_photos, str(pid_file))
        steady = pipeline.start_producer(ipc_helpers.produce_photos, ["coffee"], 8)
        counts = {doomed: 0, steady: 0}
        killed = False
        for result in pipeline.results():
            assert result.status is StatusCode.SUCCESS
            counts[result.producer] += 1
            if counts[doomed] == 3 and not killed:  # once: the pool may reap it at once
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                killed = True
            if result.producer == steady:
                assert int(np.argmax(result.outputs[0].numpy())) == ESPRESSO
        assert counts[steady] == 8
        assert pipeline.pool.exit_codes()[doomed] == -signal.SIGKILL
        assert pipeline.pool.free_slots == 3
