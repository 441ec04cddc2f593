"""The OCR chain served: copyless-serve's ``copyless-ocr`` entry against RapidOCR (3.x, its
PP-OCRv6 models, its defaults) in a PyTriton callable, as users put it behind Triton; the
same pages sent as PNG bytes over gRPC by ``--concurrency`` clients, whole server processes
on loopback.

Pages: ``--pages`` drawn pages of 900x1600 to 1754x1240 with 6 to 14 lines, every fifth one
turned 90, 180 or 270 degrees (issue 52's kind). Each round sends every page once to each
server (the servers alternate); reports pages/s, the ratio, and the share of pages whose
lines both read the same.

Run: ``python benchmarks/serve_ocr.py [--pages 10] [--concurrency 2] [--rounds 3]
[--json F]`` through ``../shared/tools/quiet``.
"""

from __future__ import annotations

import argparse
import io
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _serving_peers import pytriton_python
from copyless.ocr import draw_page

#: RapidOCR behind PyTriton: the page decoded by RapidOCR itself (its own reader), no batching
#: (a page's lines vary in number), ``instances`` model instances.
PYTRITON_OCR = textwrap.dedent('''
    import sys
    import numpy as np
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig
    from rapidocr import RapidOCR

    http, grpc, metrics, instances = sys.argv[1:5]

    def make():
        engine = RapidOCR()

        def infer(requests):
            answers = []
            for request in requests:
                result = engine(bytes(request["page"][0]))
                texts = list(result.txts or ())
                answers.append({"text": np.array([t.encode() for t in texts], dtype=object),
                                "scores": np.array(result.scores or (), np.float32)})
            return answers
        return infer

    config = TritonConfig(http_address="127.0.0.1", http_port=int(http), grpc_address="127.0.0.1",
                          grpc_port=int(grpc), metrics_port=int(metrics))
    with Triton(config=config) as triton:
        triton.bind(model_name="ocr", infer_func=[make() for _ in range(int(instances))],
                    inputs=[Tensor(name="page", dtype=bytes, shape=(1,))],
                    outputs=[Tensor(name="text", dtype=bytes, shape=(-1,)),
                             Tensor(name="scores", dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(batching=False), strict=False)
        triton.serve()
''')
SIZES = ((900, 1600), (1754, 1240), (1240, 1754), (1000, 1400), (1600, 1100))


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pages(count: int) -> list[bytes]:
    out = []
    for number in range(count):
        drawn = draw_page(number, size=SIZES[number % len(SIZES)], lines=6 + number % 9)
        image = Image.fromarray(drawn.image)
        if number % 5 == 4:
            image = image.rotate((90, 180, 270)[number // 5 % 3], expand=True)
        buffer = io.BytesIO()
        image.save(buffer, "PNG")
        out.append(buffer.getvalue())
    return out


def _serve(name: str, folder: Path, args: argparse.Namespace
           ) -> tuple[subprocess.Popen[bytes], str]:  # fmt: skip
    http, grpc = _port(), _port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    if name == "copyless":
        (folder / "repo" / "ocr").mkdir(parents=True, exist_ok=True)
        (folder / "repo" / "ocr" / "config.pbtxt").write_text('backend: "copyless-ocr"\n')
        argv = [sys.executable, "-m", "copyless.apps.inference_server", str(folder / "repo"),
                f"--http=127.0.0.1:{http}", f"--grpc=127.0.0.1:{grpc}", "--metrics=off"]
        return subprocess.Popen(argv, **quiet), f"127.0.0.1:{grpc}"  # type: ignore[call-overload]
    script = folder / "pytriton_ocr.py"
    script.write_text(PYTRITON_OCR)
    python = pytriton_python(extra=("rapidocr", "onnxruntime"))
    argv = [str(python), str(script), str(http), str(grpc), str(_port()),
            str(args.peer_instances)]  # fmt: skip
    return subprocess.Popen(argv, **quiet), f"127.0.0.1:{grpc}"  # type: ignore[call-overload]


def _ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 600) -> None:
    import tritonclient.grpc as grpcclient

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"serve_ocr: a server exited with {process.returncode}")
        try:
            client = grpcclient.InferenceServerClient(url)
            if client.is_server_ready() and client.is_model_ready("ocr"):
                client.close()
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    raise SystemExit("serve_ocr: a server was not ready in time")


def _send(url: str, data: list[bytes], concurrency: int) -> tuple[float, list[list[str]]]:
    """Every page once, ``concurrency`` at a time: (seconds, each page's lines)."""
    import tritonclient.grpc as grpcclient

    texts: list[list[str]] = [[] for _ in data]
    next_page, lock = [0], threading.Lock()

    def client() -> None:
        connection = grpcclient.InferenceServerClient(url)
        while True:
            with lock:
                number = next_page[0]
                next_page[0] += 1
            if number >= len(data):
                break
            given = grpcclient.InferInput("page", [1], "BYTES")
            given.set_data_from_numpy(np.array([data[number]], dtype=object))
            answer = connection.infer("ocr", [given], outputs=[
                grpcclient.InferRequestedOutput("text")]).as_numpy("text")
            texts[number] = [t.decode() for t in answer] if answer is not None else []
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peer-instances", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    data = pages(args.pages)
    seconds: dict[str, list[float]] = {"copyless": [], "pytriton": []}
    same: list[float] = []
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        servers = {server: _serve(server, folder, args) for server in ("copyless", "pytriton")}
        try:
            for process, url in servers.values():
                _ready(url, process)
                _send(url, data[:1], 1)  # warm
            for number in range(args.rounds):
                order = ("copyless", "pytriton") if number % 2 == 0 else ("pytriton", "copyless")
                read = {}
                for server in order:
                    took, read[server] = _send(servers[server][1], data, args.concurrency)
                    seconds[server].append(took)
                    print(f"round {number + 1} {server:9s} {args.pages / took:6.2f} pages/s",
                          flush=True)  # fmt: skip
                same.append(sum(a == b for a, b in zip(read["copyless"], read["pytriton"],
                                                       strict=True)) / args.pages)  # fmt: skip
        finally:
            for process, _ in servers.values():
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
    ratios = [p / c for c, p in zip(seconds["copyless"], seconds["pytriton"], strict=True)]
    print(f"{args.pages} pages, concurrency {args.concurrency}: median copyless / RapidOCR on "
          f"PyTriton {statistics.median(ratios):.2f}x (rounds "
          f"{', '.join(f'{r:.2f}' for r in ratios)}); pages read alike "
          f"{100 * statistics.median(same):.0f}%")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"pages": args.pages, "seconds": seconds,
                                         "ratios": ratios, "same": same}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
