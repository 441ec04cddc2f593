"""Encoded images into an image model's input: JPEG (phone-sized, EXIF-turned, greyscale),
PNG and WebP sent as BYTES through tritonclient's REST and gRPC clients give exactly what the
client gets by decoding with copyless.vision and sending the pixels; bad images are one 400
each and the server goes on."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import skimage.data
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image
from serve_helpers import post
from tritonclient.utils import InferenceServerException

import copyless as cl
from copyless.serve import InferenceServer
from copyless.vision import preparer_for

CLIENTS = {"http": httpclient, "grpc": grpcclient}


def _encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def photos() -> dict[str, bytes]:
    cat, coffee = Image.fromarray(skimage.data.chelsea()), Image.fromarray(skimage.data.coffee())
    turned = cat.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 8  # stored turned: EXIF says rotate back
    return {
        "jpeg": _encode(cat, "JPEG", quality=90),
        "phone-sized jpeg": _encode(coffee.resize((3000, 2400)), "JPEG", quality=85),
        "png": _encode(coffee, "PNG"),
        "webp": _encode(cat, "WEBP", quality=90),
        "greyscale jpeg": _encode(cat.convert("L"), "JPEG"),
        "exif-turned jpeg": _encode(turned, "JPEG", exif=exif),
    }


PHOTOS = photos()


def client_pixels(model: Path, data: bytes) -> np.ndarray:
    """What a client gets by decoding ``data`` with copyless.vision, as the model records."""
    with cl.RunnerFactory.create_runner(model, runner_type=cl.RunnerType.ONNXRUNTIME) as runner:
        (info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        preparer = preparer_for(runner, info)
        tensor = runner.allocate_npu_tensor(info)
        preparer(preparer.decode(data), tensor)
        return tensor.numpy().copy()


def _infer(client: object, given: object) -> np.ndarray:
    result = client.infer("lite0", [given])  # type: ignore[attr-defined]
    response = result.get_response()
    name = response["outputs"][0]["name"] if isinstance(response, dict) \
        else response.outputs[0].name  # fmt: skip
    return result.as_numpy(name)  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("photo", PHOTOS)
def test_encoded_images_answer_as_client_decoding(server: InferenceServer, repository: Path,
                                                  kind: str, photo: str) -> None:  # fmt: skip
    module = CLIENTS[kind]
    client = module.InferenceServerClient(server.url(kind))
    data = PHOTOS[photo]
    pixels = client_pixels(repository / "lite0" / "lite0.rai", data)
    as_pixels = module.InferInput("input", list(pixels.shape), "UINT8")
    as_pixels.set_data_from_numpy(pixels)
    as_bytes = module.InferInput("input", [1], "BYTES")
    as_bytes.set_data_from_numpy(np.array([data], dtype=object))
    np.testing.assert_array_equal(_infer(client, as_bytes), _infer(client, as_pixels))


def test_the_config_names_the_encoded_image_inputs(server: InferenceServer) -> None:
    config = httpclient.InferenceServerClient(server.url("http")).get_model_config("lite0")
    assert config["parameters"]["encoded_image_inputs"]["string_value"] == "input"
    assert "parameters" not in httpclient.InferenceServerClient(
        server.url("http")).get_model_config("conv")


def _bytes_input(module: object, elements: list[bytes], shape: list[int] | None = None) -> object:
    given = module.InferInput("input", shape or [len(elements)], "BYTES")  # type: ignore[attr-defined]
    given.set_data_from_numpy(np.array(elements, dtype=object).reshape(shape or [len(elements)]))
    return given


BAD = {
    "empty": ([b""], None, "image 0 is empty"),
    "not an image": ([b"GIF? no: just text"], None, "image 0"),
    "truncated jpeg": ([PHOTOS["jpeg"][:300]], None, "input 'input'"),
    "two for one row": ([PHOTOS["jpeg"], PHOTOS["png"]], None, "1 <= N <= 1"),
    "a shape of two dims": ([PHOTOS["jpeg"], PHOTOS["png"]], [1, 2], "BYTES [N] or [N, 1]"),
}


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("case", BAD)
def test_bad_images_are_one_400_each(server: InferenceServer, kind: str, case: str) -> None:
    module = CLIENTS[kind]
    client = module.InferenceServerClient(server.url(kind))
    elements, shape, words = BAD[case]
    with pytest.raises(InferenceServerException) as caught:
        client.infer("lite0", [_bytes_input(module, elements, shape)])
    assert words in caught.value.message(), caught.value.message()
    assert str(caught.value.status()) in ("400", "StatusCode.INVALID_ARGUMENT")
    good = module.InferInput("input", [1], "BYTES")
    good.set_data_from_numpy(np.array([PHOTOS["jpeg"]], dtype=object))
    assert client.infer("lite0", [good]) is not None


def test_bytes_where_no_image_is_taken(server: InferenceServer) -> None:
    client = httpclient.InferenceServerClient(server.url("http"))
    given = httpclient.InferInput("input", [1], "BYTES")
    given.set_data_from_numpy(np.array([PHOTOS["jpeg"]], dtype=object))
    with pytest.raises(InferenceServerException, match="preprocessing recorded"):
        client.infer("conv", [given])
    status, body = post(server.url("http"), "/v2/models/lite0/infer",
                        '{"inputs": [{"name": "input", "datatype": "BYTES", "shape": [1], '
                        '"data": ["abc"]}]}')  # fmt: skip
    assert status == 400 and "binary data" in body["error"], body  # type: ignore[index]


def test_a_decompression_bomb_is_refused_from_its_header(repository: Path) -> None:
    from serve_helpers import start

    server = start(repository, max_image_bytes=50 * 1024 * 1024)
    try:
        client = grpcclient.InferenceServerClient(server.url("grpc"))
        huge = _encode(Image.new("L", (10_000, 10_000)), "PNG")  # ~100 KB, 100 megapixels
        with pytest.raises(InferenceServerException, match="10000x10000 image needs"):
            client.infer("lite0", [_bytes_input(grpcclient, [huge])])
    finally:
        server.stop()
