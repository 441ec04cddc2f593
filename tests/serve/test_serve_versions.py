"""copyless-serve's repository in operation, through tritonclient: Triton's version folders
and version policies, model control (poll, explicit), a reload under load that loses no
request, a broken version that leaves the old serving; the schedule policy (priorities,
timeouts) and cancelled requests."""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_helpers import conv_rows, pixels, post, runner_answers, start
from tritonclient.utils import InferenceServerException

import copyless as cl
from copyless.serve import InferenceServer
from model_helpers import conv_net

CLIENTS = {"http": httpclient, "grpc": grpcclient}


def conv_version(shift: float) -> onnx.ModelProto:
    """The conv net with its logits moved by ``shift``: each version answers its own."""
    model = conv_net(batch="N")
    for init in model.graph.initializer:
        if init.name == "fcb":
            values = onnx.numpy_helper.to_array(init) + np.float32(shift)
            init.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), "fcb"))
    return model


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Versions 1, 2, 3 of the conv net (batch 4), compiled once."""
    root = tmp_path_factory.mktemp("versions")
    out = {}
    for version in (1, 2, 3):
        out[version] = root / f"conv-v{version}.rai"
        cl.compile_model(conv_version(100.0 * version), out[version], batch_size=4)
    return out


def place(repository: Path, name: str, version: int, source: Path) -> Path:
    """``source`` as ``repository/name/version/model.rai``, written then renamed in (as a
    deploy tool does: a poll never sees half a file)."""
    folder = repository / name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / ".model.rai.new"
    shutil.copy(source, temporary)
    os.replace(temporary, folder / "model.rai")
    return folder


def offset_of(logits: np.ndarray) -> int:
    """Which version answered: its logits' shift from version 0's (hundreds)."""
    return round(float(np.median(logits)) / 100.0)


def infer(client: object, module: object, x: np.ndarray, version: str = "", **kw: object
          ) -> np.ndarray:  # fmt: skip
    given = module.InferInput("input", list(x.shape), "FP32")  # type: ignore[attr-defined]
    given.set_data_from_numpy(x)
    result = client.infer("conv", [given], model_version=version, **kw)  # type: ignore[attr-defined]
    return result.as_numpy("logits")  # type: ignore[no-any-return]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return tmp_path / "models"


@pytest.mark.parametrize("kind", CLIENTS)
def test_latest_version_by_default_and_all_with_a_policy(repo: Path, compiled: dict[int, Path],
                                                         kind: str) -> None:  # fmt: skip
    for version in (1, 2):
        place(repo, "conv", version, compiled[version])
    x = conv_rows(1)
    server = start(repo)
    try:
        client = CLIENTS[kind].InferenceServerClient(server.url(kind))
        assert offset_of(infer(client, CLIENTS[kind], x)) == 2  # Triton's default: latest 1
        with pytest.raises(InferenceServerException, match="no version '1'"):
            infer(client, CLIENTS[kind], x, "1")
    finally:
        server.stop()
    (repo / "conv" / "config.pbtxt").write_text("version_policy: { all {} }\n")
    server = start(repo)
    try:
        client = CLIENTS[kind].InferenceServerClient(server.url(kind))
        assert offset_of(infer(client, CLIENTS[kind], x, "1")) == 1
        assert offset_of(infer(client, CLIENTS[kind], x, "2")) == 2
        assert offset_of(infer(client, CLIENTS[kind], x)) == 2
        meta = client.get_model_metadata("conv")
        versions = meta["versions"] if kind == "http" else list(meta.versions)
        assert versions == ["1", "2"]
        assert client.is_model_ready("conv", "1") and client.is_model_ready("conv", "2")
        stats = client.get_inference_statistics("conv")
        if kind == "grpc":
            from google.protobuf import json_format

            stats = json_format.MessageToDict(stats, preserving_proto_field_name=True)
        assert sorted(s["version"] for s in stats["model_stats"]) == ["1", "2"]
    finally:
        server.stop()


def test_a_policy_naming_a_missing_version_is_one_line_and_others_serve(
        repo: Path, compiled: dict[int, Path],
        caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    place(repo, "conv", 1, compiled[1])
    (repo / "conv" / "config.pbtxt").write_text("version_policy: { specific { versions: [1, 7] } }")
    place(repo, "other", 1, compiled[2])
    server = InferenceServer(repo, http=_loopback(), grpc_address=None, metrics=None,
                             settings=_settings())  # fmt: skip
    server.start()
    try:
        server.wait_ready(60)
        rows = {r["name"]: r for r in server.service.index()}
        assert rows["conv"]["state"] == "UNAVAILABLE" and "[7]" in rows["conv"]["reason"]
        assert rows["other"]["state"] == "READY"
        client = httpclient.InferenceServerClient(server.url("http"))
        assert not client.is_server_ready() and client.is_model_ready("other")
    finally:
        server.stop()
    errors = [r for r in caplog.records if r.levelname == "ERROR" and "'conv'" in r.getMessage()]
    assert len(errors) == 1, [r.getMessage() for r in errors]


def _loopback():  # type: ignore[no-untyped-def]
    from copyless.serve import Address

    return Address("127.0.0.1", 0)


def _settings(**kw: object):  # type: ignore[no-untyped-def]
    from copyless.serve import ServeSettings

    return ServeSettings(runner_type=cl.RunnerType.ONNXRUNTIME, **kw)  # type: ignore[arg-type]


class Load:
    """``clients`` gRPC clients sending one row each, back to back, until stopped: every
    answer's version and latency, every failure."""

    def __init__(self, url: str, clients: int = 8) -> None:
        self.answers: list[tuple[float, int, float]] = []  # (when, version, seconds)
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(url, i)) for i in range(clients)]
        for thread in self._threads:
            thread.start()

    def _run(self, url: str, seed: int) -> None:
        client = grpcclient.InferenceServerClient(url)
        x = conv_rows(1, seed=seed)
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                logits = infer(client, grpcclient, x)
            except InferenceServerException as exc:
                with self._lock:
                    self.failures.append(str(exc))
                continue
            with self._lock:
                self.answers.append((time.monotonic(), offset_of(logits),
                                     time.perf_counter() - started))  # fmt: skip
        client.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)


