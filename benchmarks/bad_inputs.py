"""The bad-input catalogue, run: files, options, tensors, call orders and console-script
arguments a user can get wrong, each with what copyless answers (a status or a clear error,
never a crash; the scripts: exit status 2, one error line, no traceback).

    python benchmarks/bad_inputs.py [--quiet] [--api-only | --inputs-only]

Prints one row per case (area, input, answer, ok) and a summary; exits 1 when a case gives
anything but its expected status or error. The cases live in tests/reliability/catalogue.py,
catalogue_apps.py and catalogue_inputs.py (the test suite runs the same lists);
``--api-only`` skips the scripts' cases (each starts a child process: about a minute for
all of them), ``--inputs-only`` runs only the inputs as users have them (issue 40: real
pictures through the built-in models, compiled into the user's cache on the first run).
"""

from __future__ import annotations

import argparse
import collections
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))
from catalogue import CATALOGUE, Kit, run_case
from catalogue_apps import APPS
from catalogue_inputs import INPUTS
from reliability_helpers import small_net


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quiet", action="store_true", help="only the summary and failures")
    parser.add_argument("--log", action="store_true", help="show copyless's log records too")
    parser.add_argument("--api-only", action="store_true", help="not the console scripts")
    parser.add_argument("--inputs-only", action="store_true",
                        help="only the inputs as users have them (issue 40: photos, scans, "
                        "pipes, folders, memory), each in a child process")  # fmt: skip
    parser.add_argument("--match", metavar="TEXT", help="only the cases whose name holds TEXT")
    args = parser.parse_args(argv)
    if not args.log:  # each case's own error record would interleave with the table
        logging.disable(logging.CRITICAL)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="copyless-bad-inputs-") as scratch:
        kit = Kit(Path(scratch), small_net())
        try:
            cases = CATALOGUE if args.api_only else [*CATALOGUE, *APPS, *INPUTS]
            if args.inputs_only:
                cases = INPUTS
            if args.match:
                cases = [case for case in cases if args.match in case.what]
            outcomes = [run_case(kit, case) for case in cases]
        finally:
            kit.close()
            logging.disable(logging.NOTSET)
    for outcome in outcomes:
        if not args.quiet or not outcome.ok:
            mark = "ok  " if outcome.ok else "FAIL"
            print(f"{mark} {outcome.case.area:6s} {outcome.case.what:60s} {outcome.got[:110]}")
    per_area = collections.Counter(o.case.area for o in outcomes)
    bad = [o for o in outcomes if not o.ok]
    print(f"{len(outcomes)} bad inputs ({dict(per_area)}): {len(outcomes) - len(bad)} answered "
          f"as expected, {len(bad)} not, in {time.perf_counter() - start:.1f} s")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
