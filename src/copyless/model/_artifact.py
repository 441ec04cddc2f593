"""The compiler's version and the cache key of a compiled artifact: light (no onnx), so
that finding a cached artifact does not load the compiler."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

# 2: RGBx stem fold; 3: uint8 INT8 activations (U8S8); 4: capacities of data-dependent
# dims; 5: the pixel prefix moves bytes before floats, 3-channel stem fold of any mean;
# 6: in-graph frame resize as fixed taps (PIL's filter, torchvision's crop coordinates);
# 7: YUV offsets as swscale's; 8: resized frames rounded to whole levels; 9: INT8 by NNCF
COMPILER_VERSION = "9"


def artifact_key(source: str, options: Mapping[str, Any]) -> str:
    """A short key naming the compiled artifact of ``source`` (a file name carrying its own
    version) with ``options``, for caches: it changes with the compiler's output format."""
    text = json.dumps([source, COMPILER_VERSION, dict(options)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
