"""RunnerFactory: model path + options + runner type -> Runner on the right backend."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Mapping
from typing import Any

from ..backends import Backend, Engine, EngineCache, create_backend
from ..model import (
    CompiledModel,
    check_compiled_with,
    read_config,
    run_precision,
    slower_than_fp32,
)
from ..types import ModelLoadError, OptionError, RunnerType, UnsupportedError
from ._choice import choose_engine
from ._options import RunnerOptions, parse_options
from ._runner import Runner

logger = logging.getLogger(__name__)

#: The engines' names in a precision record's speed figures (copyless.model._speed).
_ENGINE_NAMES = {RunnerType.ONNXRUNTIME: "onnxruntime", RunnerType.OPENVINO: "openvino"}


class RunnerFactory:
    """Creates runners, as VART-ML's ``vart::RunnerFactory``."""

    @staticmethod
    def create_runner(
        model_path: str | os.PathLike[str],
        options: Mapping[str, Any] | None = None,
        runner_type: RunnerType = RunnerType.VAIML,
    ) -> Runner:
        """Load a compiled model (``.rai``, a directory with one ``.rai``, a directory with a
        ``vaiml_par_0`` or ``par_0`` partition directory, or that partition directory itself)
        and prepare it on the backend of ``runner_type``: ``VAIML`` (the default) the engine
        measured fastest for this model here (see ``copyless.runner._choice``; the runner's
        ``engine``/``engine_reason`` say which and why), ``ONNXRUNTIME``/``OPENVINO`` that one.

        Raises ModelLoadError (missing/corrupt model), OptionError (unknown key, bad value),
        UnsupportedError (backend or device not available here: never a silent fallback).
        """
        parsed = parse_options(options)
        if not isinstance(model_path, (str, os.PathLike)):
            raise ModelLoadError(f"model_path must be a path, got {type(model_path).__name__}")
        from ..model import load_model  # the loader lives beside the compiler

        model = load_model(os.fspath(model_path))  # the cache_path option is read below
        return RunnerFactory.from_compiled(model, parsed, runner_type)

    @staticmethod
    def from_compiled(
        model: CompiledModel,
        options: Mapping[str, Any] | RunnerOptions | None = None,
        runner_type: RunnerType = RunnerType.VAIML,
    ) -> Runner:
        """A runner over an in-memory compiled model (see ``copyless.model.compile_to_memory``)."""
        parsed = options if isinstance(options, RunnerOptions) else parse_options(options)
        if not isinstance(runner_type, RunnerType):
            raise OptionError(f"runner_type must be a RunnerType, got {runner_type!r}")
        if parsed.config_json is not None:
            check_compiled_with(model, read_config(parsed.config_json))
        if parsed.inference_precision == "model" and run_precision(model.metadata) == "bf16":
            # the model's own precision, chosen when it was compiled, its price recorded
            parsed = dataclasses.replace(parsed, inference_precision="bf16")
        if runner_type is RunnerType.VAIML:
            runner, choice = choose_engine(model, parsed, functools.partial(_build, model))
            runner._adopt_choice(choice)  # the factory's side of the runner
        else:
            runner = _build(model, runner_type, parsed)
        # the record's speeds are the graph's own, on this CPU's engines
        if parsed.inference_precision == "model" and parsed.device in ("cpu", "CPU"):
            slower = slower_than_fp32(model.metadata, _ENGINE_NAMES.get(runner.engine, ""))
            if slower is not None:
                logger.warning("%s: %s", model.name, slower)
        return runner


