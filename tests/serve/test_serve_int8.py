"""copyless-serve runs the INT8 model it is given: EfficientNet-Lite0 compiled by NNCF with its
RGBx uint8 input and INT8 logits, answered as the Runner answers, its precision and each
integer view's quantization in Triton's model config, its price in the program's lines."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import skimage.data
import tritonclient.grpc as grpcclient
from PIL import Image
from serve_helpers import runner_answers, start

from copyless.model import compile_model, load_model, precision_line, zoo
from copyless.serve import InferenceServer
from model_helpers import calibration_folder


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("int8-repository")
    (root / "lite0_int8").mkdir()
    compile_model(zoo.build("efficientnet-lite0", progress=False),
                  root / "lite0_int8" / "lite0_int8.rai", precision="int8",
                  calibration=calibration_folder(tmp_path_factory.mktemp("photos")),
                  input_format="rgbx", mean=(127,) * 3, std=(128,) * 3,
                  resize="crop:0.875")  # fmt: skip
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[InferenceServer]:
    served = start(repository, max_queue_delay_ms=2.0)
    yield served
    served.stop()


def _rows() -> np.ndarray:
    """Chelsea and coffee as RGBx pixels, 224 x 224."""
    out = []
    for photo in (skimage.data.chelsea(), skimage.data.coffee()):
        rgb = np.asarray(Image.fromarray(photo).resize((224, 224), Image.BILINEAR))
        out.append(np.concatenate([rgb, np.zeros((224, 224, 1), np.uint8)], axis=2))
    return np.stack(out)


def test_int8_answers_are_the_runners(server: InferenceServer, repository: Path) -> None:
    rows = _rows()
    (want,) = runner_answers(repository / "lite0_int8" / "lite0_int8.rai", rows)
    client = grpcclient.InferenceServerClient(server.url("grpc"))
    try:
        got = []
        for row in rows:
            x = grpcclient.InferInput("input", [1, 224, 224, 4], "UINT8")
            x.set_data_from_numpy(row[None])
            answer = client.infer("lite0_int8", [x])
            logits = answer.as_numpy("logits")
            assert logits.dtype == np.int8
            got.append(logits[0])
        metadata = client.get_model_metadata("lite0_int8", as_json=True)
        config = client.get_model_config("lite0_int8", as_json=True)["config"]
    finally:
        client.close()
    np.testing.assert_array_equal(np.stack(got), want)
    assert int(want[0].argmax()) in (281, 282, 285) and int(want[1].argmax()) == 967
    assert [t["datatype"] for t in metadata["outputs"]] == ["INT8"]
    model = load_model(repository / "lite0_int8" / "lite0_int8.rai")
    quant = model.outputs[0].quant
    assert quant is not None
    parameters = config["parameters"]
    assert parameters["precision"]["string_value"] == precision_line(model.metadata)
    assert parameters["quantization/logits"]["string_value"] == (
        f"scale={quant.scale!r} zero_point={quant.zero_point}"
    )


def test_the_program_says_what_the_int8_model_costs(repository: Path) -> None:
    ports = []
    for _ in range(3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    args = [f"--{name}=127.0.0.1:{port}" for name, port in zip(("http", "grpc", "metrics"),
                                                               ports, strict=True)]  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "copyless.apps.inference_server", str(repository), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    lines = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = process.stdout.readline()  # type: ignore[union-attr]
            assert line, f"the server ended: {process.stderr.read()}"  # type: ignore[union-attr]
            lines.append(line.strip())
            if lines[-1] == "copyless-serve: ready":
                break
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    model = load_model(repository / "lite0_int8" / "lite0_int8.rai")
    assert f"model 'lite0_int8': {precision_line(model.metadata)}" in lines
