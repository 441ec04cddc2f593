"""Dynamic batching on the Pipeline, the bounded queue, metrics and readiness."""

from __future__ import annotations

import concurrent.futures
import threading
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_helpers import conv_rows, pixels, post, runner_answers, start
from tritonclient.utils import InferenceServerException

from copyless.serve import InferenceServer, ServedModel


def _grpc_infer(client, model: str, x: np.ndarray, dtype: str = "FP32"):  # type: ignore[no-untyped-def]
    given = grpcclient.InferInput("input", list(x.shape), dtype)
    given.set_data_from_numpy(x)
    return client.infer(model, [given])


def test_concurrent_requests_are_batched(repository) -> None:
    """16 single-row requests at once on the batch-4 model, with a 50 ms delay: fewer than
    16 batches, each answer the Runner's."""
    server = start(repository, max_queue_delay_ms=50.0)
    try:
        client = grpcclient.InferenceServerClient(server.url("grpc"))
        xs = conv_rows(16, seed=21)
        expected = runner_answers(repository / "conv", xs)[0]
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda i: _grpc_infer(client, "conv4", xs[i:i + 1]),
                                    range(16)))  # fmt: skip
        for i, result in enumerate(results):
            np.testing.assert_array_equal(result.as_numpy("logits")[0], expected[i])
        metrics = server.service.metrics
        assert metrics.value("nv_inference_count", "conv4") == 16
        assert metrics.value("nv_inference_request_success", "conv4") == 16
        batches = metrics.value("nv_inference_exec_count", "conv4")
        assert 4 <= batches < 16, batches
        text = urllib.request.urlopen(f"http://{server.url('metrics')}/metrics").read().decode()
        assert 'nv_inference_exec_count{model="conv4",version="1"}' in text
        assert 'copyless_serve_batch_size_bucket{le="4.0",model="conv4",version="1"} ' in text
        client.close()
    finally:
        server.stop()


def test_a_full_queue_is_503_and_resource_exhausted(repository) -> None:
    """A queue of one row on Lite0, 24 requests at once: some are refused with one clear
    message (counted as REJECTED), the rest answered right, the server goes on."""
    server = start(repository, max_queue_size=1, slots=1)
    try:
        client = grpcclient.InferenceServerClient(server.url("grpc"))
        x = pixels(1, seed=8)
        (expected,) = runner_answers(repository / "lite0", x)

        def one(_: int) -> str:
            try:
                result = _grpc_infer(client, "lite0", x, "UINT8")
            except InferenceServerException as exc:
                assert exc.status() == "StatusCode.RESOURCE_EXHAUSTED", exc
                assert "is busy" in exc.message() and "retry later" in exc.message()
                return "refused"
            np.testing.assert_array_equal(result.as_numpy(result.get_response().outputs[0].name),
                                          expected)  # fmt: skip
            return "ok"

        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            outcomes = list(pool.map(one, range(24)))
        assert "refused" in outcomes and "ok" in outcomes, outcomes
        assert server.service.metrics.value("nv_inference_request_failure", "lite0") \
            == outcomes.count("refused")  # fmt: skip
        # REST says 503 for the same
        http = httpclient.InferenceServerClient(server.url("http"))
        given = httpclient.InferInput("input", list(x.shape), "UINT8")
        given.set_data_from_numpy(x)
        assert http.infer("lite0", [given]).as_numpy(
            http.get_model_metadata("lite0")["outputs"][0]["name"]).shape == (1, 1000)
        client.close()
    finally:
        server.stop()


def test_not_ready_while_a_model_loads(repository, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    load = ServedModel.load

    def held(self: ServedModel) -> None:
        if self.name == "lite0":
            gate.wait(30)
        load(self)

    monkeypatch.setattr(ServedModel, "load", held)
    from copyless.serve import Address, ServeSettings
    from copyless.types import RunnerType

    loopback = Address("127.0.0.1", 0)
    server = InferenceServer(repository, http=loopback, grpc_address=loopback, metrics=None,
                             settings=ServeSettings(runner_type=RunnerType.ONNXRUNTIME))
    server.start()
    try:
        http = httpclient.InferenceServerClient(server.url("http"))
        grpc_client = grpcclient.InferenceServerClient(server.url("grpc"))
        assert http.is_server_live() and not http.is_server_ready()
        assert not grpc_client.is_server_ready()
        assert not http.is_model_ready("lite0")
        status, answer = post(server.url("http"), "/v2/models/lite0/infer", b"{}")
        assert status == 503 and "not ready" in answer["error"]  # type: ignore[index]
        gate.set()
        assert server.wait_ready(60)
        assert http.is_server_ready() and grpc_client.is_model_ready("lite0")
        grpc_client.close()
    finally:
        gate.set()
        server.stop()


def test_a_model_that_fails_to_load(tmp_path, repository) -> None:
    """A corrupt model is UNAVAILABLE with its reason (server not ready); the others serve."""
    import shutil

    shutil.copytree(repository / "conv", tmp_path / "conv")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "broken.rai").write_bytes(b"not a model")
    from copyless.serve import Address, ServeSettings
    from copyless.types import RunnerType

    loopback = Address("127.0.0.1", 0)
    server = InferenceServer(tmp_path, http=loopback, grpc_address=None, metrics=None,
                             settings=ServeSettings(runner_type=RunnerType.ONNXRUNTIME))
    server.start()
    try:
        server.service.repository.wait_loaded(60)
        http = httpclient.InferenceServerClient(server.url("http"))
        assert not http.is_server_ready() and http.is_model_ready("conv")
        index = {row["name"]: row for row in http.get_model_repository_index()}
        assert index["broken"]["state"] == "UNAVAILABLE" and "failed to load" in \
            index["broken"]["reason"]  # fmt: skip
        x = conv_rows(1)
        given = httpclient.InferInput("input", list(x.shape), "FP32")
        given.set_data_from_numpy(x)
        assert http.infer("conv", [given]).as_numpy("logits").shape == (1, 10)
    finally:
        server.stop()
