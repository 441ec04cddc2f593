"""Helpers of the serve tests (imported by basename): the repository, the Runner's own
answers to compare with, raw HTTP requests, shared-memory regions."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import copyless as cl
from copyless.serve import Address, InferenceServer, ServeSettings
from model_helpers import conv_net


def build_repository(root: Path) -> None:
    """``conv`` (batch 1) and ``conv4`` (batch 4) under ``root``."""
    (root / "conv").mkdir(parents=True)
    (root / "conv4").mkdir()
    cl.compile_model(conv_net(), root / "conv" / "conv.rai")
    cl.compile_model(conv_net(batch="N"), root / "conv4" / "conv4.rai", batch_size=4)


def start(repository: Path, **settings: object) -> InferenceServer:
    """A server of ``repository`` on free loopback ports (onnxruntime), models loaded."""
    loopback = Address("127.0.0.1", 0)
    server = InferenceServer(
        repository, http=loopback, grpc_address=loopback, metrics=loopback,
        settings=ServeSettings(runner_type=cl.RunnerType.ONNXRUNTIME, **settings),  # type: ignore[arg-type]
    )  # fmt: skip
    server.start()
    assert server.wait_ready(120), [m.reason for m in server.service.repository]
    return server


def lite0_path() -> Path:
    """The built-in EfficientNet-Lite0, RGBx uint8 input (compiled once, cached)."""
    from copyless.apps._models import builtin_classifier

    return builtin_classifier(progress=False)


def runner_answers(model: Path, rows: np.ndarray) -> list[np.ndarray]:
    """Each output for ``rows`` (one row at a time, HW view) as the Runner computes it."""
    with cl.RunnerFactory.create_runner(model, runner_type=cl.RunnerType.ONNXRUNTIME) as runner:
        (ii,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        outs = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        x = runner.allocate_npu_tensor(ii)
        ys = [runner.allocate_npu_tensor(o) for o in outs]
        answers: list[list[np.ndarray]] = [[] for _ in outs]
        for row in rows:
            x.numpy()[...] = np.broadcast_to(row[None], x.numpy().shape)
            assert runner.execute([[x]], [ys]) is cl.StatusCode.SUCCESS
            for store, y in zip(answers, ys, strict=True):
                store.append(y.numpy()[0].copy())
        return [np.stack(a) for a in answers]


def conv_rows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 3, 16, 16)).astype(np.float32)


def pixels(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, 224, 224, 4), dtype=np.uint8)


def post(address: str, path: str, body: bytes | str, headers: dict[str, str] | None = None,
         method: str = "POST") -> tuple[int, dict[str, Any] | bytes]:  # fmt: skip
    """A raw request; ``(status, JSON body or raw bytes)``."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data


def get(address: str, path: str) -> tuple[int, dict[str, Any] | bytes]:
    return post(address, path, b"", method="GET")


@contextlib.contextmanager
def shm_region(key: str, nbytes: int) -> Iterator[tuple[int, memoryview]]:
    """A /dev/shm object of ``nbytes`` (``(fd, mapping)``), removed afterwards."""
    import mmap

    path = f"/dev/shm/{key.lstrip('/')}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, nbytes)
        with mmap.mmap(fd, nbytes) as mapping:
            view = memoryview(mapping)
            try:
                yield fd, view
            finally:
                view.release()
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
