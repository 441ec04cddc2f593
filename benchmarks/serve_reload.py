"""A reload under load: copyless-serve in poll mode serving EfficientNet-Lite0 (RGBx uint8) to
8 gRPC clients sending back to back, while a new version is dropped into the repository.

Reports the failed requests (the target: none), the p50 and p99 latency before the reload
and during it (from the moment the new version's files land until 5 s after the last answer
of the old version), and their ratio (the target: p99 during <= 2x p99 before), plus how
long the new version took to take over. Whole server process on loopback.

Run: ``python benchmarks/serve_reload.py [--clients 8] [--before 10] [--after 5]
[--runner onnxruntime|openvino|vaiml] [--rounds 1] [--json F]`` (through
``../shared/tools/quiet`` for figures).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import copyless as cl
from copyless.model import zoo


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _place(repository: Path, version: int, source: Path) -> None:
    folder = repository / "lite0" / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, folder / ".model.rai.new")
    os.replace(folder / ".model.rai.new", folder / "model.rai")


class Clients:
    """``count`` gRPC clients, each sending one photo-sized RGBx row after the other."""

    def __init__(self, url: str, count: int) -> None:
        import tritonclient.grpc as grpcclient

        self.answers: list[tuple[float, float, str]] = []  # (when, seconds, version)
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._module = grpcclient
        self._threads = [threading.Thread(target=self._run, args=(url, i)) for i in range(count)]
        for thread in self._threads:
            thread.start()

    def _run(self, url: str, seed: int) -> None:
        from tritonclient.utils import InferenceServerException

        client = self._module.InferenceServerClient(url)
        x = np.random.default_rng(seed).integers(0, 256, (1, 224, 224, 4), dtype=np.uint8)
        given = self._module.InferInput("input", list(x.shape), "UINT8")
        given.set_data_from_numpy(x)
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                result = client.infer("lite0", [given])
            except InferenceServerException as exc:
                with self._lock:
                    self.failures.append(str(exc))
                continue
            took = time.perf_counter() - started
            with self._lock:
                self.answers.append((time.monotonic(), took,
                                     result.get_response().model_version))  # fmt: skip
        client.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


def _quantiles(seconds: list[float]) -> tuple[float, float]:
    ms = sorted(s * 1e3 for s in seconds)
    return ms[len(ms) // 2], ms[min(len(ms) - 1, int(0.99 * len(ms)))]


def one_round(source: Path, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder)
        _place(repository, 1, source)
        ports = {"http": _port(), "grpc": _port()}
        argv = [sys.executable, "-m", "copyless.apps.inference_server", str(repository),
                "--model-control-mode", "poll", "--repository-poll-secs", "0.5",
                "--runner", args.runner, "--metrics", "off",
                *[a for n, p in ports.items() for a in (f"--{n}", f"127.0.0.1:{p}")]]
        server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)  # fmt: skip
        try:
            assert server.stdout is not None
            for line in server.stdout:
                if line.strip().endswith(": ready"):
                    break
            clients = Clients(f"127.0.0.1:{ports['grpc']}", args.clients)
            time.sleep(1.0 + args.before)
            landed = time.monotonic()
            _place(repository, 2, source)
            while not any(v == "2" for _, _, v in clients.answers[-50:]):
                if time.monotonic() - landed > 120:
                    raise SystemExit("serve_reload: version 2 never answered")
                time.sleep(0.05)
            last_old = max(t for t, _, v in clients.answers if v == "1")
            took_over = min(t for t, _, v in clients.answers if v == "2") - landed
            time.sleep(args.after)
            clients.stop()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
    before = [s for t, s, _ in clients.answers if landed - args.before <= t < landed]
    during = [s for t, s, _ in clients.answers if landed <= t <= last_old + args.after]
    (p50_before, p99_before), (p50_during, p99_during) = _quantiles(before), _quantiles(during)
    return {"failed": len(clients.failures), "answers": len(clients.answers),
            "p50_before_ms": p50_before, "p99_before_ms": p99_before,
            "p50_during_ms": p50_during, "p99_during_ms": p99_during,
            "p99_ratio": p99_during / p99_before, "took_over_s": took_over}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--before", type=float, default=10.0, help="seconds measured before")
    parser.add_argument("--after", type=float, default=5.0,
                        help="seconds after the old version's last answer")
    parser.add_argument("--runner", default="onnxruntime")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "lite0.rai"
        cl.compile_model(zoo.build("efficientnet-lite0"), source, input_format="rgbx",
                         mean=(127, 127, 127), std=(128, 128, 128))  # fmt: skip
        rounds = []
        for number in range(args.rounds):
            row = one_round(source, args)
            rounds.append(row)
            print(f"round {number + 1}: {row['failed']} failed of {row['answers']}; p99 "
                  f"{row['p99_before_ms']:.1f} ms before, {row['p99_during_ms']:.1f} ms during "
                  f"({row['p99_ratio']:.2f}x); p50 {row['p50_before_ms']:.1f} -> "
                  f"{row['p50_during_ms']:.1f} ms; new version answering "
                  f"{row['took_over_s']:.1f} s after its files landed", flush=True)  # fmt: skip
    ratio = statistics.median(r["p99_ratio"] for r in rounds)
    failed = sum(int(r["failed"]) for r in rounds)
    print(f"median p99 during / before: {ratio:.2f}x; failed requests: {failed}")
    if args.json:
        args.json.write_text(json.dumps({"runner": args.runner, "clients": args.clients,
                                         "rounds": rounds}, indent=1))  # fmt: skip
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
