"""Memory before work (issue 40 item 3): what an app may use (free memory, a container's
cgroup v1/v2 limit, --max-memory) and the one-line refusals, in child processes.

Before: ``copyless-detect -i 9000x9000.jpg --model face --max-side 9000`` grew past 6 GiB
and was killed by the kernel with no message.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from copyless.apps import _memory
from copyless.apps._checks import UsageError
from copyless.apps._memory import MemoryBudget, parse_size

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    ("text", "size"),
    [("512M", 512 << 20), ("6G", 6 << 30), ("2GiB", 2 << 30), ("1.5g", 3 << 29), ("4096", 4096)],
)
def test_sizes_parse_in_binary_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1G", "0", "5X"])
def test_bad_sizes_are_usage_errors(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


def _cgroup(root: Path, proc: str, files: dict[str, str]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    (root / "proc-cgroup").write_text(proc)


@pytest.mark.parametrize(
    ("proc", "files", "room"),
    [
        # v2: the process's own level is limited
        ("0::/app\n", {"app/memory.max": "1073741824\n", "app/memory.current": "268435456\n",
                       "memory.max": "max\n", "memory.current": "5\n"}, 768 << 20),
        # v2: a parent level is tighter than the process's own
        ("0::/a/b\n", {"a/b/memory.max": "max\n", "a/b/memory.current": "1\n",
                       "a/memory.max": "536870912\n", "a/memory.current": "134217728\n"},
         384 << 20),
        # v1: the memory controller's hierarchy; no-limit is a huge number
        ("4:memory:/c\n9:name=systemd:/\n",
         {"memory/c/memory.limit_in_bytes": "2147483648\n",
          "memory/c/memory.usage_in_bytes": "1073741824\n",
          "memory/memory.limit_in_bytes": "9223372036854771712\n",
          "memory/memory.usage_in_bytes": "1\n"}, 1 << 30),
        # a container that sees its own cgroup as the root: the mount point holds the limit
        ("0::/\n", {"memory.max": "2147483648\n", "memory.current": "0\n"}, 2 << 30),
        # no limit anywhere
        ("0::/\n", {"memory.max": "max\n", "memory.current": "0\n"}, None),
    ],
    ids=["v2-own", "v2-parent", "v1", "v2-root", "none"],
)  # fmt: skip
def test_the_container_limit_is_found_at_every_level(tmp_path, monkeypatch, proc, files, room):
    _cgroup(tmp_path, proc, files)
    monkeypatch.setattr(_memory, "_CGROUP", tmp_path)
    real = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/self/cgroup":
            return real(tmp_path / "proc-cgroup")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    assert _memory._cgroup_room() == room
    budget = MemoryBudget.of()
    if room is not None and room < _memory._available():
        assert budget.source == "the container's memory limit"
        assert abs(budget.limit - (_memory._resident() + room)) < 64 << 20  # RSS moves


def test_max_memory_is_the_tightest_and_says_so() -> None:
    budget = MemoryBudget.of(64 << 20)
    assert (budget.limit, budget.source) == (64 << 20, "--max-memory")
    budget.check(64 << 20, "x", "y")  # at the limit: fine
    with pytest.raises(UsageError, match=r"x needs about 65 MiB of memory, more than the 64 MiB "
                       r"--max-memory allows: lower it, or raise --max-memory"):  # fmt: skip
        budget.check((64 << 20) + (1 << 20), "x", "lower it")


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True,
                          cwd=cwd, timeout=300, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def huge_jpeg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The issue's 9000x9000 photo (one flat colour: small on disk)."""
    path = tmp_path_factory.mktemp("huge") / "9000.jpg"
    Image.new("RGB", (9000, 9000), (120, 130, 140)).save(path, quality=80)
    return path


def test_detect_refuses_a_face_model_that_would_not_fit(huge_jpeg: Path, tmp_path: Path) -> None:
    """Refused before anything is compiled or decoded: one line with the estimate, the
    budget and the --max-side that fits."""
    done = _run("copyless-detect", "-i", str(huge_jpeg), "--model", "face", "--max-side", "9000",
                "-o", "o.jpg", "--max-memory", "6G", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: the face detector at 9000x9000 (--max-side 9000) needs about ")
    assert "more than the 6.0 GiB --max-memory allows: --max-side " in line
    side = int(line.split("--max-side ")[-1].split()[0])
    assert 1024 <= side <= 4096 and side % 32 == 0
    assert not (tmp_path / "o.jpg").exists()


@pytest.mark.parametrize("app", ["copyless-zerocopy", "copyless-ocr"])
def test_an_image_too_large_to_decode_is_one_line(app: str, huge_jpeg: Path, tmp_path) -> None:
    flag = "-i"
    limit = "600M" if app == "copyless-zerocopy" else "2.3G"
    done = _run(app, flag, str(huge_jpeg), "--max-memory", limit, cwd=tmp_path)
    assert "Traceback" not in done.stderr
    lines = [row for row in (done.stdout + done.stderr).splitlines() if "error:" in row]
    assert len(lines) == 1 and "9000x9000 image needs about 696 MiB of memory to read" in lines[0]
    assert done.returncode == (2 if app == "copyless-zerocopy" else 1)
