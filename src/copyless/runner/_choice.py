"""``RunnerType.VAIML``: run the compiled model on the engine measured fastest for it here.

The first runner of a model on a machine loads it on onnxruntime and on OpenVINO and times
``execute`` on runner-allocated (zero-copy) tensors in interleaved rounds: each round runs
every engine :data:`ROUND_RUNS` times back to back, the engine that goes first alternating
round by round, so load from elsewhere hits both alike. Each engine is judged by its best
round (the lowest round median: the quietest moment it had), and the faster one is kept
(onnxruntime, the reference engine, unless OpenVINO's best is more than :data:`TIE` lower:
the default runs within 1 + TIE of the faster engine); the other is closed. The whole
measurement is bounded (:data:`BUDGET_S`, loads included, at least :data:`MIN_ROUNDS`
rounds).

The machine's own load is watched while measuring (the CPU time other processes took,
from ``/proc/stat``, less this process's own; the load average where there is no
``/proc``). A measurement taken while others used more than :data:`BUSY_SHARE` of the CPUs
is still used and still cached, but marked busy, and the reason says so ("measured while
the machine was busy: others used 40% of the CPUs"); a runner that finds such a record on a
quiet machine measures again and replaces it.

A cached choice is checked against the runner's first runs: :data:`CHECK_RUNS` timed runs of
the chosen engine on zeros when it loads. When they disagree with the record (the chosen
engine's best is now slower than the other engine's recorded best, and more than
:data:`RECHECK` times its own), both engines are measured again (said at INFO) and the file
rewritten; unless others used more than :data:`BUSY_SHARE` of the CPUs during those runs
(a Ray actor starting beside its decode tasks, a loaded machine): then the slow runs time the
load, not the engines, and the record stands (said at INFO).

The choice is cached in ``<cache root>/engines/<digest>.json`` (the cache root of
:mod:`copyless.model.zoo`), where ``<digest>`` hashes the model's graphs and metadata and the
options that change speed or answers; the file also records the engine versions and the CPU
(model name and a digest of its flags). A file that is corrupt, from another CPU or from
other engine versions is ignored (said at WARNING/INFO), measured again and rewritten: never
trusted.

Precision: both engines run the compiled precision. OpenVINO's own choice (bf16 on CPUs
with AVX512-BF16 or AMX, which changes answers) is never made silently: with the default
``inference_precision="model"`` the OpenVINO backend sets ``INFERENCE_PRECISION_HINT`` to
f32 for float graphs, for the measurement and for the run. Only an explicit
``inference_precision`` other than "model" lets OpenVINO run otherwise, and the reason
string says so. A model compiled with ``precision="bf16"`` (its price recorded in it), or
an explicit ``inference_precision="bf16"``, runs on OpenVINO without a measurement:
onnxruntime has no BF16 arithmetic.

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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

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
    best_round_medians,
    cpu_info,
    openvino_unloadable,
    write_atomically,
)
from ._load import BUSY_SHARE, CpuLoad, machine_busy
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

__all__ = ["BUDGET_S", "MIN_ROUNDS", "EngineChoice", "choose_engine"]

logger = logging.getLogger("copyless.runner")

#: Seconds the first measurement of a model may take, engine loads included: MIN_ROUNDS
#: rounds within it; past twice it, the round running ends it.
BUDGET_S = 1.8
MIN_ROUNDS = 3
MAX_ROUNDS = 12
#: Timed runs of each engine per round, back to back (their median is the round's figure).
ROUND_RUNS = 3
#: OpenVINO replaces onnxruntime (the reference engine, whose answers the accuracy work
#: pins) when its best is more than this much lower: below it the two are a tie, and a
#: choice that flips between measurements helps nobody.
TIE = 0.03
#: A cached choice is checked with this many timed runs of the chosen engine...
CHECK_RUNS = 3
#: ... and measured again when its best is over RECHECK times the recorded best (and slower
#: than the other engine's recorded best).
RECHECK = 1.3
#: The cache file's format; another number is ignored and rewritten.
FORMAT = 2
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
    (``requested``), and why, in one line (``reason``). ``medians_ms``: each engine's best
    round median latency (empty when nothing was measured); ``cached``: read from the cache
    file instead of measured now; ``busy``: the share of the CPUs other processes used while
    it was measured, when that made the machine busy (None: measured on a quiet machine)."""

    engine: RunnerType
    requested: RunnerType
    reason: str
    medians_ms: dict[str, float] = field(default_factory=dict)
    cached: bool = False
    busy: float | None = None

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
    if cached is not None and cached.busy is not None and not machine_busy():
        logger.info("%s: the cached engine choice was measured on a busy machine (others "
                    "used %.0f%% of the CPUs); the machine is quiet now: measuring again",
                    model.name, 100.0 * cached.busy)  # fmt: skip
        cached = None
    if cached is not None:
        runner = _cached_runner(model, options, build, cached)
        if runner is not None:
            return runner, cached
    runner, choice = _measure(model, options, build)
    if choice.medians_ms:
        _write(path, record, choice)
    return runner, choice


