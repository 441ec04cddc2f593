"""Accuracy control: layers go back to float until INT8's top-1 agrees with fp32 well enough.

``compile_model(..., precision="int8", max_drop=PCT)`` (``--max-drop PCT``): the INT8
model's top-1 must agree with the fp32 model's on at least ``100 - PCT`` percent of the
check images (``--validation DIR``, else the held-out fifth of the calibration images).
While it does not, a layer (a node that reads a dequantized tensor: a convolution, a
matrix product, an addition, a pooling...) goes back to float: its inputs are read before
their quantizers, its weights and bias are the fp32 model's again (NNCF's bias correction
is undone for it).

Which layer: each is reverted alone once and ranked by how far the images INT8 answers
differently from fp32 then stay from fp32's answer (the flip margin: over those images, the
logit of INT8's top class less the logit of fp32's, in units of fp32's logit range; a finer
measure than top-1 on a few dozen images, and one that ignores layers that only move
images INT8 already answers right); the layers are then reverted in that order, each kept
only when it raises the agreement or, at the same agreement, narrows the flip margin,
until the agreement holds; where a pass ends short of it, the layers still INT8 are
ranked again beside the reverted ones (at most :data:`PASSES` rankings). Every candidate is
measured in the graph's final form (:func:`._qdq_form.onnxruntime_form`) on onnxruntime, the
reference engine. This is the
procedure of NNCF's ``quantize_with_accuracy_control``, written here because NNCF's ONNX
backend ranks layers by the metric alone (top-1 agreement on a few dozen images ties
most layers) and does not say which layers it reverted or what agreement it reached when
the drop cannot be met.

A drop met only with every layer in float cannot be met in INT8: UnsupportedError, in one
line, with the best agreement reached and the layers that were float then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ..types import QuantParameters, UnsupportedError
from ._precision import Run, through_int8
from ._qdq_form import drop_unread, onnxruntime_form
from ._shapes import session

_log = logging.getLogger(__name__)

__all__ = ["Restored", "Scorer", "int8_layers", "restore_accuracy", "revert"]

#: Layer names listed in an error line before "and N more".
_LISTED = 12
#: Rankings at most (each ranks the layers still INT8 beside those reverted so far).
PASSES = 3


@dataclass(frozen=True, slots=True)
class Score:
    """A candidate INT8 model against fp32 on the check images."""

    top1: float  # percent of images whose top-1 is fp32's
    margin: float  # flip margin (module docstring): 0 where every image agrees


class Scorer:
    """Scores models against the fp32 ``source``'s first output on ``batches`` (classifier
    logits ``[N, classes]``: UnsupportedError otherwise), read through the INT8 output view
    ``view`` where the compiled model will have one."""

    def __init__(self, source: onnx.ModelProto, name: str, batches: list[np.ndarray],
                 images: int, view: QuantParameters | None = None) -> None:  # fmt: skip
        self._name, self._batches, self._images = name, batches, images
        self._view: QuantParameters | None = None
        self._reference = self.outputs(source)
        self._view = view
        if self._reference.ndim != 2 or self._reference.shape[1] < 2:
            raise UnsupportedError(
                "max_drop is a top-1 agreement: it needs a classifier's [N, classes] first "
                f"output; this model's is {list(self._reference.shape)}"
            )
        self._top1 = self._reference.argmax(axis=1)
        spread = self._reference.max(axis=1) - self._reference.min(axis=1)
        self._spread = np.maximum(spread, 1e-12)

    def outputs(self, model: onnx.ModelProto) -> np.ndarray:
        sess = session(model.SerializeToString())
        first = sess.get_outputs()[0].name

        def run(batch: np.ndarray) -> np.ndarray:
            return np.asarray(sess.run([first], {self._name: batch})[0])

        viewed: Run = through_int8(run, self._view)
        out = [viewed(batch) for batch in self._batches]
        return np.concatenate(out)[: self._images].astype(np.float64)

    def score(self, model: onnx.ModelProto) -> Score:
        out = self.outputs(model)
        rows = np.arange(len(out))
        top1 = 100.0 * float(np.mean(out.argmax(axis=1) == self._top1))
        gap = (out.max(axis=1) - out[rows, self._top1]) / self._spread
        return Score(top1, float(gap.sum()))


@dataclass(frozen=True, slots=True)
class Restored:
    """The model that holds the agreement (onnxruntime's form), the layers reverted to float
    (in the order reverted), the agreement reached and how many layers stayed INT8."""

    model: onnx.ModelProto
    reverted: tuple[str, ...]
    top1: float
    int8_layers: int


def int8_layers(model: onnx.ModelProto) -> list[str]:
    """The names of the nodes that read a dequantized tensor (the layers that run on INT8
    data), in graph order."""
    dequantized = {n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    return [n.name for n in model.graph.node
            if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
            and dequantized.intersection(n.input)]  # fmt: skip


def restore_accuracy(
    source: onnx.ModelProto,
    quantized: onnx.ModelProto,
    scorer: Scorer,
    minimum: float,
    progress: Callable[[str], None] = _log.info,
) -> Restored:
    """Revert layers of ``quantized`` (NNCF's QDQ graph of ``source``) to float until its
    top-1 agreement with fp32 is at least ``minimum`` percent (module docstring)."""
    layers = int8_layers(quantized)
    current = onnxruntime_form(quantized)
    now = scorer.score(current)
    if now.top1 >= minimum:
        return Restored(current, (), now.top1, len(layers))
    progress(f"accuracy control: top-1 as fp32 on {now.top1:.1f}%, wanted {minimum:g}%")
    reverted: list[str] = []
    for _ in range(PASSES):
        taken = len(reverted)
        now, current = _one_pass(source, quantized, scorer, minimum, layers, reverted,
                                 (now, current), progress)  # fmt: skip
        if now.top1 >= minimum and len(reverted) < len(layers):
            return Restored(current, tuple(reverted), now.top1, len(layers) - len(reverted))
        if len(reverted) == taken or len(reverted) == len(layers):
            break  # no layer left that brings the answers closer, or none left in INT8
    listed = ", ".join(reverted[:_LISTED]) + (f" and {len(reverted) - _LISTED} more"
                                              if len(reverted) > _LISTED else "")  # fmt: skip
    raise UnsupportedError(
        f"max_drop={100.0 - minimum:g} cannot be met in INT8: the best top-1 agreement with "
        f"fp32 was {now.top1:.1f}% with {len(reverted)} of {len(layers)} layers float "
        f"({listed or 'none'}); allow a larger drop or compile without precision='int8'"
    )


def _one_pass(
    source: onnx.ModelProto,
    quantized: onnx.ModelProto,
    scorer: Scorer,
    minimum: float,
    layers: list[str],
    reverted: list[str],
    state: tuple[Score, onnx.ModelProto],
    progress: Callable[[str], None],
) -> tuple[Score, onnx.ModelProto]:
    """Rank the layers still INT8 (each reverted alone, beside ``reverted``), then revert
    them in that order, keeping each that brings the answers closer to fp32's (appended to
    ``reverted``), until the agreement holds; the score and model reached."""
    now, current = state
    remaining = [layer for layer in layers if layer not in reverted]
    progress(f"accuracy control: ranking {len(remaining)} layers")
    ranked = sorted(remaining, key=lambda layer: _order(scorer.score(
        onnxruntime_form(revert(quantized, source, {*reverted, layer})))))  # fmt: skip
    for layer in ranked:
        trial = onnxruntime_form(revert(quantized, source, {*reverted, layer}))
        score = scorer.score(trial)
        if _order(score) >= _order(now):
            continue  # no closer to fp32's answers: this layer stays INT8 (this pass)
        reverted.append(layer)
        now, current = score, trial
        progress(f"accuracy control: {layer} float ({len(reverted)} of {len(layers)}): "
                 f"top-1 as fp32 on {now.top1:.1f}%")  # fmt: skip
        if now.top1 >= minimum:
            break
    return now, current


def _order(score: Score) -> tuple[float, float]:
    """Better scores sort first: a higher agreement, then a narrower flip margin."""
    return (-score.top1, score.margin)


def revert(
    quantized: onnx.ModelProto, source: onnx.ModelProto, layers: set[str]
) -> onnx.ModelProto:
    """A copy of ``quantized`` with ``layers`` in float: each reads its inputs before their
    quantizers, and its weights and bias are the ``source`` node's (same name) again; the
    quantizers nothing reads any more are removed."""
    out = onnx.ModelProto()
    out.CopyFrom(quantized)
    graph = out.graph
    producer = {o: n for n in graph.node for o in n.output}
    inits = {t.name: t for t in graph.initializer}
    originals = {n.name: n for n in source.graph.node}
    floats = {t.name: t for t in source.graph.initializer}
    for node in graph.node:
        if node.name not in layers:
            continue
        original = originals.get(node.name)
        for i, name in enumerate(node.input):
            before = producer.get(name)
            feeds = producer.get(before.input[0]) if before is not None else None
            if before is not None and before.op_type == "DequantizeLinear" and (
                feeds is not None and feeds.op_type == "QuantizeLinear"
            ):
                node.input[i] = feeds.input[0]  # the activation before its quantizer
                continue
            if original is None or i >= len(original.input):
                continue
            weight = floats.get(original.input[i])
            if weight is not None:  # a weight (dequantized) or a corrected bias
                node.input[i] = _float_initializer(graph, inits, weight)
    drop_unread(graph)
    return out


def _float_initializer(
    graph: onnx.GraphProto, inits: dict[str, onnx.TensorProto], tensor: onnx.TensorProto
) -> str:
    """The name under which ``graph`` holds the fp32 model's ``tensor`` (added if absent;
    renamed when the graph holds another value under its name, e.g. a corrected bias)."""
    held = inits.get(tensor.name)
    if held is not None and np.array_equal(numpy_helper.to_array(held),
                                           numpy_helper.to_array(tensor)):  # fmt: skip
        return tensor.name
    name = tensor.name if held is None else f"{tensor.name}/fp32"
    if name not in inits:
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        copy.name = name
        graph.initializer.append(copy)
        inits[name] = copy
    return name
