"""JobControl on a real head: stop() ends a running dataset's sources (the batches running
still come out, whole; the iteration then ends early), fail() makes the consuming thread's
blocked next() raise the error, from any thread, with no signal; a control attached to one
dataset leaves the others alone."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from copyless.ray import JobControl  # noqa: E402

# Ray's workers cannot import this test module: its functions travel by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROWS = 400


def _slow(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    time.sleep(0.2)
    return {"id": batch["id"], "twice": batch["id"] * 2}


def _dataset() -> ray.data.Dataset:
    ds = ray.data.range(ROWS, override_num_blocks=100).map_batches(_slow, batch_size=4)
    ds.context.enable_progress_bars = False
    return ds


def test_stop_lets_the_running_batches_out_then_ends(ray_driver) -> None:
    control = JobControl()
    rows = []
    start = time.monotonic()
    for batch in control.attach(_dataset()).iter_batches(batch_size=None):
        assert (batch["twice"] == batch["id"] * 2).all() and len(batch["id"]) == 4  # whole
        rows.extend(batch["id"].tolist())
        if not control.stopped:
            control.stop()
    assert control.stopped and 0 < len(rows) < ROWS // 2
    assert len(set(rows)) == len(rows) and time.monotonic() - start < 60


def test_fail_raises_in_the_consuming_thread(ray_driver) -> None:
    control = JobControl()
    batches = iter(control.attach(_dataset()).iter_batches(batch_size=None))
    next(batches)
    timer = threading.Timer(0.5, control.fail, args=(RuntimeError("cancelled by the test"),))
    timer.start()
    start = time.monotonic()
    with pytest.raises(Exception, match="cancelled by the test"):
        for _ in batches:
            pass
    timer.join()
    assert time.monotonic() - start < 30


def test_a_control_governs_only_its_dataset(ray_driver) -> None:
    control = JobControl()
    control.attach(_dataset())
    control.stop()
    other = ray.data.range(20, override_num_blocks=5).map_batches(_slow, batch_size=4)
    assert sorted(other.to_pandas()["id"]) == list(range(20))
