"""ONNX backend node tests through the Runner, per engine: the conformance rate.

    python benchmarks/node_conformance.py [--match TEXT] [--engines ort,ov] [--failures]
                                    [--jsonl FILE]

Every case of onnx's node test suite (``onnx.backend.test.case.node``: the generators of the
``data/node`` files, the same models and tensors), and its ``simple`` model cases
(``test_sequence_model*``, ``test_expand_shape_model*``...; not the ``real`` ones, which
download), is run three ways: onnxruntime on the
source model (``InferenceSession.run``: the yardstick), and compiled with no options
(``compile_to_memory``; ``input_shapes`` from the case's data where the model leaves a dim
open, as a user gives ``--input-shape``) through a Runner on each engine
(``RunnerType.ONNXRUNTIME``, ``RunnerType.OPENVINO``), outputs bound as the API binds them
(data-dependent ones at their capacity, read back at ``produced_shape``). Answers are
compared with the case's own tolerances (``assert_allclose``, the onnx backend runner's
rule).

Each engine's outcome of a case is one of: ``pass``; ``wrong`` (it ran and answered
otherwise: the one outcome that must not happen); ``refused`` (a clear ``CopylessError``
at compile or load: the model is not one copyless or that engine runs); ``status`` (execute
returned an error status); ``crash`` (the worker process died). OpenVINO's own API is also
run on the source model (``Core.compile_model``, f32): a case it passes and the Runner on
OpenVINO does not is the Runner's fault; the others are OpenVINO's own. The rate printed per engine
is its ``pass`` count over the cases onnxruntime passes on the source model *whose inputs
and outputs a copyless model can have* (tensors of ``DataType``'s element types: sequences,
optionals, strings and float64 are refused by the compiler, as API.md says), with the rate
over every case onnxruntime passes beside it.

Cases run in a child process that reports one JSON line per case; a case that kills the
child is recorded as ``crash`` and the next child goes on after it. About 1,500 cases:
~5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENGINES = {"ort": "ONNXRUNTIME", "ov": "OPENVINO"}


def _cases() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero and overflow on purpose
        from onnx.backend.test.case import model, node

        simple = [c for c in model.collect_testcases() if c.kind == "simple" and c.data_sets]
        return {case.name: case for case in [*node.collect_testcases(), *simple]}


def _expressible(case: Any) -> bool:
    """Whether a copyless model can have this interface: tensors of DataType's dtypes."""
    from copyless.model import ELEM_OF, graph_inputs

    graph = case.model.graph
    values = (*graph_inputs(graph), *graph.output)
    tensors = all(vi.type.HasField("tensor_type") for vi in values)
    return tensors and all(vi.type.tensor_type.elem_type in ELEM_OF.values() for vi in values)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _compare(got: list[Any], expected: list[Any], case: Any) -> str | None:
    """None when equal within the case's tolerances, else why not."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (g, want) in enumerate(zip(got, expected, strict=True)):
        why = _differ(g, want, case)
        if why is not None:
            return f"output {i}: {why}"
    return None


def _differ(g: Any, want: Any, case: Any) -> str | None:
    """Why ``g`` is not ``want`` (a tensor, a sequence of them, or None), or None."""
    import numpy as np

    if want is None or g is None:
        return None if g is None and want is None else "optional presence differs"
    if isinstance(want, (list, tuple)):
        if not isinstance(g, (list, tuple)) or len(g) != len(want):
            return "sequence differs"
        whys = (_differ(a, b, case) for a, b in zip(g, want, strict=True))
        return next((why for why in whys if why), None)
    g, want = np.asarray(g), np.asarray(want)
    if g.shape != want.shape:
        return f"shape {g.shape}, expected {want.shape}"
    if want.dtype == object or g.dtype == object:
        return None if np.array_equal(g, want) else "values differ"
    try:
        np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)
    except AssertionError as exc:
        lines = [s for s in str(exc).splitlines() if "Mismatched" in s or "Max abs" in s]
        return " ".join(s.strip() for s in lines)[:200] or "values differ"
    except (TypeError, ValueError):
        return None if np.array_equal(g, want) else "values differ"
    return None


def _plain_ort(case: Any) -> tuple[str, str]:
    import onnxruntime as ort

    inputs, expected = case.data_sets[0]
    try:
        session = ort.InferenceSession(
            case.model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        names = [i.name for i in session.get_inputs()]
        got = session.run(None, dict(zip(names, inputs, strict=False)))
    except Exception as exc:  # noqa: BLE001 - recorded as the case's outcome
        return "error", _first_line(exc)
    why = _compare(got, expected, case)
    return ("pass", "") if why is None else ("wrong", why)


def _plain_ov(case: Any) -> tuple[str, str]:
    """OpenVINO's own API on the source model (f32, inputs by position): what OpenVINO itself
    answers, to tell its failures from the Runner's."""
    import numpy as np
    import openvino as ov

    inputs, expected = case.data_sets[0]
    try:
        core = ov.Core()
        compiled = core.compile_model(
            core.read_model(model=case.model.SerializeToString()), "CPU",
            {"INFERENCE_PRECISION_HINT": "f32"},
        )  # fmt: skip
        request = compiled.create_infer_request()
        request.infer({i: np.asarray(v) for i, v in enumerate(inputs)})
        got = [np.array(request.get_output_tensor(i).data) for i in range(len(compiled.outputs))]
    except Exception as exc:  # noqa: BLE001 - recorded as the case's outcome
        return "error", _first_line(exc)
    why = _compare(got, expected, case)
    return ("pass", "") if why is None else ("wrong", why)


