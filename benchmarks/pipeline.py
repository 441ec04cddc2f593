"""copyless.Pipeline against the same work in a plain loop, and against its limit (each stage
alone on the same inputs).

    python benchmarks/pipeline.py [--items 200] [--rounds 5] [--io-ms 4] [--runner onnxruntime]

The work per item: ``prepare`` = an I/O wait of ``--io-ms`` (a sleep: a camera, a disk, a
socket) and the photo preprocessed into the item's RGBx input (EfficientNet-Lite0,
copyless's fused resize + crop, the photo decoded once); the model; ``finish`` = top-1 read
in place. Contenders, alternating within each round (load that drifts hits all alike):

* ``plain``: ``for item: prepare; runner.execute; finish`` (what a user writes first);
* ``pipeline``: ``copyless.Pipeline(runner, prepare, finish)`` with its defaults;
* ``pipeline-sN``: the same with ``slots=N`` (``--slots``).

Then each stage alone, on the same inputs: the I/O wait, the preprocess, ``execute`` one
call at a time, the finish, per item; and the engine alone at the pipeline's concurrency (a
Pipeline whose prepare and finish do nothing): the limit, since a pipeline that overlapped
its other stages perfectly would run at the engine's own pace.
Prints medians per item over rounds and the ratios against ``plain``; checks first that
every contender names the same class.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import copyless as cl
from copyless.model import compile_model, zoo
from copyless.model.zoo import cache_root
from copyless.vision import classify_preprocess, decode, softmax_topk

RUNNERS = {"onnxruntime": cl.RunnerType.ONNXRUNTIME, "openvino": cl.RunnerType.OPENVINO,
           "vaiml": cl.RunnerType.VAIML}  # fmt: skip


def _model() -> Path:
    path = cache_root() / "bench" / "efficientnet-lite0-rgbx-pipeline.rai"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        compile_model(zoo.build("efficientnet-lite0"), path, input_format="rgbx",
                      mean=(127, 127, 127), std=(128, 128, 128))  # fmt: skip
    return path


class Work:
    """The stages of one item, shared by every contender."""

    def __init__(self, io_ms: float) -> None:
        self.io_s = io_ms / 1000.0
        self.image = decode(zoo.photo_path("chelsea.jpg"))

    def io(self) -> None:
        time.sleep(self.io_s)

    def preprocess(self, tensor: cl.NpuTensor) -> None:
        classify_preprocess(self.image, tensor)

    def prepare(self, item: int, inputs: list[cl.NpuTensor]) -> None:
        self.io()
        self.preprocess(inputs[0])

    def finish(self, item: int, outputs: list[cl.NpuTensor]) -> int:
        return softmax_topk(outputs[0], 1)[0][0]


def _plain(runner: cl.Runner, work: Work) -> Callable[[int], list[int]]:
    (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
    (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
    x, y = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)

    def run(items: int) -> list[int]:
        found = []
        for item in range(items):
            work.prepare(item, [x])
            if runner.execute([[x]], [[y]]) is not cl.StatusCode.SUCCESS:
                raise cl.CopylessError("execute failed")
            found.append(work.finish(item, [y]))
        return found

    return run


def _pipelined(pipeline: cl.Pipeline) -> Callable[[int], list[int]]:
    def run(items: int) -> list[int]:
        return [r.unwrap() for r in pipeline.map(range(items))]

    return run


def _stage_alone(runner: cl.Runner, work: Work, items: int) -> dict[str, float]:
    """Seconds per item of each stage run alone, in a loop of ``items``."""
    (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
    (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
    x, y = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)
    stages: dict[str, Callable[[], object]] = {
        "io": work.io,
        "preprocess": lambda: work.preprocess(x),
        "execute": lambda: runner.execute([[x]], [[y]]),
        "finish": lambda: work.finish(0, [y]),
    }
    times = {}
    for name, stage in stages.items():
        start = time.perf_counter()
        for _ in range(items):
            stage()
        times[name] = (time.perf_counter() - start) / items
    # the engine alone at the pipeline's concurrency: its jobs with nothing around them
    with cl.Pipeline(runner, lambda item, x: None, lambda item, y: None) as engine_only:
        start = time.perf_counter()
        for _ in engine_only.map(range(items)):
            pass
        times["engine (pipelined)"] = (time.perf_counter() - start) / items
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--io-ms", type=float, default=4.0)
    parser.add_argument("--slots", type=int, action="append", default=[])
    parser.add_argument("--runner", choices=sorted(RUNNERS), default="onnxruntime")
    args = parser.parse_args(argv)
    work = Work(args.io_ms)
    with cl.RunnerFactory.create_runner(_model(), {}, RUNNERS[args.runner]) as runner:
        runner.warm_up()
        print(f"engine: {runner.engine.name.lower()}; {args.items} items, io {args.io_ms:g} ms,"
              f" {args.rounds} rounds")  # fmt: skip
        pipelines = [cl.Pipeline(runner, work.prepare, work.finish)]
        pipelines += [cl.Pipeline(runner, work.prepare, work.finish, slots=n) for n in args.slots]
        contenders = {"plain": _plain(runner, work), "pipeline": _pipelined(pipelines[0])}
        for n, pipeline in zip(args.slots, pipelines[1:], strict=True):
            contenders[f"pipeline-s{n}"] = _pipelined(pipeline)
        answers = {name: set(run(8)) for name, run in contenders.items()}  # warm, and check
        if len({frozenset(a) for a in answers.values()}) != 1:
            print(f"WRONG: the contenders disagree: {answers}")
            return 1
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        alone: dict[str, list[float]] = {}
        for round_ in range(args.rounds):
            order = list(contenders) if round_ % 2 == 0 else list(reversed(contenders))
            for name in order:
                start = time.perf_counter()
                contenders[name](args.items)
                samples[name].append((time.perf_counter() - start) / args.items)
            for stage, seconds in _stage_alone(runner, work, max(20, args.items // 4)).items():
                alone.setdefault(stage, []).append(seconds)
        for pipeline in pipelines:
            stats = pipeline.stats()
            pipeline.close()
        _report(samples, alone, stats)
    return 0


def _report(samples: dict[str, list[float]], alone: dict[str, list[float]],
            stats: cl.PipelineStats) -> None:  # fmt: skip
    plain = statistics.median(samples["plain"])
    print(f"{'contender':<16}{'ms/item':>10}{'vs plain':>10}   (median of rounds)")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"{name:<16}{med * 1e3:10.3f}{plain / med:9.2f}x")
    stage = {name: statistics.median(values) for name, values in alone.items()}
    limit = stage["engine (pipelined)"]
    print("each stage alone, ms/item: " + ", ".join(f"{k} {v * 1e3:.3f}" for k, v in stage.items()))
    print(f"limit (the engine alone, its jobs overlapped as the pipeline's): {limit * 1e3:.3f} "
          f"ms/item; the pipeline runs at {limit / statistics.median(samples['pipeline']):.2f}x "
          "the limit's pace")  # fmt: skip
    print("pipeline stages (last contender's stats): " + "; ".join(
        f"{k} p50 {s.p50 * 1e3:.2f} ms" for k, s in stats.stages.items() if s.count))  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
