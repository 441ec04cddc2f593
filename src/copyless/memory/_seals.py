"""Sealed memfds: shared memory whose size nobody can change under a mapping.

A process that maps a shared file and touches a page past the file's end dies of SIGBUS.
Whoever holds a descriptor of the file can ``ftruncate`` it, so a peer that was sent a
buffer (or that sent one) could kill every process mapping it, ``Runner.execute`` included,
which is documented as never raising. Linux's answer is memfd sealing: a memfd created
with ``MFD_ALLOW_SEALING`` and sealed with ``F_SEAL_SHRINK | F_SEAL_GROW`` keeps its size
for good, whoever holds it (Wayland compositors and Chromium require this of their
clients). copyless seals every memfd it creates (:meth:`HostMemory.shared`, hence the
runner's XRT_BO tensors and the ipc slot pool) and adds ``F_SEAL_SEAL``, so a peer cannot
add seals of its own either (``F_SEAL_FUTURE_WRITE`` would stop later writable maps).

What a peer holding each kind of descriptor can still do:

* a sealed memfd: write its bytes (that is the point of sharing), nothing to its size;
* a dma-buf: its size is fixed by its exporter; the bytes are shared as above;
* any other file (POSIX ``shm_open`` files in ``/dev/shm``, tmpfs and disk files, memfds
  made without seals): truncate it at any time, and every process with a mapping past the
  new end dies of SIGBUS on its next touch. Such files cannot be sealed after the fact.

Hence the rules: an unsealed memfd is refused wherever copyless maps a descriptor (a
clear :class:`TensorError`, see :func:`check_sealed`); a file is mapped when you wrap it
yourself (you vouch for whoever holds it), but :func:`copyless.ipc.recv_tensors` refuses
one from a peer unless told to trust it (:func:`size_is_fixed`).
"""

from __future__ import annotations

import fcntl
import os

from ..types import TensorError
from . import _dmabuf as dmabuf

SIZE_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
"""The seals a shared memfd must carry: its size can neither shrink nor grow."""


def seal_size(fd: int) -> None:
    """Seal a memfd made with ``MFD_ALLOW_SEALING`` against resizing, and close its seal set
    (``F_SEAL_SEAL``). Raises OSError when the kernel refuses."""
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SIZE_SEALS | fcntl.F_SEAL_SEAL)


def is_memfd(fd: int) -> bool:
    """Whether ``fd`` is a memfd (the kernel names them ``/memfd:NAME``)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
    except OSError:
        return False


def seals_of(fd: int) -> int:
    """The seals on ``fd`` (``F_GET_SEALS``); 0 for a file that takes no seals."""
    try:
        return int(fcntl.fcntl(fd, fcntl.F_GET_SEALS))
    except OSError:
        return 0


def size_is_fixed(fd: int) -> bool:
    """Whether no holder of ``fd`` can change its size: a memfd sealed against shrinking and
    growing, or a dma-buf (sized once by its exporter)."""
    return seals_of(fd) & SIZE_SEALS == SIZE_SEALS or dmabuf.is_dmabuf(fd)


def check_sealed(fd: int) -> None:
    """TensorError for a memfd without ``F_SEAL_SHRINK | F_SEAL_GROW``: whoever else holds
    it could shrink it under our mapping (SIGBUS). Other kinds of fd pass."""
    if not is_memfd(fd):
        return
    missing = SIZE_SEALS & ~seals_of(fd)
    if missing:
        names = [n for bit, n in ((fcntl.F_SEAL_SHRINK, "F_SEAL_SHRINK"),
                                  (fcntl.F_SEAL_GROW, "F_SEAL_GROW")) if missing & bit]  # fmt: skip
        raise TensorError(
            f"fd {fd} is a memfd without {' | '.join(names)}: whoever holds it could shrink "
            "it under the mapping (SIGBUS). Create it with MFD_ALLOW_SEALING and seal it "
            "(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW)), or use HostMemory.shared()"
        )
