"""The peers of ``benchmarks/serving.py``: PyTriton (its own Python 3.13 venv, built on first
use) and FastAPI + onnxruntime as a user writes it; each a whole server process."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import platformdirs

PYTRITON = "nvidia-pytriton==0.7.0"

#: PyTriton's server: Triton's own core and dynamic batcher, the model in its Python
#: callable (onnxruntime on the same ONNX file).
PYTRITON_SERVER = textwrap.dedent('''
    import sys
    import numpy as np
    import onnxruntime as ort
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    onnx_path, http, grpc, metrics, max_batch, delay_us = sys.argv[1:7]
    options = ort.SessionOptions()
    session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    name_in, name_out = session.get_inputs()[0].name, session.get_outputs()[0].name

    @batch
    def infer(**inputs):
        return {name_out: session.run(None, {name_in: inputs[name_in]})[0]}

    config = TritonConfig(http_address="127.0.0.1", http_port=int(http), grpc_address="127.0.0.1",
                          grpc_port=int(grpc), metrics_port=int(metrics))
    with Triton(config=config) as triton:
        triton.bind(model_name="lite0", infer_func=infer,
                    inputs=[Tensor(name=name_in, dtype=np.float32, shape=(3, 224, 224))],
                    outputs=[Tensor(name=name_out, dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(max_batch_size=int(max_batch), batcher=DynamicBatcher(
                        max_queue_delay_microseconds=int(delay_us))))
        triton.serve()
''')

#: FastAPI + onnxruntime as users write it: one endpoint speaking the protocol's binary
#: REST form (so tritonclient drives it), one session, no batching.
FASTAPI_SERVER = textwrap.dedent('''
    import json, sys
    import numpy as np
    import onnxruntime as ort
    import uvicorn
    from fastapi import FastAPI, Request, Response

    onnx_path, port = sys.argv[1], int(sys.argv[2])
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    name_in, name_out = session.get_inputs()[0].name, session.get_outputs()[0].name
    app = FastAPI()

    @app.get("/v2/health/ready")
    def ready():
        return {}

    @app.post("/v2/models/{model}/infer")
    async def infer(model: str, request: Request):
        body = await request.body()
        n = int(request.headers.get("inference-header-content-length", len(body)))
        head = json.loads(body[:n])
        tensor = head["inputs"][0]
        x = np.frombuffer(body[n:], np.float32).reshape(tensor["shape"])
        y = session.run(None, {name_in: x})[0]
        out = json.dumps({"model_name": model, "outputs": [{"name": name_out,
            "datatype": "FP32", "shape": list(y.shape),
            "parameters": {"binary_data_size": y.nbytes}}]}).encode()
        return Response(out + y.tobytes(), media_type="application/octet-stream",
                        headers={"Inference-Header-Content-Length": str(len(out))})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
''')


def pytriton_python(extra: tuple[str, ...] = ()) -> Path:
    """The interpreter of PyTriton's venv under the user cache dir, built on first use:
    Python 3.13 from pyenv (PyTriton 0.7's bundled stub needs it), numpy < 2 (with numpy 2
    its data path returns empty outputs; numpy 1.26 builds from source there: minutes);
    ``extra``: packages its callables also need (installed once each)."""
    venv = Path(platformdirs.user_cache_dir("copyless")) / "pytriton-0.7.0-py3.13"
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        for package in extra:
            marker = venv / f".with-{package}"
            if not marker.exists():  # PyTriton 0.7 needs numpy < 2 kept: pin it beside
                subprocess.run([str(python), "-m", "pip", "install", "-q", package, "numpy<2"],
                               check=True)  # fmt: skip
                marker.write_text("ok\n")
        return python
    base = _python313()
    print(f"serving: building PyTriton's venv in {venv} (first use: minutes)", file=sys.stderr)
    subprocess.run([str(base), "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "numpy<2", PYTRITON, "onnxruntime"], check=True)
    (venv / ".complete").write_text("ok\n")
    return pytriton_python(extra)


def _python313() -> Path:
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13")))
    for candidate in [*found, "/usr/bin/python3.13", "/usr/local/bin/python3.13"]:
        if Path(candidate).exists():
            return Path(candidate)
    raise SystemExit("serving: PyTriton 0.7 needs Python 3.13 (pyenv install 3.13): none found")


if __name__ == "__main__":
    print(pytriton_python())
