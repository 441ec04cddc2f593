"""A client of copyless-serve in a process of its own, possibly as another user: the security
tests run it with ``python hostile_client.py ACTION JSON [UID]`` (as root: it becomes UID
after its imports) and read one JSON line back.

Actions (JSON keys as named):
* ``register`` (protocol, url, name, key, byte_size[, headers]): register a region, answer
  ``{"ok": true}`` or ``{"ok": false, "status": ..., "message": ...}``;
* ``status`` (protocol, url[, headers]): the region names this client sees;
* ``infer_region`` (protocol, url, model, name, byte_size): an inference of ``conv`` whose
  input is the region ``name``: its logits (a list) or the error;
* ``own_region`` (protocol, url, model): create an object of this user, register it, infer
  from it: the logits or the error; the object is removed after;
* ``unregister_all`` (protocol, url): unregister this client's regions;
* ``unix_http`` (path, method, target[, body]): one raw HTTP request over a Unix socket:
  ``{"status", "body"}``;
* ``make_object`` (key, byte_size): a /dev/shm object of this user (mode 0600), left behind
  for the test to remove.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import uuid
from typing import Any

import numpy as np


def _client(args: dict[str, Any]) -> Any:
    if args["protocol"] == "http":
        import tritonclient.http as module

        return module, module.InferenceServerClient(args["url"])
    import tritonclient.grpc as module

    # a connection of its own: gRPC shares subchannels between channels to one target, so a
    # client made after dropping privileges could reuse the warm-up's root connection
    return module, module.InferenceServerClient(
        args["url"], channel_args=[("grpc.use_local_subchannel_pool", 1)])


def _failed(exc: Any) -> dict[str, Any]:
    return {"ok": False, "status": str(exc.status()), "message": exc.message()}


def register(args: dict[str, Any]) -> dict[str, Any]:
    from tritonclient.utils import InferenceServerException

    _, client = _client(args)
    try:
        client.register_system_shared_memory(args["name"], args["key"], args["byte_size"],
                                             headers=args.get("headers"))  # fmt: skip
    except InferenceServerException as exc:
        return _failed(exc)
    return {"ok": True}


def status(args: dict[str, Any]) -> dict[str, Any]:
    from tritonclient.utils import InferenceServerException

    _, client = _client(args)
    try:
        found = client.get_system_shared_memory_status(headers=args.get("headers"))
    except InferenceServerException as exc:
        return _failed(exc)
    names = [r["name"] for r in found] if args["protocol"] == "http" else list(found.regions)
    return {"ok": True, "names": sorted(names)}


def _infer(module: Any, client: Any, model: str, name: str, nbytes: int,
           headers: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    from tritonclient.utils import InferenceServerException

    given = module.InferInput("input", [1, 3, 16, 16], "FP32")
    given.set_shared_memory(name, nbytes)
    try:
        result = client.infer(model, [given], headers=headers)
    except InferenceServerException as exc:
        return _failed(exc)
    return {"ok": True, "logits": result.as_numpy("logits").tolist()}


def infer_region(args: dict[str, Any]) -> dict[str, Any]:
    module, client = _client(args)
    return _infer(module, client, args["model"], args["name"], args["byte_size"],
                  args.get("headers"))  # fmt: skip


def own_region(args: dict[str, Any]) -> dict[str, Any]:
    from tritonclient.utils import InferenceServerException

    module, client = _client(args)
    x = np.full((1, 3, 16, 16), 0.5, np.float32)
    key = f"copyless-own-{uuid.uuid4().hex[:10]}"
    # os calls, not tritonclient's shm utilities: their resource tracker starts a process,
    # which another user may not be able to exec
    fd = os.open(f"/dev/shm/{key}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, x.tobytes())
        try:
            client.register_system_shared_memory("own", key, x.nbytes)
        except InferenceServerException as exc:
            return _failed(exc)
        answer = _infer(module, client, args["model"], "own", x.nbytes)
        client.unregister_system_shared_memory("own")
        return answer
    finally:
        os.close(fd)
        os.unlink(f"/dev/shm/{key}")


def unregister_all(args: dict[str, Any]) -> dict[str, Any]:
    _, client = _client(args)
    client.unregister_system_shared_memory()
    return {"ok": True}


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(self._path)


def unix_http(args: dict[str, Any]) -> dict[str, Any]:
    conn = _UnixConnection(args["path"])
    try:
        conn.request(args["method"], args["target"], body=args.get("body"))
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    try:
        body: Any = json.loads(data)
    except ValueError:
        body = data.decode(errors="replace")
    return {"status": response.status, "body": body}


def make_object(args: dict[str, Any]) -> dict[str, Any]:
    fd = os.open(f"/dev/shm/{args['key'].lstrip('/')}", os.O_RDWR | os.O_CREAT | os.O_EXCL,
                 0o600)  # fmt: skip
    os.ftruncate(fd, args["byte_size"])
    os.close(fd)
    return {"ok": True}


def _become(uid: int, args: dict[str, Any]) -> None:
    """Drop to user ``uid`` once everything is imported (the interpreter may live where
    that user cannot read, such as root's home; gevent and gRPC import more on their first
    call, so one harmless call is made first, on a client dropped before): the sockets and
    objects made after are that user's."""
    if "protocol" in args:
        _, warm = _client(args)
        warm.is_server_live()
        warm.close()
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


if __name__ == "__main__":
    action, raw = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:
        _become(int(sys.argv[3]), json.loads(raw))
    os.environ["HOME"] = "/tmp"
    print(json.dumps(globals()[action](json.loads(raw))), flush=True)
