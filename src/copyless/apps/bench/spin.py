"""spin: do onnxruntime's engine threads pay for spinning, on this machine, right now?

    copyless-bench spin [--model efficientnet-lite0] [--frames 40] [--rounds 5]

One synchronous stream of copyless-zerocopy's frames (fused preprocess into the RGBx tensor,
``execute``, top-5) on onnxruntime, three ways: the runner's default (``engine_spinning``
off: idle engine threads block), the runner with ``engine_spinning`` (threads spin within a
run and stop when it returns), and onnxruntime with its default SessionOptions (spinning,
IOBinding on a prepared float input) with the same host work per frame (the fused
preprocess and a top-5). Each variant runs in a fresh process of its own, in turn, round after round
(spinning threads would otherwise steal time from the next variant); a round's figure is
the process's median ms per frame, the result the median over rounds. The machine's load
average is printed: spinning wins on an idle machine and loses badly on a loaded one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence

from .._output import Output, add_output_arguments
from .models import MODELS

VARIANTS = ("runner", "runner-spinning", "ort-defaults")

# ``python -c`` puts the working directory first on sys.path: the child drops it before
# any other import, so that files there (a ``copyless/`` or ``numpy.py``) are never imported
_CHILD = """
import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
import statistics, time
import numpy as np
import copyless as cl
from copyless.apps._models import builtin_model
from copyless.vision import preparer_for
from copyless.model import zoo
from copyless.vision import decode, softmax_topk
variant, name, frames = sys.argv[1], sys.argv[2], int(sys.argv[3])
image = decode(zoo.photo_path("chelsea.jpg"))
options = {"engine_spinning": variant == "runner-spinning"}
with cl.RunnerFactory.create_runner(builtin_model(name, progress=False), options) as runner:
    (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
    (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
    x, y = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)
    prepare = preparer_for(runner, i)
    if variant == "ort-defaults":
        import onnxruntime as ort
        session = ort.InferenceSession(str(zoo.build(name, progress=False)))
        inp = session.get_inputs()[0]
        shape = (1, 3, i.shape[1], i.shape[2])
        feed = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        out = np.asarray(session.run(None, {inp.name: feed})[0])
        binding = session.io_binding()
        binding.bind_input(inp.name, "cpu", 0, np.float32, list(feed.shape), feed.ctypes.data)
        binding.bind_output(session.get_outputs()[0].name, "cpu", 0, out.dtype,
                            list(out.shape), out.ctypes.data)
        def frame():
            prepare(image, x)
            session.run_with_iobinding(binding)
            softmax_topk(out, 5)
    else:
        def frame():
            prepare(image, x)
            runner.execute([[x]], [[y]])
            softmax_topk(y, 5)
    for _ in range(5):
        frame()
    times = []
    for _ in range(frames):
        start = time.perf_counter()
        frame()
        times.append(time.perf_counter() - start)
print(statistics.median(times) * 1e3)
"""


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="copyless-bench spin", description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=[m for m, s in MODELS.items() if s.task == "classify"],
                   default="efficientnet-lite0")  # fmt: skip
    p.add_argument("--frames", type=int, default=40, help="timed frames per process")
    p.add_argument("--rounds", type=int, default=5, help="rounds of one process per variant")
    add_output_arguments(p, quiet=False)
    args = p.parse_args(list(argv))
    if args.frames < 1 or args.rounds < 1:
        p.error("--frames and --rounds must be >= 1")
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    loads = []
    for _ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for variant in VARIANTS:
            samples[variant].append(_child(variant, args.model, args.frames))
    base = statistics.median(samples["ort-defaults"])
    out = Output.from_args(args)
    out.say(f"{args.model}, {args.rounds} rounds of {args.frames} frames; load average "
            f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores")  # fmt: skip
    for variant in VARIANTS:
        ms = statistics.median(samples[variant])
        out.say(f"  {variant:<18}{ms:9.3f} ms/frame  {ms / base:5.2f}x ort-defaults")
        out.record("variant", variant=variant, ms_per_frame=round(ms, 4),
                   vs_ort_defaults=round(ms / base, 4))  # fmt: skip
    out.summary(model=args.model, rounds=args.rounds, frames=args.frames,
                load_average=[round(min(loads), 2), round(max(loads), 2)],
                cores=os.cpu_count())  # fmt: skip
    return 0


def _child(variant: str, model: str, frames: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, variant, model, str(frames)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"spin variant {variant} failed: {done.stderr.strip()[-400:]}")
    return float(done.stdout.strip().splitlines()[-1])
