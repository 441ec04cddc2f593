"""SIGINT / SIGTERM to copyless-zerocopy and copyless-detect mid-run (one image, synchronous
rounds: no Pipeline): the round running ends, the rounds done are reported (labels or boxes,
the benchmark block), one line says why it stopped, exit 130 / 143, no traceback."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from copyless.apps._models import builtin_classifier, builtin_detector
from copyless.model import zoo


def _script(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, "the console script is installed beside the interpreter"
    return found


@pytest.mark.parametrize(
    ("app", "sig", "code"),
    [("copyless-zerocopy", signal.SIGINT, 130), ("copyless-detect", signal.SIGTERM, 143)],
)
def test_a_signal_ends_the_rounds_and_reports_them(
    app: str, sig: signal.Signals, code: int, tmp_path: Path
) -> None:
    model = builtin_classifier(progress=False) if app.endswith("zerocopy") else builtin_detector()
    drawn = tmp_path / "boxes.png"
    extra = ["-o", str(drawn)] if app.endswith("detect") else []
    child = subprocess.Popen(
        [_script(app), "-i", str(zoo.photo_path("chelsea.jpg")), "-m", str(model),
         "-n", "1000000", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stderr is not None
    engine = child.stderr.readline()  # "engine: ..." once the runner is open
    assert engine.startswith("engine:"), engine
    time.sleep(1.0)  # rounds running
    child.send_signal(sig)
    out, err = child.communicate(timeout=60)
    assert child.returncode == code, (out, err)
    assert "Traceback" not in err
    stopped = [line for line in err.splitlines() if "stopped by" in line]
    assert stopped == [f"{app}: stopped by {sig.name}"], err
    assert re.search(r"^throughput \(pipeline\) {3}\d+\.\d{3} FPS$", out, re.M), out
    if app.endswith("zerocopy"):
        assert re.search(r"^top-1: 28[125] ", out, re.M), out
    else:
        assert re.search(r"^text boxes: \d+$", out, re.M) and drawn.is_file(), out
