"""copyless-bench: copyless against the pipelines users write, per frame, on a real photo.

For each model / precision / batch: time decode + preprocess + infer + postprocess per frame
for the plain onnxruntime pipeline, ORT IOBinding, OpenVINO's own pipeline (sync and
AsyncInferQueue) and copyless (zero-copy and CPU view on each backend, async with 2 and 4
slots), against the limit: each engine alone on an already-prepared input (``engine-ort``,
``engine-ov``, see :mod:`.limits`). Every pipeline must first agree with the plain one on
the photo (else WRONG, not timed). Pipelines are interleaved round by round; the tables
(stdout), the JSON and the PNG give median ms/frame, the speed-up vs plain (plain ms / ms),
the ratio to the engine's limit (ms / engine-alone ms), a per-stage breakdown of the sync
pipelines, and per configuration whether copyless's fastest pipeline is a zero-copy one.

Every frame decodes the photo's bytes (Pillow for the users' pipelines, libjpeg-turbo at the
needed DCT scale for copyless's); ``--predecoded`` reuses the decoded photo instead, as the
VART-ML samples and copyless-zerocopy time it. OpenVINO's own pipelines run at OpenVINO's
own precision (bf16 on AVX512-BF16/AMX CPUs: what its users get), copyless's at its
default (f32, the model's precision); ``--ov-precision f32|bf16`` sets one for all.
copyless's sync onnxruntime engines spin within runs, as onnxruntime's defaults do for the
plain pipeline and engine-ort (``--no-spin``: they block, the runner's default).

Deterministic inputs (the zoo's models and photos, fixed compile options and calibration),
interleaved rounds, medians: run it on a quiet machine for figures, e.g. ::

    copyless-bench --model all                         # the full tables, JSON, PNG
    copyless-bench --model all --predecoded --precision fp32 --batch 1 \
        --only engine-ort,engine-ov,copyless-ort-zc,copyless-ov-zc      # zero-copy vs limit
    copyless-bench --quick                             # a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from ...model import zoo
from ...types import CopylessError
from ...vision import decode
from .._output import Output
from . import contenders, limits, peers, suites
from .contender import FAMILY_LIMIT, PLAIN, Contender
from .gate import detail, disagreement
from .measure import Samples, batches_per_round, interleaved
from .models import MODELS, PRECISIONS, Config, copyless_model, peer_model
from .report import (
    FAILED,
    OK,
    UNAVAILABLE,
    WRONG,
    Row,
    breakdown,
    table,
    verdicts,
    write_json,
    write_png,
)
from .stages import medians_ms
from .tasks import Outcome, Photo, Task

logger = logging.getLogger(__name__)

EXIT_USAGE = 2
#: Rough ms per frame of the plain pipeline on a 2-core machine, for the up-front estimate.
_GUESS_MS = {"efficientnet-lite0": 10.0, "resnet50": 60.0, "ppocr-det": 400.0}


@dataclass(frozen=True, slots=True)
class Settings:
    frames: int | None  # None: the model's default (ModelSpec.frames)
    rounds: int
    pipelines: tuple[str, ...]
    photo: str | None
    decode: bool = True  # every frame decodes the photo (else: decoded once)
    ov_precision: str | None = None  # None: each pipeline's own default
    spin: bool = True  # copyless's sync onnxruntime engines spin within runs


@dataclass(frozen=True, slots=True)
class Assets:
    """Everything a pipeline factory needs for one configuration (photo decoded once)."""

    config: Config
    peer_model: Path
    copyless_model: Path
    photo: Photo
    task: Task
    settings: Settings

    @property
    def engine_precision(self) -> str:
        """What engine-ov runs: the precision copyless's OpenVINO pipelines run."""
        return self.settings.ov_precision or "f32"


Factory = Callable[[Assets], Contender]


def _cl_sync(backend: str, zero_copy: bool) -> Factory:
    return lambda a: contenders.sync(
        a.copyless_model, a.task, a.photo, a.config.batch, backend, zero_copy,
        a.settings.ov_precision, a.settings.spin,
    )  # fmt: skip


def _cl_async(backend: str, slots: int) -> Factory:
    return lambda a: contenders.pipelined(
        a.copyless_model, a.task, a.photo, a.config.batch, backend, slots,
        a.settings.ov_precision,
    )  # fmt: skip


