"""Users' own models served, every row of docs/guides/your-model.md's table (torchvision's
SSDLite and Faster R-CNN exported [3, H, W], a batch dimension added at compile time; the
YOLOs with decoding and NMS folded in; the segmenters with their argmax folded in; the
classifiers): metadata and config agree with the requests that work,
and the answers are the Runner's. A model compiled before the batch dimension was added
(its input ``[3, H, W]``) is refused at load in one line, never READY yet unusable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from serve_helpers import start

import copyless as cl
from copyless.model import compile_model
from copyless.serve import InferenceServer
from user_models import MODELS as USER_MODELS
from user_models import export

pytestmark = pytest.mark.slow
pytest.importorskip("torch")

_PIXELS = ((0.0, 0.0, 0.0), (255.0, 255.0, 255.0))
_IMAGENET = ((123.7, 116.3, 103.5), (58.4, 57.1, 57.4))
#: served name -> (user model, mean, std): every row of docs/guides/your-model.md's table
MODELS = {
    name.split("_")[0]: (name, *(_PIXELS if spec.task == "detect" else _IMAGENET))
    for name, spec in USER_MODELS.items()
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferenceServer]:
    root = tmp_path_factory.mktemp("user-repository")
    for name, (source, mean, std) in MODELS.items():
        (root / name).mkdir()
        compile_model(export(source), root / name / f"{name}.rai", input_format="rgbx",
                      mean=mean, std=std, task=USER_MODELS[source].task)  # fmt: skip
    served = start(root)
    yield served
    served.stop()


def _runner_outputs(path: Path, frame: np.ndarray) -> dict[str, np.ndarray]:
    with cl.RunnerFactory.create_runner(path, runner_type=cl.RunnerType.ONNXRUNTIME) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        outs = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        x = runner.allocate_npu_tensor(i)
        x.numpy()[...] = frame
        ys = [runner.allocate_npu_tensor(o) for o in outs]
        assert runner.execute([[x]], [ys]) is cl.StatusCode.SUCCESS
        found = {}
        for info, y in zip(outs, ys, strict=True):
            shape = y.produced_shape or info.shape
            found[info.name] = y.numpy().reshape(-1)[: int(np.prod(shape))].reshape(shape)
        return found


@pytest.mark.parametrize("name", list(MODELS))
def test_metadata_config_and_requests_agree(server: InferenceServer, name: str) -> None:
    client = httpclient.InferenceServerClient(server.url("http"))
    assert client.is_model_ready(name)
    meta, config = client.get_model_metadata(name), client.get_model_config(name)
    (given,) = meta["inputs"]
    (conf,) = config["input"]
    batch = int(config["max_batch_size"])
    assert batch == 1 and given["shape"] == [-1, *conf["dims"]] and given["datatype"] == "UINT8"
    for out, declared in zip(meta["outputs"], config["output"], strict=True):
        assert out["name"] == declared["name"]
        dims = declared["dims"]
        assert out["shape"] == ([-1, *dims] if batch and -1 not in dims else dims)
        if USER_MODELS[MODELS[name][0]].task == "detect" and out["name"] == "boxes":
            assert dims == [-1, 4]  # the detections' count is the data's: -1 in both
    frame = np.random.default_rng(3).integers(0, 256, (1, *conf["dims"]), dtype=np.uint8)
    request = httpclient.InferInput(given["name"], list(frame.shape), "UINT8")
    request.set_data_from_numpy(frame, binary_data=True)
    answer = client.infer(name, [request])
    path = next(m.path for m in server.service.repository if m.name == name)
    for out_name, want in _runner_outputs(path, frame).items():
        got = answer.as_numpy(out_name)
        assert got is not None and got.size == want.size, (out_name, got, want.shape)
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)


def test_a_model_without_batch_dimension_is_refused_at_load(tmp_path: Path) -> None:
    """What copyless compiled before the record: the [3, H, W] input kept (input_shapes
    given, so no dimension is added)."""
    (tmp_path / "old").mkdir()
    compile_model(export("ssdlite320_mobilenet_v3_large"), tmp_path / "old" / "old.rai",
                  input_shapes={"images": (3, 320, 320)})  # fmt: skip
    served = start_unready(tmp_path)
    try:
        (row,) = served.service.index()  # the repository's row for the failed version
        assert row["state"] == "UNAVAILABLE"
        assert "no batch dimension" in row["reason"] and "\n" not in row["reason"]
    finally:
        served.stop()


def start_unready(root: Path) -> InferenceServer:
    from copyless.serve import Address, ServeSettings

    loopback = Address("127.0.0.1", 0)
    server = InferenceServer(root, http=loopback, grpc_address=loopback, metrics=loopback,
                             settings=ServeSettings(runner_type=cl.RunnerType.ONNXRUNTIME))
    server.start()
    server.wait_ready(60)
    return server
