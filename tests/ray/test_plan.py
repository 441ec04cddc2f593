"""The resource plan: actors and a decode task fitted to the cluster's nodes before
anything is submitted; shrunk (fractional CPUs, then fewer actors) with a one-line note, or
refused with the numbers; the free CPUs read from a real head."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from copyless.ray import (
    DECODE_CPUS,
    PlanError,
    ResourcePlan,
    node_cpus,
    plan_resources,
)


@pytest.mark.parametrize(
    ("actors", "nodes", "expected"),
    [
        (2, [4.0], (2, 1.0)),  # room to spare: as asked
        (1, [2.0], (1, 1.0)),  # one actor and one decode task on 2 CPUs
        (2, [2.0], (2, 0.5)),  # the hang of issue 27: shrunk to half a CPU each
        (3, [2.0], (3, 0.25)),
        (2, [1.0, 1.0, 1.0], (2, 1.0)),  # one actor per node, the decode task on the third
        (3, [1.0, 1.0, 1.0], (2, 1.0)),  # spread fractions leave no node 0.9 to decode on
        (8, [2.0], (4, 0.25)),  # fewer actors once the smallest fraction does not fit
    ],
)
def test_actors_and_a_decode_task_fit_each_on_one_node(actors, nodes, expected) -> None:
    plan = plan_resources(actors, nodes)
    assert (plan.actors, plan.cpus_per_actor) == expected
    assert plan.decode_cpus == DECODE_CPUS
    used = plan.actors * plan.cpus_per_actor + plan.decode_cpus
    assert used <= sum(nodes) + 1e-9
    if expected == (actors, 1.0):
        assert plan == ResourcePlan(actors, 1.0) and plan.note == ""
    else:
        assert plan.note == (
            f"{actors} actor(s) of 1 CPU and a decode task of 0.9 CPU do not fit the "
            f"cluster's free CPUs ({sum(nodes):g}: {', '.join(f'{n:g}' for n in nodes)} on "
            f"{len(nodes)} node(s)): running {expected[0]} actor(s) of {expected[1]:g} CPU each"
        )


def test_a_cluster_without_room_is_refused_with_the_numbers() -> None:
    with pytest.raises(PlanError) as info:
        plan_resources(2, [0.5, 0.5])
    assert str(info.value) == (
        "1 actor(s) of 0.25 CPU and a decode task of 0.9 CPU do not fit the cluster's free "
        "CPUs (1: 0.5, 0.5 on 2 node(s))"
    )
    with pytest.raises(PlanError, match=r"free CPUs \(0: 0 on 1 node\(s\)\)"):
        plan_resources(1, [0.0])  # a cluster with no CPU left
    with pytest.raises(PlanError, match=r"\(0: none on 0 node\(s\)\) \(no node has a CPU\)"):
        plan_resources(1, [])
    with pytest.raises(ValueError, match="actors >= 1"):
        plan_resources(0, [4.0])


def test_node_cpus_of_the_session_head(ray_driver) -> None:
    # the head is shared: the actors of the tests before (in any order) give their CPUs
    # back a moment after they end; a leaked one would keep them past the wait
    _wait_for_free_cpus(2.0)
    assert node_cpus() == [2.0]  # tests/ray_helpers.py starts it with --num-cpus=2
    import ray

    @ray.remote(num_cpus=1.5)
    class Holder:
        def ready(self) -> bool:
            return True

    holder = Holder.remote()  # type: ignore[attr-defined]
    try:
        ray.get(holder.ready.remote())
        assert node_cpus() == [pytest.approx(0.5)]  # what others hold is not free
        with pytest.raises(PlanError, match=r"free CPUs \(0\.5: 0\.5 on 1 node"):
            plan_resources(1, node_cpus())
    finally:
        ray.kill(holder)
        _wait_for_free_cpus(2.0)


def test_the_readme_recipe_finishes_on_a_two_cpu_head(ray_driver, photo_folder, batch_model):
    """The README's Ray Data snippet with 2 actors, which used to wait forever on 2 CPUs."""
    import ray

    from copyless.ray import JobControl, Predictor, watch

    _, expected = photo_folder
    paths = sorted(expected)
    _wait_for_free_cpus(2.0)  # the actors of the tests before give them back (any order)
    plan = plan_resources(2, node_cpus())
    assert (plan.actors, plan.cpus_per_actor) == (2, 0.5)
    ds = ray.data.from_items([{"path": p} for p in paths])
    ds = ds.map_batches(
        Predictor,
        fn_constructor_kwargs={"model": ray.put(batch_model), "top_k": 5, "decode": "path"},
        compute=ray.data.ActorPoolStrategy(
            size=plan.actors, max_concurrent_calls_per_actor=2, enable_true_multi_threading=True
        ),
        num_cpus=plan.cpus_per_actor,
        batch_size=4,
    )
    control = JobControl()
    rows = {}
    batches = control.attach(ds).iter_batches(batch_size=None)
    for batch in watch(iter(batches), stall_s=60, cancel=control.fail):
        rows.update(zip(batch["path"], batch["class_id"], strict=True))
    assert sorted(rows) == paths
    assert all(rows[path] in classes for path, classes in expected.items())


def test_copyless_batch_refuses_a_cluster_with_no_cpu_left(ray_driver, photo_folder, tmp_path):
    """Another job holds both CPUs of the head: one line with the numbers, exit 1, no
    output, and no wait."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    import ray

    from ray_helpers import RAY_ENV

    @ray.remote(num_cpus=2)
    class Hog:
        def ready(self) -> bool:
            return True

    folder, _ = photo_folder
    out = tmp_path / "out.parquet"
    exe = Path(sys.executable).with_name("copyless-batch")
    hog = Hog.remote()  # type: ignore[attr-defined]
    try:
        ray.get(hog.ready.remote())
        start = time.monotonic()
        result = subprocess.run(
            [str(exe), str(folder), "-o", str(out), "--address", ray_driver.address],
            capture_output=True, text=True, env={**os.environ, **RAY_ENV}, timeout=300,
            check=False,
        )  # fmt: skip
        elapsed = time.monotonic() - start
    finally:
        ray.kill(hog)
        _wait_for_free_cpus(2.0)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: 1 actor(s) of 0.25 CPU and a decode task of 0.9 CPU do not fit the cluster's "
        "free CPUs (0: 0 on 1 node(s)); no output written"
    ], result.stderr
    assert not out.exists() and elapsed < 120


def _wait_for_free_cpus(cpus: float) -> None:
    """A killed actor gives its CPUs back a moment later: wait for them (up to a minute)."""
    import time

    deadline = time.monotonic() + 60
    while sum(node_cpus()) < cpus and time.monotonic() < deadline:
        time.sleep(0.2)
