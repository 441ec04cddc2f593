"""Runner options: the VART-ML VAIML keys (and copyless's own), validated once at creation.

What each option means on each engine is in README.md ("Runner options"), the one table of
them; :class:`RunnerOptions` lists the keys and defaults, ``_VALIDATORS`` what each accepts.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..backends import CudaOptions, parse_cuda_options
from ..model import ConfigFile, read_config
from ..types import OptionError

logger = logging.getLogger(__name__)

_TENSOR_TYPES = ("HW", "CPU")
_ORDERS = ("submission", "completion")
_LEVELS = ("ERROR", "WARNING", "INFO", "DEBUG")
_DEVICES = ("cpu", "cuda", "tensorrt")
#: OpenVINO device names (RunnerType.OPENVINO): a plugin, an optional ".N" id or ":" list.
_OPENVINO_DEVICE = re.compile(r"(CPU|GPU|NPU|AUTO|HETERO|MULTI|BATCH)(\.\d+)?(:[A-Z0-9.,:]+)?")
_HINTS = ("LATENCY", "THROUGHPUT", "AUTO")
_PRECISIONS = ("model", "engine", "f32", "bf16", "f16")
_ASYNC_ENGINES = ("auto", "own", "shared")
_CUDA_DEFAULTS = CudaOptions()  # frozen: one shared default


@dataclass(frozen=True, slots=True)
class RunnerOptions:
    input_tensor_type: str = "HW"
    output_tensor_type: str = "HW"
    skip_in_bo_sync: bool = False
    skip_out_bo_sync: bool = False
    cma_index: int = 0
    aie_columns_sharing: bool = True
    start_column: int | None = None
    async_threadpool_depth: int = 10
    max_concurrent_runs: int = 2
    callback_order: str = "submission"
    log_level: str = "INFO"
    debug: bool = False
    config_json: str | None = None
    cache_path: str | None = None
    ai_analyzer_profiling: bool = False
    device: str = "cpu"
    num_threads: int = 0
    profile_path: str | None = None
    performance_hint: str = "LATENCY"
    engine_spinning: bool = False
    inference_precision: str = "model"
    warm_up: bool = False
    cuda_options: CudaOptions = _CUDA_DEFAULTS
    #: Where async jobs run on a backend whose threads belong to an engine (onnxruntime):
    #: "own" engines of :meth:`async_engine_threads` threads each, "shared" with ``execute``
    #: on the sync engines, "auto" own ones only when their thread count differs.
    async_engines: str = "auto"
    #: Async jobs on an engine's own async requests (OpenVINO's ``start_async``: started
    #: from a job worker, ended on OpenVINO's callback thread) instead of a job worker
    #: blocking in ``infer``; off unless measured faster for your model (README).
    native_async: bool = False

    def own_async_engines(self, threads_per_engine: bool) -> bool:
        """Whether async jobs load engines of their own, on a backend that declares (or not)
        ``Capabilities.threads_per_engine``."""
        if not threads_per_engine or self.async_engines == "shared":
            return False
        return self.async_engines == "own" or self.async_engine_threads() != self.engine_threads()

    def throughput_async_engines(self, throughput_engines: bool) -> bool:
        """Whether async jobs get engines compiled for concurrent requests, on a backend that
        declares (or not) ``Capabilities.throughput_engines``: when ``execute``'s engines are
        compiled for latency and more than one job may run at once."""
        return (
            throughput_engines
            and self.async_engines != "shared"
            and self.performance_hint == "LATENCY"
            and self.max_concurrent_runs > 1
            and self.device in ("cpu", "CPU")
        )

    def engine_threads(self) -> int:
        """Engine threads of a synchronous run: explicit, or every core."""
        if self.num_threads > 0:
            return self.num_threads
        return _cores()

    def async_engine_threads(self) -> int:
        """Engine threads of each async job: explicit, or the cores shared by the
        ``max_concurrent_runs`` jobs that run at once (at least one)."""
        if self.num_threads > 0:
            return self.num_threads
        return max(1, _cores() // self.max_concurrent_runs)


def _cores() -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, cores or 1)


def _choice(values: tuple[str, ...]) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if not isinstance(value, str) or value not in values:
            raise OptionError(f"option {key!r}: {value!r} is not one of {list(values)}")
        return value

    return check


def _upper_choice(values: tuple[str, ...]) -> Callable[[str, Any], Any]:
    inner = _choice(values)

    def check(key: str, value: Any) -> Any:
        return inner(key, value.upper() if isinstance(value, str) else value)

    return check


def _device(key: str, value: Any) -> Any:
    if isinstance(value, str) and (value in _DEVICES or _OPENVINO_DEVICE.fullmatch(value)):
        return value
    raise OptionError(
        f"option {key!r}: {value!r} is not one of {list(_DEVICES)} "
        "or an OpenVINO device name (CPU, GPU, GPU.1, NPU, AUTO, ...)"
    )


def _bool(key: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise OptionError(f"option {key!r}: expected True or False, got {value!r}")
    return value


def _int_range(
    low: int, high: int | None = None, *, none_ok: bool = False
) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if value is None and none_ok:
            return None
        bad_type = isinstance(value, bool) or not isinstance(value, int)
        if bad_type or value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            extra = " or None" if none_ok else ""
            raise OptionError(f"option {key!r}: expected an int {bound}{extra}, got {value!r}")
        return value

    return check


def _one_bank(key: str, value: Any) -> Any:
    _int_range(0)(key, value)
    if value != 0:
        raise OptionError(
            f"option {key!r}: copyless allocates from host memory, which has one bank (0); "
            f"got {value!r}"
        )
    return value


def _path(must_exist: bool) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, (str, os.PathLike)):
            raise OptionError(f"option {key!r}: expected a path string or None, got {value!r}")
        path = os.fspath(value)
        if must_exist and not os.path.isfile(path):
            raise OptionError(f"option {key!r}: no file at {path!r}")
        return path

    return check


_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "input_tensor_type": _upper_choice(_TENSOR_TYPES),
    "output_tensor_type": _upper_choice(_TENSOR_TYPES),
    "skip_in_bo_sync": _bool,
    "skip_out_bo_sync": _bool,
    "cma_index": _one_bank,
    "aie_columns_sharing": _bool,
    "start_column": _int_range(0, none_ok=True),
    "async_threadpool_depth": _int_range(1, 1024),
    "max_concurrent_runs": _int_range(1, 1024),
    "callback_order": _choice(_ORDERS),
    "log_level": _upper_choice(_LEVELS),
    "debug": _bool,
    "config_json": _path(must_exist=True),
    "cache_path": _path(must_exist=False),
    "ai_analyzer_profiling": _bool,
    "device": _device,
    "num_threads": _int_range(0, 1024),
    "profile_path": _path(must_exist=False),
    "performance_hint": _upper_choice(_HINTS),
    "engine_spinning": _bool,
    "inference_precision": _choice(_PRECISIONS),
    "warm_up": _bool,
    "cuda_options": lambda _key, value: parse_cuda_options(value),
    "async_engines": _choice(_ASYNC_ENGINES),
    "native_async": _bool,
}

KNOWN_OPTIONS = tuple(f.name for f in fields(RunnerOptions))
assert set(KNOWN_OPTIONS) == set(_VALIDATORS)  # internal consistency, not user input


def parse_options(options: Mapping[str, Any] | None) -> RunnerOptions:
    """Validate ``options``; unknown keys and bad values raise :class:`OptionError`."""
    if options is None:
        return RunnerOptions()
    if not isinstance(options, Mapping):
        raise OptionError(
            f"options must be a mapping of str to values, got {type(options).__name__}"
        )
    merged: dict[str, Any] = {}
    config = options.get("config_json")
    if config is not None:
        path = _VALIDATORS["config_json"]("config_json", config)
        merged.update(_config_options(read_config(path)))
    merged.update(options)
    values: dict[str, Any] = {}
    for key, value in merged.items():
        if not isinstance(key, str) or key not in _VALIDATORS:
            raise OptionError(
                f"unknown option {key!r}; accepted options: {', '.join(KNOWN_OPTIONS)}"
            )
        values[key] = _VALIDATORS[key](key, value)
    return RunnerOptions(**values)


def _config_options(config: ConfigFile) -> dict[str, Any]:
    """The runner options a configuration file gives. A copyless "runner" section is
    checked like options given directly (a typo there is an OptionError). A Vitis AI
    ``vitis_ai_config.json`` (no copyless sections: "passes", "target", ...) gives the
    runner options among its top-level keys; its other keys, and unknown top-level keys
    beside copyless's sections, are named once in a warning and ignored."""
    given = {k: v for k, v in config.runner.items() if k != "config_json"}
    ignored = list(config.ignored)
    if not config.sectioned:
        ignored += [k for k in given if k not in _VALIDATORS]
        given = {k: v for k, v in given.items() if k in _VALIDATORS}
    if ignored:
        logger.warning(
            "config_json %r: ignoring key(s) copyless does not use: %s",
            config.path,
            ", ".join(sorted(map(str, ignored))),
        )
    return given
