"""Encoded photos in, top-1 out: copyless-serve decoding JPEG bytes straight into the batch
against PyTriton whose callable decodes and preprocesses them with PIL as its users write it,
the same EfficientNet-Lite0 on onnxruntime, gRPC at concurrency 8, whole server processes on
loopback.

copyless-serve: the model compiled for RGBx uint8 with its preprocessing recorded; a request
is ``BYTES [1]`` (the JPEG file), decoded at the DCT scale the resize needs, written into the
batch row by the model's Preparer. PyTriton: ``Tensor(dtype=bytes, shape=(1,))``, its
callable opens each photo with PIL, converts to RGB, resizes the short side to 256 and
centre-crops 224 as torchvision's Resize + CenterCrop do on PIL (bilinear), normalises
((x - 127) / 128), stacks the batch and runs onnxruntime (one intra-op thread per instance,
``--peer-instances`` model instances: 2, one a core).

Photos: ``--size phone`` (3000x2400 JPEGs, quality 90) or ``small`` (500x400), made from
scikit-image's photos. Reports requests/s and p50/p99 of both, their ratio per round (rounds
alternate the servers), and the share of photos whose top-1 the two agree on.

Run: ``python benchmarks/serve_images.py [--size phone|small] [--seconds 10]
[--concurrency 8] [--rounds 3] [--json F]`` through ``../shared/tools/quiet``.
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
import skimage.data
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))

import copyless as cl
from _serving_peers import pytriton_python
from copyless.model import zoo

#: PyTriton's server with the photo decoded and preprocessed in its callable, as users write
#: it (PIL, then numpy), the model on onnxruntime.
PYTRITON_IMAGES = textwrap.dedent('''
    import io, sys
    import numpy as np
    import onnxruntime as ort
    from PIL import Image
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    onnx_path, http, grpc, metrics, max_batch, delay_us, instances = sys.argv[1:8]

    def load(raw):  # torchvision's Resize(256) + CenterCrop(224), on PIL
        image = Image.open(io.BytesIO(raw)).convert("RGB")
        w, h = image.size
        size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
        image = image.resize(size, Image.BILINEAR)
        w, h = image.size
        left, top = int(round((w - 224) / 2.0)), int(round((h - 224) / 2.0))
        x = np.asarray(image.crop((left, top, left + 224, top + 224)), np.float32)
        return ((x - 127.0) / 128.0).transpose(2, 0, 1)

    def make():
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        name_in, name_out = session.get_inputs()[0].name, session.get_outputs()[0].name

        @batch
        def infer(image):
            x = np.stack([load(row[0]) for row in image])
            return {"logits": session.run(None, {name_in: x})[0]}
        return infer

    config = TritonConfig(http_address="127.0.0.1", http_port=int(http), grpc_address="127.0.0.1",
                          grpc_port=int(grpc), metrics_port=int(metrics))
    with Triton(config=config) as triton:
        triton.bind(model_name="lite0", infer_func=[make() for _ in range(int(instances))],
                    inputs=[Tensor(name="image", dtype=bytes, shape=(1,))],
                    outputs=[Tensor(name="logits", dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(max_batch_size=int(max_batch), batcher=DynamicBatcher(
                        max_queue_delay_microseconds=int(delay_us))), strict=False)
        triton.serve()
''')


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def photos(size: str) -> list[bytes]:
    """Eight JPEGs of scikit-image's photos at the size asked."""
    wh = (3000, 2400) if size == "phone" else (500, 400)
    sources = [skimage.data.chelsea(), skimage.data.coffee(), skimage.data.astronaut(),
               skimage.data.rocket()]  # fmt: skip
    out = []
    for number, array in enumerate(sources * 2):
        image = Image.fromarray(array).resize(wh if number < 4 else wh[::-1], Image.LANCZOS)
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def _serve(name: str, folder: Path, onnx_path: Path, args: argparse.Namespace
           ) -> tuple[subprocess.Popen[bytes], str, str]:  # fmt: skip
    http, grpc = _port(), _port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    if name == "copyless":
        argv = [sys.executable, "-m", "copyless.apps.inference_server", str(folder / "repo"),
                f"--http=127.0.0.1:{http}", f"--grpc=127.0.0.1:{grpc}", "--metrics=off",
                f"--max-queue-delay-ms={args.delay_us / 1000}"]
        return subprocess.Popen(argv, **quiet), f"127.0.0.1:{grpc}", "input"  # type: ignore[call-overload]
    script = folder / "pytriton_images.py"
    script.write_text(PYTRITON_IMAGES)
    argv = [str(pytriton_python(extra=("pillow",))), str(script), str(onnx_path), str(http),
            str(grpc), str(_port()), str(args.batch), str(args.delay_us),
            str(args.peer_instances)]  # fmt: skip
    return subprocess.Popen(argv, **quiet), f"127.0.0.1:{grpc}", "image"  # type: ignore[call-overload]


