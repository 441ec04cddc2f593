"""The model zoo: real models built from installed packages, checked by running them."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import skimage.data
from PIL import Image

from copyless.model import zoo
from copyless.model.zoo import _catalog as catalog
from copyless.types import UnsupportedError
from copyless.vision import text_quads


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One private cache for the module: each model is built once per run."""
    root = tmp_path_factory.mktemp("zoo-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(zoo.CACHE_ENV, str(root))
        yield root


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _classifier_input(image: np.ndarray, prep: zoo.Preprocessing) -> np.ndarray:
    """Short side to ``prep.resize``, centre crop ``prep.size``, normalise, HWC -> CHW."""
    pil = Image.fromarray(image).convert("RGB")
    scale = prep.resize / min(pil.size)
    pil = pil.resize(
        (round(pil.width * scale), round(pil.height * scale)), Image.Resampling.BILINEAR
    )
    h, w = prep.size
    left, top = (pil.width - w) // 2, (pil.height - h) // 2
    rgb = np.asarray(pil.crop((left, top, left + w, top + h)), dtype=np.float32)
    x = (rgb - np.array(prep.mean, np.float32)) / np.array(prep.std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_names() -> None:
    assert zoo.names() == [
        "centerface",
        "efficientnet-lite0",
        "picodet-layout",
        "ppocr-cls",
        "ppocr-det",
        "ppocr-rec",
        "ppocr-v4-cls",
        "ppocr-v4-det",
        "ppocr-v4-rec",
        "ppocr-v6-cls",
        "ppocr-v6-det",
        "ppocr-v6-rec",
        "resnet50",
    ]


@pytest.mark.slow
def test_efficientnet_lite0_classifies_real_photos() -> None:
    path = zoo.build("efficientnet-lite0", progress=False)
    prep = zoo.preprocessing("efficientnet-lite0")
    batch = np.stack(
        [
            _classifier_input(skimage.data.chelsea(), prep),
            _classifier_input(skimage.data.coffee(), prep),
        ]
    )
    (logits,) = _session(path).run(["logits"], {"input": batch})
    assert logits.shape == (2, 1000)
    probs = _softmax(logits)
    cat, coffee = (int(i) for i in probs.argmax(axis=1))
    assert cat in {281, 282, 285}, zoo.labels()[cat]
    assert coffee == 967, zoo.labels()[coffee]
    assert probs[1, 967] > 0.5  # a confident espresso: the weights and padding are right
    # every cat class together dominates the cat photo
    assert probs[0, [281, 282, 285]].sum() > 0.5


def test_efficientnet_lite0_model_contract() -> None:
    model = onnx.load(str(zoo.build("efficientnet-lite0", progress=False)))
    assert model.ir_version == 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    (inp,), (out,) = model.graph.input, model.graph.output
    assert inp.name == "input" and out.name == "logits"
    dims = [d.dim_value or d.dim_param for d in inp.type.tensor_type.shape.dim]
    assert isinstance(dims[0], str) and dims[1:] == [3, 224, 224]
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    ops = {n.op_type for n in model.graph.node}
    assert "BatchNormalization" not in ops and "Sigmoid" not in ops  # folded BN, no SE/swish
    # TF "SAME" padding of the converted weights: a stride-2 conv pads only bottom/right
    stem = next(n for n in model.graph.node if n.op_type == "Conv")
    pads = next(list(a.ints) for a in stem.attribute if a.name == "pads")
    assert pads == [0, 0, 1, 1]


@pytest.mark.slow
def test_resnet50_is_deterministic_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = zoo.build("resnet50", progress=False)
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    second = zoo.build("resnet50", progress=False)
    assert first != second
    assert first.read_bytes() == second.read_bytes()
    x = np.random.default_rng(1).standard_normal((2, 3, 224, 224), dtype=np.float32)
    (logits,) = _session(second).run(None, {"input": x})
    assert logits.shape == (2, 1000) and logits.dtype == np.float32
    assert np.isfinite(logits).all() and logits.std() > 0
    model = onnx.load(str(second), load_external_data=False)
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(convs) == 53  # 1 stem + 16 blocks x 3 + 4 projection shortcuts


def _detector_input(gray_or_rgb: np.ndarray, prep: zoo.Preprocessing) -> np.ndarray:
    h, w = prep.size
    rgb = Image.fromarray(gray_or_rgb).convert("RGB").resize((w, h), Image.Resampling.BILINEAR)
    x = (np.asarray(rgb, np.float32) - np.array(prep.mean, np.float32)) / np.array(
        prep.std, np.float32
    )
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def test_ppocr_det_finds_text_lines() -> None:
    path = zoo.build("ppocr-det", progress=False)
    prep = zoo.preprocessing("ppocr-det")
    assert prep.size == (640, 640) and prep.size_multiple == 32
    session = _session(path)
    (page,) = session.run(None, {"x": _detector_input(skimage.data.page(), prep)})
    assert page.shape == (1, 1, 640, 640)
    text = page[0, 0] > 0.3
    assert text.mean() > 0.02
    # the printed lines show as separate horizontal bands of text pixels
    rows = text.mean(axis=1) > 0.05
    bands = int(np.count_nonzero(rows[1:] & ~rows[:-1]) + rows[0])
    assert bands >= 5
    blank = np.full((191, 384), 230, dtype=np.uint8)
    (empty,) = session.run(None, {"x": _detector_input(blank, prep)})
    # PP-OCRv6's small detector puts faint blobs (< 0.55) on uniform paper: the DB box
    # score (mean >= 0.5 inside the box) drops them, as it drops v4's rare pixels
    assert len(text_quads(empty[0, 0])[0]) == 0
    assert len(text_quads(page[0, 0])[0]) >= 5


@pytest.mark.parametrize("role", ["det", "rec", "cls"])
def test_ppocr_models_are_the_shipped_ones(role: str) -> None:
    """ppocr-det/rec/cls are the preferred generation's files (v6 where rapidocr 3.x is
    installed, else v4) as shipped; ppocr-v4-* and ppocr-v6-* name a generation."""
    from copyless.model.zoo import _ppocr as ppocr
    from copyless.model.zoo import _sources as sources

    installed = ppocr.installed_generations()
    assert installed and ppocr.preferred_generation() == installed[0]
    for generation in installed:
        gen = ppocr.GENERATIONS[generation]
        shipped = sources.package_file(gen.package, gen.file(role)).read_bytes()
        built = zoo.build(f"ppocr-{generation}-{role}", progress=False).read_bytes()
        if role == "cls":  # the batch dim, stored as the value -1, becomes a symbol
            model, original = onnx.load_from_string(built), onnx.load_from_string(shipped)
            assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
            assert list(model.graph.node) == list(original.graph.node)
        else:
            assert built == shipped
        if generation == installed[0]:
            assert zoo.build(f"ppocr-{role}", progress=False).read_bytes() == built
            assert zoo.entry(f"ppocr-{role}").source == gen.package


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], list[int]]:
    """Wrap a catalog entry's builder so the test can count real builds."""

    def wrap(name: str) -> list[int]:
        calls: list[int] = []
        entry = catalog.ENTRIES[name]

        def builder(tick: Callable[[int], None]) -> Any:
            calls.append(1)
            return entry.builder(tick)

        monkeypatch.setitem(catalog.ENTRIES, name, dataclasses.replace(entry, builder=builder))
        return calls

    return wrap


