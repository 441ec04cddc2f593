"""An exported fd crosses to a real child process over a Unix socket (SCM_RIGHTS).

The child maps it as a DMA_FD tensor, checks what the parent wrote and writes back; the
parent sees the child's writes through the numpy view it took before sending: one set of
pages, no copy.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest

import copyless as cl
from copyless.memory import HostMemory
from copyless.types._serialize import info_to_dict

_CHILD = r"""
import json, os, socket, sys
import numpy as np
import copyless as cl
from copyless.types._serialize import info_from_dict

sock = socket.socket(fileno=int(sys.argv[1]))
message, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
header = json.loads(message)
parent = cl.NpuTensor.from_fd(info_from_dict(header["parent"]), fds[0], take_ownership=True)
tensor = parent._sub_tensor(info_from_dict(header["info"]), header["offset"])
view = tensor.numpy()
seen = view.astype(np.float64).tolist()
view[...] = -np.arange(view.size, dtype=view.dtype).reshape(view.shape)
tensor.sync_buffer()
parent.close()
tensor.close()
fd_alive = True
try:
    os.fstat(fds[0])
except OSError:
    fd_alive = False
sock.sendall(json.dumps({"seen": seen, "fd_alive": fd_alive}).encode())
sock.close()
"""


def _shared_xrt_bo(info: cl.NpuTensorInfo) -> cl.NpuTensor:
    memory = HostMemory.shared(info.size_in_bytes, warn_on_leak=False)
    return cl.NpuTensor._wrap_memory(info, memory, cl.MemoryType.XRT_BO)


def _dma_fd(info: cl.NpuTensorInfo) -> cl.NpuTensor:
    fd = os.memfd_create("copyless-child-test", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, info.size_in_bytes)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    tensor = cl.NpuTensor(info, fd, cl.MemoryType.DMA_FD)
    os.close(fd)  # the tensor's private dup keeps it exportable
    return tensor


@pytest.mark.parametrize("make", [_shared_xrt_bo, _dma_fd], ids=["XRT_BO", "DMA_FD"])
@pytest.mark.parametrize("offset", [0, 256])
def test_child_writes_are_seen_by_the_parent(
    make: Callable[[cl.NpuTensorInfo], cl.NpuTensor],
    offset: int,
    memory_fds: Callable[[], dict[int, str]],
) -> None:
    before = memory_fds()
    whole = cl.NpuTensorInfo(
        "pool",
        cl.DataType.UINT8,
        cl.TensorDirection.INPUT,
        cl.TensorType.HW,
        cl.MemoryLayout.GENERIC,
        (4096,),
    )
    info = cl.NpuTensorInfo(
        "frame",
        cl.DataType.FLOAT32,
        cl.TensorDirection.INPUT,
        cl.TensorType.HW,
        cl.MemoryLayout.NHWC,
        (1, 4, 4, 3),
    )
    parent = make(whole)
    tensor = parent._sub_tensor(info, offset)
    view = tensor.numpy()
    view[...] = np.arange(48, dtype=np.float32).reshape(1, 4, 4, 3) / 2

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(theirs.fileno())], pass_fds=[theirs.fileno()]
    )
    theirs.close()
    exported = tensor.export_buffer()
    try:
        header = {"parent": info_to_dict(whole), "info": info_to_dict(info), "offset": offset}
        socket.send_fds(ours, [json.dumps(header).encode()], [exported])
    finally:
        os.close(exported)  # the child got its own descriptor
    reply = b""
    while chunk := ours.recv(1 << 16):
        reply += chunk
    ours.close()
    assert child.wait(timeout=60) == 0
    result = json.loads(reply)

    np.testing.assert_array_equal(np.array(result["seen"]), np.arange(48).reshape(1, 4, 4, 3) / 2)
    assert result["fd_alive"] is False  # the child's owning tensor closed the received fd
    expected = -np.arange(48, dtype=np.float32).reshape(1, 4, 4, 3)
    np.testing.assert_array_equal(view, expected)  # the view taken before sending
    assert np.shares_memory(view, tensor.numpy())
    assert np.shares_memory(view, parent.numpy())
    whole_bytes = parent.numpy()
    assert not whole_bytes[:offset].any()  # nothing outside the sub-tensor was touched
    assert not whole_bytes[offset + info.size_in_bytes :].any()
    tensor.close()
    parent.close()
    # A live numpy view keeps its mapping (and the mapping's own fd) until it goes.
    del view, whole_bytes
    assert memory_fds() == before
