"""The .rai and directory forms: damaged files fail with ModelLoadError naming the defect,
and never with any other exception, whatever the bytes."""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from compiler_support import conv_net
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from copyless.model import compile_model, compile_to_memory, load_model
from copyless.model._archive import HEADER_SIZE, MAGIC
from copyless.types import ModelLoadError


@pytest.fixture(scope="module")
def rai(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("rai") / "m.rai"
    compile_model(conv_net(), out, cpu_ops=("Softmax",))
    return out.read_bytes()


def _write(tmp: Path, data: bytes) -> Path:
    path = tmp / "m.rai"
    path.write_bytes(data)
    return path


def test_rai_layout(rai: bytes, tmp_path: Path) -> None:
    assert rai[:8] == MAGIC
    model = load_model(_write(tmp_path, rai))
    assert [p.name for p in model.partitions] == ["par_0", "par_1"]
    # every blob sits at a 64-byte aligned offset
    man_off, man_size = struct.unpack_from("<QQ", rai, 24)
    manifest = json.loads(rai[man_off : man_off + man_size])
    for part, loaded in zip(manifest["partitions"], model.partitions, strict=True):
        offset = part["blob"]["offset"]
        assert offset % 64 == 0
        assert rai[offset : offset + part["blob"]["size"]] == loaded.onnx_bytes


def test_directory_holding_one_rai_loads(rai: bytes, tmp_path: Path) -> None:
    _write(tmp_path, rai)
    assert load_model(tmp_path, cache_path=str(tmp_path / "unused")).name == "convnet"
    (tmp_path / "second.rai").write_bytes(rai)
    with pytest.raises(ModelLoadError, match=r"2 \.rai files"):
        load_model(tmp_path)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b"", "empty file"),
        (lambda b: b[:40], "truncated: 40 bytes"),
        (lambda b: b[:1000], "truncated: header declares \\d+ bytes, file has 1000"),
        (lambda b: b"NOTARAI\0" + b[8:], "not a copyless .rai"),
        (lambda b: b[:8] + struct.pack("<I", 7) + b[12:], "version 7 is newer"),
        (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], "corrupted header"),
        (lambda b: b[:200] + bytes([b[200] ^ 0xFF]) + b[201:], "blob is corrupted"),
        (lambda b: b[:-5] + bytes([b[-5] ^ 0x20]) + b[-4:], "corrupted manifest"),
        (lambda b: b + b"\0" * 10, "trailing data"),
    ],
)
def test_damaged_rai(rai: bytes, damage, message: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelLoadError, match=message):
        load_model(_write(tmp_path, damage(rai)))


def _reseal(data: bytes, manifest: dict) -> bytes:  # type: ignore[type-arg]
    """Rewrite the manifest with valid checksums, to reach the manifest's own checks."""
    man_off = struct.unpack_from("<Q", data, 24)[0]
    text = json.dumps(manifest).encode()
    total = man_off + len(text)
    head = struct.pack(
        "<8sIIQQQI", MAGIC, 1, HEADER_SIZE, total, man_off, len(text), zlib.crc32(text)
    )
    head += struct.pack("<I", zlib.crc32(head))
    return head.ljust(HEADER_SIZE, b"\0") + data[HEADER_SIZE:man_off] + text


def _manifest(data: bytes) -> dict:  # type: ignore[type-arg]
    man_off, man_size = struct.unpack_from("<QQ", data, 24)
    return json.loads(data[man_off : man_off + man_size])  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(format_version=99), "format version 99 is newer"),
        (lambda m: m.update(format="other"), "not a copyless manifest"),
        (lambda m: m.update(partitions=[]), "no partitions"),
        (lambda m: m["partitions"][0]["blob"].update(size=10**15), "outside the"),
        (lambda m: m["partitions"][0]["blob"].update(offset=65), "misaligned"),
        (lambda m: m["inputs"][0]["cpu"].update(data_type="COMPLEX"), "malformed manifest"),
        (lambda m: m.update(batch_size=0), "malformed manifest"),
        (lambda m: m["partitions"][1].update(inputs=["x"]), "no earlier partition"),
        (lambda m: m["partitions"][0].update(outputs=["features"]), "does not match"),
        (lambda m: m["outputs"][0].update(name="zzz"), "view names differ"),
        (lambda m: m.pop("inputs"), "malformed manifest"),
    ],
)
def test_inconsistent_manifest(rai: bytes, edit, message: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    manifest = _manifest(rai)
    edit(manifest)
    with pytest.raises(ModelLoadError, match=message):
        load_model(_write(tmp_path, _reseal(rai, manifest)))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_byte_damage_gives_model_load_error(
    rai: bytes, tmp_path: Path, data: st.DataObject
) -> None:
    blob = bytearray(rai)
    cut = data.draw(st.integers(0, len(blob)), label="cut")
    for _ in range(data.draw(st.integers(1, 8), label="flips")):
        pos = data.draw(st.integers(0, len(blob) - 1))
        blob[pos] = data.draw(st.integers(0, 255))
    damaged = bytes(blob[:cut]) if data.draw(st.booleans(), label="truncate") else bytes(blob)
    path = _write(tmp_path, damaged)
    if damaged == rai:
        load_model(path)
    else:
        with pytest.raises(ModelLoadError):
            load_model(path)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return compile_model(conv_net(), tmp_path / "compiled", cpu_tail=True)


def test_directory_layout(directory: Path) -> None:
    assert [p.name for p in directory.iterdir()] == ["vaiml_par_0"]
    folder = directory / "vaiml_par_0"
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "par_0.onnx", "par_1.onnx"]
    assert load_model(directory) == compile_to_memory(conv_net(), cpu_tail=True)


def test_damaged_directories(directory: Path, tmp_path: Path) -> None:
    directory = directory / "vaiml_par_0"
    graph = directory / "par_1.onnx"
    good = graph.read_bytes()
    saved = (directory / "manifest.json").read_text()
    graph.write_bytes(good[:100])
    with pytest.raises(ModelLoadError, match="truncated: manifest declares"):
        load_model(directory)
    graph.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(ModelLoadError, match="corrupted"):
        load_model(directory)
    graph.unlink()
    with pytest.raises(ModelLoadError, match=r"cannot read par_1\.onnx"):
        load_model(directory)
    (directory / "manifest.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        load_model(directory)
    (directory / "manifest.json").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty"):
        load_model(directory)
    manifest = json.loads(saved)
    manifest["partitions"][0]["blob"]["path"] = "../../etc/passwd"
    (directory / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="leaves the directory"):
        load_model(directory)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="not a compiled model"):
        load_model(empty)
    with pytest.raises(ModelLoadError, match="no such file"):
        load_model(tmp_path / "missing.rai")
    shutil.rmtree(directory)
