"""What an app says about a model whose preprocessing record is incomplete. The preparing
itself is :class:`copyless.vision.Preparer`'s (:func:`copyless.vision.preparer_for`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..model import ResizePolicy
from ..vision import DEFAULT_RESIZE


def warning(
    model: str | os.PathLike[str], assumed: Sequence[str], policy: ResizePolicy = DEFAULT_RESIZE
) -> str:
    """The warning an app prints for a model whose record lacks ``assumed`` (``policy``: the
    resize the app uses instead: the task's usual one, else a classifier's crop)."""
    resizes = {"crop": "resize the short side to 256/224 of the input, centre crop",
               "letterbox": f"letterbox ({policy})", "stretch": "stretch to the input size"}
    guesses = {
        "mean/std": "pixels go in as they are (0..255, no normalisation)",
        "colour order": "RGB",
        "resize policy": resizes[policy.policy],
    }
    told = "; ".join(f"{what}: {guesses[what]}" for what in assumed)
    return (
        f"warning: {os.fspath(model)} was compiled without its preprocessing ({', '.join(assumed)})"
        f". Assuming {told}: results (labels, boxes) are wrong if the model expects otherwise. "
        "Recompile with copyless-compile --mean R,G,B --std R,G,B --colour-order rgb|bgr "
        "--resize crop:0.875|letterbox:114|stretch."
    )
