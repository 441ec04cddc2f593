"""The issue's bad input, raw: each malformed request is one 4xx with one clear message
(gRPC: INVALID_ARGUMENT / NOT_FOUND / RESOURCE_EXHAUSTED), and the server answers the next
good request."""

from __future__ import annotations

import json
import logging
import struct

import grpc
import numpy as np
import pytest
from serve_helpers import conv_rows, post, start
from tritonclient.grpc import service_pb2, service_pb2_grpc

from copyless.serve import InferenceServer

X = conv_rows(1).tobytes()
INPUT = {"name": "input", "datatype": "FP32", "shape": [1, 3, 16, 16]}
HEADER = "Inference-Header-Content-Length"


def _binary(entry: dict, data: bytes, declared: int | None = None) -> tuple[bytes, dict]:
    entry = {**entry, "parameters": {"binary_data_size": len(data) if declared is None
                                     else declared}}  # fmt: skip
    head = json.dumps({"inputs": [entry]}).encode()
    return head + data, {HEADER: str(len(head))}


def _json_data(count: int, **changes: object) -> str:
    return json.dumps({"inputs": [{**INPUT, **changes, "data": [1] * count}]})


CASES = {
    # name: (path, body, headers, status, words in the message)
    "malformed JSON": ("conv", b'{"inputs": [', {}, 400, "malformed JSON"),
    "not an object": ("conv", b"[1, 2]", {}, 400, "JSON object"),
    "no inputs": ("conv", b"{}", {}, 400, "'inputs'"),
    "unknown model": ("nope", _json_data(768), {}, 404, "unknown model 'nope'"),
    "unknown input": ("conv", _json_data(768, name="pixels"), {}, 400, "no input 'pixels'"),
    "wrong shape": ("conv", _json_data(768, shape=[1, 3, 8, 32]), {}, 400, "does not fit"),
    "too many rows": ("conv4", _json_data(5 * 768, shape=[5, 3, 16, 16]), {}, 400,
                      "1 to 4 rows"),
    "wrong datatype": ("conv", _json_data(768, datatype="INT32"), {}, 400, "takes FP32"),
    "unknown datatype": ("conv", _json_data(768, datatype="FP128"), {}, 400, "FP128"),
    "data shorter": ("conv", _json_data(767), {}, 400, "767 elements"),
    "data longer": ("conv", _json_data(769), {}, 400, "769 elements"),
    "strings as data": ("conv", json.dumps({"inputs": [{**INPUT, "data": ["a"] * 768}]}), {},
                        400, "only numbers"),
    "ragged data": ("conv", json.dumps({"inputs": [{**INPUT, "data": [[1.0], [1.0, 2.0]]}]}),
                    {}, 400, "rectangular"),
    "binary shorter": ("conv", *_binary(INPUT, X[:-4]), 400, "768 (3072 bytes)"),
    "binary size lies (more)": ("conv", *_binary(INPUT, X, len(X) + 4), 400, "runs past"),
    "binary size lies (less)": ("conv", *_binary(INPUT, X, len(X) - 4), 400, "declare"),
    "binary size odd": ("conv", *_binary(INPUT, X[:-1]), 400, "whole number"),
    "header length lies": ("conv", _binary(INPUT, X)[0], {HEADER: "999999"}, 400,
                           HEADER),
    "header length garbage": ("conv", _binary(INPUT, X)[0], {HEADER: "-3"}, 400, HEADER),
    "unknown output": ("conv", json.dumps({"inputs": [{**INPUT, "data": [0] * 768}],
                                           "outputs": [{"name": "probs"}]}), {}, 400,
                       "no output 'probs'"),
    "input twice": ("conv", json.dumps({"inputs": [{**INPUT, "data": [0] * 768}] * 2}), {},
                    400, "twice"),
    # client shared memory is off over TCP by default (test_serve_security: when it is on)
    "a region over TCP": ("conv", json.dumps({"inputs": [{**INPUT, "parameters": {
        "shared_memory_region": "gone", "shared_memory_byte_size": 3072}}]}), {}, 403,
        "--allow-client-shm"),
    "nested too deeply": ("conv", "[" * 3000 + "]" * 3000, {}, 400, "nested too deeply"),
    "data nested too deeply": ("conv", '{"inputs": [{"name": "input", "datatype": "FP32", '
                               '"shape": [1, 3, 16, 16], "data": ' + "[" * 100 + "1"
                               + "]" * 100 + "}]}", {}, 400, "input 'input'"),
    "header length superscript": ("conv", _binary(INPUT, X)[0], {HEADER: "\u00b2"}, 400,
                                  HEADER),
    "header length too long": ("conv", _binary(INPUT, X)[0], {HEADER: "9" * 40}, 400, HEADER),
    "classification": ("conv", json.dumps({"inputs": [{**INPUT, "data": [0] * 768}],
                                           "outputs": [{"name": "logits", "parameters": {
                                               "classification": 3}}]}), {}, 400,
                       "classification"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_each_bad_request_is_one_clear_4xx(server: InferenceServer, case: str,
                                           caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    model, body, headers, status, words = CASES[case]
    with caplog.at_level(logging.WARNING):
        got, answer = post(server.url("http"), f"/v2/models/{model}/infer", body, headers)
    assert got == status, answer
    assert isinstance(answer, dict) and set(answer) == {"error"}, answer
    assert words in answer["error"], answer
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    good, _ = post(server.url("http"), "/v2/models/conv/infer", _json_data(768))
    assert good == 200


def test_too_large_is_413(repository) -> None:

    server = start(repository, max_request_bytes=4096)
    try:
        body, headers = _binary({**INPUT, "shape": [4, 3, 16, 16]}, X * 4)
        status, answer = post(server.url("http"), "/v2/models/conv4/infer", body, headers)
        assert status == 413 and "4096" in answer["error"]  # type: ignore[index]
        with grpc.insecure_channel(server.url("grpc")) as channel, \
                pytest.raises(grpc.RpcError) as caught:  # fmt: skip
            request = service_pb2.ModelInferRequest(model_name="conv4",
                                                    raw_input_contents=[X * 4])
            request.inputs.add(name="input", datatype="FP32", shape=[4, 3, 16, 16])
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
        assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        server.stop()


@pytest.mark.parametrize("path", ["/v2/nothing", "/v3/models/conv", "/v2/models/conv/infer/x"])
def test_unknown_routes_are_json_404(server: InferenceServer, path: str) -> None:
    status, answer = post(server.url("http"), path, b"", method="GET")
    assert status in (404, 405) and "error" in answer, answer  # type: ignore[operator]


def _grpc_infer(server: InferenceServer, request: object) -> grpc.StatusCode:
    with grpc.insecure_channel(server.url("grpc")) as channel:
        try:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
        except grpc.RpcError as exc:
            assert exc.details(), exc
            return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def _request(model: str = "conv", raw: list[bytes] | None = None, shape=(1, 3, 16, 16),
             datatype: str = "FP32", name: str = "input"):  # type: ignore[no-untyped-def]
    request = service_pb2.ModelInferRequest(model_name=model,
                                            raw_input_contents=[X] if raw is None else raw)
    request.inputs.add(name=name, datatype=datatype, shape=list(shape))
    return request


def _versioned(request, version: str):  # type: ignore[no-untyped-def]
    request.model_version = version
    return request


GRPC_CASES = {
    "unknown model": (_request("nope"), grpc.StatusCode.NOT_FOUND),
    "unknown input": (_request(name="pixels"), grpc.StatusCode.INVALID_ARGUMENT),
    "wrong shape": (_request(shape=(1, 3, 8, 8)), grpc.StatusCode.INVALID_ARGUMENT),
    "wrong datatype": (_request(datatype="UINT8"), grpc.StatusCode.INVALID_ARGUMENT),
    "data shorter": (_request(raw=[X[:-4]]), grpc.StatusCode.INVALID_ARGUMENT),
    "data longer": (_request(raw=[X + X]), grpc.StatusCode.INVALID_ARGUMENT),
    "raw contents twice": (_request(raw=[X, X]), grpc.StatusCode.INVALID_ARGUMENT),
    "no data": (_request(raw=[]), grpc.StatusCode.INVALID_ARGUMENT),
    "unknown version": (_versioned(_request(), "9"), grpc.StatusCode.NOT_FOUND),
}  # fmt: skip


@pytest.mark.parametrize("case", GRPC_CASES)
def test_each_bad_grpc_request_is_one_status(server: InferenceServer, case: str) -> None:
    request, code = GRPC_CASES[case]
    assert _grpc_infer(server, request) is code
    assert _grpc_infer(server, _request()) is grpc.StatusCode.OK


def test_a_region_named_in_grpc_over_tcp_is_refused(server: InferenceServer) -> None:
    """Client shared memory is off over TCP by default (test_serve_security: when it is
    on, an unknown region is NOT_FOUND)."""
    request = _request(raw=[])
    params = request.inputs[0].parameters
    params["shared_memory_region"].string_param = "gone"
    params["shared_memory_byte_size"].int64_param = len(X)
    assert _grpc_infer(server, request) is grpc.StatusCode.PERMISSION_DENIED


def test_a_client_that_disconnects_mid_request_costs_nothing(server: InferenceServer) -> None:
    """Half a body, then the socket closes: the server answers the next request."""
    import socket

    host, port = server.url("http").rsplit(":", 1)
    body, _ = _binary(INPUT, X)
    for _ in range(20):
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v2/models/conv/infer HTTP/1.1\r\nHost: x\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:100])
    assert post(server.url("http"), "/v2/models/conv/infer", _json_data(768))[0] == 200
    assert struct.calcsize("f") == 4 and np.float32  # the module's imports are used
