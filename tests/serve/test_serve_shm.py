"""The system shared-memory extension with tritonclient's own regions (REST and gRPC):
inputs read from and outputs written into registered regions, equal to the Runner's; a
region its owner truncates, unregisters mid-flight or that lies outside /dev/shm is one
request's 4xx, and the server goes on."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from serve_helpers import conv_rows, pixels, post, runner_answers, shm_region, start
from tritonclient.utils import InferenceServerException

from copyless.serve import InferenceServer

CLIENTS = {"http": httpclient, "grpc": grpcclient}


@pytest.fixture(scope="module")
def server(repository) -> Iterator[InferenceServer]:  # type: ignore[no-untyped-def]
    """This module's server takes client shared memory over TCP (``--allow-client-shm``);
    the regions are this process's own, so the uid check passes."""
    served = start(repository, max_queue_delay_ms=2.0, allow_client_shm=True)
    yield served
    served.stop()


def _shm_fds(key: str) -> list[str]:
    """This process's descriptors open on the /dev/shm object ``key``."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(f"/dev/shm/{key.lstrip('/')}"):
                found.append(fd)
    return found


def _key() -> str:
    return f"/copyless-test-{uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def triton_region(client, name: str, nbytes: int) -> Iterator[object]:  # type: ignore[no-untyped-def]
    key = _key()
    handle = shm.create_shared_memory_region(name, key, nbytes)
    try:
        client.register_system_shared_memory(name, key, nbytes)
        yield handle
    finally:
        client.unregister_system_shared_memory(name)
        shm.destroy_shared_memory_region(handle)


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize(("model", "rows"), [("conv", 1), ("conv4", 3)])
def test_inputs_and_outputs_in_regions(server: InferenceServer, repository, kind: str,
                                       model: str, rows: int) -> None:  # fmt: skip
    module = CLIENTS[kind]
    client = module.InferenceServerClient(server.url(kind))
    x = conv_rows(rows, seed=11)
    out_bytes = rows * 10 * 4
    with triton_region(client, "in", x.nbytes + 64) as h_in, \
            triton_region(client, "out", out_bytes + 64) as h_out:  # fmt: skip
        shm.set_shared_memory_region(h_in, [x], offset=64)
        given = module.InferInput("input", list(x.shape), "FP32")
        given.set_shared_memory("in", x.nbytes, offset=64)
        wanted = module.InferRequestedOutput("logits")
        wanted.set_shared_memory("out", out_bytes, offset=64)
        client.infer(model, [given], outputs=[wanted])
        got = shm.get_contents_as_numpy(h_out, np.float32, [rows, 10], offset=64)
        (expected,) = runner_answers(repository / "conv", x)
        np.testing.assert_array_equal(got, expected)
        status = client.get_system_shared_memory_status("in")
        if kind == "http":
            assert status == [{"name": "in", "key": status[0]["key"], "offset": 0,
                               "byte_size": x.nbytes + 64}]  # fmt: skip
        else:
            assert status.regions["in"].byte_size == x.nbytes + 64


def test_shm_input_with_a_binary_output(server: InferenceServer, repository) -> None:
    client = httpclient.InferenceServerClient(server.url("http"))
    x = pixels(1, seed=2)
    with triton_region(client, "pix", x.nbytes) as handle:
        shm.set_shared_memory_region(handle, [x])
        given = httpclient.InferInput("input", list(x.shape), "UINT8")
        given.set_shared_memory("pix", x.nbytes)
        result = client.infer("lite0", [given])
    (expected,) = runner_answers(repository / "lite0", x)
    name = result.get_response()["outputs"][0]["name"]
    np.testing.assert_array_equal(result.as_numpy(name), expected)


def _infer_from(server: InferenceServer, region: str, nbytes: int, out: str | None = None,
                out_bytes: int = 40) -> tuple[int, object]:  # fmt: skip
    import json

    request = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 16, 16],
                           "parameters": {"shared_memory_region": region,
                                          "shared_memory_byte_size": nbytes}}]}  # fmt: skip
    if out is not None:
        request["outputs"] = [{"name": "logits", "parameters": {
            "shared_memory_region": out, "shared_memory_byte_size": out_bytes}}]  # fmt: skip
    return post(server.url("http"), "/v2/models/conv/infer", json.dumps(request))


def test_a_truncated_input_region_is_a_400_and_the_server_goes_on(
        server: InferenceServer) -> None:  # fmt: skip
    x = conv_rows(1)
    key = _key()
    with shm_region(key, x.nbytes) as (fd, view):
        view[:] = x.tobytes()
        assert post(server.url("http"), "/v2/systemsharedmemory/region/t/register",
                    f'{{"key": "{key}", "byte_size": {x.nbytes}}}')[0] == 200  # fmt: skip
        assert _infer_from(server, "t", x.nbytes)[0] == 200
        os.ftruncate(fd, 100)  # the owner shrinks it under the server
        status, body = _infer_from(server, "t", x.nbytes)
        assert status == 400 and "truncated" in body["error"], body  # type: ignore[index]
        post(server.url("http"), "/v2/systemsharedmemory/region/t/unregister", b"")
    assert server.service.ready
    assert not _shm_fds(key)  # the region's descriptor closed


def test_a_truncated_output_region_is_a_400(server: InferenceServer) -> None:
    x = conv_rows(1)
    key_in, key_out = _key(), _key()
    with shm_region(key_in, x.nbytes) as (_, view), shm_region(key_out, 40) as (fd_out, _):
        view[:] = x.tobytes()
        url = server.url("http")
        post(url, "/v2/systemsharedmemory/region/i/register",
             f'{{"key": "{key_in}", "byte_size": {x.nbytes}}}')  # fmt: skip
        post(url, "/v2/systemsharedmemory/region/o/register",
             f'{{"key": "{key_out}", "byte_size": 40}}')  # fmt: skip
        os.ftruncate(fd_out, 8)
        status, body = _infer_from(server, "i", x.nbytes, out="o")
        assert status == 400 and "truncated" in body["error"], body  # type: ignore[index]
        assert os.fstat(fd_out).st_size == 8  # not grown back
        post(url, "/v2/systemsharedmemory/unregister", b"")


@pytest.mark.parametrize("key", ["../etc/passwd", "/a/b", "/.", "/..", "", "/missing-x1",
                                 "/proc/self/mem"])
def test_keys_outside_dev_shm_are_refused(server: InferenceServer, key: str) -> None:
    status, body = post(server.url("http"), "/v2/systemsharedmemory/region/bad/register",
                        f'{{"key": "{key}", "byte_size": 4}}')  # fmt: skip
    assert status == 400, body
    assert len(server.service.regions) == 0


def test_a_symlink_in_dev_shm_is_refused(server: InferenceServer) -> None:
    link = f"/dev/shm/copyless-test-link-{uuid.uuid4().hex[:8]}"
    os.symlink("/etc/hostname", link)
    try:
        status, body = post(server.url("http"), "/v2/systemsharedmemory/region/l/register",
                            f'{{"key": "{os.path.basename(link)}", "byte_size": 1}}')
    finally:
        os.unlink(link)
    assert status == 400 and "that this client may open" in body["error"]  # type: ignore[index]


def test_ranges_out_of_bounds_and_unknown_regions(server: InferenceServer) -> None:
    url = server.url("http")
    key = _key()
    with shm_region(key, 4096):
        status, body = post(url, "/v2/systemsharedmemory/region/big/register",
                            f'{{"key": "{key}", "byte_size": 8192}}')  # fmt: skip
        assert status == 400 and "outside" in body["error"]  # type: ignore[index]
        assert post(url, "/v2/systemsharedmemory/region/r/register",
                    f'{{"key": "{key}", "offset": 1024, "byte_size": 2048}}')[0] == 200
        status, body = post(url, "/v2/systemsharedmemory/region/r/register",
                            f'{{"key": "{key}", "byte_size": 8}}')  # fmt: skip
        assert status == 409  # already registered
        import json

        request = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 16, 16],
                               "parameters": {"shared_memory_region": "r",
                                              "shared_memory_byte_size": 3072,
                                              "shared_memory_offset": 1000}}]}  # fmt: skip
        status, body = post(url, "/v2/models/conv/infer", json.dumps(request))
        assert status == 400 and "outside" in body["error"], body  # type: ignore[index]
        post(url, "/v2/systemsharedmemory/region/r/unregister", b"")
    status, body = _infer_from(server, "nowhere", 3072)
    assert status == 404 and "is registered" in body["error"]  # type: ignore[index]
    status, body = post(url, "/v2/systemsharedmemory/region/nowhere/status", b"", method="GET")
    assert status == 404


def test_unregistered_mid_flight(server: InferenceServer, repository) -> None:
    """Requests racing an unregister: each answer is right or one clear 4xx; no descriptor
    is left open once they are done (gRPC: its client is thread-safe)."""
    client = grpcclient.InferenceServerClient(server.url("grpc"))
    x = pixels(1, seed=4)
    (expected,) = runner_answers(repository / "lite0", x)
    key = _key()
    handle = shm.create_shared_memory_region("mid", key, x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    try:
        client.register_system_shared_memory("mid", key, x.nbytes)

        def one(_: int) -> str:
            given = grpcclient.InferInput("input", list(x.shape), "UINT8")
            given.set_shared_memory("mid", x.nbytes)
            try:
                result = client.infer("lite0", [given])
            except InferenceServerException as exc:
                assert exc.status() in ("StatusCode.INVALID_ARGUMENT",
                                        "StatusCode.NOT_FOUND"), exc  # fmt: skip
                assert "registered" in exc.message(), exc
                return "refused"
            name = result.get_response().outputs[0].name
            np.testing.assert_array_equal(result.as_numpy(name), expected)
            return "ok"

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(one, i) for i in range(24)]
            client.unregister_system_shared_memory("mid")
            outcomes = [f.result() for f in futures]
        assert set(outcomes) <= {"ok", "refused"}
    finally:
        shm.destroy_shared_memory_region(handle)
        client.close()
    assert len(server.service.regions) == 0
    assert not _shm_fds(key)
