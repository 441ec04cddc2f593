"""The cost of an output whose shape depends on the data, measured side by side in one run.

    python benchmarks/dynamic_outputs.py [--quick]

The model keeps the rows of an [8400, 6] detection table whose score passes a threshold
(Compress: a data-dependent [k, 6] output) and returns the [8400] keep mask beside them. Its
static twin computes the same mask and gathers the same k rows by fixed indices (a static
[k, 6] output of the same size: the same bytes, nearly the same engine work). For k = 84,
840 and 8400 rows, medians of interleaved rounds (microseconds per call) of:

* copyless execute, static twin (output bound in place, the C fast path);
* copyless execute, dynamic model (capacity [8400, 6]: onnxruntime allocates the result and
  the context copies the k rows into the caller's tensor; OpenVINO writes it in place);
* what a user writes without copyless: ``InferenceSession.run`` (returns a new array),
  OpenVINO ``InferRequest.infer`` + a copy of the output out of OpenVINO's memory.

Ratios are against the static twin on the same backend. The machine is shared: compare the
ratios, not the absolute times, and look at the load printed first.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
from onnx import TensorProto, numpy_helper

import copyless as cl
from copyless.apps.bench.timing import interleaved
from copyless.backends import session_options
from copyless.model import compile_to_memory

ROWS, COLS = 8400, 6
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT


def _model(nodes, inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = oh.make_graph(
        [
            oh.make_node("Gather", ["table", "score_col"], ["score"], axis=1),
            oh.make_node("Greater", ["score", "threshold"], ["keep"]),
            *nodes,
        ],
        "detections",
        [oh.make_tensor_value_info("table", TensorProto.FLOAT, [ROWS, COLS])],
        [
            oh.make_tensor_value_info("kept", TensorProto.FLOAT, None),
            oh.make_tensor_value_info("keep", TensorProto.BOOL, [ROWS]),
        ],
        [
            numpy_helper.from_array(v, k)
            for k, v in {
                **inits,
                "score_col": np.array(4, np.int64),
                "threshold": np.array(0.5, np.float32),
            }.items()
        ],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def dynamic_model() -> onnx.ModelProto:
    """kept = table[table[:, 4] > 0.5] (a data-dependent number of rows)."""
    return _model([oh.make_node("Compress", ["table", "keep"], ["kept"], axis=0)], {})


def static_model(rows: np.ndarray) -> onnx.ModelProto:
    """kept = table[rows]: the same rows, by fixed indices (a static output)."""
    return _model([oh.make_node("Gather", ["table", "rows"], ["kept"], axis=0)], {"rows": rows})


def table(kept: int) -> np.ndarray:
    rng = np.random.default_rng(kept)
    t = rng.random((ROWS, COLS), dtype=np.float32) * 0.5  # every score below the threshold
    t[rng.choice(ROWS, kept, replace=False), 4] = 0.9
    return t


def copyless_calls(runner_type: cl.RunnerType, data: np.ndarray, threads: int):
    """(static execute, dynamic execute, runners) over the same input bytes."""
    kept_rows = np.flatnonzero(data[:, 4] > 0.5).astype(np.int64)
    calls, runners = [], []
    for model in (static_model(kept_rows), dynamic_model()):
        runner = cl.RunnerFactory.from_compiled(
            compile_to_memory(model), {"num_threads": threads}, runner_type
        )
        x = runner.allocate_npu_tensor(runner.get_tensors_info(IN)[0])
        y, mask = (runner.allocate_npu_tensor(i) for i in runner.get_tensors_info(OUT))
        x.numpy()[...] = data
        inputs, outputs = [[x]], [[y, mask]]  # y: the capacity [8400, 6] when dynamic
        assert runner.execute(inputs, outputs) is cl.StatusCode.SUCCESS
        got = y.numpy().reshape(-1)[: kept_rows.size * COLS].reshape(-1, COLS)
        np.testing.assert_array_equal(got, data[kept_rows])  # both give the same rows
        calls.append(lambda r=runner, i=inputs, o=outputs: r.execute(i, o))
        runners.append(runner)
    return calls[0], calls[1], runners


def plain_ort(data: np.ndarray, threads: int):
    session = ort.InferenceSession(
        dynamic_model().SerializeToString(), session_options(threads), ["CPUExecutionProvider"]
    )
    return lambda: session.run(None, {"table": data})


def plain_openvino(data: np.ndarray, threads: int):
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
    graph = core.read_model(dynamic_model().SerializeToString())
    compiled = core.compile_model(graph, "CPU", config)
    request = compiled.create_infer_request()
    request.set_input_tensor(0, ov.Tensor(data, shared_memory=True))

    def run() -> object:
        request.infer()
        # out of OpenVINO's memory, as InferRequest.infer() returns them by default
        return [request.get_output_tensor(i).data.copy() for i in range(2)]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    args = parser.parse_args()
    reps, rounds = (50, 5) if args.quick else (200, 9)
    threads = 1
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"{rounds} interleaved rounds of {reps} calls; {threads} engine thread")  # fmt: skip
    for kept in (84, 840, 8400):
        data = table(kept)
        print(f"\n{kept} of {ROWS} rows kept ({kept * COLS * 4} bytes out)")
        for runner_type, name, plain in (
            (cl.RunnerType.ONNXRUNTIME, "onnxruntime", plain_ort),
            (cl.RunnerType.OPENVINO, "openvino", plain_openvino),
        ):
            static, dynamic, runners = copyless_calls(runner_type, data, threads)
            fns = {
                "copyless static twin": static,
                "copyless dynamic": dynamic,
                f"plain {name} (dynamic model)": plain(data, threads),
            }
            res = interleaved(fns, reps, rounds)
            base = res["copyless static twin"]
            for key, value in res.items():
                print(f"  {name:<12}{key:<34}{value * 1e6:9.1f} us  {value / base:5.2f}x")
            for runner in runners:
                runner.close()


if __name__ == "__main__":
    main()
