"""SIGINT / SIGTERM to a running copyless-infer-async: the jobs in flight end, the counts are
printed, one line says why it stopped, the exit status is 130 / 143, no traceback."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from copyless.apps._models import builtin_classifier


def _script() -> list[str]:
    found = shutil.which("copyless-infer-async", path=str(Path(sys.executable).parent))
    assert found, "the console script is installed beside the interpreter"
    return [found]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_it_cleanly(sig: signal.Signals, code: int) -> None:
    model = str(builtin_classifier(progress=False))
    child = subprocess.Popen(
        [*_script(), "--model-path", model, "--dry-run", "-n", "1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stderr is not None
    engine = child.stderr.readline()  # "engine: ..." once the runner is open
    assert engine.startswith("engine:"), engine
    time.sleep(1.0)  # jobs running
    child.send_signal(sig)
    # the rest through the same file objects (communicate() would lose what the text
    # wrapper of stderr has buffered)
    with child:  # closes the pipes
        out = child.stdout.read()  # type: ignore[union-attr]
        err = child.stderr.read()
        child.wait(30)
    assert child.returncode == code, (out, err)
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert [line for line in lines if "stopped by" in line] == [
        f"copyless-infer-async: stopped by {sig.name}"
    ], err
    done = re.search(r"Batches completed: (\d+) / 1000000", out)
    assert done is not None, out
    assert 0 < int(done.group(1)) < 1_000_000
