"""The limits: each engine alone, the same model on an input that is already prepared.

No pipeline on an engine can beat its engine-alone row: no decode, no preprocess, no
postprocess, no conversion; the float input (the photo preprocessed once, as the plain
pipeline does, batched) and the output are bound once and every call is the engine's
cheapest one.

* ``engine-ort``: onnxruntime with its default SessionOptions (what users get: intra-op
  threads for every core, spinning on), ``run_with_iobinding`` on preallocated buffers.
* ``engine-ov``: OpenVINO, LATENCY hint, ``InferRequest.infer()`` on input and output
  tensors set once over the same buffers, in the precision copyless's OpenVINO pipelines
  run (f32 unless ``--ov-precision`` says otherwise), so it is their limit.

Both run the peers' model (the zoo's float model, or the INT8 QDQ graph with float I/O, see
:mod:`.models`). ``run`` returns the outcome of the output it computed first (the input
never changes, so neither does the output): the gate checks it like any other row's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .contender import FAMILY_LIMIT, Contender
from .peers import import_openvino, ov_config, ov_precision_note
from .tasks import Outcome, Photo, Task


def _prepared(task: Task, photo: Photo, batch: int) -> npt.NDArray[np.float32]:
    one = task.plain_preprocess(photo.image)
    return np.ascontiguousarray(np.stack([one] * batch))


def engine_ort(model: Path, task: Task, photo: Photo, batch: int) -> Contender:
    import onnxruntime as ort

    options = ort.SessionOptions()  # defaults, as users get them; only quieter logs
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    (xin,), (yout,) = session.get_inputs(), session.get_outputs()
    # The buffers must live as long as the binding: the closure below holds them.
    x = _prepared(task, photo, batch)
    y = np.asarray(session.run(None, {xin.name: x})[0])
    binding = session.io_binding()
    binding.bind_input(xin.name, "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    binding.bind_output(yout.name, "cpu", 0, y.dtype, list(y.shape), y.ctypes.data)
    first: list[Outcome] = []
    bound = (x, y)  # the bound memory lives as long as run: it is read through the binding

    def run(batches: int) -> Outcome:
        for _ in range(batches):
            session.run_with_iobinding(binding)
        if not first:
            first.append(task.postprocess(bound[1][0]))
        return first[0]

    note = "onnxruntime defaults, prepared input"
    return Contender("engine-ort", FAMILY_LIMIT, False, run, note=note, engine="ort")


def engine_ov(model: Path, task: Task, photo: Photo, batch: int, precision: str) -> Contender:
    ov = import_openvino()
    core = ov.Core()
    net = core.read_model(str(model))
    x = _prepared(task, photo, batch)
    net.reshape({net.inputs[0].any_name: list(x.shape)})
    compiled = core.compile_model(net, "CPU", ov_config("LATENCY", precision))
    request = compiled.create_infer_request()
    request.set_input_tensor(ov.Tensor(x, shared_memory=True))
    request.infer()
    y: Any = np.empty(tuple(request.get_output_tensor(0).shape), np.float32)
    request.set_output_tensor(ov.Tensor(y, shared_memory=True))
    first: list[Outcome] = []
    shared = (x, y)  # OpenVINO's tensors share this memory: it lives as long as run

    def run(batches: int) -> Outcome:
        for _ in range(batches):
            request.infer()
        if not first:
            first.append(task.postprocess(shared[1][0]))
        return first[0]

    note = f"{ov_precision_note(compiled)}, prepared input"
    return Contender("engine-ov", FAMILY_LIMIT, False, run, note=note, engine="ov")
