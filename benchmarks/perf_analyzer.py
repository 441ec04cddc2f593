"""Triton's own load tester against copyless-serve, unchanged: ``perf_analyzer`` over HTTP and
gRPC, with and without ``--shared-memory system``, with the server-side breakdown (queue,
compute input / infer / output) its statistics extension gives.

perf_analyzer's pip package is a placeholder; the binary ships in ``tritonclient`` 2.36's
wheel (``data/bin/perf_analyzer``), linked against libb64 (Debian's ``libb64-0d``) and
``libcudart.so.12`` (PyPI's ``nvidia-cuda-runtime-cu12``; no GPU is needed). On first use
this script fetches the three from the package registries into
``<copyless cache>/tools/perf_analyzer-2.36`` (``pip download``, ``apt-get download``: no root
needed) and reuses them after.

The server: ``copyless-serve --allow-client-shm`` on free loopback ports, on a repository of
``--model`` (``conv``: a small convolution net, compiled for batch 4; ``lite0``: the built-in
EfficientNet-Lite0, RGBx uint8). Each mode runs at ``--concurrency``; a mode fails when
perf_analyzer exits non-zero or prints no server-side section. Exit 0 when all four pass.

Run: ``python benchmarks/perf_analyzer.py [--model conv|lite0] [--concurrency 1]
[--requests 200] [--json F]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh

import copyless as cl
from copyless.model.zoo import cache_root

TRITONCLIENT = "tritonclient==2.36.0"
CUDART = "nvidia-cuda-runtime-cu12==12.9.79"
LIBB64 = "libb64-0d"
MODES = {"http": ("http", False), "grpc": ("grpc", False),
         "http+shm": ("http", True), "grpc+shm": ("grpc", True)}  # fmt: skip


def _run(*argv: str, cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()[-400:]}")


def _fetch(home: Path) -> None:
    work = Path(tempfile.mkdtemp(dir=home.parent))
    try:
        (work / "lib").mkdir()
        pip = (sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(work))
        _run(*pip, TRITONCLIENT, cwd=work)
        _run(*pip, CUDART, cwd=work)
        _run("apt-get", "download", "-q", LIBB64, cwd=work)
        for wheel in work.glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    base = name.rsplit("/", 1)[-1]
                    if name.endswith("data/bin/perf_analyzer"):
                        (work / "perf_analyzer").write_bytes(archive.read(name))
                    elif base == "libcudart.so.12":
                        (work / "lib" / base).write_bytes(archive.read(name))
        (deb,) = work.glob("libb64*.deb")
        _run("dpkg-deb", "-x", str(deb), str(work / "deb"), cwd=work)
        (lib,) = (work / "deb").rglob("libb64.so.0d")
        shutil.copy(lib, work / "lib" / "libb64.so.0d")
        (work / "perf_analyzer").chmod(0o755)
        for leftover in [*work.glob("*.whl"), *work.glob("*.deb")]:
            leftover.unlink()
        shutil.rmtree(work / "deb")
        os.rename(work, home)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def perf_analyzer() -> tuple[Path, dict[str, str]]:
    """The perf_analyzer binary and the environment it runs in (fetched once, locked)."""
    home = cache_root() / "tools" / "perf_analyzer-2.36"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / ".perf_analyzer.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "perf_analyzer").exists():
            _fetch(home)
    env = {**os.environ, "LD_LIBRARY_PATH": str(home / "lib")}
    return home / "perf_analyzer", env


def conv_model() -> onnx.ModelProto:
    """Conv 3->8, ReLU, global pool, Gemm 8->10 on ``[N, 3, 16, 16]``: small and real."""
    rng = np.random.default_rng(0)
    inits = [onh.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w", (8, 3, 3, 3)), ("b", (8,)), ("fc", (10, 8)), ("fcb", (10,)))]
    nodes = [oh.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["c"], ["r"]), oh.make_node("GlobalAveragePool", ["r"], ["p"]),
             oh.make_node("Flatten", ["p"], ["f"]),
             oh.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1)]  # fmt: skip
    graph = oh.make_graph(nodes, "conv", [oh.make_tensor_value_info(
        "input", onnx.TensorProto.FLOAT, ["N", 3, 16, 16])], [oh.make_tensor_value_info(
            "logits", onnx.TensorProto.FLOAT, ["N", 10])], inits)  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def repository(root: Path, model: str) -> str:
    (root / model).mkdir(parents=True)
    if model == "conv":
        cl.compile_model(conv_model(), root / "conv" / "conv.rai", batch_size=4)
    else:
        from copyless.model import zoo

        cl.compile_model(zoo.build("efficientnet-lite0"), root / model / f"{model}.rai",
                         input_format="rgbx", mean=(127, 127, 127), std=(128, 128, 128))
    return model


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def served(root: Path) -> Iterator[dict[str, str]]:
    ports = {name: f"127.0.0.1:{_port()}" for name in ("http", "grpc", "metrics")}
    argv = [sys.executable, "-m", "copyless.apps.inference_server", str(root),
            "--allow-client-shm", *[a for n, v in ports.items() for a in (f"--{n}", v)]]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            for line in server.stdout:
                if line.strip().endswith(": ready"):
                    break
            else:
                raise RuntimeError("copyless-serve did not get ready")
            yield ports
        finally:
            server.terminate()
            server.wait(60)


def measure(binary: Path, env: dict[str, str], model: str, url: str, protocol: str,
            shm: bool, concurrency: int, requests: int) -> dict[str, object]:  # fmt: skip
    argv = [str(binary), "-m", model, "-u", url, "-i", protocol, "-b", "1",
            "--concurrency-range", str(concurrency), "--measurement-mode", "count_windows",
            "--measurement-request-count", str(requests), "--stability-percentage", "100",
            "--max-trials", "5"]  # fmt: skip
    if shm:
        argv += ["--shared-memory", "system"]
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    text = done.stdout + done.stderr
    throughput = re.search(r"Throughput: ([0-9.]+) infer/sec", text)
    server = re.search(r"Avg request latency: (\d+) usec \(overhead (\d+) usec \+ queue (\d+) "
                       r"usec \+ compute input (\d+) usec \+ compute infer (\d+) usec \+ "
                       r"compute output (\d+) usec\)", text)  # fmt: skip
    return {"rc": done.returncode, "seconds": round(time.perf_counter() - started, 1),
            "throughput": float(throughput.group(1)) if throughput else None,
            "server_us": dict(zip(("request", "overhead", "queue", "compute_input",
                                   "compute_infer", "compute_output"),
                                  map(int, server.groups()), strict=True)) if server else None,
            "tail": "" if done.returncode == 0 and server else text[-800:]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("conv", "lite0"), default="conv")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=200, help="requests per window")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    binary, env = perf_analyzer()
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        model = repository(Path(folder), args.model)
        with served(Path(folder)) as ports:
            for mode in args.modes.split(","):
                protocol, shm = MODES[mode]
                row = measure(binary, env, model, ports[protocol], protocol, shm,
                              args.concurrency, args.requests)  # fmt: skip
                rows[mode] = row
                print(f"{mode:9s} rc {row['rc']}  {row['throughput']} infer/s  server "
                      f"{row['server_us']}{('  ' + str(row['tail'])) if row['tail'] else ''}",
                      flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"model": args.model, "concurrency": args.concurrency,
                                         "modes": rows}, indent=1))  # fmt: skip
    return 0 if all(r["rc"] == 0 and r["server_us"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
