"""copyless against the pipelines users write (plain ORT, ORT IOBinding, OpenVINO).

    .venv/bin/python benchmarks/compare.py [--model efficientnet-lite0|resnet50|ppocr-det|all]
        [--batch 1,8] [--precision fp32,int8] [--frames N] [--rounds R] [--only a,b]
        [--json PATH] [--png PATH] [--quick]

The same program as the ``copyless-bench`` console script: see
:mod:`copyless.apps.bench.cli` for what is measured and how.
"""

from __future__ import annotations

import sys

from copyless.apps.bench.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