def _through_runner(case: Any, compiled: Any, runner_type: Any) -> tuple[str, str]:
    import numpy as np

    import copyless as cl

    inputs, expected = case.data_sets[0]
    try:
        runner = cl.RunnerFactory.from_compiled(compiled, None, runner_type)
    except cl.CopylessError as exc:
        return "refused", _first_line(exc)
    try:
        infos = runner.get_tensors_info(cl.TensorDirection.INPUT)
        ins = [runner.allocate_npu_tensor(i) for i in infos]
        for tensor, value in zip(ins, inputs, strict=True):
            tensor.numpy()[...] = value
        outs = []
        for spec, want in zip(compiled.outputs, expected, strict=True):
            info = runner.get_tensor_info_by_name(spec.name)
            if spec.dynamic:  # room for the result: the capacity, or what it needs
                if len(info.shape) != np.ndim(want):  # unknown rank: a flat capacity
                    info = dataclasses.replace(info, shape=(max(1, np.size(want)),))
                else:
                    dims = zip(info.shape, np.shape(want), strict=True)
                    shape = tuple(w if c == -1 else c for c, w in dims)
                    info = dataclasses.replace(info, shape=shape)
            outs.append(runner.allocate_npu_tensor(info))
        status = runner.execute([ins], [outs])
        if status is not cl.StatusCode.SUCCESS:
            return "status", status.name
        got = []
        for tensor in outs:
            got.append(tensor.produced().copy())
    except cl.CopylessError as exc:
        return "refused", _first_line(exc)
    except Exception as exc:  # noqa: BLE001 - recorded as the case's outcome
        return "status", _first_line(exc)
    finally:
        runner.close()
    why = _compare(got, expected, case)
    return ("pass", "") if why is None else ("wrong", why)


def _run_case(case: Any, engines: list[str]) -> dict[str, Any]:
    import copyless as cl
    from copyless.model import compile_to_memory

    row: dict[str, Any] = {"name": case.name, "tensors": _expressible(case)}
    row["plain_ort"] = _plain_ort(case)
    if "ov" in engines and row["tensors"]:
        row["plain_ov"] = _plain_ov(case)
    try:
        compiled = compile_to_memory(case.model, input_shapes=_data_shapes(case) or None)
    except cl.CopylessError as exc:
        for engine in engines:
            row[engine] = ("refused", "compile: " + _first_line(exc))
        return row
    except Exception as exc:  # noqa: BLE001 - a compiler bug, recorded as such
        for engine in engines:
            row[engine] = ("status", "compile crashed: " + _first_line(exc))
        return row
    for engine in engines:
        row[engine] = _through_runner(case, compiled, getattr(cl.RunnerType, ENGINES[engine]))
    return row


def _data_shapes(case: Any) -> dict[str, tuple[int, ...]]:
    """The case's input shapes, for the inputs whose declared shape is not fixed (what a user
    gives ``copyless-compile --input-shape``)."""
    import numpy as np

    from copyless.model import graph_inputs

    shapes = {}
    for vi, value in zip(graph_inputs(case.model.graph), case.data_sets[0][0], strict=False):
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else ()
        fixed = vi.type.tensor_type.shape.dim and all(d.HasField("dim_value") for d in dims)
        if not fixed and isinstance(value, np.ndarray):
            shapes[vi.name] = tuple(value.shape)
    return shapes