def _wait(condition, timeout_s: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_poll_reloads_under_load_without_losing_a_request(
        repo: Path, compiled: dict[int, Path]) -> None:  # fmt: skip
    """8 clients sending: a version added, then replaced in place, then a broken one: no
    request fails, answers move to the new version, the broken one leaves the old
    serving and says so in the index."""
    place(repo, "conv", 1, compiled[1])
    server = start(repo, model_control="poll", repository_poll_s=0.2)
    load = Load(server.url("grpc"))
    try:
        assert _wait(lambda: len(load.answers) > 50)
        place(repo, "conv", 2, compiled[2])
        assert _wait(lambda: load.answers and load.answers[-1][1] == 2), load.answers[-3:]
        place(repo, "conv", 2, compiled[3])  # version 2 replaced in place
        assert _wait(lambda: load.answers[-1][1] == 3), load.answers[-3:]
        folder = repo / "conv" / "4"
        folder.mkdir()
        (folder / "model.rai").write_bytes(b"not a model")
        assert _wait(lambda: any(r["version"] == "4" and r["state"] == "UNAVAILABLE"
                                 for r in server.service.index()))  # fmt: skip
        count = len(load.answers)
        assert _wait(lambda: len(load.answers) > count + 50)
        assert load.answers[-1][1] == 3  # version 2's new files still serve
    finally:
        load.stop()
        server.stop()
    assert load.failures == [], load.failures[:5]
    versions = [v for _, v, _ in load.answers]
    assert versions[0] == 1 and versions[-1] == 3 and 2 in versions


def test_explicit_control_loads_and_unloads_on_request(repository: Path) -> None:
    server = start(repository, model_control="explicit", load_models=("conv",))
    try:
        for kind, module in CLIENTS.items():
            client = module.InferenceServerClient(server.url(kind))
            assert client.is_model_ready("conv") and not client.is_model_ready("lite0")
            client.load_model("lite0")
            assert client.is_model_ready("lite0")
            x = pixels(1, seed=2)
            given = module.InferInput("input", list(x.shape), "UINT8")
            given.set_data_from_numpy(x)
            out = client.infer("lite0", [given]).as_numpy(
                client.get_model_metadata("lite0")["outputs"][0]["name"] if kind == "http"
                else client.get_model_metadata("lite0").outputs[0].name)
            (expected,) = runner_answers(repository / "lite0", x)
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
            client.unload_model("lite0")
            assert _wait(lambda c=client: not c.is_model_ready("lite0"), 10)
            with pytest.raises(InferenceServerException, match="no model 'nope'"):
                client.load_model("nope")
    finally:
        server.stop()


def test_load_and_unload_are_refused_outside_explicit_mode(server: InferenceServer) -> None:
    for kind, module in CLIENTS.items():
        client = module.InferenceServerClient(server.url(kind))
        with pytest.raises(InferenceServerException, match="--model-control-mode none"):
            client.load_model("conv")
        with pytest.raises(InferenceServerException, match="--model-control-mode none"):
            client.unload_model("conv")
        assert client.is_model_ready("conv")


@pytest.fixture
def slow_repo(repo: Path, repository: Path) -> Iterator[Path]:
    """Lite0 (batch 1, ~10 ms a row here) with two priority levels and a queue timeout
    policy that requests may shorten."""
    (repo / "lite0").mkdir(parents=True)
    shutil.copy(repository / "lite0" / "lite0.rai", repo / "lite0" / "lite0.rai")
    (repo / "lite0" / "config.pbtxt").write_text(
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 "
        "default_queue_policy { max_queue_size: 64 allow_timeout_override: true "
        "default_timeout_microseconds: 60000000 } }\n")
    yield repo


def _lite0(client: object, x: np.ndarray, **kw: object) -> float:
    given = grpcclient.InferInput("input", list(x.shape), "UINT8")
    given.set_data_from_numpy(x)
    client.infer("lite0", [given], **kw)  # type: ignore[attr-defined]
    return time.monotonic()


def test_priority_one_overtakes_the_queue(slow_repo: Path) -> None:
    server = start(slow_repo, slots=1)
    try:
        url = server.url("grpc")
        x = pixels(1, seed=1)
        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            low = [pool.submit(_lite0, grpcclient.InferenceServerClient(url), x, priority=2)
                   for _ in range(20)]  # fmt: skip
            time.sleep(0.05)
            high = [pool.submit(_lite0, grpcclient.InferenceServerClient(url), x, priority=1)
                    for _ in range(3)]  # fmt: skip
            low_done = sorted(f.result() for f in low)
            high_done = [f.result() for f in high]
        # each high-priority request finished before most of the low ones queued before it
        for done in high_done:
            assert sum(t > done for t in low_done) >= 8, (done, low_done)
    finally:
        server.stop()


def test_timeouts_and_bad_schedule_parameters(slow_repo: Path) -> None:
    server = start(slow_repo, slots=1)
    try:
        url = server.url("grpc")
        x = pixels(1, seed=1)
        client = grpcclient.InferenceServerClient(url)
        with pytest.raises(InferenceServerException, match="priority 3 is not one of"):
            _lite0(client, x, priority=3)
        http = httpclient.InferenceServerClient(server.url("http"))
        status, body = post(server.url("http"), "/v2/models/lite0/infer",
                            '{"inputs": [], "parameters": {"timeout": -5}}')  # fmt: skip
        assert status == 400 and "'timeout'" in body["error"], body  # type: ignore[index]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            busy = [pool.submit(_lite0, grpcclient.InferenceServerClient(url), x)
                    for _ in range(12)]  # fmt: skip
            time.sleep(0.05)
            with pytest.raises(InferenceServerException, match="Request timeout expired") as e:
                _lite0(client, x, timeout=1000)  # 1 ms in a queue of ~12 rows of ~10 ms
            assert "DEADLINE_EXCEEDED" in str(e.value.status())
            for f in busy:
                f.result()
        assert http.is_model_ready("lite0")
        metrics = server.service.metrics
        assert metrics.value("nv_inference_request_failure", "lite0") >= 2
    finally:
        server.stop()


