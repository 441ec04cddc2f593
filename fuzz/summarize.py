"""Executions and coverage per harness over the long-run logs in fuzz/logs/ (or given files).

    .venv/bin/python fuzz/summarize.py            # one row per log, then totals per harness

A log whose run was stopped early has no final stats: its last ``#N`` status line counts.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

STATUS = re.compile(r"^#(\d+)\s+\S+\s+cov: (\d+) ft: (\d+)")
FINAL = re.compile(r"^stat::number_of_executed_units: (\d+)")


def read(log: Path) -> tuple[int, int, int, str]:
    """(executions, coverage, features, how it ended) of one log."""
    execs = cov = ft = 0
    ended, finding = "stopped", ""
    for line in log.read_text(errors="replace").splitlines():
        if m := STATUS.match(line):
            execs, cov, ft = int(m[1]), int(m[2]), int(m[3])
        elif m := FINAL.match(line):
            execs, ended = max(execs, int(m[1])), "done"
        elif "runtime error:" in line:
            finding = finding or "finding (UBSan)"
        elif "ERROR: AddressSanitizer" in line:
            finding = finding or "finding (ASan)"
        elif "Uncaught Python exception" in line:
            finding = finding or "finding (contract)"
    return execs, cov, ft, finding or ended


def main() -> None:
    logs = [Path(p) for p in sys.argv[1:]] or sorted(Path("fuzz/logs").glob("*.log"))
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for log in logs:
        execs, cov, ft, ended = read(log)
        harness = log.name.split("-")[0]
        print(f"{log.name:<36} {execs:>10,} execs  cov {cov:>5}  ft {ft:>6}  {ended}")
        totals[harness][0] += execs
        totals[harness][1] = max(totals[harness][1], cov)
        totals[harness][2] = max(totals[harness][2], ft)
    for harness, (execs, cov, ft) in sorted(totals.items()):
        print(f"TOTAL {harness:<30} {execs:>10,} execs  max cov {cov}  max ft {ft}")
    print(f"TOTAL all {sum(t[0] for t in totals.values()):,} execs")


if __name__ == "__main__":
    main()
