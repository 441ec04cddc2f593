"""copyless-serve against hostile clients (docs/serve.md, "Security"): client shared memory
is off over TCP by default; where it is on, no client opens an object it could not open
itself, nor learns that one exists, nor sees, uses or removes another client's regions;
restricted APIs answer only with their key; Unix sockets identify their clients.

The clients run in processes of their own (``hostile_client.py``); as other users where the
test runs as root (it creates the victim's object as another user then), which CI does.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from serve_helpers import conv_rows, runner_answers, start
from tritonclient.utils import InferenceServerException

from copyless.serve import Address, InferenceServer, ServeSettings, parse_restriction

HOSTILE = Path(__file__).with_name("hostile_client.py")
VICTIM, INTRUDER = 12345, 23456
SECRET = b"the victim's secret: 0123456789abcdef"
X = conv_rows(1, seed=3)
ROOT = os.geteuid() == 0
as_root = pytest.mark.skipif(not ROOT, reason="creating another user's object needs root")


def hostile(action: str, uid: int | None = None, **args: Any) -> dict[str, Any]:
    """``hostile_client.py ACTION`` in a child process, as ``uid`` (None: this user)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, str(HOSTILE), action, json.dumps(args)]
    done = subprocess.run(argv + ([str(uid)] if uid is not None else []), capture_output=True,
                          text=True, timeout=120, env=env, cwd="/")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _key() -> str:
    return f"copyless-victim-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def victim_object(owner: int | None = VICTIM, mode: int = 0o600) -> Iterator[str]:
    """A /dev/shm object holding :data:`SECRET` and a conv input after it, owned by
    ``owner``; its key."""
    key = _key()
    path = f"/dev/shm/{key}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, SECRET.ljust(64, b"\0") + X.tobytes())
        os.fchmod(fd, mode)
        if owner is not None:
            os.fchown(fd, owner, owner)
        yield key
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@pytest.fixture(scope="module")
def open_server(repository: Path) -> Iterator[InferenceServer]:
    """A server that takes client shared memory over TCP (``--allow-client-shm``)."""
    served = start(repository, allow_client_shm=True)
    yield served
    served.stop()


def _url(server: InferenceServer, protocol: str) -> str:
    return server.url(protocol)


PROTOCOLS = ("http", "grpc")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_client_shared_memory_is_off_over_tcp_by_default(server: InferenceServer,
                                                         protocol: str) -> None:  # fmt: skip
    with victim_object(owner=None) as key:
        answer = hostile("register", protocol=protocol, url=_url(server, protocol), name="r",
                         key=key, byte_size=64)  # fmt: skip
    assert not answer["ok"]
    assert answer["status"] in ("403", "StatusCode.PERMISSION_DENIED"), answer
    assert "--allow-client-shm" in answer["message"]
    status = hostile("status", protocol=protocol, url=_url(server, protocol))
    assert not status["ok"] and "--allow-client-shm" in status["message"]


@as_root
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_another_users_object_cannot_be_registered(open_server: InferenceServer,
                                                   protocol: str) -> None:  # fmt: skip
    """The issue's victim: a 0600 object of another user. The intruder's registration is
    refused with the words a missing object gets; the victim's own succeeds."""
    url = _url(open_server, protocol)
    with victim_object() as key, contextlib.ExitStack() as cleanup:
        cleanup.callback(open_server.service.regions.close)
        stolen = hostile("register", INTRUDER, protocol=protocol, url=url, name="loot", key=key,
                         byte_size=64)  # fmt: skip
        missing = hostile("register", INTRUDER, protocol=protocol, url=url, name="loot",
                          key="copyless-no-such-object", byte_size=64)  # fmt: skip
        assert not stolen["ok"] and not missing["ok"]
        assert stolen["message"].replace(key, "K") == missing["message"].replace(
            "copyless-no-such-object", "K"), (stolen, missing)  # nothing tells them apart
        assert "bytes" not in stolen["message"]  # nor the object's size
        used = hostile("infer_region", INTRUDER, protocol=protocol, url=url, model="conv",
                       name="loot", byte_size=X.nbytes)  # fmt: skip
        assert not used["ok"] and "'loot'" in used["message"], used
        assert SECRET.decode()[:10] not in json.dumps(used)
        mine = hostile("register", VICTIM, protocol=protocol, url=url, name="mine", key=key,
                       byte_size=64 + X.nbytes)  # fmt: skip
        assert mine["ok"], mine
        hostile("unregister_all", VICTIM, protocol=protocol, url=url)


