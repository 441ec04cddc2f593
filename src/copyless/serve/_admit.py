"""Checking a request against a model before anything is queued: each input given once,
known, of the model's datatype and shape, with exactly the bytes its shape holds (in the
request or in a registered region, within its bounds); each output asked for known, and a
region given for it large enough. The first problem is one :class:`RequestError` that says
what and where; the regions a request names are held until it is answered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ._errors import RequestError
from ._images import BYTES, ImageInput
from ._pending import InputSource, OutputTarget, PendingRequest
from ._regions import RegionTable, SharedRegion
from ._request import InferRequest, InputTensor, OutputWish, RegionRange, array_from_values
from ._tensors import ServedTensor

__all__ = ["ENCODED_IMAGE_BYTES", "HEADER_BYTES", "ModelShape", "admit", "request_bound"]

#: A request's JSON beside its tensors' data, at most: names, shapes, parameters, outputs.
HEADER_BYTES = 64 * 1024
#: Characters one number takes in a request's JSON, at most (indented, a float's repr).
_JSON_NUMBER = 48
#: An encoded image's file, at most (a phone's JPEG is 2-8 MB; a PNG of 50 MP about 64).
ENCODED_IMAGE_BYTES = 64 * 1024 * 1024


class ModelShape:
    """What :func:`admit` needs of a model: its name, served tensors and batch; ``images``:
    the inputs that also take encoded images (``BYTES``), and how."""

    def __init__(self, name: str, version: str, inputs: Sequence[ServedTensor],
                 outputs: Sequence[ServedTensor], max_batch_size: int,
                 images: Mapping[str, ImageInput] | None = None,
                 encoded: frozenset[str] = frozenset()) -> None:  # fmt: skip
        self.name, self.version = name, version
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.max_batch_size = max_batch_size
        self.images = dict(images or {})
        #: the inputs a request may send as encoded files (their bound allows for it)
        self.encoded = encoded | frozenset(self.images)


def request_bound(model: ModelShape, binary: bool) -> int:
    """The most bytes a request for ``model`` can need (its JSON, and every input at the
    model's batch as ``binary`` data or as JSON numbers): a larger body is refused before it
    is read, and a parsed request's memory is bounded by the model, not by the client."""
    rows = max(1, model.max_batch_size)
    total = HEADER_BYTES
    for tensor in model.inputs:
        count = rows if tensor.batched else 1
        nbytes = count * tensor.row_bytes
        total += nbytes if binary else nbytes // tensor.dtype.itemsize * _JSON_NUMBER
        if binary and tensor.name in model.encoded:  # or encoded images, if larger
            total += max(0, count * ENCODED_IMAGE_BYTES - nbytes)
    return total


def _names(tensors: Sequence[ServedTensor]) -> str:
    return ", ".join(repr(t.name) for t in tensors)


def _rows(model: ModelShape, tensor: ServedTensor, given: InputTensor) -> int:
    """The rows ``given``'s shape holds, or a RequestError."""
    shape = given.shape
    where = f"input {given.name!r}"
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise RequestError.invalid(f"{where}: shape {list(shape)} must hold integers >= 0")
    if given.datatype == BYTES:  # encoded images: one a row
        limit = max(1, model.max_batch_size)
        if len(shape) in (1, 2) and shape[1:] in ((), (1,)) and 1 <= shape[0] <= limit:
            return shape[0]
        raise RequestError.invalid(f"{where}: encoded images come as BYTES [N] or [N, 1], "
                                   f"1 <= N <= {limit}; got {list(shape)}")  # fmt: skip
    if tensor.batched:
        if len(shape) == len(tensor.shape) and tuple(shape[1:]) == tensor.rest \
                and 1 <= shape[0] <= model.max_batch_size:  # fmt: skip
            return shape[0]
        raise RequestError.invalid(
            f"{where}: shape {list(shape)} does not fit the model's {list(tensor.shape)} "
            f"(1 to {model.max_batch_size} rows of {list(tensor.rest)})"
        )
    if tuple(shape) != tensor.shape:
        raise RequestError.invalid(f"{where}: shape {list(shape)} is not the model's "
                                 f"{list(tensor.shape)}")  # fmt: skip
    return 1


def _region(regions: RegionTable, request: InferRequest, shm: RegionRange,
            held: list[SharedRegion], what: str) -> SharedRegion:  # fmt: skip
    try:
        region = regions.acquire(request.client, shm.region)
    except RequestError as exc:
        raise RequestError(exc.refusal, f"{what}: {exc.message}") from None
    held.append(region)
    region.check_range(shm.offset, shm.byte_size, what)
    return region


def _input(request: InferRequest, tensor: ServedTensor, given: InputTensor, rows: int,
           regions: RegionTable, held: list[SharedRegion],
           images: Mapping[str, ImageInput]) -> InputSource:  # fmt: skip
    where = f"input {given.name!r}"
    nbytes = rows * tensor.row_bytes
    if given.datatype == BYTES:
        return _images(images, tensor, given, rows, where)
    if sum(x is not None for x in (given.data, given.values, given.shm)) != 1:
        raise RequestError.invalid(f"{where}: give its data, binary data or a shared memory "
                                 "region: exactly one")  # fmt: skip
    if given.shm is not None:
        if given.shm.byte_size != nbytes:
            raise RequestError.invalid(
                f"{where}: shared_memory_byte_size {given.shm.byte_size} is not the "
                f"{nbytes} bytes that shape {list(given.shape)} of {tensor.datatype} holds"
            )
        region = _region(regions, request, given.shm, held, where)
        return InputSource(tensor, region=region, offset=given.shm.offset)
    data = given.data
    if given.values is not None:  # converted now that the shape is known to fit
        data = array_from_values(given.values, given.datatype, where,
                                 nbytes // tensor.dtype.itemsize)  # fmt: skip
    if not isinstance(data, np.ndarray) or data.dtype != tensor.dtype:
        raise RequestError.invalid(f"{where}: data is not {tensor.datatype}")
    if data.size * tensor.dtype.itemsize != nbytes:
        raise RequestError.invalid(
            f"{where}: {data.size} elements ({data.size * tensor.dtype.itemsize} bytes) "
            f"given; shape {list(given.shape)} of {tensor.datatype} holds "
            f"{nbytes // tensor.dtype.itemsize} ({nbytes} bytes)"
        )
    return InputSource(tensor, array=data.reshape(rows, -1))


def _images(images: Mapping[str, ImageInput], tensor: ServedTensor, given: InputTensor,
            rows: int, where: str) -> InputSource:  # fmt: skip
    decoder = images.get(tensor.name)
    elements = given.elements
    if decoder is None or elements is None:
        raise RequestError.invalid(f"{where}: encoded images (BYTES) need their bytes as "
                                   "binary data, raw contents or bytes_contents")  # fmt: skip
    if len(elements) != rows:
        raise RequestError.invalid(f"{where}: {len(elements)} encoded images given; its shape "
                                   f"{list(given.shape)} holds {rows}")  # fmt: skip
    decoder.check(elements, where)
    return InputSource(tensor, images=elements, decoder=decoder)


def _inputs(model: ModelShape, request: InferRequest, regions: RegionTable,
            held: list[SharedRegion]) -> tuple[int, list[InputSource]]:  # fmt: skip
    known = {t.name: t for t in model.inputs}
    given: dict[str, InputTensor] = {}
    for each in request.inputs:
        tensor = known.get(each.name)
        if tensor is None:
            raise RequestError.invalid(f"model {model.name!r} has no input {each.name!r}; its "
                                     f"inputs are {_names(model.inputs)}")  # fmt: skip
        if each.name in given:
            raise RequestError.invalid(f"input {each.name!r} is given twice")
        if each.datatype == BYTES and each.name not in model.images:
            raise RequestError.invalid(
                f"input {each.name!r}: datatype BYTES (encoded images) is taken only by an "
                f"image input of a model compiled with its preprocessing recorded (mean/std, "
                f"resize, colour order); this one takes {tensor.datatype}"
            )
        if each.datatype != tensor.datatype and each.datatype != BYTES:
            raise RequestError.invalid(
                f"input {each.name!r}: datatype {each.datatype!r}, the model takes "
                f"{tensor.datatype} (its HW view)"
                + (" or BYTES (encoded images)" if each.name in model.images else "")
            )
        given[each.name] = each
    missing = [t.name for t in model.inputs if t.name not in given]
    if missing:
        raise RequestError.invalid(f"model {model.name!r} needs input(s) {missing}; the "
                                 "request has none of that name")  # fmt: skip
    counts = {t.name: _rows(model, t, given[t.name]) for t in model.inputs}
    if len(set(counts.values())) != 1:
        raise RequestError.invalid(f"the inputs hold different numbers of rows: {counts}")
    rows = next(iter(counts.values()))
    return rows, [_input(request, t, given[t.name], rows, regions, held, model.images)
                  for t in model.inputs]  # fmt: skip


def _outputs(model: ModelShape, request: InferRequest, rows: int, regions: RegionTable,
             held: list[SharedRegion]) -> list[OutputTarget]:  # fmt: skip
    known = {t.name: t for t in model.outputs}
    wishes: dict[str, OutputWish] = {}
    if request.outputs is None:
        wishes = {t.name: OutputWish(t.name) for t in model.outputs}
    wish: OutputWish | None
    for wish in request.outputs or ():
        if wish.name not in known:
            raise RequestError.invalid(f"model {model.name!r} has no output {wish.name!r}; its "
                                     f"outputs are {_names(model.outputs)}")  # fmt: skip
        if wish.name in wishes:
            raise RequestError.invalid(f"output {wish.name!r} is asked for twice")
        wishes[wish.name] = wish
    targets = []
    for tensor in model.outputs:
        wish = wishes.get(tensor.name)
        target = OutputTarget(tensor, wish)
        if wish is not None and wish.shm is not None:
            where = f"output {tensor.name!r}"
            nbytes = rows * tensor.row_bytes
            if not tensor.dynamic and wish.shm.byte_size < nbytes:
                raise RequestError.invalid(
                    f"{where}: shared_memory_byte_size {wish.shm.byte_size} is less than the "
                    f"{nbytes} bytes of {rows} row(s) of {list(tensor.rest)} {tensor.datatype}"
                )
            target.region = _region(regions, request, wish.shm, held, where)
            target.offset, target.capacity = wish.shm.offset, wish.shm.byte_size
        elif wish is not None and not tensor.dynamic:
            target.array = np.empty((rows, tensor.row_bytes // tensor.dtype.itemsize),
                                    tensor.dtype)  # fmt: skip
        targets.append(target)
    return targets


def admit(model: ModelShape, request: InferRequest, regions: RegionTable) -> PendingRequest:
    """The :class:`PendingRequest` for ``request``, or the :class:`RequestError` that refuses
    it (every region it named given back)."""
    held: list[SharedRegion] = []
    try:
        rows, inputs = _inputs(model, request, regions, held)
        outputs = _outputs(model, request, rows, regions, held)
    except BaseException:
        for region in held:
            region.release()
        raise
    return PendingRequest(request, model.version, rows, inputs, outputs, held)