def _ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    import tritonclient.grpc as grpcclient

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"serve_images: a server exited with {process.returncode}")
        try:
            client = grpcclient.InferenceServerClient(url)
            if client.is_server_ready() and client.is_model_ready("lite0"):
                client.close()
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    raise SystemExit("serve_images: a server was not ready in time")


def _load(url: str, input_name: str, images: list[bytes], args: argparse.Namespace
          ) -> tuple[float, float, float, dict[int, int]]:  # fmt: skip
    """``concurrency`` clients for ``seconds``: (requests/s, p50 ms, p99 ms, top-1 per photo)."""
    import tritonclient.grpc as grpcclient

    latencies: list[float] = []
    top1: dict[int, int] = {}
    lock, stop = threading.Lock(), threading.Event()

    def client(index: int) -> None:
        connection = grpcclient.InferenceServerClient(url)
        number = index
        while not stop.is_set():
            photo = number % len(images)
            given = grpcclient.InferInput(input_name, [1, 1] if input_name == "image" else [1],
                                          "BYTES")  # fmt: skip
            given.set_data_from_numpy(np.array([images[photo]], dtype=object).reshape(
                given.shape()))
            started = time.perf_counter()
            logits = connection.infer("lite0", [given]).as_numpy("logits")
            took = time.perf_counter() - started
            with lock:
                latencies.append(took)
                top1.setdefault(photo, int(np.argmax(logits)))
            number += args.concurrency
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.concurrency)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # warm
    with lock:
        latencies.clear()
    started = time.perf_counter()
    time.sleep(args.seconds)
    with lock:
        measured = list(latencies)
    elapsed = time.perf_counter() - started
    stop.set()
    for thread in threads:
        thread.join(60)
    ms = sorted(x * 1e3 for x in measured)
    return len(ms) / elapsed, ms[len(ms) // 2], ms[min(len(ms) - 1, int(0.99 * len(ms)))], top1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("phone", "small"), default="phone")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4, help="PyTriton's max_batch_size")
    parser.add_argument("--delay-us", type=int, default=500)
    parser.add_argument("--peer-instances", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    images = photos(args.size)
    rows: dict[str, list[tuple[float, float, float]]] = {"copyless": [], "pytriton": []}
    agree: list[float] = []
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        onnx_path = zoo.build("efficientnet-lite0")
        (folder / "repo" / "lite0").mkdir(parents=True)
        cl.compile_model(onnx_path, folder / "repo" / "lite0" / "lite0.rai", input_format="rgbx",
                         mean=(127, 127, 127), std=(128, 128, 128))  # fmt: skip
        for number in range(args.rounds):
            order = ("copyless", "pytriton") if number % 2 == 0 else ("pytriton", "copyless")
            top: dict[str, dict[int, int]] = {}
            for server in order:
                process, url, input_name = _serve(server, folder, onnx_path, args)
                try:
                    _ready(url, process)
                    rps, p50, p99, top[server] = _load(url, input_name, images, args)
                finally:
                    process.send_signal(signal.SIGTERM)
                    try:
                        process.wait(60)
                    except subprocess.TimeoutExpired:
                        process.kill()
                rows[server].append((rps, p50, p99))
                print(f"round {number + 1} {server:9s} {rps:7.1f} req/s  p50 {p50:7.1f} ms  "
                      f"p99 {p99:7.1f} ms", flush=True)  # fmt: skip
            same = [top["copyless"][p] == top["pytriton"][p]
                    for p in top["copyless"] if p in top["pytriton"]]  # fmt: skip
            agree.append(sum(same) / max(1, len(same)))
            ratio = rows["copyless"][-1][0] / rows["pytriton"][-1][0]
            print(f"round {number + 1}: copyless / pytriton {ratio:.2f}x; top-1 agree "
                  f"{100 * agree[-1]:.0f}% of {len(same)} photos", flush=True)  # fmt: skip
    ratios = [c[0] / p[0] for c, p in zip(rows["copyless"], rows["pytriton"], strict=True)]
    print(f"{args.size} photos, concurrency {args.concurrency}: median copyless / pytriton "
          f"{statistics.median(ratios):.2f}x (rounds {', '.join(f'{r:.2f}' for r in ratios)}); "
          f"top-1 agreement {100 * min(agree):.0f}%")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"size": args.size, "concurrency": args.concurrency,
                                         "rows": rows, "ratios": ratios, "agree": agree},
                                        indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
