"""Child process for the loader fuzz tests: reads model paths (one a line) on stdin, writes
one JSON line per path on stdout. Run by ``LoadChild``; a segfault here ends the child, which
the parent reports as a crash.

For each path: ``load_model`` must give a CompiledModel or ModelLoadError; a loaded model
must give a Runner (``RunnerFactory.from_compiled``) or a CopylessError; a runner must
``execute`` on runner-allocated tensors and return a StatusCode (it never raises).
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import resource
import sys
import traceback
from typing import Any

import copyless as cl
from copyless.model import load_model
from copyless.runner import RunnerFactory

#: Tensors larger than this are not allocated for the execute step (a mutated shape may
#: declare terabytes; allocation refusing it is tested elsewhere).
MAX_TENSOR_BYTES = 64 << 20


def _execute(runner: cl.Runner) -> str:
    infos = [
        runner.get_tensors_info(direction, cl.TensorType.HW)
        for direction in (cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT)
    ]
    if sum(i.size_in_bytes for group in infos for i in group) > MAX_TENSOR_BYTES:
        return "skipped: tensors too large"
    try:
        ins, outs = ([runner.allocate_npu_tensor(i) for i in group] for group in infos)
    except cl.CopylessError as exc:
        return f"allocation refused: {type(exc).__name__}"
    status = runner.execute([ins], [outs])
    if not isinstance(status, cl.StatusCode):
        raise TypeError(f"execute returned {status!r}, not a StatusCode")
    return status.name


def examine(path: str) -> dict[str, Any]:
    try:
        model = load_model(path)
    except cl.ModelLoadError as exc:
        return {"outcome": "rejected", "detail": str(exc)[:300]}
    except BaseException as exc:  # noqa: BLE001 - the point: report anything else
        return {"outcome": "bad-load", "detail": traceback.format_exc(limit=6)[-2000:],
                "type": type(exc).__name__}  # fmt: skip
    try:
        runner = RunnerFactory.from_compiled(model, {"log_level": "ERROR"})
    except cl.CopylessError as exc:
        return {"outcome": "runner-refused", "detail": f"{type(exc).__name__}: {exc}"[:300]}
    except BaseException as exc:  # noqa: BLE001
        return {"outcome": "bad-runner", "detail": traceback.format_exc(limit=6)[-2000:],
                "type": type(exc).__name__}  # fmt: skip
    try:
        with runner:
            status = _execute(runner)
    except BaseException as exc:  # noqa: BLE001
        return {"outcome": "bad-execute", "detail": traceback.format_exc(limit=6)[-2000:],
                "type": type(exc).__name__}  # fmt: skip
    return {"outcome": "loaded", "detail": status}


def main() -> None:
    faulthandler.enable()
    logging.disable(logging.CRITICAL)  # the loader logs every rejection; keep stderr for crashes
    # A mutated shape must not make this child take the whole machine.
    resource.setrlimit(resource.RLIMIT_AS, (16 << 30, 16 << 30))
    # Native code (onnxruntime, protobuf) may print to fd 1: answers go to a private copy
    # of it, and fd 1 becomes stderr.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        result = examine(line.rstrip("\n"))
        answers.write(json.dumps(result) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
