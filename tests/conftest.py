"""Shared fixtures: small, generic helpers every test folder may use."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import copyless as cl


def _open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.fixture
def open_fds() -> Callable[[], set[int]]:
    """``open_fds()``: the descriptors open in this process right now."""
    return _open_fds


@pytest.fixture
def make_info() -> Callable[..., cl.NpuTensorInfo]:
    """``make_info(shape, data_type=FLOAT32, **overrides)``: a CPU input info."""

    def make(
        shape: tuple[int, ...] = (1, 3, 8, 8),
        data_type: cl.DataType = cl.DataType.FLOAT32,
        **overrides: Any,
    ) -> cl.NpuTensorInfo:
        fields: dict[str, Any] = {
            "name": "t",
            "data_type": data_type,
            "direction": cl.TensorDirection.INPUT,
            "tensor_type": cl.TensorType.CPU,
            "memory_layout": cl.MemoryLayout.NCHW if len(shape) == 4 else cl.MemoryLayout.GENERIC,
            "shape": shape,
        }
        fields.update(overrides)
        return cl.NpuTensorInfo(**fields)

    return make


@pytest.fixture
def memfd() -> Iterator[Callable[[int], int]]:
    """``memfd(nbytes)``: a read-write memfd of that size, closed after the test."""
    fds: list[int] = []

    def make(nbytes: int) -> int:
        fd = os.memfd_create("copyless-test", os.MFD_CLOEXEC)
        fds.append(fd)
        os.ftruncate(fd, nbytes)
        return fd

    yield make
    for fd in fds:
        with contextlib.suppress(OSError):  # a test closed it on purpose
            os.close(fd)


@pytest.fixture(scope="session")
def object_detector() -> Callable[..., Path]:
    """``object_detector("centerface" | "picodet-layout", (H, W), **options)``: the zoo
    detector compiled for RGBx frames of that size with its postprocess folded in (cached on
    disk by copyless.apps._models, and here for the session)."""
    from copyless.apps._models import builtin_object_detector

    @functools.cache
    def compiled(name: str, frame: tuple[int, int], **options: Any) -> Path:
        return builtin_object_detector(name, frame, progress=False, **options)

    return compiled