@as_root
def test_refusals_say_the_same_for_links_fifos_directories_and_others(
        open_server: InferenceServer) -> None:  # fmt: skip
    url = _url(open_server, "http")
    made = []
    try:
        for kind in ("link", "fifo", "dir"):
            path = f"/dev/shm/copyless-{kind}-{uuid.uuid4().hex[:8]}"
            {"link": lambda p: os.symlink("/etc/hostname", p), "fifo": os.mkfifo,
             "dir": os.mkdir}[kind](path)  # fmt: skip
            made.append(path)
        with victim_object() as key:
            answers = {Path(p).name: hostile("register", INTRUDER, protocol="http", url=url,
                                             name="r", key=Path(p).name, byte_size=1)
                       for p in [*made, f"/dev/shm/{key}", "/dev/shm/copyless-absent"]}
    finally:
        for path in made:
            (os.rmdir if os.path.isdir(path) and not os.path.islink(path) else os.unlink)(path)
    words = {a["message"].replace(name, "K") for name, a in answers.items()}
    assert len(words) == 1 and all(a["status"] == "400" for a in answers.values()), answers


@as_root
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_regions_belong_to_their_client(open_server: InferenceServer, repository: Path,
                                        protocol: str) -> None:  # fmt: skip
    """Two users register the same region name over their own objects: each sees, uses
    and unregisters only its own."""
    url = _url(open_server, protocol)
    with victim_object(VICTIM) as key_a, victim_object(INTRUDER, 0o600) as key_b, \
            contextlib.ExitStack() as cleanup:  # fmt: skip
        cleanup.callback(open_server.service.regions.close)
        for uid, key in ((VICTIM, key_a), (INTRUDER, key_b)):
            answer = hostile("register", uid, protocol=protocol, url=url, name="shared",
                             key=key, byte_size=64 + X.nbytes)  # fmt: skip
            assert answer["ok"], answer
        assert hostile("status", VICTIM, protocol=protocol, url=url)["names"] == ["shared"]
        assert hostile("status", INTRUDER, protocol=protocol, url=url)["names"] == ["shared"]
        assert len(open_server.service.regions) == 2
        hostile("unregister_all", INTRUDER, protocol=protocol, url=url)
        assert hostile("status", INTRUDER, protocol=protocol, url=url)["names"] == []
        assert hostile("status", VICTIM, protocol=protocol, url=url)["names"] == ["shared"]
        used = hostile("infer_region", INTRUDER, protocol=protocol, url=url, model="conv",
                       name="shared", byte_size=X.nbytes)  # fmt: skip
        assert not used["ok"] and "no shared memory region 'shared'" in used["message"], used
        hostile("unregister_all", VICTIM, protocol=protocol, url=url)
    assert len(open_server.service.regions) == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_clients_own_object_works_and_is_checked_against_its_user(
        open_server: InferenceServer, repository: Path, protocol: str) -> None:  # fmt: skip
    uid = INTRUDER if ROOT else None
    answer = hostile("own_region", uid, protocol=protocol, url=_url(open_server, protocol),
                     model="conv")  # fmt: skip
    assert answer["ok"], answer
    (expected,) = runner_answers(repository / "conv", np.full((1, 3, 16, 16), 0.5, np.float32))
    np.testing.assert_allclose(np.asarray(answer["logits"], np.float32), expected, rtol=1e-6)


