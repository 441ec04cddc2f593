"""The launcher's signals: an app with no handler of its own (copyless-compile, -zoo,
-bench, or any app before its handlers are in) stops on SIGINT/SIGTERM with one line and
status 130/143, no traceback."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

# An app module whose main() says it is running, then works for a long time.
CHILD = """
import sys, time, types
app = types.ModuleType("copyless.apps.sleeper")
def main():
    print("running", flush=True)
    time.sleep(60)
    return 0
app.main = main
sys.modules["copyless.apps.sleeper"] = app
from copyless.apps._launch import run
sys.exit(run("sleeper", "copyless-sleeper"))
"""


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_in_an_app_without_handlers(sig: signal.Signals, code: int) -> None:
    with subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, bufsize=1) as child:  # fmt: skip
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.readline() == "running\n"
        child.send_signal(sig)
        err = child.stderr.read()
        assert child.wait(30) == code
    assert err == f"copyless-sleeper: stopped by {sig.name}\n"
