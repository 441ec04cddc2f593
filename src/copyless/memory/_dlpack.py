"""DLPack exchange for host tensors, without copies.

Export goes through numpy's own ``__dlpack__`` of a view that shares the tensor's memory;
the capsule keeps that view (and so the memory's owner) alive. numpy's DLPack has no
bfloat16, so BF16 tensors cannot travel through DLPack here (``BufferError``, the protocol's
refusal): use ``NpuTensor.numpy()``. Import goes through ``np.from_dlpack``; the imported
array keeps the producer's capsule (and so its memory) alive.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

DEVICE_CPU = 1
DEVICE_CUDA = 2
DEVICE_CUDA_HOST = 3


def to_dlpack(array: npt.NDArray[Any], owner: object, **kwargs: Any) -> Any:
    """A DLPack capsule of ``array`` (a view of ``owner``'s memory)."""
    if array.dtype.kind == "V" or array.dtype.name == "bfloat16":
        raise BufferError(
            f"{owner!r}: numpy's DLPack cannot carry {array.dtype}; use .numpy() for BF16 data"
        )
    return array.__dlpack__(**kwargs)


def host_array_from_dlpack(producer: Any) -> npt.NDArray[Any]:
    """A numpy array over a host DLPack producer's memory (no copy).

    Raises ``BufferError`` when the producer's memory is not on the host.
    """
    device = getattr(producer, "__dlpack_device__", None)
    if device is not None:
        kind, _ = device()
        if int(kind) not in (DEVICE_CPU, DEVICE_CUDA_HOST):
            raise BufferError(
                f"{type(producer).__name__} lives on DLPack device {int(kind)}, not the host"
            )
    return np.from_dlpack(producer)