FACTORIES: dict[str, Factory] = {
    PLAIN: lambda a: peers.plain(a.peer_model, a.task, a.photo, a.config.batch),
    "engine-ort": lambda a: limits.engine_ort(a.peer_model, a.task, a.photo, a.config.batch),
    "engine-ov": lambda a: limits.engine_ov(
        a.peer_model, a.task, a.photo, a.config.batch, a.engine_precision
    ),
    "ort-iobinding": lambda a: peers.iobinding(a.peer_model, a.task, a.photo, a.config.batch),
    "openvino-sync": lambda a: peers.openvino_sync(
        a.peer_model, a.task, a.photo, a.config.batch, a.settings.ov_precision
    ),
    "openvino-async": lambda a: peers.openvino_async(
        a.peer_model, a.task, a.photo, a.config.batch, a.settings.ov_precision
    ),
    "copyless-ort-zc": _cl_sync("ort", True),
    "copyless-ort-cpu": _cl_sync("ort", False),
    "copyless-ov-zc": _cl_sync("ov", True),
    "copyless-ov-cpu": _cl_sync("ov", False),
    "copyless-ort-async2": _cl_async("ort", 2),
    "copyless-ort-async4": _cl_async("ort", 4),
    "copyless-ov-async2": _cl_async("ov", 2),
    "copyless-ov-async4": _cl_async("ov", 4),
}