def test_cache_hit_is_fast_and_does_not_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counting: Callable[[str], list[int]]
) -> None:
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    calls = counting("efficientnet-lite0")
    path = zoo.build("efficientnet-lite0", progress=False)
    assert path.parent == tmp_path / "zoo" and calls == [1]
    stamp = path.stat().st_mtime_ns
    start = time.perf_counter()
    again = zoo.build("efficientnet-lite0", progress=False)
    elapsed = time.perf_counter() - start
    assert again == path and calls == [1] and path.stat().st_mtime_ns == stamp
    assert elapsed < 0.05


def test_cache_key_changes_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counting: Callable[[str], list[int]]
) -> None:
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    calls = counting("ppocr-det")
    old = zoo.build("ppocr-det", progress=False)
    version = zoo.package_version(zoo.entry("ppocr-det").source)
    assert f"src{version}" in old.name and f"-b{catalog.BUILDER_VERSION}" in old.name
    monkeypatch.setattr(catalog, "BUILDER_VERSION", catalog.BUILDER_VERSION + 1)
    new = zoo.build("ppocr-det", progress=False)
    assert new != old and calls == [1, 1]
    assert old.is_file() and new.read_bytes() == old.read_bytes()
    monkeypatch.setattr(zoo, "package_version", lambda _source: "9.9.9")
    newest = zoo.build("ppocr-det", progress=False)
    assert "src9.9.9" in newest.name and calls == [1, 1, 1]


def test_failed_build_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    entry = catalog.ENTRIES["ppocr-det"]

    def crash(tick: Callable[[int], None]) -> bytes:
        tick(1)
        raise RuntimeError("builder crashed")

    monkeypatch.setitem(catalog.ENTRIES, "ppocr-det", dataclasses.replace(entry, builder=crash))
    with pytest.raises(RuntimeError, match="crashed"):
        zoo.build("ppocr-det", progress=False)
    leftovers = [p.name for p in (tmp_path / "zoo").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
    assert not zoo.cache_path("ppocr-det").exists()


def test_concurrent_builds_build_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counting: Callable[[str], list[int]]
) -> None:
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path))
    calls = counting("ppocr-det")
    paths: list[Path] = []
    threads = [
        threading.Thread(target=lambda: paths.append(zoo.build("ppocr-det", progress=False)))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and len(set(paths)) == 1 and len(paths) == 4


def test_progress_bar_goes_to_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path / "a"))
    zoo.build("ppocr-det", progress=True)
    shown = capsys.readouterr()
    assert "building ppocr-det" in shown.err and shown.out == ""
    monkeypatch.setenv(zoo.CACHE_ENV, str(tmp_path / "b"))
    zoo.build("ppocr-det", progress=False)
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == ""


def test_unknown_name_raises() -> None:
    with pytest.raises(UnsupportedError, match="efficientnet-lite0"):
        zoo.build("mobilenet-v9")
    with pytest.raises(UnsupportedError):
        zoo.preprocessing("mobilenet-v9")


def test_preprocessing_scale_offset_match_mean_std() -> None:
    for name in zoo.names():
        prep = zoo.preprocessing(name)
        pixel = np.array([0.0, 128.0, 255.0], np.float64)
        for c in range(3):
            folded = pixel * prep.scale[c] + prep.offset[c]
            np.testing.assert_allclose(folded, (pixel - prep.mean[c]) / prep.std[c], rtol=1e-12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prep.resize = 1  # type: ignore[misc]