def _cached_runner(
    model: CompiledModel, options: RunnerOptions, build: Build[R], cached: EngineChoice
) -> R | None:
    """The cached engine's runner, checked by its first runs (:data:`CHECK_RUNS`); None
    when it cannot load the model or its runs disagree with the record (measure again)."""
    try:
        runner = build(cached.engine, dataclasses.replace(options, warm_up=False))
    except (UnsupportedError, ModelLoadError) as exc:  # e.g. a check added since
        logger.warning("%s: the cached engine %s cannot load it (%s): measuring again",
                       model.name, cached.engine_name, exc)  # fmt: skip
        return None
    try:
        disagree = _disagrees(runner, cached)
    except BaseException:
        runner.close()
        raise
    if disagree is not None:
        logger.info("%s: the first runs disagree with the cached engine choice (%s): "
                    "measuring again", model.name, disagree)  # fmt: skip
        runner.close()
        return None
    if options.warm_up:
        runner.warm_up()
    return runner


def _disagrees(runner: Candidate, cached: EngineChoice) -> str | None:
    """Why the runner's first runs contradict the cached figures, or None when they do not
    (or cannot be timed: the record stands)."""
    mine = cached.medians_ms.get(cached.engine_name)
    others = [ms for name, ms in cached.medians_ms.items() if name != cached.engine_name]
    if mine is None or not others:
        return None
    call = _call(runner)
    if isinstance(call, str):
        return None
    times = []
    load = CpuLoad()
    for _ in range(CHECK_RUNS + 1):  # the first untimed
        began = time.perf_counter()
        if call() is not StatusCode.SUCCESS:
            return None
        times.append((time.perf_counter() - began) * 1e3)
    best = min(times[1:])
    if best > min(others) and best > RECHECK * mine:
        busy = load.others_share()
        if busy is not None and busy > BUSY_SHARE:
            # A measurement now would time the load, not the engines (e.g. a Ray actor
            # starting beside its decode tasks and sibling actors): the record stands.
            logger.info("%s: its first runs were slow (%.3f ms, recorded %.3f ms) while "
                        "others used %.0f%% of the CPUs: the cached engine choice stands",
                        cached.engine_name, best, mine, 100.0 * busy)  # fmt: skip
            return None
        return (f"{cached.engine_name} now runs {best:.3f} ms, recorded {mine:.3f} ms, the "
                f"other engine {min(others):.3f} ms")  # fmt: skip
    return None


def _no_choice(model: CompiledModel, options: RunnerOptions) -> tuple[RunnerType, str] | None:
    """The engine, and why, where nothing is to be measured; None where it is."""
    ort = RunnerType.ONNXRUNTIME
    if options.device in ("cuda", "tensorrt"):
        return ort, f"device {options.device!r} is an onnxruntime device"
    if options.device != "cpu":
        return RunnerType.OPENVINO, f"device {options.device!r} is an OpenVINO device"
    if importlib.util.find_spec("openvino") is None:
        return ort, "OpenVINO is not installed (pip install copyless[openvino]): onnxruntime"
    if options.inference_precision in ("bf16", "f16"):  # asked, or the model's record
        return RunnerType.OPENVINO, (
            f"{options.inference_precision} arithmetic runs on OpenVINO only (onnxruntime's "
            "CPU provider has none): not measured"
        )
    unloadable = openvino_unloadable()
    if unloadable:  # loading it to measure would end the caller
        return ort, f"not measured: {unloadable}"
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
        load = CpuLoad()
        medians = _time_runs(runners, start)
        busy = load.others_share()
        if isinstance(medians, str):  # not measurable: onnxruntime, the reference engine
            winner = runners.pop(RunnerType.ONNXRUNTIME)
            if options.warm_up:
                winner.warm_up()
            return winner, EngineChoice(RunnerType.ONNXRUNTIME, RunnerType.VAIML, medians)
        ort, ov = medians[RunnerType.ONNXRUNTIME], medians[RunnerType.OPENVINO]
        best = RunnerType.OPENVINO if ov < ort * (1.0 - TIE) else RunnerType.ONNXRUNTIME
        if options.warm_up:
            runners[best].warm_up()
        winner = runners.pop(best)
    finally:
        for runner in runners.values():
            runner.close()
    figures = ", ".join(f"{_NAMES[e]} {ms:.3f} ms" for e, ms in sorted(
        medians.items(), key=lambda item: item[1]))  # fmt: skip
    elapsed = time.perf_counter() - start
    busy = busy if busy is not None and busy > BUSY_SHARE else None
    when = (
        ""
        if busy is None
        else (f"; measured while the machine was busy: others used {busy:.0%} of the CPUs")
    )
    reason = (
        f"measured fastest here at {_precision(options)}: best round median {figures} "
        f"(interleaved rounds, a {TIE:.0%} tie goes to onnxruntime; measured in "
        f"{elapsed:.2f} s{when})"
    )
    named = {_NAMES[e]: round(ms, 4) for e, ms in medians.items()}
    return winner, EngineChoice(best, RunnerType.VAIML, reason, named,
                                busy=None if busy is None else round(busy, 3))  # fmt: skip


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