def test_cancelled_requests_are_dropped_before_they_run(slow_repo: Path) -> None:
    """A gRPC call cancelled while queued, and an HTTP client that disconnects while its
    request waits: their rows never reach the engine; counted as CANCELED."""
    import socket

    server = start(slow_repo, slots=1)
    try:
        url = server.url("grpc")
        x = pixels(1, seed=1)
        metrics = server.service.metrics

        def admitted() -> float:
            return metrics.registry.get_sample_value("copyless_serve_request_bytes_count",
                                                     {"model": "lite0"}) or 0.0  # fmt: skip

        busy_count = 40  # a queue of ~0.4 s or more: both leave while theirs wait in it
        with concurrent.futures.ThreadPoolExecutor(busy_count) as pool:
            busy = [pool.submit(_lite0, grpcclient.InferenceServerClient(url), x)
                    for _ in range(busy_count)]  # fmt: skip
            assert _wait(lambda: metrics.value("nv_inference_pending_request_count", "lite0")
                         >= busy_count // 2, 30)  # fmt: skip
            # each leaves once the server holds it (on a loaded machine a request cancelled
            # before it arrives is no request, and not counted)
            assert _wait(lambda: admitted() >= busy_count, 30)
            client = grpcclient.InferenceServerClient(url)
            given = grpcclient.InferInput("input", list(x.shape), "UINT8")
            given.set_data_from_numpy(x)
            context = client.async_infer("lite0", [given], callback=lambda *a: None)
            assert _wait(lambda: admitted() >= busy_count + 1, 30)
            context.cancel()
            host, port = server.url("http").rsplit(":", 1)
            body = (b'{"inputs":[{"name":"input","datatype":"UINT8","shape":[1,224,224,4],'
                    b'"parameters":{"binary_data_size":200704}}]}')
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(b"POST /v2/models/lite0/infer HTTP/1.1\r\nHost: x\r\n"
                             b"Inference-Header-Content-Length: " + str(len(body)).encode()
                             + b"\r\nContent-Length: " + str(len(body) + x.nbytes).encode()
                             + b"\r\n\r\n" + body + x.tobytes())
                assert _wait(lambda: admitted() >= busy_count + 2, 30)
            for f in busy:
                f.result()
        assert _wait(lambda: metrics.value("nv_inference_pending_request_count", "lite0") == 0)
        failures = server.service.metrics.snapshot()[1]
        assert failures[("lite0", "1", "CANCELED")] == 2, failures
        assert metrics.value("nv_inference_count", "lite0") == busy_count
    finally:
        server.stop()
