"""Shared fixtures: small, generic helpers every test folder may use."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import copyless as cl


def _memory_fds() -> dict[int, str]:
    """The descriptors open in this process of the kinds copyless's memory opens (memfds,
    dma-bufs, /dev/shm objects, device files), with their targets. Sockets, pipes, epoll and
    eventfds are left out: a Ray driver or server thread another test left in this process
    opens and closes those at any time (seen in a random order: fd 22 closed and 32 opened
    while a leak test ran; fd 24 opened during a child-process test)."""
    held = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed since it was listed
            continue
        if target.startswith(("/memfd:", "/dev/", "anon_inode:dmabuf", "/dmabuf")):
            held[int(name)] = target
    return held


@pytest.fixture
def memory_fds() -> Callable[[], dict[int, str]]:
    """``memory_fds()``: the memory descriptors open in this process right now, with their
    targets (see :func:`_memory_fds`)."""
    return _memory_fds


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
    """``memfd(nbytes)``: a read-write memfd of that size, sealed against resizing as copyless
    requires of every memfd it maps, closed after the test."""
    fds: list[int] = []

    def make(nbytes: int) -> int:
        fd = os.memfd_create("copyless-test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        fds.append(fd)
        os.ftruncate(fd, nbytes)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
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


# -- The cache root: the session's own, sharing only the built models --------------------

#: The cache root's folders the tests share with the user's cache: the zoo's ONNX files,
#: compiled models, photos, the benchmarks' artifacts and users' exported models
#: (tests/user_models.py), each built once per machine and
#: keyed by what made it. Everything else is the session's own, above all ``engines/``,
#: VAIML's measured engine choices: a choice measured earlier (by another session, another
#: user of the cache, under other load) decided which engine a later test ran on, and
#: with it what the test saw (test_engine_cache's counts differed between a runner that
#: measured both engines on a fresh cache and one that read a cached choice).
SHARED_CACHE = ("zoo", "compiled", "photos", "bench", "exports")


@pytest.fixture(scope="session", autouse=True)
def session_cache_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``$COPYLESS_CACHE_DIR`` for the whole session (child processes too): a fresh folder
    whose :data:`SHARED_CACHE` entries link to the user's cache root."""
    from copyless.model.zoo import CACHE_ENV, cache_root

    user = cache_root()
    root = tmp_path_factory.mktemp("cache-root")
    for name in SHARED_CACHE:
        (user / name).mkdir(parents=True, exist_ok=True)
        (root / name).symlink_to(user / name, target_is_directory=True)
    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(root)
    try:
        yield root
    finally:
        if saved is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = saved


# -- Ray: one real head for the whole session (about 7 s and 700 MB to start) ------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the Ray head run last: a Ray driver leaves native threads (and the malloc
    arenas they touched) in this process after ``ray.shutdown()``, which the memory-growth
    checks of other tests would count; and the head's 700 MB are held only at the end.

    pytest-randomly shuffles the modules, and the tests within each, before this hook (its
    hook wraps the others): this stable partition keeps that order within each group, so
    the Ray tests stay last and each module's tests stay together (the head is started
    once; a module's ``ray_driver`` connects once)."""
    on_ray = [item for item in items if "ray_head" in getattr(item, "fixturenames", ())]
    if on_ray:
        others = [item for item in items if "ray_head" not in getattr(item, "fixturenames", ())]
        items[:] = others + on_ray


@pytest.fixture(scope="session")
def ray_head() -> Iterator[Any]:
    """A ``ray start --head`` in its own process (``ray_driver`` in tests/ray connects this
    process to it). Stopped by its process id at the end of the session."""
    pytest.importorskip("ray")
    from ray_helpers import RAY_ENV, start_head

    saved = {key: os.environ.get(key) for key in RAY_ENV}
    os.environ.update(RAY_ENV)
    head = start_head()
    try:
        yield head
    finally:
        head.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def photo_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """``(folder, {absolute path: ImageNet classes it may be given})`` of real photos."""
    from ray_helpers import write_photos

    folder = tmp_path_factory.mktemp("photos")
    return folder, write_photos(folder)


@pytest.fixture(scope="session")
def batch_model() -> Any:
    """The built-in EfficientNet-Lite0 with an RGBx input, as copyless-batch compiles it."""
    from copyless.apps.batch import builtin_batch_classifier
    from copyless.model import load_model

    return load_model(builtin_batch_classifier())


@pytest.fixture
def make_runner(runner_type: cl.RunnerType) -> Iterator[Callable[..., cl.Runner]]:
    """``make_runner(compiled, **options)``: a runner of ``runner_type`` (the fixture of the
    test's folder, e.g. tests/runner, tests/pipeline: every engine) closed after the test."""
    made: list[cl.Runner] = []

    def make(compiled: cl.CompiledModel, **options: Any) -> cl.Runner:
        runner = cl.RunnerFactory.from_compiled(compiled, options, runner_type)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()


@pytest.fixture
def runners() -> Iterator[list[cl.Runner]]:
    """A list the test appends its runners to; each is closed after the test."""
    made: list[cl.Runner] = []
    yield made
    for runner in made:
        runner.close()