def _call(runner: Candidate) -> Callable[[], StatusCode] | str:
    """One ``execute`` of ``runner`` on zero-filled runner-allocated tensors, or why not."""
    infos = runner.get_tensors_info
    try:
        ins = [runner.allocate_npu_tensor(i) for i in infos(TensorDirection.INPUT)]
        outs = [runner.allocate_npu_tensor(i) for i in infos(TensorDirection.OUTPUT)]
    except CopylessError as exc:
        return f"not measured: its tensors cannot be allocated ({exc})"
    return lambda: runner.execute([ins], [outs])


def _time_runs(runners: dict[RunnerType, R], start: float) -> dict[RunnerType, float] | str:
    """Each engine's best round median, in milliseconds: rounds of :data:`ROUND_RUNS`
    back-to-back runs per engine, the first engine alternating round by round (a burst of
    load from elsewhere lands in one engine's round, not in its best one). One untimed run
    each first (onnxruntime's first). Why nothing was measured, instead, when a first run
    fails on zeros or alone takes longer than the budget (then the other engine never runs)."""
    calls: dict[RunnerType, Callable[[], StatusCode]] = {}
    for engine, runner in runners.items():
        call = _call(runner)
        if isinstance(call, str):
            return call
        calls[engine] = call
        began = time.perf_counter()
        status = call()
        took = time.perf_counter() - began
        if status is not StatusCode.SUCCESS:
            return f"not measured: a run on zeros gave {status.name} on {_NAMES[engine]}"
        if took > BUDGET_S:
            return f"not measured: one run took {took:.1f} s on {_NAMES[engine]}"

    def more(rounds: int) -> bool:
        # MIN_ROUNDS while within the budget; past twice it, the round run is enough (a
        # slow model, or a loaded machine, must not make the first create_runner slow)
        elapsed = time.perf_counter() - start
        over = (elapsed > BUDGET_S and rounds >= MIN_ROUNDS) or elapsed > 2 * BUDGET_S
        return rounds < MAX_ROUNDS and not over

    return best_round_medians(calls, ROUND_RUNS, more)


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
    cpu = cpu_info()
    record = {"format": FORMAT, "cpu": cpu.tag, "cpu_name": cpu.name, "versions": _versions()}
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
        busy = None if data.get("busy") is None else float(data["busy"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        logger.warning("engine choice cache %s is corrupt (%r): measuring again", path, exc)
        return None
    if stale:
        logger.info("engine choice cache %s was written with another %s: measuring again",
                    path, "/".join(stale))  # fmt: skip
        return None
    return EngineChoice(engine, RunnerType.VAIML, f"cached: {reason}", medians, cached=True,
                        busy=busy)  # fmt: skip


def _write(path: Path, record: dict[str, Any], choice: EngineChoice) -> None:
    """Write atomically (:func:`~copyless.types.write_atomically`); a failure only warns."""
    data = {**record, "engine": choice.engine_name, "medians_ms": choice.medians_ms,
            "reason": choice.reason, "busy": choice.busy}  # fmt: skip
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(data, indent=1).encode("utf-8"))
    except OSError as exc:
        logger.warning("cannot write the engine choice cache %s: %s", path, exc)


def _versions() -> dict[str, str]:
    import onnxruntime

    found = {"onnxruntime": onnxruntime.__version__}
    with contextlib.suppress(ImportError):
        import openvino

        found["openvino"] = openvino.__version__
    return found
