"""``copyless-zoo``: write a ready ONNX model from the zoo, list the models, or find a photo.

::

    copyless-zoo efficientnet-lite0 -o lite0.onnx   # build (cached) and copy to lite0.onnx
    copyless-zoo resnet50                           # build (cached) and print the cache path
    copyless-zoo --list                             # names and one-line summaries
    copyless-zoo --photo chelsea.jpg [-o cat.jpg]   # print (or copy to FILE) a real photo

Output paths go to stdout; progress and timing go to stderr. Exit status: 0 on success, 2 for
an unknown model or photo name (or bad arguments), 1 when a build fails (e.g. the source
package is not installed).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..model import zoo
from ..types import CopylessError
from ._output import Output, add_output_arguments, progress_wanted

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="copyless-zoo",
        description="Build a ready float32 ONNX model from installed packages (no network), "
        "cached under the user cache directory (override with $COPYLESS_CACHE_DIR).",
    )
    parser.add_argument("name", nargs="?", help=f"model name: {', '.join(zoo.names())}")
    parser.add_argument("-o", "--output", type=Path, help="copy the model (or photo) here")
    parser.add_argument("--list", action="store_true", help="list the model names and exit")
    parser.add_argument(
        "--photo",
        metavar="PHOTO",
        help=f"print the path of a real photo: {', '.join(zoo.photo_names())} "
        "(add .jpg for a JPEG copy)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar or timing")
    add_output_arguments(parser, quiet=False)
    return parser


def _copy(source: Path, output: Path) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, output)
    return output


def _list(out: Output) -> int:
    for name in zoo.names():
        entry = zoo.entry(name)
        out.say(f"{name:20s} {entry.summary}")
        out.record("model", name=name, summary=entry.summary, trained=entry.trained)
    out.summary(models=len(zoo.names()))
    return 0


def _photo(name: str, output: Path | None, out: Output) -> int:
    try:
        path = zoo.photo_path(name)
    except CopylessError as exc:
        print(f"copyless-zoo: error: {exc}", file=sys.stderr)
        return 2
    result = _copy(path, output) if output else path
    out.say(str(result))
    out.record("photo", name=name, path=str(result))
    out.summary(photos=1)
    return 0


def _model(name: str, output: Path | None, quiet: bool, out: Output) -> int:
    if name not in zoo.names():
        print(
            f"copyless-zoo: error: unknown model {name!r}; choose from {', '.join(zoo.names())}",
            file=sys.stderr,
        )
        return 2
    start = time.perf_counter()
    try:
        cached = zoo.cache_path(name).is_file()
        path = zoo.build(name, progress=not quiet and progress_wanted())
        result = _copy(path, output) if output else path
    except (CopylessError, OSError) as exc:
        print(f"copyless-zoo: error: {exc}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - start
    if not quiet and not out.json_lines:
        how = "cache hit" if cached else "built"
        print(f"{name}: {how} in {seconds:.2f} s ({path})", file=sys.stderr)
    out.say(str(result))
    out.record("model", name=name, path=str(result), cached=cached)
    out.timing([], {"seconds": round(seconds, 3)})
    out.summary(models=1)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on bad arguments (2)
        return exc.code if isinstance(exc.code, int) else 2
    out = Output.from_args(args)
    if args.list:
        return _list(out)
    if args.photo:
        return _photo(args.photo, args.output, out)
    if not args.name:
        parser.print_usage(sys.stderr)
        print("copyless-zoo: error: give a model NAME, --list or --photo", file=sys.stderr)
        return 2
    return _model(args.name, args.output, args.quiet, out)


if __name__ == "__main__":
    sys.exit(main())
