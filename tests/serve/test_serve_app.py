"""``copyless-serve`` as a program, in a child process: usage errors (one line, exit 2),
SIGTERM drains (the admitted requests answered, exit 0), memory flat over 1,000 bad
requests."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from serve_helpers import conv_rows, pixels, post, runner_answers
from tritonclient.utils import InferenceServerException

SCRIPT = Path(sys.executable).parent / "copyless-serve"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _command(repository: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "copyless.apps.inference_server", str(repository), *extra]


class Child:
    def __init__(self, repository: Path, *extra: str) -> None:
        self.ports = {name: _free_port() for name in ("http", "grpc", "metrics")}
        args = [f"--{name}=127.0.0.1:{port}" for name, port in self.ports.items()]
        self.process = subprocess.Popen(
            _command(repository, *args, "--runner", "onnxruntime", *extra),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        self.lines: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise AssertionError(f"the server ended: {self.process.stderr.read()}")  # type: ignore[union-attr]
            self.lines.append(line.strip())
            if line.strip() == "copyless-serve: ready":
                return
        raise AssertionError(f"not ready in time: {self.lines}")

    def url(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def stop(self) -> tuple[int, str, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, out, err


@pytest.fixture
def child(repository: Path) -> Iterator[Child]:
    served = Child(repository, "--max-queue-delay-ms", "5")
    yield served
    try:
        served.stop()
    except subprocess.TimeoutExpired:
        served.process.kill()
        served.process.communicate()


def test_the_console_script_is_installed() -> None:
    if not SCRIPT.exists():
        pytest.skip("copyless-serve is not installed (pip install -e .)")
    result = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60,
                            check=False)  # fmt: skip
    assert result.returncode == 0 and "--grpc HOST:PORT" in result.stdout


@pytest.mark.parametrize("problem", ["missing", "empty", "port in use"])
def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path, repository: Path,
                                              problem: str) -> None:  # fmt: skip
    extra: list[str] = ["--metrics=off", "--grpc=off"]
    target = tmp_path / "missing"
    busy = socket.socket()
    if problem == "empty":
        target.mkdir()
    elif problem == "port in use":
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        target = repository
        extra.append(f"--http=127.0.0.1:{busy.getsockname()[1]}")
    with busy:
        result = subprocess.run(_command(target, *extra), capture_output=True, text=True,
                                timeout=120, check=False)  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("copyless-serve: error:"), lines


def test_sigterm_drains_and_exits_0(child: Child, repository: Path) -> None:
    assert any(line.startswith("model 'lite0': ready") for line in child.lines)
    client = grpcclient.InferenceServerClient(child.url("grpc"))
    x = pixels(1, seed=6)
    (expected,) = runner_answers(repository / "lite0", x)

    def one(_: int) -> str:
        given = grpcclient.InferInput("input", list(x.shape), "UINT8")
        given.set_data_from_numpy(x)
        try:
            result = client.infer("lite0", [given], client_timeout=60)
        except InferenceServerException as exc:
            assert exc.status() == "StatusCode.UNAVAILABLE", exc
            return "refused"
        got = result.as_numpy(result.get_response().outputs[0].name)
        np.testing.assert_array_equal(got, expected)
        return "answered"

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(one, i) for i in range(12)]
        time.sleep(0.3)  # requests admitted and running
        child.process.send_signal(signal.SIGTERM)
        outcomes = [f.result() for f in futures]
    out, err = child.process.communicate(timeout=60)  # one signal only: a second stops now
    code = child.process.returncode
    assert code == 0, err
    assert "copyless-serve: draining" in out and "copyless-serve: stopped" in out
    assert "answered" in outcomes, outcomes
    client.close()


def _bad_requests() -> list[tuple[str, bytes | str, dict[str, str]]]:
    x = conv_rows(1).tobytes()
    inp = {"name": "input", "datatype": "FP32", "shape": [1, 3, 16, 16]}
    head = json.dumps({"inputs": [{**inp, "parameters": {"binary_data_size": len(x) + 8}}]})
    return [
        ("/v2/models/conv/infer", b'{"inputs": [', {}),
        ("/v2/models/nope/infer", b"{}", {}),
        ("/v2/models/conv/infer", json.dumps({"inputs": [{**inp, "data": [1] * 700}]}), {}),
        ("/v2/models/conv/infer", head.encode() + x,
         {"Inference-Header-Content-Length": str(len(head))}),
        ("/v2/models/conv/infer", json.dumps({"inputs": [{**inp, "parameters": {
            "shared_memory_region": "gone", "shared_memory_byte_size": len(x)}}]}), {}),
        ("/v2/systemsharedmemory/region/r/register", '{"key": "../etc/passwd", "byte_size": 4}',
         {}),
    ]  # fmt: skip


def test_memory_flat_over_1000_bad_requests(child: Child) -> None:
    import psutil

    process = psutil.Process(child.process.pid)
    bad = _bad_requests()

    def send(count: int) -> None:
        for i in range(count):
            path, body, headers = bad[i % len(bad)]
            status, _ = post(child.url("http"), path, body, headers)
            assert 400 <= status < 500, (path, status)

    send(300)  # warm: allocator pools, code paths
    before = process.memory_info().rss
    send(1000)
    grown = process.memory_info().rss - before
    assert grown < 4 * 1024 * 1024, f"RSS grew {grown / 1e6:.1f} MB over 1000 bad requests"
    assert post(child.url("http"), "/v2/models/conv/infer", json.dumps({"inputs": [{
        "name": "input", "datatype": "FP32", "shape": [1, 3, 16, 16],
        "data": [1] * 768}]}))[0] == 200  # fmt: skip
    assert os.path.exists(f"/proc/{child.process.pid}")


def test_json_lines_say_listening_models_ready_draining_and_stopped(repository: Path) -> None:
    """``--json``: every stdout line one JSON object (a supervisor reads them), the same
    events as the human lines, ``summary`` last."""
    ports = {name: _free_port() for name in ("http", "grpc", "metrics")}
    args = [f"--{name}=127.0.0.1:{port}" for name, port in ports.items()]
    process = subprocess.Popen(
        _command(repository, *args, "--runner", "onnxruntime", "--json"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        records = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = process.stdout.readline()  # type: ignore[union-attr]
            assert line, f"the server ended: {process.stderr.read()}"  # type: ignore[union-attr]
            records.append(json.loads(line))
            if records[-1]["type"] == "ready":
                break
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    records += [json.loads(line) for line in out.splitlines()]
    kinds = [r["type"] for r in records]
    assert kinds[0] == "listening" and kinds[-3:] == ["ready", "draining", "summary"]
    assert records[0]["grpc"] == f"127.0.0.1:{ports['grpc']}"
    models = {r["name"]: r for r in records if r["type"] == "model"}
    assert set(models) == {"conv", "conv4", "lite0"}
    assert models["conv4"]["ready"] and models["conv4"]["max_batch_size"] == 4
