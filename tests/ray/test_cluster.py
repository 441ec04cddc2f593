"""Clusters: an unreachable or malformed address fails in seconds with a clear message, one
Ray per process, GPUs shared out over the actors (and refused where there are none), job
settings validated before anything starts."""

from __future__ import annotations

import time

import pytest

from ray_helpers import free_port

pytest.importorskip("ray")

import copyless as cl
from copyless.ray import (
    ClusterError,
    ClusterInfo,
    JobSettings,
    check_reachable,
    gpus_per_actor,
    join_cluster,
    local_ray,
)


def test_unreachable_address_fails_fast() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    start = time.monotonic()
    message = rf"no Ray cluster at {address}: .*ray start --head"
    with pytest.raises(ClusterError, match=message), join_cluster(address):
        pass
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("address", ["localhost", "localhost:", ":6379", "host:99999", "a:b"])
def test_malformed_address(address) -> None:
    with pytest.raises(ClusterError, match="HOST:PORT"):
        check_reachable(address)


def test_unknown_host() -> None:
    with pytest.raises(ClusterError, match=r"no Ray cluster at nonexistent\.invalid:6379"):
        check_reachable("nonexistent.invalid:6379", timeout_s=5)


def test_one_ray_per_process(ray_driver) -> None:
    with pytest.raises(ClusterError, match="already initialised"), local_ray():
        pass
    with pytest.raises(ClusterError, match="already initialised"), join_cluster(ray_driver.address):
        pass


def test_gpus_are_shared_out_over_the_actors() -> None:
    def cluster(gpus: float) -> ClusterInfo:
        return ClusterInfo("10.0.0.1:6379", cpus=8, gpus=gpus, nodes=2, local=False)

    cuda = {"device": "cuda"}
    assert gpus_per_actor(JobSettings(actors=4), cluster(2)) == 0.0  # cpu jobs take none
    assert gpus_per_actor(JobSettings(actors=4, **cuda), cluster(1)) == 0.25
    assert gpus_per_actor(JobSettings(actors=3, **cuda), cluster(2)) == pytest.approx(2 / 3)
    assert gpus_per_actor(JobSettings(actors=1, **cuda), cluster(2)) == 1.0
    assert gpus_per_actor(JobSettings(actors=2, device="tensorrt"), cluster(1)) == 0.5
    with pytest.raises(ClusterError, match=r"--device cuda: .* has no GPU \(8 CPUs on 2"):
        gpus_per_actor(JobSettings(**cuda), cluster(0))


@pytest.mark.parametrize(
    "bad",
    [
        {"actors": 0},
        {"batch_size": 0},
        {"top_k": True},
        {"in_flight": 0},
        {"device": "tpu"},
        {"device": "cuda", "runner_type": cl.RunnerType.OPENVINO},
        {"cpus_per_actor": 0},
    ],
)
def test_job_settings_are_checked(bad) -> None:
    with pytest.raises(cl.OptionError):
        JobSettings(**bad)