def _child(engines: list[str]) -> int:
    """Read case names on stdin; for each, print ``{"start": name}`` then its row."""
    import onnxruntime as ort

    logging.disable(logging.CRITICAL)
    ort.set_default_logger_severity(3)
    cases = _cases()
    for line in sys.stdin:
        name = line.strip()
        print(json.dumps({"start": name}), flush=True)
        print(json.dumps(_run_case(cases[name], engines)), flush=True)
    return 0


def _rows(names: list[str], engines: list[str]) -> Iterator[dict[str, Any]]:
    """Run ``names`` in child processes, restarting after one that dies."""
    todo = list(names)
    while todo:
        child = subprocess.Popen(
            [sys.executable, __file__, "--child", "--engines", ",".join(engines)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("\n".join(todo) + "\n")
        child.stdin.close()
        started = None
        for line in child.stdout:
            data = json.loads(line)
            if "start" in data:
                started = data["start"]
                continue
            todo.remove(data["name"])
            started = None
            yield data
        code = child.wait()
        if started is not None:  # it died in this case
            todo.remove(started)
            yield {"name": started, "tensors": True, "plain_ort": ("crash", f"exit {code}"),
                   **{e: ("crash", f"exit {code}") for e in engines}}  # fmt: skip


def _report(rows: list[dict[str, Any]], engines: list[str], failures: bool) -> None:
    passed_ort = [r for r in rows if r["plain_ort"][0] == "pass"]
    tensors = [r for r in passed_ort if r["tensors"]]
    print(f"{len(rows)} node cases; onnxruntime passes {len(passed_ort)} on the source model, "
          f"{len(tensors)} of them with inputs and outputs copyless models can have")  # fmt: skip
    for engine in engines:
        outcomes = collections.Counter(r[engine][0] for r in tensors)
        ok = outcomes["pass"]
        everything = sum(1 for r in passed_ort if r[engine][0] == "pass")
        print(f"  {ENGINES[engine].lower():12s} through the Runner: {ok} / {len(tensors)} = "
              f"{100 * ok / max(1, len(tensors)):.1f}% ({dict(outcomes)}); over every case "
              f"onnxruntime passes {100 * everything / max(1, len(passed_ort)):.1f}%")  # fmt: skip
    if "ov" in engines:
        own = collections.Counter(
            ("ok" if r["plain_ov"][0] == "pass" else "fails") + " / runner " + r["ov"][0]
            for r in tensors if r["ov"][0] != "pass" and "plain_ov" in r
        )  # fmt: skip
        runs = [r for r in tensors if r.get("plain_ov", ("",))[0] == "pass"]
        ok = sum(1 for r in runs if r["ov"][0] == "pass")
        print(f"  openvino's own API on the source model passes {len(runs)} of them; the "
              f"Runner on OpenVINO passes {ok} of those ({100 * ok / max(1, len(runs)):.1f}%)."
              f" OpenVINO's failures by what its own API does: {dict(own)}")  # fmt: skip
    if failures:
        for engine in engines:
            for r in tensors:
                outcome, why = r[engine]
                if outcome != "pass":
                    own = r.get("plain_ov", ("-",))[0] if engine == "ov" else ""
                    print(f"{engine} {outcome:8s} {own:5s} {r['name']:55s} {why[:150]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--match", metavar="TEXT", help="only the cases whose name holds TEXT")
    parser.add_argument("--engines", default="ort,ov", help="ort,ov (default both)")
    parser.add_argument("--failures", action="store_true", help="list what did not pass")
    parser.add_argument("--jsonl", metavar="FILE", help="write one row per case to FILE")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    if any(e not in ENGINES for e in engines):
        parser.error(f"--engines: choose from {','.join(ENGINES)}")
    if args.child:
        return _child(engines)
    start = time.perf_counter()
    names = sorted(n for n in _cases() if not args.match or args.match in n)
    rows = []
    for row in _rows(names, engines):
        rows.append(row)
        if len(rows) % 100 == 0:
            print(f"[{len(rows)}/{len(names)}] {time.perf_counter() - start:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    if args.jsonl:
        Path(args.jsonl).write_text("".join(json.dumps(r) + "\n" for r in rows))
    _report(rows, engines, args.failures)
    print(f"in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
