"""The batch job on a real Ray (the session's head): real photos classified end to end, the
images decoded in the actors straight into the engine's batch tensor (or, with
``decode="tasks"``, decoded by a stage of tasks and passed as read-only object-store views),
bad files reported as rows, and a killed actor's batches retried so that every image comes
out exactly once."""

from __future__ import annotations

import collections
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

from copyless.model import zoo  # noqa: E402
from copyless.ray import ClassificationJob, JobSettings, Predictor, ResultWriter  # noqa: E402

# The probes below run in Ray's worker processes, which cannot import this test module.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class InPlaceProbe(Predictor):
    """Adds what the actor saw: were there frames, and read-only object-store views; and the
    actor's frame counts so far (its calls overlap: the counts are the actor's, not the
    call's)."""

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        pixels = batch.get("pixels")
        out = super().__call__(batch)
        n = len(batch["path"])
        out["frames"] = np.full(n, pixels is not None)
        out["read_only"] = np.full(n, pixels is not None and not pixels.flags.writeable)
        for name in ("in_place", "gathered", "copied"):
            out[name] = np.full(n, getattr(self, f"frames_{name}"))
        out["pid"] = np.full(n, os.getpid())
        return out


def _gated(gate: Path) -> type[Predictor]:
    """A Predictor whose second batch, in the first actor only, waits to be killed once the
    first batch has returned (an actor runs two calls at once): it writes its process id to
    ``gate`` and blocks. (A local class: Ray ships it by value.)"""

    class Gated(InPlaceProbe):
        calls = 0
        returned = 0

        def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
            type(self).calls += 1
            if type(self).calls == 2 and _claim(gate):
                deadline = time.monotonic() + 60
                while type(self).returned < 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(0.5)  # its result on its way to the driver
                gate.write_text(str(os.getpid()))
                threading.Event().wait(300)  # until the test kills this process
            out = super().__call__(batch)
            type(self).returned += 1
            return out

    return Gated


def _claim(gate: Path) -> bool:
    """True for the one call (of any actor) that is to block: it creates the claim file."""
    try:
        os.close(os.open(gate.with_name("claim"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


def _bad_files(folder: Path) -> list[str]:
    folder.mkdir()
    (folder / "garbage.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00not a jpeg" * 50)
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "notes.png").write_text("not an image")
    gone = folder / "deleted.jpg"  # listed, then gone before the job reads it
    return [str(folder / n) for n in ("garbage.jpg", "empty.jpg", "notes.png")] + [str(gone)]


@pytest.mark.parametrize("decode", ["actor", "tasks"])
def test_photos_are_classified_in_place_and_bad_files_are_rows(
    ray_driver, photo_folder, batch_model, tmp_path, decode
) -> None:
    _, expected = photo_folder
    bad = _bad_files(tmp_path / "bad")
    paths = sorted(expected)[:5] + bad + sorted(expected)[5:]
    # the model's batch is 8 too
    settings = JobSettings(actors=1, batch_size=8, top_k=3, decode=decode)
    out = tmp_path / "out.parquet"
    seen = []
    with ResultWriter(out, zoo.labels()) as writer:
        job = ClassificationJob(paths, batch_model, settings, predictor=InPlaceProbe)
        for batch in job.run():
            writer.write(batch)
            seen.append(tuple(batch[k][0] for k in
                              ("frames", "read_only", "in_place", "gathered", "copied")))
    rows = {row["path"]: row for row in pq.read_table(out).to_pylist()}
    assert sorted(rows) == sorted(paths)
    for path, classes in expected.items():
        row = rows[path]
        assert row["error"] is None
        assert row["class_id"] in classes, (path, row)
        assert row["label"] == zoo.labels()[row["class_id"]]
        assert row["top_class_ids"][0] == row["class_id"] and len(row["top_scores"]) == 3
        assert row["score"] == pytest.approx(row["top_scores"][0]) and 0 < row["score"] <= 1
    for path in bad:
        row = rows[path]
        assert row["error"] and path in row["error"], row
        assert row["class_id"] is None and row["top_class_ids"] is None and row["label"] is None
    assert writer.rows == len(paths) and writer.errors == len(bad)
    # decode="tasks": the frames reached the actor as read-only object-store views, copied
    # once into the engine's batch tensor; "actor": paths only, decoded into that tensor.
    # Whole jobs were bound in place, short ones (the end of the data) gathered; the bad
    # files never ran.
    tasks = decode == "tasks"
    assert {(frames, read_only) for frames, read_only, *_ in seen} == {(tasks, tasks)}
    in_place, gathered, copied = (max(row[i] for row in seen) for i in (2, 3, 4))
    assert in_place + gathered == len(expected) and in_place % 8 == 0
    assert copied == (len(expected) if tasks else 0)


def test_killed_actor_batches_are_retried_and_each_image_comes_out_once(
    ray_driver, photo_folder, batch_model, tmp_path
) -> None:
    _, expected = photo_folder
    paths = sorted(expected)
    gate = tmp_path / "gate"
    killed: list[int] = []

    def kill_when_gated() -> None:
        deadline = time.monotonic() + 300
        while not (gate.exists() and gate.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if gate.exists():
            killed.append(int(gate.read_text()))
            os.kill(killed[0], signal.SIGKILL)  # the actor process itself

    killer = threading.Thread(target=kill_when_gated, daemon=True)
    killer.start()
    settings = JobSettings(actors=1, batch_size=2)
    batches = list(ClassificationJob(paths, batch_model, settings, predictor=_gated(gate)).run())
    killer.join(timeout=1)
    assert killed, "the gated actor never blocked"
    out_paths = [p for b in batches for p in b["path"]]
    assert collections.Counter(out_paths) == collections.Counter(paths)  # each exactly once
    pids = {int(pid) for b in batches for pid in b["pid"]}
    assert killed[0] in pids and len(pids) == 2  # the first batch, then the restarted actor
    for batch in batches:
        for path, class_id in zip(batch["path"], batch["class_id"], strict=True):
            assert class_id in expected[path]
