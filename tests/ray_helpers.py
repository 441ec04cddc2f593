"""Helpers for the Ray tests: real Ray nodes in their own processes, and a folder of photos.

The head is ``ray start --head --block`` in a child process, on free ports, with a small
object store and its session files in a private temporary directory; a worker node is
``ray start --address HEAD --block`` (its own raylet and object store, on free ports of
its own, on this machine). Each is stopped by signalling that process (its own id), which
takes its Ray processes down with it; what is left of its tree is killed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

CAT = frozenset({281, 282, 285})
ESPRESSO = frozenset({967})
#: The environment every Ray process of the tests runs with (no token under ~/.ray).
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
_STARTUP_S = 120.0
_GRACE_S = 2.0


def batch_command() -> list[str]:
    """How a user starts copyless-batch from this venv: its console script, or the module
    where the script is absent."""
    exe = Path(sys.executable).with_name("copyless-batch")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "copyless.apps.batch"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RayHead:
    """A running ``ray start --head --block`` process."""

    process: subprocess.Popen[bytes]
    port: int
    temp_dir: Path
    log: Path
    pids: list[int] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def raylet(self) -> int:
        """The process id of this node's raylet."""
        import psutil

        for proc in psutil.Process(self.process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if proc.name() == "raylet" or "raylet" in " ".join(proc.cmdline()[:1]):
                    return int(proc.pid)
        raise RuntimeError(f"no raylet under process {self.process.pid}")

    def stop(self) -> None:
        """SIGTERM to the head's own process id (``--block`` then stops its Ray processes);
        what is still up after a few seconds (Ray Data's detached actors make the raylet
        wait 30 s for them) is killed: every process of this head's tree is ours."""
        import psutil

        try:
            tree = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGTERM)
        _, alive = psutil.wait_procs(tree, timeout=_GRACE_S)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(alive, timeout=30)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


#: ``ray start`` through this interpreter (the environment may have no ``ray`` script).
RAY_START = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block"]


def start_head(cpus: int = 2, object_store_mb: int = 200) -> RayHead:
    """Start a head on free ports and wait until it accepts connections."""
    temp_dir = Path(tempfile.mkdtemp(prefix="clt-", dir="/tmp"))  # short: Ray's socket paths
    port = free_port()
    command = [
        *RAY_START, "--head",
        f"--port={port}",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]  # fmt: skip
    return _start(command + _node_options(cpus, object_store_mb), port, temp_dir, "head")


def start_worker(head: RayHead, cpus: int = 1, object_store_mb: int = 100) -> RayHead:
    """Start a worker node of ``head`` on this machine (its own raylet, object store and
    ports) and wait until it has joined."""
    temp_dir = Path(tempfile.mkdtemp(prefix="clw-", dir="/tmp"))  # its log only
    command = [*RAY_START, f"--address={head.address}"]
    return _start(command + _node_options(cpus, object_store_mb), head.port, temp_dir, "worker")


def _node_options(cpus: int, object_store_mb: int) -> list[str]:
    return [
        f"--num-cpus={cpus}",
        f"--object-store-memory={object_store_mb * 1024 * 1024}",
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
    ]


def _start(command: list[str], port: int, temp_dir: Path, what: str) -> RayHead:
    log = temp_dir / f"{what}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **RAY_ENV}
        )
    node = RayHead(process, port, temp_dir, log)
    deadline = time.monotonic() + _STARTUP_S
    while b"Ray runtime started" not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            text = log.read_text(errors="replace")
            node.stop()
            raise RuntimeError(f"ray start ({what}) failed:\n{text}")
        time.sleep(0.2)
    return node


def write_photos(folder: Path) -> dict[str, frozenset[int]]:
    """Real photos as JPEGs (and one PNG) of several sizes and qualities; returns each
    file's absolute path with the ImageNet classes it may be given."""
    from skimage import data

    folder.mkdir(parents=True, exist_ok=True)
    expected: dict[str, frozenset[int]] = {}
    for name, classes in (("chelsea", CAT), ("coffee", ESPRESSO)):
        image = Image.fromarray(np.ascontiguousarray(getattr(data, name)()))
        variants = {
            f"{name}.jpg": (image, {"quality": 92}),
            f"{name}_q70.jpg": (image, {"quality": 70}),
            f"{name}_mirror.jpg": (image.transpose(Image.Transpose.FLIP_LEFT_RIGHT), {}),
            f"{name}_big.jpg": (image.resize((image.width * 2, image.height * 2)), {}),
            f"{name}.png": (image, {}),
        }
        for file, (picture, options) in variants.items():
            picture.save(folder / file, **options)
            expected[str((folder / file).resolve())] = classes
    return expected
