"""The peers: what users write without copyless.

* ``plain``: PIL/numpy preprocess, ``InferenceSession.run`` with numpy feeds (default
  SessionOptions, CPUExecutionProvider), numpy postprocess. Copies: every numpy step
  allocates; ``run`` allocates the outputs.
* ``ort-iobinding``: the same session kind with input and output numpy buffers bound once;
  preprocess writes the bound input (``out=``), ``run_with_iobinding`` writes the bound
  output in place.
* ``openvino-sync`` / ``openvino-async``: OpenVINO's own Python API. The PrePostProcessor
  takes u8 NHWC frames of the decoded size and does the resize (Pillow-style bilinear),
  crop or letterbox padding, float conversion, mean/scale and NCHW inside the compiled
  model; LATENCY hint + ``InferRequest.infer(share_inputs=True)`` for sync, THROUGHPUT +
  ``AsyncInferQueue`` (its optimal number of requests; postprocess in the callback) for
  async. The async queue copies each frame into its request (``share_inputs=False``)
  because a frame buffer is reused while earlier jobs are in flight.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from ...types import UnsupportedError
from .pipeline import FAMILY_PEER, FAMILY_PLAIN, PLAIN, Pipeline
from .tasks import FILL, Outcome, Task

logger = logging.getLogger(__name__)


def _ort() -> Any:
    import onnxruntime as ort

    return ort


def _session(model: Path) -> Any:
    ort = _ort()
    options = ort.SessionOptions()  # defaults, as users get them; only quieter logs
    options.log_severity_level = 3
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def plain(model: Path, task: Task, image: Image.Image, batch: int) -> Pipeline:
    session = _session(model)
    name = session.get_inputs()[0].name

    def run(batches: int) -> Outcome:
        outcome = Outcome()
        for _ in range(batches):
            x = np.stack([task.plain_preprocess(image) for _ in range(batch)])
            y = session.run(None, {name: x})[0]
            outcomes = [task.postprocess(y[i]) for i in range(batch)]
            outcome = outcomes[0]
        return outcome

    return Pipeline(PLAIN, FAMILY_PLAIN, False, run)


def iobinding(model: Path, task: Task, image: Image.Image, batch: int) -> Pipeline:
    session = _session(model)
    (xin,), (yout,) = session.get_inputs(), session.get_outputs()
    size = task.spec.size
    # The numpy buffers must live as long as the binding: the closure below holds them.
    x = np.zeros((batch, 3, size, size), np.float32)
    y = np.asarray(session.run(None, {xin.name: x})[0])  # its shape; then bound in place
    scratch = np.empty((size, size, 3), np.float32)
    binding = session.io_binding()
    binding.bind_input(xin.name, "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    binding.bind_output(yout.name, "cpu", 0, y.dtype, list(y.shape), y.ctypes.data)

    def run(batches: int) -> Outcome:
        outcome = Outcome()
        for _ in range(batches):
            for i in range(batch):
                task.into(image, x[i], scratch)
            session.run_with_iobinding(binding)
            outcomes = [task.postprocess(y[i]) for i in range(batch)]
            outcome = outcomes[0]
        return outcome

    return Pipeline("ort-iobinding", FAMILY_PEER, False, run)


def _openvino() -> Any:
    try:
        import openvino
    except ImportError as exc:
        raise UnsupportedError(f"openvino cannot be imported: {exc}") from exc
    return openvino


def _ppp_model(ov: Any, model: Path, task: Task, batch: int) -> Any:
    """The model with OpenVINO's PrePostProcessor doing the whole preprocess."""
    from openvino.preprocess import PaddingMode, PrePostProcessor, ResizeAlgorithm

    g, size = task.geo, task.spec.size
    net = ov.Core().read_model(str(model))
    net.reshape({net.inputs[0].any_name: [batch, 3, size, size]})
    ppp = PrePostProcessor(net)
    ppp.input().tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC")).set_shape(
        [batch, g.height, g.width, 3]
    )
    ppp.input().model().set_layout(ov.Layout("NCHW"))
    steps = ppp.input().preprocess()
    steps.convert_element_type(ov.Type.f32)
    steps.resize(ResizeAlgorithm.RESIZE_BILINEAR_PILLOW, g.new_h, g.new_w)
    if g.letterbox:
        bottom, right = size - g.new_h - g.top, size - g.new_w - g.left
        steps.pad([0, g.top, g.left, 0], [0, bottom, right, 0], float(FILL), PaddingMode.CONSTANT)
    else:
        steps.crop([0, g.top, g.left, 0], [batch, g.top + size, g.left + size, 3])
    steps.mean([float(v) for v in task.mean]).scale([float(v) for v in task.std])
    return ppp.build()


def _framer(image: npt.NDArray[np.uint8], batch: int) -> Any:
    """``fill()`` -> the u8 NHWC batch of the photo: the photo itself (a view) for batch 1,
    else a reused buffer the photo is copied into once per frame."""
    if batch == 1:
        one = image[None]
        return lambda: one
    frames = np.empty((batch, *image.shape), np.uint8)

    def fill() -> npt.NDArray[np.uint8]:
        frames[:] = image
        return frames

    return fill


def openvino_sync(model: Path, task: Task, image: npt.NDArray[np.uint8], batch: int) -> Pipeline:
    ov = _openvino()
    compiled = ov.Core().compile_model(
        _ppp_model(ov, model, task, batch), "CPU", {"PERFORMANCE_HINT": "LATENCY"}
    )
    request = compiled.create_infer_request()
    fill = _framer(image, batch)

    def run(batches: int) -> Outcome:
        outcome = Outcome()
        for _ in range(batches):
            request.infer({0: fill()}, share_inputs=True, share_outputs=True)
            y = request.get_output_tensor(0).data
            outcomes = [task.postprocess(y[i]) for i in range(batch)]
            outcome = outcomes[0]
        return outcome

    return Pipeline("openvino-sync", FAMILY_PEER, False, run)


def openvino_async(model: Path, task: Task, image: npt.NDArray[np.uint8], batch: int) -> Pipeline:
    ov = _openvino()
    compiled = ov.Core().compile_model(
        _ppp_model(ov, model, task, batch), "CPU", {"PERFORMANCE_HINT": "THROUGHPUT"}
    )
    queue = ov.AsyncInferQueue(compiled, 0)  # 0: the plugin's optimal number of requests
    jobs = len(queue)
    fill = _framer(image, batch)
    results: dict[int, Outcome] = {}

    def done(request: Any, index: int) -> None:
        y = request.get_output_tensor(0).data
        outcomes = [task.postprocess(y[i]) for i in range(batch)]
        results[index] = outcomes[0]

    queue.set_callback(done)

    def run(batches: int) -> Outcome:
        results.clear()
        for index in range(batches):
            queue.start_async({0: fill()}, index, share_inputs=False)
        queue.wait_all()
        return results[batches - 1]

    return Pipeline("openvino-async", FAMILY_PEER, True, run, note=f"{jobs} requests")
