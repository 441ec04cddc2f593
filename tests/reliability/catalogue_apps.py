"""The bad-input catalogue, console scripts: each case runs one ``copyless-*`` script in a
child process (under a timeout: a hang fails) with a mistake a user makes, and checks the
answer: exit status 2 with exactly one ``error:`` line on stderr (naming what is wrong,
with the words the case expects) and no traceback, or, for the cases a sensible result
answers, status 0.

Each is a :class:`catalogue.Case` in area ``"app"``: ``run(kit)`` raises :class:`AppRefused`
(a ValueError: the clear answer) for a clean refusal, returns SUCCESS for a clean run, and
raises :class:`AppMisbehaved` (not a clear error: the case fails) for anything else. The
children get a scratch cache folder, so no case can lean on (or build into) the user's
compiled models: a case that tried to build a zoo model would time out.

The ``core install`` cases make the extras' packages unimportable in the child
(``sys.modules[name] = None``, as a core ``pip install copyless`` leaves them) and check that
the script names the extra to install instead of a ModuleNotFoundError traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from catalogue import Case, Kit

import copyless as cl

S = cl.StatusCode
TIMEOUT_S = 180  # a loaded 2-core machine: a script's imports alone take seconds
BIN = Path(sys.executable).parent


class AppRefused(ValueError):
    """The script exited 2 with one error line and no traceback (the line is the message)."""


class AppMisbehaved(RuntimeError):
    """A traceback, another exit status, no error line or several, or the wrong words."""


#: An argument: a string, or a function of the kit (a path in its scratch folder).
Arg = str | Callable[[Kit], Any]


def app(
    script: str, *args: Arg, says: str = "", rc: int = 2, blocked: tuple[str, ...] = ()
) -> Callable[[Kit], S]:
    """A case's ``run``: ``script`` with ``args`` in the kit's scratch folder. ``says``: words
    the error line must hold; ``blocked``: modules made unimportable (a core install)."""

    def run(kit: Kit) -> S:
        argv = [str(a(kit)) if callable(a) else a for a in args]
        done = _run(kit, script, argv, blocked)
        err = done.stderr
        lines = [line for line in err.splitlines() if "error:" in line]
        if "Traceback" in err or done.returncode != rc:
            raise AppMisbehaved(f"exit {done.returncode}: {err.strip()[-400:]}")
        if rc == 0:
            return S.SUCCESS
        if len(lines) != 1 or says not in lines[0]:
            raise AppMisbehaved(f"error lines {lines!r}, wanted one with {says!r}")
        raise AppRefused(lines[0])

    return run


def _run(kit: Kit, script: str, argv: list[str], blocked: tuple[str, ...]) -> Any:
    env = {**os.environ, "COPYLESS_CACHE_DIR": str(kit.scratch / "app-cache")}
    if not blocked:
        command = [str(BIN / script), *argv]
    else:  # the console script's own entry point, with the extras' modules gone
        entry = script.removeprefix("copyless-").replace("-", "_")
        entry = {"compile": "compiler"}.get(entry, entry)
        code = f"""
            import sys
            for name in {blocked!r}:
                sys.modules[name] = None  # import raises ModuleNotFoundError
            sys.argv = [{script!r}, *{argv!r}]
            from copyless.apps import _launch
            sys.exit(_launch.{entry}())
        """
        command = [sys.executable, "-c", textwrap.dedent(code)]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=kit.scratch, env=env, check=False)  # fmt: skip


# -- the files the cases point at ----------------------------------------------------------
def photo(kit: Kit) -> Path:
    """A small RGB PNG (skimage's astronaut, cut to 64x64)."""
    path = kit.scratch / "photo.png"
    if not path.exists():
        from PIL import Image
        from skimage import data

        Image.fromarray(np.ascontiguousarray(data.astronaut()[::8, ::8])).save(path)
    return path


def garbage(kit: Kit) -> Path:
    """A .jpg that is not an image."""
    return kit.file("garbage.jpg", b"this is not a JPEG")


def onnx_file(kit: Kit) -> Path:
    """A valid ONNX model (the small net), not compiled."""
    import onnx

    path = kit.scratch / "net.onnx"
    if not path.exists():
        onnx.save(onnx.ModelProto.FromString(kit.runner.model.partitions[0].onnx_bytes), path)
    return path


def in_file(name: str) -> Callable[[Kit], str]:
    """``photo.png/NAME``: a path whose parent is a file."""
    return lambda k: str(photo(k) / name)


def scratch(name: str) -> Callable[[Kit], str]:
    return lambda k: str(k.scratch / name)


def a_dir(name: str) -> Callable[[Kit], str]:
    """An existing directory named like a file (``out.png/``)."""

    def make(kit: Kit) -> str:
        (kit.scratch / name).mkdir(exist_ok=True)
        return str(kit.scratch / name)

    return make


def rai(kit: Kit) -> str:
    return str(kit.rai)


def noise_rai(kit: Kit) -> str:
    return str(kit.file("noise.rai", os.urandom(512)))


NO_DIR = "/nonexistent/dir"
DETECT, ZEROCOPY, COMPILE = "copyless-detect", "copyless-zerocopy", "copyless-compile"
VIDEO, BATCH, ASYNC = "copyless-video", "copyless-batch", "copyless-infer-async"

# fmt: off
APPS = [
    # copyless-detect
    Case("app", "detect: image that does not exist", AppRefused,
         app(DETECT, "-i", "none.jpg", "-o", "o.png", says="no image at none.jpg")),
    Case("app", "detect: undecodable image names its path", AppRefused,
         app(DETECT, "-i", garbage, "-o", "o.png", says="garbage.jpg: not a decodable image")),
    Case("app", "detect: -o with an unknown extension", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.gif", says="unknown image extension '.gif'")),
    Case("app", "detect: -o without an extension", AppRefused,
         app(DETECT, "-i", photo, "-o", "out", says="unknown image extension")),
    Case("app", "detect: -o in a missing directory", AppRefused,
         app(DETECT, "-i", photo, "-o", f"{NO_DIR}/o.png", says=f"no directory {NO_DIR}")),
    Case("app", "detect: -o under /proc", AppRefused,
         app(DETECT, "-i", photo, "-o", "/proc/o.png", says="cannot write into /proc")),
    Case("app", "detect: -o whose parent is a file", AppRefused,
         app(DETECT, "-i", photo, "-o", in_file("o.png"), says="is not a directory")),
    Case("app", "detect: -o is a directory", AppRefused,
         app(DETECT, "-i", photo, "-o", a_dir("dir.png"), says="is a directory")),
    Case("app", "detect: -m a classifier", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.png", "-m", rai, says="is a classifier")),
    Case("app", "detect: -m a classifier with --model face", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.png", "-m", rai, "--model", "face",
             says="is a classifier")),
    Case("app", "detect: -m an .onnx says how to compile it", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.png", "-m", onnx_file, says="copyless-compile")),
    Case("app", "detect: -m a model that does not exist", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.png", "-m", "none.rai", says="no model at none.rai")),
    Case("app", "detect: -m random bytes", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.png", "-m", noise_rai, says="noise.rai")),
    Case("app", "detect: --runs 0", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.png", "--runs", "0", says="--runs must be >= 1")),
    Case("app", "detect: --max-side -1", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.png", "--max-side", "-1", says="--max-side")),
    Case("app", "detect: --model that is not a task", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.png", "--model", "cats", says="invalid choice")),
    # copyless-zerocopy
    Case("app", "zerocopy: image that does not exist", AppRefused,
         app(ZEROCOPY, "-i", "none.png", says="no image at none.png")),
    Case("app", "zerocopy: undecodable image names its path", AppRefused,
         app(ZEROCOPY, "-i", garbage, "-m", rai, says="garbage.jpg: not a decodable image")),
    Case("app", "zerocopy: -m an .onnx says how to compile it", AppRefused,
         app(ZEROCOPY, "-i", photo, "-m", onnx_file, says="compile it first")),
    Case("app", "zerocopy: a classifier without a preprocessing record runs", S.SUCCESS,
         app(ZEROCOPY, "-i", photo, "-m", rai, rc=0)),
    # copyless-compile
    Case("app", "compile: -o under /proc", AppRefused,
         app(COMPILE, onnx_file, "-o", "/proc/x.rai", says="cannot write into /proc")),
    Case("app", "compile: -o whose parent is a file", AppRefused,
         app(COMPILE, onnx_file, "-o", in_file("x.rai"), says="is not a directory")),
    Case("app", "compile: -o directory form onto a file", AppRefused,
         app(COMPILE, onnx_file, "-o", photo, says="exists and is not a directory")),
    # missing directories are made (as compile_model makes them) where they can be
    Case("app", "compile: -o in a missing directory it cannot make", AppRefused,
         app(COMPILE, onnx_file, "-o", "/proc/copyless-missing/x.rai",
             says="cannot write into /proc")),
    Case("app", "compile: a model that does not exist", AppRefused,
         app(COMPILE, "none.onnx", "-o", "x.rai", says="no model at none.onnx")),
    Case("app", "compile: an image given as the model", AppRefused,
         app(COMPILE, photo, "-o", "x.rai", says="photo.png")),
    Case("app", "compile: an unknown --input-format", AppRefused,
         app(COMPILE, onnx_file, "-o", "x.rai", "--input-format", "cmyk",
             says="invalid choice")),
    # copyless-video
    Case("app", "video: -o in a missing directory fails before any frame", AppRefused,
         app(VIDEO, "-i", photo, "-o", f"{NO_DIR}/out.mp4", says=f"no directory {NO_DIR}")),
    Case("app", "video: -o with an unknown extension", AppRefused,
         app(VIDEO, "-i", photo, "-o", "out.xyz", says="unknown video extension")),
    Case("app", "video: -o under /proc", AppRefused,
         app(VIDEO, "-i", photo, "-o", "/proc/out.mp4", says="cannot write into /proc")),
    Case("app", "video: input that does not exist", AppRefused,
         app(VIDEO, "-i", "none.mp4", says="no video at none.mp4")),
    Case("app", "video: input that is not a video", AppRefused,
         app(VIDEO, "-i", garbage, says="garbage.jpg")),
    Case("app", "video: -m a model that does not exist", AppRefused,
         app(VIDEO, "-i", photo, "-m", "none.rai", says="no model at none.rai")),
    Case("app", "video: -m an .onnx says how to compile it", AppRefused,
         app(VIDEO, "-i", photo, "-m", onnx_file, says="compile it first")),
    Case("app", "video: --slots 0", AppRefused,
         app(VIDEO, "-i", photo, "--slots", "0", says="--slots must be >= 1")),
    # copyless-batch
    Case("app", "batch: -o that is not Parquet", AppRefused,
         app(BATCH, photo, "-o", "out.csv", says="unknown Parquet extension '.csv'")),
    Case("app", "batch: -o in a missing directory", AppRefused,
         app(BATCH, photo, "-o", f"{NO_DIR}/out.parquet", says="no directory")),
    Case("app", "batch: inputs that match nothing", AppRefused,
         app(BATCH, scratch("nothing*.jpg"), "-o", "out.parquet", says="no file matches")),
    Case("app", "batch: -m an .onnx says how to compile it", AppRefused,
         app(BATCH, photo, "-o", "out.parquet", "-m", onnx_file, says="compile it first")),
    Case("app", "batch: --actors 0", AppRefused,
         app(BATCH, photo, "-o", "out.parquet", "--actors", "0", says="--actors must be >= 1")),
    # copyless-infer-async, copyless-bench, copyless-zoo
    Case("app", "infer-async: -m a model that does not exist", AppRefused,
         app(ASYNC, "-m", "none.rai", "--dry-run", says="no model at none.rai")),
    Case("app", "infer-async: -m an .onnx says how to compile it", AppRefused,
         app(ASYNC, "-m", onnx_file, "--dry-run", says="compile it first")),
    Case("app", "infer-async: a dry run on a good model", S.SUCCESS,
         app(ASYNC, "-m", rai, "--dry-run", rc=0)),
    Case("app", "bench: a suite that does not exist", AppRefused,
         app("copyless-bench", "no_such", says="no suite 'no_such'")),
    Case("app", "zoo: a model the zoo does not hold", AppRefused,
         app("copyless-zoo", "no-such", says="unknown model 'no-such'")),
    # a core install: the extras' packages missing
    Case("app", "core install: detect names the vision extra", AppRefused,
         app(DETECT, "-i", photo, "-o", "o.png", blocked=("PIL", "simplejpeg"),
             says="copyless[vision]")),
    Case("app", "core install: zerocopy names the vision extra", AppRefused,
         app(ZEROCOPY, "-i", photo, "-m", rai, blocked=("PIL", "simplejpeg"),
             says="copyless[vision]")),
    Case("app", "core install: bench names the vision extra", AppRefused,
         app("copyless-bench", "spin", blocked=("PIL", "simplejpeg", "matplotlib"),
             says="copyless[vision]")),
    Case("app", "core install: batch names the ray extra", AppRefused,
         app(BATCH, photo, "-o", "out.parquet", blocked=("ray", "pyarrow"),
             says="copyless[ray]")),
    Case("app", "core install: video names the video extra", AppRefused,
         app(VIDEO, "-i", photo, blocked=("av",), says="copyless[video]")),
    Case("app", "core install: compile runs", S.SUCCESS,
         app(COMPILE, onnx_file, "-o", "core.rai", rc=0,
             blocked=("PIL", "simplejpeg", "av", "ray", "pyarrow", "tqdm", "matplotlib"))),
]
# fmt: on
