"""dma-buf file descriptors: recognising them and the cache sync their exporters need.

A dma-buf (``/dev/dma_heap/*``, ``udmabuf``, a V4L2 or DRM export) may be memory a device
reads and writes without the CPU's caches: the CPU brackets its own access with
``DMA_BUF_IOCTL_SYNC``. :func:`sync` is that ioctl: before a device reads a buffer the CPU
wrote (an INPUT), ``END | WRITE`` flushes the CPU's writes; before the CPU reads what a
device wrote (an OUTPUT), ``START | READ`` invalidates stale lines. Other fds (memfd,
``/dev/shm``, files) are coherent with every engine copyless drives: nothing to do.
"""

from __future__ import annotations

import fcntl
import os
import struct

#: ``_IOW('b', 0, struct dma_buf_sync)`` (linux/dma-buf.h)
DMA_BUF_IOCTL_SYNC = 0x40086200
SYNC_READ, SYNC_WRITE, SYNC_START, SYNC_END = 1, 2, 0, 4


def is_dmabuf(fd: int) -> bool:
    """Whether ``fd`` is a dma-buf (the kernel names them ``/dmabuf:`` or
    ``anon_inode:dmabuf``); False for any fd it cannot tell."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False
    return target.startswith(("/dmabuf:", "anon_inode:dmabuf"))


def sync(fd: int, *, device_reads: bool) -> int:
    """Issue the cache sync for a device access to dma-buf ``fd``; returns the flags used.

    ``device_reads``: the CPU wrote and a device reads next (flush); else a device wrote
    and the CPU reads next (invalidate). Raises OSError when the kernel refuses.
    """
    flags = SYNC_END | SYNC_WRITE if device_reads else SYNC_START | SYNC_READ
    _ioctl(fd, flags)
    return flags


def _ioctl(fd: int, flags: int) -> None:
    fcntl.ioctl(fd, DMA_BUF_IOCTL_SYNC, struct.pack("=Q", flags))
