"""Triton's own load tester, unchanged, against copyless-serve: ``perf_analyzer`` over HTTP
and gRPC, with and without system shared memory, with its server-side breakdown (the
statistics extension). The binary ships in tritonclient 2.36's wheel; benchmarks/
perf_analyzer.py fetches it and its two libraries from the package registries once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "perf_analyzer.py"


def test_perf_analyzer_runs_its_four_modes(tmp_path: Path) -> None:
    record = tmp_path / "pa.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--requests", "50", "--json",
                           str(record)], capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    modes = json.loads(record.read_text())["modes"]
    assert set(modes) == {"http", "grpc", "http+shm", "grpc+shm"}
    for mode, row in modes.items():
        assert row["rc"] == 0 and row["throughput"] > 0, (mode, row)
        server = row["server_us"]
        assert server is not None and server["compute_infer"] > 0, (mode, row)
        assert server["request"] >= server["compute_infer"], (mode, row)
