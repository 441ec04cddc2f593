"""The OCR chain served as one model (a repository entry whose config.pbtxt says backend
"copyless-ocr"): an encoded page in, its lines out (text, quadrilaterals, scores), equal to
copyless.ocr.OcrPipeline's on the same page, through tritonclient's REST and gRPC clients;
a page that is no image is one 400 and the chain goes on."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image
from serve_helpers import start
from tritonclient.utils import InferenceServerException

from copyless.ocr import OcrPipeline, draw_page
from copyless.serve import InferenceServer

CONFIG = 'backend: "copyless-ocr"\nparameters { key: "angle" value { string_value: "true" } }\n'


@pytest.fixture(scope="module")
def ocr_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferenceServer]:
    root = tmp_path_factory.mktemp("chain")
    (root / "ocr").mkdir()
    (root / "ocr" / "config.pbtxt").write_text(CONFIG)
    served = start(root)
    yield served
    served.stop()


def _page(seed: int) -> tuple[bytes, tuple[str, ...]]:
    drawn = draw_page(seed, size=(900, 1200), lines=6)
    out = io.BytesIO()
    Image.fromarray(drawn.image).save(out, "PNG")
    return out.getvalue(), drawn.lines


@pytest.mark.parametrize("kind", ["http", "grpc"])
def test_a_page_in_its_lines_out(ocr_server: InferenceServer, kind: str) -> None:
    module = {"http": httpclient, "grpc": grpcclient}[kind]
    client = module.InferenceServerClient(ocr_server.url(kind))
    data, drawn = _page(3)
    given = module.InferInput("page", [1], "BYTES")
    given.set_data_from_numpy(np.array([data], dtype=object))
    result = client.infer("ocr", [given])
    texts = [t.decode() for t in result.as_numpy("text")]
    boxes, scores = result.as_numpy("boxes"), result.as_numpy("scores")
    with OcrPipeline() as ocr:
        expected = ocr.read(data)
    assert texts == [line.text for line in expected.lines]
    np.testing.assert_allclose(boxes, np.array([line.quad for line in expected.lines]),
                               atol=1e-3)  # fmt: skip
    np.testing.assert_allclose(scores, [line.score for line in expected.lines], rtol=1e-5)
    assert sum(text in texts for text in drawn) >= len(drawn) - 1  # it reads the page
    meta = client.get_model_metadata("ocr")
    if kind == "http":
        assert [t["name"] for t in meta["outputs"]] == ["text", "boxes", "scores"]


def test_a_bad_page_is_one_400(ocr_server: InferenceServer) -> None:
    client = grpcclient.InferenceServerClient(ocr_server.url("grpc"))
    bad = grpcclient.InferInput("page", [1], "BYTES")
    bad.set_data_from_numpy(np.array([b"not a page"], dtype=object))
    with pytest.raises(InferenceServerException, match="input 'page'"):
        client.infer("ocr", [bad])
    wrong = grpcclient.InferInput("pixels", [1], "BYTES")
    wrong.set_data_from_numpy(np.array([_page(1)[0]], dtype=object))
    with pytest.raises(InferenceServerException, match="takes one input, 'page'"):
        client.infer("ocr", [wrong])
    good = grpcclient.InferInput("page", [1], "BYTES")
    good.set_data_from_numpy(np.array([_page(1)[0]], dtype=object))
    assert len(client.infer("ocr", [good]).as_numpy("text")) > 0


def test_an_unknown_backend_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.pbtxt").write_text('backend: "tensorrt"\n')
    from copyless.serve import Address, ServeSettings

    server = InferenceServer(tmp_path, http=Address("127.0.0.1", 0), grpc_address=None,
                             metrics=None, settings=ServeSettings())  # fmt: skip
    server.start()
    try:
        server.wait_ready(30)
        (row,) = server.service.index()
        assert row["state"] == "UNAVAILABLE" and "'tensorrt'" in row["reason"], row
    finally:
        server.stop()
