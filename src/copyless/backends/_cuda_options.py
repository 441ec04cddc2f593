"""Options of the CUDA/TensorRT backend and the ONNX Runtime provider list they give.

=======================  =========  ===================================================
key                      default    effect
=======================  =========  ===================================================
device_id                0          the GPU (CUDA ordinal)
stream                   None       a CUDA stream handle (int > 2) to run on, kept
                                    alive by the caller while any session uses it;
                                    None: copyless's shared stream of the device.
                                    ONNX Runtime cannot run on the legacy/per-thread
                                    default streams (0, 1, 2): refused, not ignored
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

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..types import OptionError

CUDA_PROVIDER = "CUDAExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"
#: The provider each device needs (TensorRT also uses CUDA for the nodes it cannot take).
PROVIDERS = {"cuda": CUDA_PROVIDER, "tensorrt": TENSORRT_PROVIDER}
_ALGO_SEARCH = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")


@dataclass(frozen=True, slots=True)
class CudaOptions:
    device_id: int = 0
    stream: int | None = None
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
    ``has_user_compute_stream`` from it), so work queued on it before a run (our H2D copies,
    a producer told to order its writes before it) is complete when the engine reads.
    """
    cuda: dict[str, str] = {
        "device_id": str(options.device_id),
        "user_compute_stream": str(stream),
        "cudnn_conv_algo_search": options.cudnn_conv_algo_search,
        "use_tf32": "1" if options.use_tf32 else "0",
    }
    if options.gpu_mem_limit is not None:
        cuda["gpu_mem_limit"] = str(options.gpu_mem_limit)
    providers: list[Any] = [(CUDA_PROVIDER, cuda)]
    if device == "tensorrt":
        trt: dict[str, str] = {
            "device_id": str(options.device_id),
            "user_compute_stream": str(stream),
            "trt_fp16_enable": "1" if options.trt_fp16 else "0",
        }
        if options.trt_engine_cache_path is not None:
            trt["trt_engine_cache_enable"] = "1"
            trt["trt_engine_cache_path"] = options.trt_engine_cache_path
        providers.insert(0, (TENSORRT_PROVIDER, trt))
    return providers
