"""``RunnerType.VAIML``: run the compiled model on the engine measured fastest for it here.

The first runner of a model on a machine loads it on onnxruntime and on OpenVINO, times
``execute`` on runner-allocated (zero-copy) tensors on both, alternating, keeps the faster
runner (OpenVINO must be :data:`MARGIN` faster to replace onnxruntime) and closes the
other; the whole measurement is bounded (:data:`BUDGET_S`, loads included, at least
:data:`MIN_RUNS` timed runs each). The choice is cached in
``<cache root>/engines/<digest>.json`` (the cache root of :mod:`copyless.model.zoo`), where
``<digest>`` hashes the model's graphs and metadata and the options that change speed or
answers; the file also records the engine versions and the CPU (model name and a digest
of its flags). A file that is corrupt, from another CPU or from other engine versions is
ignored (said at WARNING/INFO), measured again and rewritten: never trusted.

Precision: both engines run the compiled precision. OpenVINO's own choice (bf16 on CPUs
with AVX512-BF16 or AMX, which changes answers) is never made silently: with the default
``inference_precision="model"`` the OpenVINO backend sets ``INFERENCE_PRECISION_HINT`` to
f32 for float graphs, for the measurement and for the run. Only an explicit
``inference_precision`` other than "model" lets OpenVINO run otherwise, and the reason
string says so.

No measurement (onnxruntime, said in the reason) where OpenVINO is not installed, where
``device`` is an onnxruntime GPU device (``cuda``/``tensorrt``: OpenVINO names other
devices, which choose OpenVINO), where a tensor has a dim unknown until run time, or where
OpenVINO refuses the model (its error is in the reason).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import logging
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..backends import cpu_tag
from ..model import CompiledModel
from ..model.zoo import cache_root
from ..types import (
    CopylessError,
    ModelLoadError,
    NpuTensorInfo,
    RunnerType,
    StatusCode,
    TensorDirection,
    TensorType,
    UnsupportedError,
)
from ._options import RunnerOptions


class Candidate(Protocol):
    """What the choice needs of a runner: to time it and to close the one not chosen (the
    factory's runners; this module never imports the runner)."""

    def warm_up(self) -> None: ...

    def close(self) -> None: ...

    def get_tensors_info(
        self, direction: TensorDirection, tensor_type: TensorType | None = None
    ) -> list[NpuTensorInfo]: ...

    def allocate_npu_tensor(self, info: NpuTensorInfo, memory_bank: int | None = None) -> Any: ...

    def execute(self, inputs: Any, outputs: Any) -> StatusCode: ...


R = TypeVar("R", bound=Candidate)

__all__ = ["BUDGET_S", "MIN_RUNS", "EngineChoice", "choose_engine"]

logger = logging.getLogger("copyless.runner")

#: Seconds the first measurement of a model may take, engine loads included: MIN_RUNS
#: timed runs per engine within it; past twice it, one timed run each ends it.
BUDGET_S = 1.8
MIN_RUNS = 3
MAX_RUNS = 25
#: OpenVINO replaces onnxruntime (the reference engine, whose answers the accuracy work
#: pins) only when its median is at least this much lower: a few percent is within the
#: noise of a short measurement, and a choice that flips between runs helps nobody.
MARGIN = 0.10
#: The cache file's format; another number is ignored and rewritten.
FORMAT = 1
#: Options that change an engine's speed or answers: part of the cache key.
_KEYED_OPTIONS = (
    "device", "inference_precision", "performance_hint", "num_threads",
    "max_concurrent_runs", "engine_spinning", "input_tensor_type", "output_tensor_type",
)  # fmt: skip
_NAMES = {RunnerType.ONNXRUNTIME: "onnxruntime", RunnerType.OPENVINO: "openvino"}

#: ``build(engine, options)``: a runner of the model on that engine (the factory's).
Build = Callable[[RunnerType, RunnerOptions], R]


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """Which engine runs a model (``engine``: ONNXRUNTIME or OPENVINO), what was asked
    (``requested``), and why, in one line (``reason``). ``medians_ms``: the measured median
    latency per engine name (empty when nothing was measured); ``cached``: read from the
    cache file instead of measured now."""

    engine: RunnerType
    requested: RunnerType
    reason: str
    medians_ms: dict[str, float] = field(default_factory=dict)
    cached: bool = False

    @property
    def engine_name(self) -> str:
        return _NAMES[self.engine]

    @classmethod
    def forced(cls, engine: RunnerType) -> EngineChoice:
        return cls(engine, engine, f"forced by runner_type=RunnerType.{engine.name}")


def choose_engine(
    model: CompiledModel, options: RunnerOptions, build: Build[R]
) -> tuple[R, EngineChoice]:
    """The runner ``RunnerType.VAIML`` gives for ``model``, on the cached choice or on the
    engine measured fastest now (then cached), and the choice (which engine and why)."""
    reason = _no_choice(model, options)
    if reason is not None:
        engine, why = reason
        return build(engine, options), EngineChoice(engine, RunnerType.VAIML, why)
    path, record = _cache_file(model, options)
    cached = _read(path, record)
    if cached is not None:
        try:
            return build(cached.engine, options), cached
        except (UnsupportedError, ModelLoadError) as exc:  # e.g. a check added since
            logger.warning("%s: the cached engine %s cannot load it (%s): measuring again",
                           model.name, cached.engine_name, exc)  # fmt: skip
    runner, choice = _measure(model, options, build)
    if choice.medians_ms:
        _write(path, record, choice)
    return runner, choice


def _no_choice(model: CompiledModel, options: RunnerOptions) -> tuple[RunnerType, str] | None:
    """The engine, and why, where nothing is to be measured; None where it is."""
    ort = RunnerType.ONNXRUNTIME
    if options.device in ("cuda", "tensorrt"):
        return ort, f"device {options.device!r} is an onnxruntime device"
    if options.device != "cpu":
        return RunnerType.OPENVINO, f"device {options.device!r} is an OpenVINO device"
    if importlib.util.find_spec("openvino") is None:
        return ort, "OpenVINO is not installed (pip install copyless[openvino]): onnxruntime"
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        # OpenVINO's TBB dlopens with RTLD_DEEPBIND, which AddressSanitizer refuses by
        # aborting the process: loading it to measure would end the caller.
        return ort, "not measured: OpenVINO cannot load under AddressSanitizer (LD_PRELOAD)"
    unknown = [s.name for s in model.inputs + model.outputs if -1 in s.hw.shape]
    if unknown:
        return ort, f"not measured: tensors {unknown} have dims unknown until run time"
    return None


def _measure(
    model: CompiledModel, options: RunnerOptions, build: Build[R]
) -> tuple[R, EngineChoice]:
    """Load both engines, time them alternately, keep the faster runner, close the other."""
    start = time.perf_counter()
    quiet = dataclasses.replace(options, warm_up=False)
    runners: dict[RunnerType, R] = {}
    refused: dict[RunnerType, Exception] = {}
    try:
        for engine in (RunnerType.ONNXRUNTIME, RunnerType.OPENVINO):
            try:
                runners[engine] = build(engine, quiet)
            except ModelLoadError as exc:
                if engine is RunnerType.ONNXRUNTIME:
                    raise  # a graph onnxruntime finds corrupt is not given to OpenVINO
                refused[engine] = exc
            except UnsupportedError as exc:
                refused[engine] = exc
        if len(runners) < 2:
            return _one_left(runners, refused, options)
        medians = _time_runs(runners, start)
        if isinstance(medians, str):  # not measurable: onnxruntime, the reference engine
            winner = runners.pop(RunnerType.ONNXRUNTIME)
            if options.warm_up:
                winner.warm_up()
            return winner, EngineChoice(RunnerType.ONNXRUNTIME, RunnerType.VAIML, medians)
        ort, ov = medians[RunnerType.ONNXRUNTIME], medians[RunnerType.OPENVINO]
        best = RunnerType.OPENVINO if ov < ort * (1.0 - MARGIN) else RunnerType.ONNXRUNTIME
        if options.warm_up:
            runners[best].warm_up()
        winner = runners.pop(best)
    finally:
        for runner in runners.values():
            runner.close()
    figures = ", ".join(f"{_NAMES[e]} {ms:.3f} ms" for e, ms in sorted(
        medians.items(), key=lambda item: item[1]))  # fmt: skip
    elapsed = time.perf_counter() - start
    reason = (
        f"measured fastest here at {_precision(options)}: median {figures} "
        f"(OpenVINO needs a {MARGIN:.0%} lead; measured in {elapsed:.2f} s)"
    )
    named = {_NAMES[e]: round(ms, 4) for e, ms in medians.items()}
    return winner, EngineChoice(best, RunnerType.VAIML, reason, named)


def _one_left(
    runners: dict[RunnerType, R],
    refused: dict[RunnerType, Exception],
    options: RunnerOptions,
) -> tuple[R, EngineChoice]:
    if not runners:
        raise refused[RunnerType.ONNXRUNTIME]
    engine, runner = runners.popitem()
    other = next(iter(refused))
    reason = f"{_NAMES[other]} cannot run it ({refused[other]})"
    if options.warm_up:
        try:
            runner.warm_up()
        except BaseException:
            runner.close()
            raise
    return runner, EngineChoice(engine, RunnerType.VAIML, reason)


def _time_runs(
    runners: dict[RunnerType, R], start: float
) -> dict[RunnerType, float] | str:
    """Median milliseconds of ``execute`` per engine, on zero-filled runner-allocated
    tensors, alternating engines so load from elsewhere hits both alike; one untimed run
    first (onnxruntime's first). Why nothing was measured, instead, when a first run fails
    on zeros or alone takes longer than the budget (then the other engine never runs)."""
    calls: dict[RunnerType, Callable[[], StatusCode]] = {}
    for engine, runner in runners.items():
        infos = runner.get_tensors_info
        try:
            ins = [runner.allocate_npu_tensor(i) for i in infos(TensorDirection.INPUT)]
            outs = [runner.allocate_npu_tensor(i) for i in infos(TensorDirection.OUTPUT)]
        except CopylessError as exc:
            return f"not measured: its tensors cannot be allocated ({exc})"
        calls[engine] = lambda r=runner, i=ins, o=outs: r.execute([i], [o])  # type: ignore[misc]
        began = time.perf_counter()
        status = calls[engine]()
        took = time.perf_counter() - began
        if status is not StatusCode.SUCCESS:
            return f"not measured: a run on zeros gave {status.name} on {_NAMES[engine]}"
        if took > BUDGET_S:
            return f"not measured: one run took {took:.1f} s on {_NAMES[engine]}"
    times: dict[RunnerType, list[float]] = {engine: [] for engine in calls}
    while True:
        for engine, call in calls.items():
            began = time.perf_counter()
            call()
            times[engine].append(time.perf_counter() - began)
        runs = len(times[RunnerType.ONNXRUNTIME])
        elapsed = time.perf_counter() - start
        # MIN_RUNS each while within the budget; past it, one timed run each is enough (a
        # slow model, or a loaded machine, must not make the first create_runner slow)
        over = elapsed > BUDGET_S and (runs >= MIN_RUNS or elapsed > 2 * BUDGET_S)
        if runs >= MAX_RUNS or over:
            break
    return {engine: statistics.median(t) * 1e3 for engine, t in times.items()}


def _precision(options: RunnerOptions) -> str:
    if options.inference_precision == "model":
        return "the compiled precision (OpenVINO: INFERENCE_PRECISION_HINT f32 for floats)"
    return f"inference_precision={options.inference_precision!r} (OpenVINO's, as asked)"


# -- the cache file ---------------------------------------------------------------------
def _cache_file(model: CompiledModel, options: RunnerOptions) -> tuple[Path, dict[str, Any]]:
    """Its path and the record a valid file must repeat (CPU, engine versions, format)."""
    digest = hashlib.sha1(usedforsecurity=False)
    for partition in model.partitions:
        digest.update(partition.target.encode() + b"\0" + partition.onnx_bytes)
    digest.update(json.dumps(model.metadata, sort_keys=True).encode())
    digest.update(repr([getattr(options, key) for key in _KEYED_OPTIONS]).encode())
    record = {"format": FORMAT, "cpu": cpu_tag(), "cpu_name": _cpu_name(), "versions": _versions()}
    return cache_root() / "engines" / f"{digest.hexdigest()[:24]}.json", record


def _read(path: Path, record: dict[str, Any]) -> EngineChoice | None:
    """The cached choice, or None (no file; or one that is corrupt or was written under
    another CPU, engine version or format: said, and measured again)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("engine choice cache %s unreadable (%s): measuring again", path, exc)
        return None
    try:
        data = json.loads(text)
        stale = [key for key, value in record.items() if data[key] != value]
        engine = {name: e for e, name in _NAMES.items()}[data["engine"]]
        medians = {str(k): float(v) for k, v in data["medians_ms"].items()}
        reason = str(data["reason"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.warning("engine choice cache %s is corrupt (%r): measuring again", path, exc)
        return None
    if stale:
        logger.info("engine choice cache %s was written with another %s: measuring again",
                    path, "/".join(stale))  # fmt: skip
        return None
    return EngineChoice(engine, RunnerType.VAIML, f"cached: {reason}", medians, cached=True)


def _write(path: Path, record: dict[str, Any], choice: EngineChoice) -> None:
    """Write atomically (a temporary file, then ``os.replace``); a failure only warns."""
    data = {**record, "engine": choice.engine_name, "medians_ms": choice.medians_ms,
            "reason": choice.reason}  # fmt: skip
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("cannot write the engine choice cache %s: %s", path, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()


def _versions() -> dict[str, str]:
    import onnxruntime

    found = {"onnxruntime": onnxruntime.__version__}
    with contextlib.suppress(ImportError):
        import openvino

        found["openvino"] = openvino.__version__
    return found


def _cpu_name() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()
