"""The protocol through tritonclient, REST and gRPC alike: health, metadata (the HW view),
config, repository index, infer with JSON and binary data; answers equal the Runner's."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_helpers import conv_rows, pixels, runner_answers

from copyless.serve import InferenceServer

CLIENTS = {"http": httpclient, "grpc": grpcclient}


def client(server: InferenceServer, kind: str):  # type: ignore[no-untyped-def]
    return CLIENTS[kind].InferenceServerClient(server.url(kind))


@pytest.mark.parametrize("kind", CLIENTS)
def test_health_and_server_metadata(server: InferenceServer, kind: str) -> None:
    c = client(server, kind)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("conv") and c.is_model_ready("lite0", "1")
    meta = c.get_server_metadata()
    extensions = meta["extensions"] if kind == "http" else list(meta.extensions)
    assert "binary_tensor_data" in extensions and "system_shared_memory" in extensions


@pytest.mark.parametrize("kind", CLIENTS)
def test_model_metadata_is_the_hw_view(server: InferenceServer, kind: str) -> None:
    """Lite0 compiled for RGBx takes uint8 pixels [-1, 224, 224, 4]."""
    c = client(server, kind)
    meta = c.get_model_metadata("lite0")
    if kind == "grpc":
        from google.protobuf import json_format

        meta = json_format.MessageToDict(meta)
        for t in meta["inputs"] + meta["outputs"]:
            t["shape"] = [int(d) for d in t["shape"]]
    (given,) = meta["inputs"]
    assert (given["datatype"], given["shape"]) == ("UINT8", [-1, 224, 224, 4])
    assert meta["outputs"][0]["datatype"] == "FP32"
    assert meta["outputs"][0]["shape"][-1] == 1000


@pytest.mark.parametrize("kind", CLIENTS)
def test_model_config_names_the_batching(server: InferenceServer, kind: str) -> None:
    c = client(server, kind)
    config = c.get_model_config("conv4")
    if kind == "grpc":
        from google.protobuf import json_format

        config = json_format.MessageToDict(config.config, preserving_proto_field_name=True)
    assert int(config["max_batch_size"]) == 4
    assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == 2000


def test_repository_index(server: InferenceServer) -> None:
    index = client(server, "http").get_model_repository_index()
    assert {row["name"]: row["state"] for row in index} == {
        "conv": "READY", "conv4": "READY", "lite0": "READY"}


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize(("model", "rows"), [("conv", 1), ("conv4", 3), ("conv4", 4)])
def test_binary_infer_equals_the_runner(server: InferenceServer, repository, kind: str,
                                        model: str, rows: int) -> None:  # fmt: skip
    x = conv_rows(rows, seed=rows)
    module = CLIENTS[kind]
    given = module.InferInput("input", list(x.shape), "FP32")
    given.set_data_from_numpy(x)
    result = client(server, kind).infer(model, [given], request_id="r7")
    (expected,) = runner_answers(repository / "conv", x)
    np.testing.assert_array_equal(result.as_numpy("logits"), expected)
    response = result.get_response()
    assert (response["id"] if kind == "http" else response.id) == "r7"


def test_json_infer_equals_the_runner(server: InferenceServer, repository) -> None:
    x = conv_rows(2, seed=5)
    given = httpclient.InferInput("input", list(x.shape), "FP32")
    given.set_data_from_numpy(x, binary_data=False)
    wanted = httpclient.InferRequestedOutput("logits", binary_data=False)
    result = client(server, "http").infer("conv4", [given], outputs=[wanted])
    (expected,) = runner_answers(repository / "conv", x)
    np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=1e-6)
    assert "data" in result.get_response()["outputs"][0]  # JSON, not binary


@pytest.mark.parametrize("kind", CLIENTS)
def test_lite0_pixels_equal_the_runner(server: InferenceServer, repository, kind: str) -> None:
    x = pixels(1, seed=3)
    module = CLIENTS[kind]
    given = module.InferInput("input", list(x.shape), "UINT8")
    given.set_data_from_numpy(x)
    result = client(server, kind).infer("lite0", [given])
    name = result.get_response()["outputs"][0]["name"] if kind == "http" \
        else result.get_response().outputs[0].name  # fmt: skip
    (expected,) = runner_answers(repository / "lite0", x)
    np.testing.assert_array_equal(result.as_numpy(name), expected)


def test_grpc_typed_contents(server: InferenceServer, repository) -> None:
    """A request with fp32_contents instead of raw bytes (what non-Triton clients send)."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    x = conv_rows(1, seed=9)
    request = service_pb2.ModelInferRequest(model_name="conv")
    tensor = request.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
    tensor.contents.fp32_contents.extend(x.reshape(-1).tolist())
    with grpc.insecure_channel(server.url("grpc")) as channel:
        answer = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    got = np.frombuffer(answer.raw_output_contents[0], np.float32).reshape(1, 10)
    (expected,) = runner_answers(repository / "conv", x)
    np.testing.assert_array_equal(got, expected)


def test_versioned_paths(server: InferenceServer) -> None:
    c = client(server, "http")
    assert c.get_model_metadata("conv", "1")["versions"] == ["1"]
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match="no version '2'"):
        c.get_model_metadata("conv", "2")