def test_restricted_apis_need_their_key(repository: Path) -> None:
    """Triton's restricted-API flags: shared memory and the repository guarded by one key;
    the key also opens shared memory to TCP clients (no --allow-client-shm)."""
    key = "admin-key=s3cret"
    server = start(repository,
                   http_restrictions=(parse_restriction(f"shared-memory,model-repository:{key}"),),
                   grpc_restrictions=(parse_restriction(f"shared-memory:{key}"),))  # fmt: skip
    try:
        for protocol in PROTOCOLS:
            url = _url(server, protocol)
            bare = hostile("status", protocol=protocol, url=url)
            assert not bare["ok"] and "expecting header 'admin-key'" in bare["message"], bare
            wrong = hostile("status", protocol=protocol, url=url, headers={"admin-key": "no"})
            assert not wrong["ok"] and wrong["status"] in ("403", "StatusCode.PERMISSION_DENIED")
            with victim_object(owner=None) as obj:
                keyed = hostile("register", protocol=protocol, url=url, name="r", key=obj,
                                byte_size=64 + X.nbytes, headers={"admin-key": "s3cret"})
                assert keyed["ok"], keyed
                used = hostile("infer_region", protocol=protocol, url=url, model="conv",
                               name="r", byte_size=X.nbytes)  # fmt: skip
                assert not used["ok"] and "--allow-client-shm" in used["message"], used
                keyed_use = hostile("infer_region", protocol=protocol, url=url, model="conv",
                                    name="r", byte_size=X.nbytes,
                                    headers={"admin-key": "s3cret"})  # fmt: skip
                assert keyed_use["ok"], keyed_use
            client = (httpclient if protocol == "http" else grpcclient).InferenceServerClient(url)
            client.unregister_system_shared_memory(headers={"admin-key": "s3cret"})
        with pytest.raises(InferenceServerException, match="expecting header"):
            httpclient.InferenceServerClient(server.url("http")).get_model_repository_index()
        assert grpcclient.InferenceServerClient(server.url("grpc")).get_model_repository_index()
    finally:
        server.stop()


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A folder every user may enter (pytest's own is its user's alone)."""
    with tempfile.TemporaryDirectory(prefix="copyless-sockets-") as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


@pytest.fixture
def unix_server(repository: Path, sockets: Path) -> Iterator[InferenceServer]:
    """REST and gRPC on Unix sockets (shared memory on, without --allow-client-shm)."""
    tmp_path = sockets
    server = InferenceServer(
        repository, http=Address("", 0, str(tmp_path / "http.sock")),
        grpc_address=Address("", 0, str(tmp_path / "grpc.sock")), metrics=None,
        settings=ServeSettings(runner_type=_onnxruntime()),
    )  # fmt: skip
    server.start()
    assert server.wait_ready(120)
    yield server
    server.stop()


def _onnxruntime() -> Any:
    import copyless as cl

    return cl.RunnerType.ONNXRUNTIME


def test_unix_sockets_are_private_and_take_shared_memory(unix_server: InferenceServer,
                                                         sockets: Path) -> None:  # fmt: skip
    tmp_path = sockets
    for name in ("http", "grpc"):
        mode = os.stat(tmp_path / f"{name}.sock").st_mode & 0o777
        assert mode == 0o600, oct(mode)
    answer = hostile("own_region", protocol="grpc", url=f"unix:{tmp_path / 'grpc.sock'}",
                     model="conv")  # fmt: skip
    assert answer["ok"], answer
    with victim_object(owner=None) as key:
        got = hostile("unix_http", path=str(tmp_path / "http.sock"), method="POST",
                      target="/v2/systemsharedmemory/region/r/register",
                      body=json.dumps({"key": key, "byte_size": 64}))  # fmt: skip
        assert got["status"] == 200, got
        listed = hostile("unix_http", path=str(tmp_path / "http.sock"), method="GET",
                         target="/v2/systemsharedmemory/status")  # fmt: skip
        assert [r["name"] for r in listed["body"]] == ["r"]


@as_root
def test_a_unix_socket_opened_to_others_checks_each_peer(unix_server: InferenceServer,
                                                         sockets: Path) -> None:  # fmt: skip
    """REST: SO_PEERCRED names the peer: another user may register its own object, not the
    victim's. gRPC cannot name its peer: once its socket is opened to others, it is
    unidentified and the TCP rules refuse shared memory."""
    http_sock, grpc_sock = sockets / "http.sock", sockets / "grpc.sock"
    os.chmod(http_sock, 0o666)
    os.chmod(grpc_sock, 0o666)
    with victim_object() as key:
        stolen = hostile("unix_http", INTRUDER, path=str(http_sock), method="POST",
                         target="/v2/systemsharedmemory/region/r/register",
                         body=json.dumps({"key": key, "byte_size": 64}))  # fmt: skip
        assert stolen["status"] == 400 and "may open" in stolen["body"]["error"], stolen
        own = f"copyless-own-{uuid.uuid4().hex[:8]}"
        hostile("make_object", INTRUDER, key=own, byte_size=64)
        try:
            mine = hostile("unix_http", INTRUDER, path=str(http_sock), method="POST",
                           target="/v2/systemsharedmemory/region/r/register",
                           body=json.dumps({"key": own, "byte_size": 64}))  # fmt: skip
            assert mine["status"] == 200, mine
        finally:
            os.unlink(f"/dev/shm/{own}")
        via_grpc = hostile("register", INTRUDER, protocol="grpc", url=f"unix:{grpc_sock}",
                           name="r", key=key, byte_size=64)  # fmt: skip
        assert not via_grpc["ok"] and "--allow-client-shm" in via_grpc["message"], via_grpc
