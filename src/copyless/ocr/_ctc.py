"""CTC greedy decoding of a recogniser's ``[N, T, C]`` character probabilities, vectorised."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["ctc_greedy"]


def ctc_greedy(
    probs: npt.NDArray[np.float32], characters: Sequence[str]
) -> list[tuple[str, float]]:
    """Per row: the best class per step, repeats merged, blanks (class 0) dropped; the text
    and the mean probability of the kept steps (0.0 when none is kept), as PP-OCR decodes.

    ``probs`` is read in place (the recogniser's bound output tensor)."""
    best = probs.argmax(axis=2)
    conf = np.take_along_axis(probs, best[..., None], axis=2)[..., 0]
    keep = best != 0
    keep[:, 1:] &= best[:, 1:] != best[:, :-1]
    results = []
    for row, mask, row_conf in zip(best, keep, conf, strict=True):
        ids = row[mask]
        text = "".join([characters[i] for i in ids.tolist()])
        score = float(row_conf[mask].mean()) if ids.size else 0.0
        results.append((text, score))
    return results
