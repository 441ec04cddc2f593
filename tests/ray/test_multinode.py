"""A real multi-node cluster on this machine: a head and two worker nodes started with
``ray start``, each its own raylet and object store. The actors spread over the nodes, and
a worker node killed mid-job (SIGKILL to its raylet) costs no image: every image comes out
exactly once."""

from __future__ import annotations

import collections
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ray_helpers import RAY_ENV, RayHead, start_head, start_worker

ray = pytest.importorskip("ray")

from copyless.ray import (  # noqa: E402
    ClassificationJob,
    JobSettings,
    Predictor,
    node_cpus,
    plan_resources,
)

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class NodeProbe(Predictor):
    """Adds the node and process each batch ran on."""

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = super().__call__(batch)
        n = len(batch["path"])
        out["node"] = np.full(n, ray.get_runtime_context().get_node_id())
        out["pid"] = np.full(n, os.getpid())
        return out


def _gated(gate: Path, head_node: str | None) -> type[Predictor]:
    """A NodeProbe whose second batch, on the first actor found on a worker node, writes
    its node id to ``gate`` and blocks (until its node is killed), once its first batch has
    returned (an actor runs two calls at once)."""

    class Gated(NodeProbe):
        calls = 0
        returned = 0

        def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
            node = ray.get_runtime_context().get_node_id()
            type(self).calls += 1
            if node != head_node and type(self).calls == 2 and _claim(gate):
                deadline = time.monotonic() + 60
                while type(self).returned < 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(0.5)  # its result on its way to the driver
                gate.write_text(f"{node}\n{batch['path'][0]}")
                threading.Event().wait(600)
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


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[RayHead]]:
    """Head (1 CPU) and two worker nodes (2 CPUs each), this process its driver."""
    saved = {key: os.environ.get(key) for key in RAY_ENV}
    os.environ.update(RAY_ENV)
    nodes: list[RayHead] = []
    try:
        nodes.append(start_head(cpus=1))
        nodes.append(start_worker(nodes[0], cpus=2))
        nodes.append(start_worker(nodes[0], cpus=2))
        ray.init(address=nodes[0].address, log_to_driver=False, configure_logging=False)
        deadline = time.monotonic() + 60
        while len(node_cpus()) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        yield nodes
    finally:
        ray.shutdown()
        for node in reversed(nodes):
            node.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def full_cluster(cluster: list[RayHead]) -> list[RayHead]:
    """The module's cluster as its docstring says, whatever ran before (in any order): a
    worker node a test killed is replaced (the list is the fixture's: its teardown stops
    the new one), and every CPU is free again (actors give theirs back a moment after
    they end)."""
    for index, worker in enumerate(cluster[1:], start=1):
        if not _raylet_alive(worker):  # a test killed it: the node is gone
            worker.stop()
            cluster[index] = start_worker(cluster[0], cpus=2)
    deadline = time.monotonic() + 120  # the GCS drops a dead node after missed checks
    while sorted(node_cpus()) != [1.0, 2.0, 2.0] and time.monotonic() < deadline:
        time.sleep(0.5)
    return cluster


@pytest.fixture(scope="module")
def many_photos(photo_folder, tmp_path_factory) -> dict[str, frozenset[int]]:
    """48 photos: the session's ten, copied under new names."""
    _, expected = photo_folder
    folder = tmp_path_factory.mktemp("many")
    many: dict[str, frozenset[int]] = {}
    sources = sorted(expected)
    for i in range(48):
        source = sources[i % len(sources)]
        target = folder / f"{i:03d}_{Path(source).name}"
        shutil.copyfile(source, target)
        many[str(target)] = expected[source]
    return many


def _node_ids() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n.get("Alive")}


def test_three_nodes_and_the_actors_spread_over_them(
    full_cluster, many_photos, batch_model
) -> None:
    assert sorted(node_cpus()) == [1.0, 2.0, 2.0] and len(_node_ids()) == 3
    plan = plan_resources(2, node_cpus())
    assert (plan.actors, plan.cpus_per_actor, plan.note) == (2, 1.0, "")
    settings = JobSettings(actors=2, batch_size=4, top_k=1).planned(plan)
    batches = list(
        ClassificationJob(sorted(many_photos), batch_model, settings, 0.0, NodeProbe).run()
    )
    paths = [p for b in batches for p in b["path"]]
    assert collections.Counter(paths) == collections.Counter(list(many_photos))
    actors = {(b["node"][0], b["pid"][0]) for b in batches}
    assert len(actors) == 2 and len({node for node, _ in actors}) == 2  # two nodes
    for batch in batches:
        for path, class_id in zip(batch["path"], batch["class_id"], strict=True):
            assert class_id in many_photos[path]


def test_a_worker_node_killed_mid_job_loses_no_image(
    full_cluster, many_photos, batch_model, tmp_path
) -> None:
    head, *workers = full_cluster
    head_node = _raylet_node(head)
    gate = tmp_path / "gate"
    killed: list[str] = []

    def kill_when_gated() -> None:
        deadline = time.monotonic() + 300
        while not (gate.exists() and gate.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not gate.exists():
            return
        node_id = gate.read_text().split("\n")[0]
        for worker in workers:
            if _raylet_node(worker) == node_id:
                os.kill(worker.raylet(), signal.SIGKILL)  # the node's raylet, no warning
                killed.append(node_id)

    killer = threading.Thread(target=kill_when_gated, daemon=True)
    killer.start()
    settings = JobSettings(actors=2, batch_size=4, top_k=1)
    job = ClassificationJob(
        sorted(many_photos), batch_model, settings, 0.0, _gated(gate, head_node)
    )
    batches = list(job.run())
    killer.join(timeout=5)
    assert killed, "no actor on a worker node blocked"
    paths = [p for b in batches for p in b["path"]]
    counts = collections.Counter(paths)
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    lost = len(set(many_photos) - set(counts))
    print(
        f"node kill: images in {len(many_photos)}, rows out {len(paths)}, "
        f"duplicates {duplicates}, lost {lost}"
    )
    assert (len(paths), duplicates, lost) == (len(many_photos), 0, 0)
    deadline = time.monotonic() + 120  # the GCS marks it dead after missed health checks
    while killed[0] in _node_ids() and time.monotonic() < deadline:
        time.sleep(1)
    assert killed[0] not in _node_ids()  # the node is gone
    # The batches the killed node's actor returned before it died came from there (its
    # first, and those of its second call slot meanwhile); the blocked one ran elsewhere.
    assert [b["node"][0] for b in batches].count(killed[0]) >= 1
    blocked = gate.read_text().split("\n")[1]
    assert [b["node"][0] for b in batches if blocked in list(b["path"])] != [killed[0]]
    for batch in batches:
        for path, class_id in zip(batch["path"], batch["class_id"], strict=True):
            assert class_id in many_photos[path]


def _raylet_alive(node: RayHead) -> bool:
    """Whether ``node``'s raylet runs (a killed one may linger as a zombie)."""
    import psutil

    try:
        return psutil.Process(node.raylet()).status() != psutil.STATUS_ZOMBIE
    except (RuntimeError, psutil.Error):
        return False


def _raylet_node(node: RayHead) -> str | None:
    """The node id of the raylet ``node`` started (read from its command line)."""
    import psutil

    pid = node.raylet()
    for arg in psutil.Process(pid).cmdline():
        if arg.startswith("--node_id="):
            return arg.split("=", 1)[1]
    return None
