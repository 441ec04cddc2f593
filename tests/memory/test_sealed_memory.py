"""Sealed shared memory (issue 44): a holder of a copyless memfd cannot resize it, so a peer
truncating it never kills whoever maps it with SIGBUS. Every victim runs in a child."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

import copyless as cl
from child_helpers import run_in_child
from copyless.memory import SIZE_SEALS, HostMemory, size_is_fixed

TRUNCATE = (
    "import errno, os, sys\n"
    "try:\n"
    "    os.ftruncate(int(sys.argv[1]), 0)\n"
    "    print('TRUNCATED')\n"
    "except OSError as exc:\n"
    "    print(errno.errorcode[exc.errno])\n"
)


def _info(
    nbytes: int, direction: cl.TensorDirection = cl.TensorDirection.INPUT
) -> cl.NpuTensorInfo:
    return cl.NpuTensorInfo(
        "x", cl.DataType.FLOAT32, direction, cl.TensorType.HW, cl.MemoryLayout.GENERIC,
        (nbytes // 4,),
    )  # fmt: skip


def _truncate_in_another_process(tensor: cl.NpuTensor) -> str:
    """A peer holding the tensor's exported fd tries ``ftruncate(fd, 0)``: what it got."""
    fd = tensor.export_buffer()
    try:
        done = subprocess.run([sys.executable, "-c", TRUNCATE, str(fd)], pass_fds=[fd],
                              capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    finally:
        os.close(fd)
    return done.stdout.strip()


def victim_reads_after_truncation() -> tuple[str, float]:
    memory = HostMemory.shared(1 << 20, warn_on_leak=False)
    tensor = cl.NpuTensor._wrap_memory(_info(1 << 20), memory, cl.MemoryType.XRT_BO)
    tensor.numpy()[...] = 1.0
    peer = _truncate_in_another_process(tensor)
    return peer, float(tensor.numpy().sum())  # SIGBUS here, were the memfd truncated


def victim_runner_executes_after_truncation() -> tuple[str, str, bool]:
    import onnx
    from onnx import helper

    from copyless.model import compile_to_memory

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 65536])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 65536])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    runner = cl.RunnerFactory.from_compiled(compile_to_memory(model), {"log_level": "ERROR"})
    with runner:
        (i,), (o,) = (runner.get_tensors_info(d, cl.TensorType.HW) for d in cl.TensorDirection)
        x, y = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)
        x.numpy()[...] = np.linspace(-1, 1, 65536, dtype=np.float32)
        peers = [_truncate_in_another_process(t) for t in (x, y)]
        status = runner.execute([[x]], [[y]])  # SIGBUS here, were the memfds truncated
        right = bool(np.array_equal(y.numpy(), np.maximum(x.numpy(), 0)))
    return ",".join(peers), status.name, right


def test_shared_memory_is_sealed_against_resizing() -> None:
    with HostMemory.shared(5000) as memory:
        seals = fcntl.fcntl(memory.fd, fcntl.F_GET_SEALS)
        assert seals == SIZE_SEALS | fcntl.F_SEAL_SEAL
        assert size_is_fixed(memory.fd)
        assert os.fstat(memory.fd).st_size == 8192  # whole pages, sealed at that size
        for size in (0, 4096, 1 << 20):
            with pytest.raises(PermissionError):
                os.ftruncate(memory.fd, size)
        with pytest.raises(PermissionError):  # nobody can add seals (F_SEAL_SEAL)
            fcntl.fcntl(memory.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
        memory.array[:] = 7  # still shared, writable memory
        assert os.pread(memory.fd, 2, 4998) == b"\x07\x07"


def test_a_peer_truncating_shared_memory_cannot_kill_the_reader() -> None:
    outcome = run_in_child(victim_reads_after_truncation)
    assert outcome.exitcode == 0, outcome
    assert outcome.value == ("EPERM", float(1 << 18))


def test_a_peer_truncating_runner_tensors_cannot_kill_execute() -> None:
    outcome = run_in_child(victim_runner_executes_after_truncation, timeout=180)
    assert outcome.exitcode == 0, outcome
    assert outcome.value == ("EPERM,EPERM", "SUCCESS", True)


@pytest.mark.parametrize(
    ("flags", "seals", "missing"),
    [
        (0, 0, "F_SEAL_SHRINK | F_SEAL_GROW"),
        (os.MFD_ALLOW_SEALING, 0, "F_SEAL_SHRINK | F_SEAL_GROW"),
        (os.MFD_ALLOW_SEALING, fcntl.F_SEAL_SHRINK, "F_SEAL_GROW"),
        (os.MFD_ALLOW_SEALING, fcntl.F_SEAL_GROW, "F_SEAL_SHRINK"),
    ],
)
def test_an_unsealed_memfd_is_refused_with_one_clear_error(
    flags: int, seals: int, missing: str
) -> None:
    fd = os.memfd_create("unsealed", flags)
    try:
        os.ftruncate(fd, 4096)
        if seals:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        with pytest.raises(cl.TensorError, match=f"memfd without {missing}: whoever holds it"):
            cl.NpuTensor(_info(4096), fd, cl.MemoryType.DMA_FD)
        with pytest.raises(cl.TensorError, match="could shrink"):
            HostMemory.from_fd(fd)
    finally:
        os.close(fd)


def test_a_dma_fd_tensor_maps_only_what_its_info_covers(memfd: object) -> None:
    fd = memfd(1 << 20)  # type: ignore[operator]
    tensor = cl.NpuTensor(_info(4096), fd, cl.MemoryType.DMA_FD)
    assert tensor.nbytes == 4096
    assert tensor.numpy().nbytes == 4096
    tensor.close()
    with HostMemory.from_fd(fd) as whole:  # HostMemory itself maps the whole object
        assert whole.nbytes == 1 << 20


def test_a_file_its_owner_wraps_is_mapped_but_not_size_fixed() -> None:
    """/dev/shm files cannot be sealed: mapped when you wrap them yourself (docs/api.md says
    what a peer holding one can do); ipc refuses them from a peer (tests/ipc)."""
    path = f"/dev/shm/copyless-seal-test-{uuid.uuid4().hex}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.unlink(path)
        os.ftruncate(fd, 4096)
        assert not size_is_fixed(fd)
        tensor = cl.NpuTensor(_info(4096), fd, cl.MemoryType.DMA_FD)
        tensor.numpy()[...] = 2.0
        assert os.pread(fd, 4, 0) == np.float32(2.0).tobytes()
        tensor.close()
    finally:
        os.close(fd)
