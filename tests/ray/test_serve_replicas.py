"""The recipe of docs/serve.md: the repository served by two replicas behind Ray Serve on a
local Ray head, tritonclient.http unchanged against Ray Serve's HTTP proxy, answers equal to
the Runner's."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray.serve")
pytest.importorskip("tritonclient.http")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))

from serve_helpers import build_repository, conv_rows, runner_answers


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_two_replicas_behind_ray_serve(ray_driver: Any, tmp_path: Path) -> None:
    import tritonclient.http as httpclient
    from ray import serve

    from copyless.serve import ServeSettings, replicated_app
    from copyless.types import RunnerType

    build_repository(tmp_path)
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        app = replicated_app(tmp_path, replicas=2,
                             settings=ServeSettings(runner_type=RunnerType.ONNXRUNTIME,
                                                    max_queue_delay_ms=2.0),
                             ray_actor_options={"num_cpus": 0.5})  # fmt: skip
        serve.run(app, route_prefix="/", name="copyless", blocking=False)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        import time

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if client.is_server_ready():
                    break
            except Exception:  # noqa: BLE001 - the proxy is not routing yet
                pass
            time.sleep(0.5)
        assert client.is_server_ready() and client.is_model_ready("conv4")
        status = serve.status().applications["copyless"].deployments["copyless"]
        assert status.replica_states.get("RUNNING") == 2, status
        x = conv_rows(6, seed=31)
        (expected,) = runner_answers(tmp_path / "conv", x)
        for rows in (slice(0, 1), slice(1, 5), slice(5, 6)):
            given = httpclient.InferInput("input", list(x[rows].shape), "FP32")
            given.set_data_from_numpy(x[rows])
            result = client.infer("conv4", [given])
            np.testing.assert_array_equal(result.as_numpy("logits"), expected[rows])
        meta = client.get_model_metadata("conv4")
        assert meta["inputs"][0]["shape"] == [-1, 3, 16, 16]
        client.close()
    finally:
        serve.shutdown()