def _csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        items = [kind(item.strip()) for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        return items

    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="copyless-bench [peers]",
        description=__doc__.splitlines()[0],
        epilog="The other suites: copyless-bench prefix|spin [ARGS...] (copyless-bench --list). "
        "The benchmark programs of copyless's source checkout run there: "
        "python benchmarks/NAME.py [ARGS...].",
    )
    p.add_argument("--model", choices=[*MODELS, "all"], default="efficientnet-lite0")
    p.add_argument("--photo", help="zoo photo (default chelsea.jpg; page for ppocr-det)")
    p.add_argument("--batch", type=_csv(int), help="batch sizes (default 1,8; 1,4 ppocr-det)")
    p.add_argument("--precision", type=_csv(str), default=list(PRECISIONS), help="fp32,int8")
    p.add_argument(
        "--frames",
        type=int,
        help="frames per pipeline per round (default 40; 16 resnet50; 8 ppocr-det)",
    )
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 7)")
    p.add_argument(
        "--only", type=_csv(str), help=f"pipelines (plain always runs): {','.join(FACTORIES)}"
    )
    # --json is every app's flag (JSON lines on stdout); --json FILE, the older form, names
    # the file --json-file writes
    p.add_argument("--json", dest="json_lines", nargs="?", const=True, default=False,
                   metavar="FILE", help="print a JSON object a line on stdout (a 'row' per "
                   "pipeline and configuration, then a 'summary') instead of the tables; with "
                   "a file name (the older form) it names --json-file")  # fmt: skip
    p.add_argument("--json-file", type=Path, default=Path("copyless_bench.json"),
                   help="the JSON report written (default copyless_bench.json)")  # fmt: skip
    p.add_argument("--png", type=Path, default=Path("copyless_bench.png"))
    p.add_argument("--quick", action="store_true", help="tiny counts (4 frames, 1 round)")
    p.add_argument(
        "--predecoded",
        action="store_true",
        help="decode the photo once, not per frame (copyless-zerocopy's timing)",
    )
    p.add_argument(
        "--ov-precision",
        choices=["default", "f32", "bf16"],
        default="default",
        help="OpenVINO inference precision for every OpenVINO pipeline (default: "
        "each one's own: OpenVINO's choice for its pipelines, f32 for copyless)",
    )
    p.add_argument("--no-spin", action="store_true",
                   help="copyless's sync onnxruntime engines block instead of spinning within "
                   "runs (the runner's default; faster on a loaded machine)")  # fmt: skip
    args = p.parse_args(argv)
    if isinstance(args.json_lines, str):  # --json FILE: the older form of --json-file
        args.json_file, args.json_lines = Path(args.json_lines), False
    args.frames = args.frames if args.frames is not None else (4 if args.quick else None)
    args.rounds = args.rounds if args.rounds is not None else (1 if args.quick else 7)
    if (args.frames is not None and args.frames < 1) or args.rounds < 1:
        p.error("--frames and --rounds must be >= 1")
    if args.batch is not None and any(b < 1 for b in args.batch):
        p.error("--batch sizes must be >= 1")
    bad = sorted(set(args.precision) - set(PRECISIONS))
    if bad:
        p.error(f"unknown --precision {bad}; choose from {', '.join(PRECISIONS)}")
    bad = sorted(set(args.only or ()) - set(FACTORIES))
    if bad:
        p.error(f"unknown pipeline(s) in --only {bad}; choose from {', '.join(FACTORIES)}")
    if args.photo is not None:
        try:
            zoo.photo_path(args.photo)
        except CopylessError as exc:
            p.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """``copyless-bench [SUITE] [ARGS...]``: run suite ``SUITE`` of :mod:`.suites` (``--list``
    names them); without a name, or with options first, the ``peers`` suite. Any other name
    is refused in one line (exit 2): the source checkout's programs are not in the wheel."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("--list", "list"):
        return _list(json_lines="--json" in args[1:])
    if not args or args[0].startswith("-"):
        return run_peers(args)
    name, rest = args[0], args[1:]
    builtin: dict[str, suites.Suite] = {"peers": run_peers, **suites.builtin()}
    if name in builtin:
        return builtin[name](rest)
    print(suites.unknown(name), file=sys.stderr)
    return EXIT_USAGE


def _list(json_lines: bool) -> int:
    """``--list``: the suites, as lines or (``--json``) a ``suite`` object each."""
    peers_line = (__doc__ or "").strip().splitlines()[0]
    out = Output(json_lines)
    for name in suites.NAMES:
        line = peers_line if name == "peers" else suites.first_line(f".{name}")
        out.say(f"{name:<8}{line}")
        out.record("suite", name=name, summary=line)
    out.summary(suites=len(suites.NAMES))
    return 0


def run_peers(argv: Sequence[str] | None = None) -> int:
    """The ``peers`` suite (this module's docstring)."""
    args = parse_args(argv)
    names = list(MODELS) if args.model == "all" else [args.model]
    configs = [
        Config(name, precision, batch)
        for name in names
        for precision in args.precision
        for batch in (args.batch or [1, MODELS[name].big_batch])
    ]
    chosen = [n for n in FACTORIES if n == PLAIN or args.only is None or n in args.only]
    precision = None if args.ov_precision == "default" else args.ov_precision
    settings = Settings(args.frames, args.rounds, tuple(chosen), args.photo,
                        not args.predecoded, precision, not args.no_spin)  # fmt: skip
    guess = sum(_GUESS_MS[c.model] * (args.frames or c.spec.frames) for c in configs)
    seconds = guess * len(chosen) * (args.rounds + 1) / 1e3
    _say(f"{len(configs)} configuration(s) x {len(chosen)} pipelines, {args.rounds} rounds: "
         f"roughly {seconds / 60:.1f} min of timing (this machine may differ)")  # fmt: skip
    rows: list[Row] = []
    for config in configs:
        rows.extend(run_config(config, settings))
    out = Output.from_args(args)
    out.say(table(rows), "", breakdown(rows), *verdicts(rows))
    for row in rows:
        out.record("row", **asdict(row))
    write_json(args.json_file, rows, {**asdict(settings), "configs": [c.label for c in configs]})
    write_png(args.png, rows)
    _say(f"wrote {args.json_file} and {args.png}")
    out.summary(rows=len(rows), failed=sum(r.status in (WRONG, FAILED) for r in rows),
                json_file=str(args.json_file), png=str(args.png))  # fmt: skip
    return 1 if any(r.status in (WRONG, FAILED) for r in rows) else 0


def _say(text: str) -> None:
    print(f"[copyless-bench] {text}", file=sys.stderr, flush=True)


def prepare(config: Config, settings: Settings) -> Assets:
    """Build/compile the models (cached), read the photo's bytes and decode them once."""
    path = zoo.photo_path(settings.photo or config.spec.photo)
    data = path.read_bytes()
    pixels = decode(data)
    with Image.open(path) as opened:
        pil = opened.convert("RGB")  # decoded now, outside the timing
    photo = Photo(data, pixels, pil, settings.decode)
    task = Task(config.spec, *pixels.shape[:2])
    return Assets(config, peer_model(config), copyless_model(config), photo, task, settings)


def run_config(
    config: Config, settings: Settings, extra: Sequence[Callable[[Assets], Contender]] = ()
) -> list[Row]:
    """Gate, then time every pipeline of ``config``; ``extra`` adds pipelines (tests)."""
    _say(f"{config.label}: preparing models")
    try:
        assets = prepare(config, settings)
    except (CopylessError, OSError, ValueError) as exc:
        note = f"unavailable: {_short(exc)}"
        return [_row(config, n, None, UNAVAILABLE, note) for n in settings.pipelines]
    rows: dict[str, Row] = {}
    built: list[Contender] = []
    factories = [FACTORIES[n] for n in settings.pipelines] + list(extra)
    names = [*settings.pipelines, *(f"extra{i}" for i in range(len(extra)))]
    for name, factory in zip(names, factories, strict=True):
        try:
            built.append(factory(assets))
        except Exception as exc:  # a peer that cannot load (e.g. an OpenVINO bug) is a row
            logger.debug("pipeline %s unavailable", name, exc_info=True)
            rows[name] = _row(config, name, None, UNAVAILABLE, f"unavailable: {_short(exc)}")
    try:
        timed = _gate(built, config, rows, settings)
        frames = settings.frames or config.spec.frames
        samples = interleaved(
            timed, frames, config.batch, settings.rounds,
            lambda p, e: _fail(rows, config, p, e),
        )  # fmt: skip
    finally:
        for pipeline in built:
            pipeline.close()
    for pipeline in timed:
        if pipeline.name not in rows:
            rows[pipeline.name] = _timed_row(config, pipeline, samples)
    _relate(rows)
    order = {p.name: i for i, p in enumerate(built)}
    return sorted(rows.values(), key=lambda r: order.get(r.pipeline, -1))


def _timed_row(config: Config, pipeline: Contender, samples: Samples) -> Row:
    ms = statistics.median(samples.rounds[pipeline.name]) * 1e3
    stages = medians_ms(samples.stages[pipeline.name])
    return _row(
        config, pipeline.name, pipeline, OK, pipeline.note, ms_per_frame=ms, fps=1e3 / ms,
        rounds_ms=tuple(s * 1e3 for s in samples.rounds[pipeline.name]), stages_ms=stages,
    )  # fmt: skip


def _relate(rows: dict[str, Row]) -> None:
    """Fill in each timed row's speed-up vs plain and its ratio to its engine's limit."""
    plain = rows.get(PLAIN)
    plain_ms = plain.ms_per_frame if plain is not None and plain.status == OK else None
    limits = [r for r in rows.values() if r.family == FAMILY_LIMIT and r.status == OK]
    limit_ms = {r.engine: r.ms_per_frame for r in limits}
    for name, row in rows.items():
        if row.status != OK or row.ms_per_frame is None:
            continue
        limit = limit_ms.get(row.engine)
        rows[name] = dataclasses.replace(
            row,
            speedup=plain_ms / row.ms_per_frame if plain_ms else None,
            vs_limit=row.ms_per_frame / limit if limit else None,
        )


def _gate(
    built: list[Contender], config: Config, rows: dict[str, Row], settings: Settings
) -> list[Contender]:
    """Run each pipeline once; keep those that agree with plain. Prints a time estimate."""
    reference: Outcome | None = None
    timed, estimate = [], 0.0
    for pipeline in built:
        try:
            outcome = pipeline.run(1)  # first call: lazy kernels, bindings, slots
            start = time.perf_counter()
            pipeline.run(1)  # a warm call, for the estimate
            once = time.perf_counter() - start
        except Exception as exc:  # noqa: BLE001 - reported as a failed row
            _fail(rows, config, pipeline, exc)
            continue
        if pipeline.name == PLAIN:
            reference = outcome
        elif reference is not None:
            why = disagreement(reference, outcome, config.precision)
            if why is not None:
                rows[pipeline.name] = _row(config, pipeline.name, pipeline, WRONG, f"WRONG: {why}")
                _say(f"{config.label}: {pipeline.name} WRONG ({why}; got {outcome.describe()})")
                continue
            pipeline.note = "; ".join(n for n in (pipeline.note, detail(reference, outcome)) if n)
        timed.append(pipeline)
        frames = settings.frames or config.spec.frames
        estimate += once * batches_per_round(pipeline, frames, config.batch)
    if reference is None:
        _say(f"{config.label}: no plain reference: nothing is gated or timed")
        for pipeline in timed:
            rows[pipeline.name] = _row(
                config, pipeline.name, pipeline, UNAVAILABLE, "no plain reference"
            )
        return []
    _say(f"{config.label}: timing {len(timed)} pipelines, about "
         f"{estimate * (settings.rounds + 1):.0f} s")  # fmt: skip
    return timed


def _row(
    config: Config, name: str, pipeline: Contender | None, status: str, note: str = "",
    **timing: Any,
) -> Row:  # fmt: skip
    family = pipeline.family if pipeline is not None else ""
    mode = "" if pipeline is None else "async" if pipeline.asynchronous else "sync"
    engine = pipeline.engine if pipeline is not None else ""
    return Row(config.model, config.precision, config.batch, name, family, mode, status,
               note=note, engine=engine, **timing)  # fmt: skip


def _fail(rows: dict[str, Row], config: Config, pipeline: Contender, exc: Exception) -> None:
    logger.debug("pipeline %s failed", pipeline.name, exc_info=exc)
    _say(f"{config.label}: {pipeline.name} failed: {_short(exc)}")
    rows[pipeline.name] = _row(config, pipeline.name, pipeline, FAILED, f"failed: {_short(exc)}")


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."
