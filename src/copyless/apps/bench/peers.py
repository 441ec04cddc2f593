"""The peers: what users write without copyless.

Every peer decodes with Pillow (``Image.open(...).convert("RGB")``) when the benchmark
decodes per frame (see :class:`~.tasks.Photo`).

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
  because a frame buffer is reused while earlier jobs are in flight. Precision: OpenVINO's
  own choice unless the benchmark sets one (``--ov-precision``); on CPUs with AVX512-BF16
  or AMX OpenVINO picks bf16 for float graphs by itself, which is what its users get. The
  row's note names the precision the compiled model reports.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ...types import UnsupportedError
from .contender import FAMILY_PEER, FAMILY_PLAIN, PLAIN, Contender
from .stages import Stopwatch
from .tasks import FILL, Outcome, Photo, Task

logger = logging.getLogger(__name__)


def _ort() -> Any:
    import onnxruntime as ort

    return ort


def _session(model: Path) -> Any:
    ort = _ort()
    options = ort.SessionOptions()  # defaults, as users get them; only quieter logs
    options.log_severity_level = 3
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def plain(model: Path, task: Task, photo: Photo, batch: int) -> Contender:
    session = _session(model)
    name = session.get_inputs()[0].name
    watch = Stopwatch()

    def run(batches: int) -> Outcome:
        outcome = Outcome()
        for _ in range(batches):
            watch.start()
            images = [photo.pil() for _ in range(batch)]
            if photo.per_frame:  # else decoded once: nothing to time
                watch.lap("decode")
            x = np.stack([task.plain_preprocess(image) for image in images])
            watch.lap("preprocess")
            y = session.run(None, {name: x})[0]
            watch.lap("infer")
            outcomes = [task.postprocess(y[i]) for i in range(batch)]
            watch.lap("postprocess")
            watch.frames(batch)
            outcome = outcomes[0]
        return outcome

    return Contender(PLAIN, FAMILY_PLAIN, False, run, watch=watch, engine="ort")


def iobinding(model: Path, task: Task, photo: Photo, batch: int) -> Contender:
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
    watch = Stopwatch()

    def run(batches: int) -> Outcome:
        outcome = Outcome()
        for _ in range(batches):
            watch.start()
            images = [photo.pil() for _ in range(batch)]
            if photo.per_frame:  # else decoded once: nothing to time
                watch.lap("decode")
            for i, image in enumerate(images):
                task.into(image, x[i], scratch)
            watch.lap("preprocess")
            session.run_with_iobinding(binding)
            watch.lap("infer")
            outcomes = [task.postprocess(y[i]) for i in range(batch)]
            watch.lap("postprocess")
            watch.frames(batch)
            outcome = outcomes[0]
        return outcome

    return Contender("ort-iobinding", FAMILY_PEER, False, run, watch=watch, engine="ort")


def import_openvino() -> Any:
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


def _framer(photo: Photo, batch: int) -> Any:
    """``fill()`` -> the u8 NHWC batch of the photo: its pixels (a view) for batch 1, else
    a reused buffer the photo is copied into once per frame."""
    if batch == 1:
        return lambda: photo.array()[None]
    frames = np.empty((batch, *photo.pixels.shape), np.uint8)

    def fill() -> npt.NDArray[np.uint8]:
        for i in range(batch):
            frames[i] = photo.array()
        return frames

    return fill


def ov_config(hint: str, precision: str | None) -> dict[str, Any]:
    """OpenVINO compile properties: the performance hint, and the inference precision when
    the benchmark sets one (``None``: OpenVINO's own choice)."""
    config: dict[str, Any] = {"PERFORMANCE_HINT": hint}
    if precision is not None:
        config["INFERENCE_PRECISION_HINT"] = precision
    return config


def ov_precision_note(compiled: Any) -> str:
    """The precision a compiled OpenVINO model runs float layers in, for a row's note."""
    try:
        return f"{compiled.get_property('INFERENCE_PRECISION_HINT')}".lower()
    except RuntimeError:  # a plugin without the property
        return "precision unknown"


def openvino_sync(
    model: Path, task: Task, photo: Photo, batch: int, precision: str | None
) -> Contender:
    ov = import_openvino()
    compiled = ov.Core().compile_model(
        _ppp_model(ov, model, task, batch), "CPU", ov_config("LATENCY", precision)
    )
    request = compiled.create_infer_request()
    fill = _framer(photo, batch)
    watch = Stopwatch()

    def run(batches: int) -> Outcome:
        outcome = Outcome()
        for _ in range(batches):
            watch.start()
            frames = fill()
            watch.lap("decode" if photo.per_frame else "preprocess")
            request.infer({0: frames}, share_inputs=True, share_outputs=True)
            watch.lap("infer")  # the PrePostProcessor's steps run inside the model
            y = request.get_output_tensor(0).data
            outcomes = [task.postprocess(y[i]) for i in range(batch)]
            watch.lap("postprocess")
            watch.frames(batch)
            outcome = outcomes[0]
        return outcome

    note = ov_precision_note(compiled)
    return Contender("openvino-sync", FAMILY_PEER, False, run, note=note, watch=watch, engine="ov")


def openvino_async(
    model: Path, task: Task, photo: Photo, batch: int, precision: str | None
) -> Contender:
    ov = import_openvino()
    compiled = ov.Core().compile_model(
        _ppp_model(ov, model, task, batch), "CPU", ov_config("THROUGHPUT", precision)
    )
    queue = ov.AsyncInferQueue(compiled, 0)  # 0: the plugin's optimal number of requests
    jobs = len(queue)
    fill = _framer(photo, batch)
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

    note = f"{jobs} requests, {ov_precision_note(compiled)}"
    return Contender("openvino-async", FAMILY_PEER, True, run, note=note, engine="ov")
