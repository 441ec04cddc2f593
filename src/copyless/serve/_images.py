"""Encoded images as a model's input: an image model (its preprocessing recorded at compile
time) takes an input as ``BYTES`` ``[N]`` (or ``[N, 1]``) of JPEG, PNG or WebP files instead
of its pixels; each is decoded straight into its row of the batch, as the model was compiled
to see it (:class:`copyless.vision.Preparer`: DCT-domain downscaling where the resize allows,
the model's resize policy, colour order, EXIF orientation). The answers are those of a client
that decodes with :mod:`copyless.vision` and sends the pixels.

The protocol's ``BYTES`` wire form (binary data, gRPC raw contents) is each element's length
as 4 little-endian bytes, then its bytes; gRPC's typed form is ``bytes_contents``. An empty
element, bytes that are no image, or an image whose pixels would need more than
``max_image_bytes`` to decode is that request's 400, before anything is queued (the header
alone is read); one that fails to decode later is that request's 400 too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..vision import Preparer, ReadLimit, decode, image_size
from ._errors import RequestError

__all__ = ["BYTES", "ImageInput", "bytes_elements", "check_images", "serialize_bytes"]

BYTES = "BYTES"
_LENGTH = 4


def bytes_elements(raw: bytes | bytearray | memoryview, where: str) -> tuple[memoryview, ...]:
    """The elements of a serialized ``BYTES`` tensor (views of ``raw``, no copy)."""
    view = memoryview(raw).cast("B")
    elements: list[memoryview] = []
    at = 0
    while at < len(view):
        if at + _LENGTH > len(view):
            raise RequestError.invalid(f"{where}: BYTES data ends inside an element's length")
        size = int.from_bytes(view[at : at + _LENGTH], "little")
        at += _LENGTH
        if at + size > len(view):
            raise RequestError.invalid(f"{where}: BYTES element {len(elements)} says {size} "
                                       f"bytes; {len(view) - at} are left")  # fmt: skip
        elements.append(view[at : at + size])
        at += size
    return tuple(elements)


@dataclass(frozen=True, slots=True)
class ImageInput:
    """How one model input takes encoded images: its :class:`Preparer` and the decode
    memory limit."""

    preparer: Preparer
    limit: ReadLimit

    def check(self, elements: Sequence[bytes | memoryview], where: str) -> None:
        check_images(elements, self.limit, where)

    def write(self, data: bytes | memoryview, tensor: object, where: str) -> None:
        """Decode ``data`` into ``tensor`` (one row of the batch) as the model records."""
        preparer = self.preparer
        try:
            image = decode(data, min_size=preparer.min_decode_size(), limit=self.limit)
        except ValueError as exc:
            raise RequestError.invalid(f"{where}: {_reason(exc)}") from None
        preparer(image, tensor)  # type: ignore[arg-type]


def check_images(elements: Sequence[bytes | memoryview], limit: ReadLimit, where: str) -> None:
    """Refuse empty elements, non-images and images too large to decode (past ``limit``),
    from their headers: one 400 naming the element."""
    for number, data in enumerate(elements):
        what = f"{where}: image {number}"
        if not len(data):
            raise RequestError.invalid(f"{what} is empty")
        try:
            height, width = image_size(data)
        except ValueError as exc:
            raise RequestError.invalid(f"{what}: {_reason(exc)}") from None
        try:
            limit.check(what, height, width, len(data))
        except ValueError as exc:
            raise RequestError.invalid(str(exc)) from None


def serialize_bytes(values: Sequence[bytes]) -> bytes:
    """A ``BYTES`` tensor's wire form: each element's length (4 bytes, little-endian), then
    its bytes."""
    return b"".join(len(v).to_bytes(_LENGTH, "little") + v for v in values)


def _reason(exc: BaseException) -> str:
    """A decoder's message without the placeholder name it gives in-memory bytes."""
    return str(exc).replace("<bytes>: ", "")