def _build(model: CompiledModel, runner_type: RunnerType, parsed: RunnerOptions) -> Runner:
    """A runner of ``model`` on the engine ``runner_type`` forces."""
    cache_path = parsed.cache_path or model.cache_path
    cache = EngineCache(cache_path) if cache_path is not None else None
    backend = create_backend(backend_name(runner_type, parsed.device), parsed, cache)
    cpu_backend = create_backend("onnxruntime", parsed, cache)
    _check_capabilities(model, backend)
    _check_precision(model, backend, parsed.inference_precision)
    threads = parsed.engine_threads()

    def load(num_threads: int, backend: Backend = backend) -> list[Engine]:
        engines: list[Engine] = []
        try:
            for partition in model.partitions:
                chosen = cpu_backend if partition.target == "cpu" else backend
                engines.append(chosen.load(partition, num_threads))
        except BaseException:
            for engine in engines:
                engine.close()
            raise
        return engines

    engines = load(threads)
    # onnxruntime's intra-op threads belong to a session: concurrent jobs on one session
    # would each take every core. Async jobs get sessions sized cores / concurrent runs,
    # unless the async_engines option says to share the sync ones. OpenVINO's latency
    # engine runs one request at a time on every core: concurrent jobs get an engine
    # compiled for throughput (streams), measured faster for them (README, Performance).
    async_loader = None
    if parsed.own_async_engines(backend.capabilities.threads_per_engine):
        async_loader = functools.partial(load, parsed.async_engine_threads())
    elif parsed.throughput_async_engines(backend.capabilities.throughput_engines):
        streams = dataclasses.replace(parsed, performance_hint="THROUGHPUT")
        async_backend = create_backend(backend.name, streams, cache)
        async_loader = functools.partial(load, threads, async_backend)
    logger.debug(
        "runner for %r on %s/%s: %d partition(s), %d engine thread(s)",
        model.name,
        backend.name,
        backend.device,
        len(engines),
        threads,
    )
    runner = Runner(model, parsed, backend, engines, async_loader, cache)
    if parsed.warm_up:
        try:
            runner.warm_up()
        except BaseException:
            runner.close()
            raise
    return runner


def backend_name(runner_type: RunnerType, device: str) -> str:
    """The registered backend (see ``copyless.backends.create_backend``) that runs
    ``runner_type`` on ``device``. The optional backends are imported when created: each
    raises UnsupportedError (with the install hint, or what this machine lacks) rather than
    falling back to the CPU."""
    if runner_type is RunnerType.OPENVINO:
        return "openvino"
    if device == "cpu":
        return "onnxruntime"
    if device not in ("cuda", "tensorrt"):
        raise OptionError(
            f"option 'device': {device!r} is an OpenVINO device; use "
            "runner_type=RunnerType.OPENVINO, or device 'cpu', 'cuda' or 'tensorrt'"
        )
    return "cuda"


def _check_capabilities(model: CompiledModel, backend: Backend) -> None:
    """Refuse, before loading anything, a model the backend's declaration cannot run."""
    dynamic = [s.name for s in model.outputs if s.dynamic]
    if dynamic and not backend.capabilities.engine_outputs:
        raise UnsupportedError(
            f"{model.name}: outputs {dynamic} have data-dependent shapes, which "
            f"{backend.name}/{backend.device} cannot allocate with these options "
            "(cuda_graph needs fixed shapes)"
        )


def _check_precision(model: CompiledModel, backend: Backend, precision: str) -> None:
    """Refuse, in one line, a precision the backend does not compute in here (its
    ``Capabilities.precisions``): never an emulation or a silent fp32 run. ``"model"`` is
    the graph's own; ``"engine"`` the engine's own choice, asked for explicitly."""
    if precision in ("model", "engine") or precision in backend.capabilities.precisions:
        return
    asked = f"inference_precision={precision!r}"
    if precision == run_precision(model.metadata):
        asked = f"compiled to run in {precision} (copyless-compile --precision {precision})"
    note = backend.capabilities.precision_note or f"{backend.name} does not compute in it"
    raise UnsupportedError(
        f"{model.name}: {asked}, refused on {backend.name}/{backend.device}: {note}; "
        "inference_precision='f32' runs it in fp32"
    )
