"""Options of the CUDA/TensorRT backend (the runner option ``cuda_options``), the ONNX
Runtime provider list they give, and :func:`check_available`: can the provider run here?
No CUDA library is imported at import time.

=======================  =========  ===================================================
key                      default    effect
=======================  =========  ===================================================
device_id                0          the GPU (CUDA ordinal)
stream                   None       a CUDA stream handle (int > 2) every engine runs
                                    on, kept alive by the caller while the runner
                                    lives (e.g. ``torch.cuda.Stream().cuda_stream``,
                                    ``cupy.cuda.Stream().ptr``): work queued on it
                                    before ``execute`` is ordered before the engine,
                                    work queued after it sees the results. Async jobs
                                    then share it. None: each execution slot gets a
                                    stream of its own (copyless's, blocking: ordered
                                    after the legacy default stream), so async jobs
                                    overlap. ONNX Runtime cannot run on the default
                                    streams (0, 1, 2): refused, not ignored
cuda_graph               False      capture the first runs of each execution slot in
                                    a CUDA graph and replay it (ONNX Runtime's
                                    ``enable_cuda_graph``): every tensor must then be
                                    device memory at a fixed address, every node on
                                    the CUDA provider, no data-dependent outputs
cudnn_conv_algo_search   HEURISTIC  EXHAUSTIVE | HEURISTIC | DEFAULT
use_tf32                 True       TF32 matmul/conv on Ampere and later
gpu_mem_limit            None       bytes for ONNX Runtime's arena (None: no limit)
strict                   False      refuse graphs with nodes the GPU provider cannot
                                    take, instead of running those nodes on the CPU
trt_fp16                 False      TensorRT: build FP16 engines
trt_engine_cache_path    None       TensorRT: cache built engines in this directory
=======================  =========  ===================================================
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.metadata
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import onnxruntime as ort

from ..memory import cuda as cuda_memory
from ..types import DeviceUnavailableError, OptionError, UnsupportedError

CUDA_PROVIDER = "CUDAExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"
#: The provider each device needs (TensorRT also uses CUDA for the nodes it cannot take).
PROVIDERS = {"cuda": CUDA_PROVIDER, "tensorrt": TENSORRT_PROVIDER}
_ALGO_SEARCH = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
_FIX_CLASH = (
    "pip uninstall -y onnxruntime && pip install --force-reinstall --no-deps "
    "'onnxruntime-gpu>=1.31,<2'"
)
_LIBRARIES = {
    "cuda": "libonnxruntime_providers_cuda.so",
    "tensorrt": "libonnxruntime_providers_tensorrt.so",
}


@dataclass(frozen=True, slots=True)
class CudaOptions:
    device_id: int = 0
    stream: int | None = None
    cuda_graph: bool = False
    cudnn_conv_algo_search: str = "HEURISTIC"
    use_tf32: bool = True
    gpu_mem_limit: int | None = None
    strict: bool = False
    trt_fp16: bool = False
    trt_engine_cache_path: str | None = None


def _int(key: str, value: Any, low: int, *, none_ok: bool = False) -> Any:
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        extra = " or None" if none_ok else ""
        raise OptionError(f"option {key!r}: expected an int >= {low}{extra}, got {value!r}")
    return value


def _bool(key: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise OptionError(f"option {key!r}: expected True or False, got {value!r}")
    return value


def _check(key: str, value: Any) -> Any:
    if key == "device_id":
        return _int(key, value, 0)
    if key == "stream":
        stream = _int(key, value, 0, none_ok=True)
        if stream is not None and stream <= 2:
            raise OptionError(
                f"option 'stream': {stream} is a default stream (0 legacy, 1 legacy, "
                "2 per-thread); ONNX Runtime needs a created stream: pass its handle, "
                "e.g. torch.cuda.Stream().cuda_stream or cupy.cuda.Stream().ptr"
            )
        return stream
    if key == "gpu_mem_limit":
        return _int(key, value, 1, none_ok=True)
    if key == "cudnn_conv_algo_search":
        upper = value.upper() if isinstance(value, str) else value
        if upper not in _ALGO_SEARCH:
            raise OptionError(f"option {key!r}: {value!r} is not one of {list(_ALGO_SEARCH)}")
        return upper
    if key == "trt_engine_cache_path":
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise OptionError(f"option {key!r}: expected a path or None, got {value!r}")
        return None if value is None else os.fspath(value)
    return _bool(key, value)


KNOWN = tuple(f.name for f in fields(CudaOptions))


def parse_cuda_options(options: Mapping[str, Any] | CudaOptions | None) -> CudaOptions:
    """Validate ``options``: unknown keys and bad values raise :class:`OptionError`."""
    if options is None:
        return CudaOptions()
    if isinstance(options, CudaOptions):
        return options
    if not isinstance(options, Mapping):
        raise OptionError(f"CUDA options must be a mapping, got {type(options).__name__}")
    values: dict[str, Any] = {}
    for key, value in options.items():
        if key not in KNOWN:
            raise OptionError(f"unknown CUDA option {key!r}; accepted: {', '.join(KNOWN)}")
        values[key] = _check(key, value)
    return CudaOptions(**values)


def provider_list(device: str, options: CudaOptions, stream: int) -> list[Any]:
    """The ``providers=`` argument of ``InferenceSession`` for ``device`` on ``stream``.

    Both GPU providers run on ``stream`` (``user_compute_stream``; ONNX Runtime sets
    ``has_user_compute_stream`` from it), so work queued on it before a run (ONNX Runtime's
    own copies of host inputs, a producer's writes) is complete when the engine reads.
    """
    cuda: dict[str, str] = {
        "device_id": str(options.device_id),
        "user_compute_stream": str(stream),
        "cudnn_conv_algo_search": options.cudnn_conv_algo_search,
        "use_tf32": "1" if options.use_tf32 else "0",
        "enable_cuda_graph": "1" if options.cuda_graph else "0",
    }
    if options.gpu_mem_limit is not None:
        cuda["gpu_mem_limit"] = str(options.gpu_mem_limit)
    providers: list[Any] = [(CUDA_PROVIDER, cuda)]
    if device == "tensorrt":
        trt: dict[str, str] = {
            "device_id": str(options.device_id),
            "user_compute_stream": str(stream),
            "trt_fp16_enable": "1" if options.trt_fp16 else "0",
            "trt_cuda_graph_enable": "1" if options.cuda_graph else "0",
        }
        if options.trt_engine_cache_path is not None:
            trt["trt_engine_cache_enable"] = "1"
            trt["trt_engine_cache_path"] = options.trt_engine_cache_path
        providers.insert(0, (TENSORRT_PROVIDER, trt))
    return providers


def check_available(device: str, device_id: int = 0) -> None:
    """Raise :class:`DeviceUnavailableError` (one line) unless ``device`` can run here: the
    provider is in this onnxruntime build, CuPy imports, the driver and GPU ``device_id``
    exist and the provider's CUDA libraries load. Touches no GPU memory."""
    provider = PROVIDERS.get(device)
    if provider is None:
        raise OptionError(f"device {device!r} is not a GPU device: {list(PROVIDERS)}")
    if provider not in ort.get_available_providers():
        raise DeviceUnavailableError(f"device {device!r}: {_missing_provider(provider)}")
    try:
        ctypes.CDLL("libcuda.so.1")
        count = cuda_memory.device_count()
    except OSError:
        raise DeviceUnavailableError(
            f"device {device!r}: no NVIDIA driver here (libcuda.so.1 cannot be loaded)"
        ) from None
    except UnsupportedError as exc:
        raise DeviceUnavailableError(f"device {device!r}: {exc}") from None
    if device_id >= count:
        raise DeviceUnavailableError(f"device {device!r}: no GPU {device_id} ({count} found)")
    problem = _library_problem(device)
    if problem is not None:
        raise DeviceUnavailableError(f"device {device!r}: {problem}")


def _missing_provider(provider: str) -> str:
    installed = {}
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            installed[dist] = importlib.metadata.version(dist)
    if len(installed) == 2:
        return (
            f"onnxruntime {installed['onnxruntime']} and onnxruntime-gpu "
            f"{installed['onnxruntime-gpu']} are both installed and share the onnxruntime "
            f"module, and the CPU build's files won (no {provider}): {_FIX_CLASH}"
        )
    return (
        f"this onnxruntime {ort.__version__} build has no {provider} (it offers "
        f"{', '.join(ort.get_available_providers())}): {cuda_memory.INSTALL_HINT}"
    )


@functools.cache
def _library_problem(device: str) -> str | None:
    """Why the provider's shared library cannot load (the first missing CUDA library, as
    the loader names it), or None. Loads the CUDA libraries from the nvidia-* wheels first
    (``onnxruntime.preload_dlls``), as the provider would need."""
    # It prints what it cannot find: the load below names the one that matters.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(Exception):
        ort.preload_dlls()
    capi = Path(ort.__file__).parent / "capi"
    try:
        ctypes.CDLL(str(capi / "libonnxruntime_providers_shared.so"), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(str(capi / _LIBRARIES[device]))
    except OSError as exc:
        missing = str(exc).split(":")[0]
        return (
            f"onnxruntime-gpu {ort.__version__}'s provider cannot load: {missing} is missing "
            "(install the CUDA 13 and cuDNN 9 libraries, e.g. the nvidia-* wheels that "
            "PyTorch cu130 brings, or put them on LD_LIBRARY_PATH)"
        )
    return None
