"""The torch-free checkpoint reader, on the real EfficientNet-Lite0 .pth and on crafted files."""

from __future__ import annotations

import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from copyless.model.zoo._checkpoint import load_state_dict
from copyless.model.zoo._efficientnet import checkpoint_path
from copyless.types import ModelLoadError

_MAGIC = 0x1950A86A20F9469CFC6C


def _str(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)


def _ints(values: tuple[int, ...]) -> bytes:
    return b"(" + b"".join(_int(v) for v in values) + b"t"


def _state_pickle(
    tensors: dict[str, tuple[str, int, int, tuple[int, ...], tuple[int, ...]]],
) -> bytes:
    """A protocol-2 state-dict pickle as torch writes it, emitted opcode by opcode.

    ``tensors``: name -> (storage key, storage numel, offset, shape, stride), float32 storages.
    """
    ordered_dict = b"ccollections\nOrderedDict\n)R"
    out = b"\x80\x02" + ordered_dict + b"("
    for name, (key, numel, offset, shape, stride) in tensors.items():
        storage = b"(" + _str("storage") + b"ctorch\nFloatStorage\n" + _str(key) + _str("cpu")
        storage += _int(numel) + b"NtQ"
        out += _str(name) + b"ctorch._utils\n_rebuild_tensor_v2\n("
        out += storage + _int(offset) + _ints(shape) + _ints(stride) + b"\x89" + ordered_dict
        out += b"tR"
    return out + b"u."


def _write_legacy(path: Path, state: bytes, storages: dict[str, np.ndarray]) -> None:
    with path.open("wb") as f:
        f.write(pickle.dumps(_MAGIC, protocol=2))
        f.write(pickle.dumps(1001, protocol=2))
        f.write(pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2))
        f.write(state)
        f.write(pickle.dumps(list(storages), protocol=2))
        for data in storages.values():
            f.write(struct.pack("<q", data.size) + data.astype("<f4").tobytes())


def _write_zip(path: Path, state: bytes, storages: dict[str, np.ndarray]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", state)
        for key, data in storages.items():
            z.writestr(f"archive/data/{key}", data.astype("<f4").tobytes())


@pytest.fixture(scope="module")
def real_state() -> dict[str, np.ndarray]:
    return load_state_dict(checkpoint_path())


def test_real_checkpoint(real_state: dict[str, np.ndarray]) -> None:
    assert len(real_state) == 296
    assert real_state["_conv_stem.weight"].shape == (32, 3, 3, 3)
    assert real_state["_fc.weight"].shape == (1000, 1280)
    assert real_state["_blocks.15._depthwise_conv.weight"].shape == (1152, 1, 3, 3)
    assert real_state["_bn0.num_batches_tracked"].dtype == np.int64
    for name, array in real_state.items():
        assert array.flags.c_contiguous and array.flags.owndata and array.flags.writeable
        if name.endswith("running_var"):
            assert (array >= 0).all(), name  # zero for channels dead in training
        if array.dtype == np.float32:
            assert np.isfinite(array).all(), name
    # trained weights, not zeros or a constant
    assert real_state["_fc.weight"].std() > 0.01


def test_real_checkpoint_truncated_raises(tmp_path: Path) -> None:
    raw = checkpoint_path().read_bytes()
    for cut in (len(raw) - 1, len(raw) // 2, 40):
        bad = tmp_path / f"cut{cut}.pth"
        bad.write_bytes(raw[:cut])
        with pytest.raises(ModelLoadError):
            load_state_dict(bad)


@pytest.mark.parametrize("writer", [_write_legacy, _write_zip], ids=["legacy", "zip"])
def test_views_offsets_and_strides(tmp_path: Path, writer: object) -> None:
    base = np.arange(24, dtype=np.float32) * 0.5 - 3
    other = np.linspace(-1, 1, 6, dtype=np.float32)
    state = _state_pickle(
        {
            "whole": ("0", 24, 0, (2, 3, 4), (12, 4, 1)),
            "transposed": ("0", 24, 0, (4, 6), (1, 4)),  # a .t() view of a [6,4] tensor
            "tail": ("0", 24, 10, (2, 5), (5, 1)),
            "other": ("7", 6, 0, (6,), (1,)),
            "scalar": ("7", 6, 5, (), ()),
        }
    )
    path = tmp_path / "state.pth"
    writer(path, state, {"0": base, "7": other})  # type: ignore[operator]
    got = load_state_dict(path)
    np.testing.assert_array_equal(got["whole"], base.reshape(2, 3, 4))
    np.testing.assert_array_equal(got["transposed"], base.reshape(6, 4).T)
    np.testing.assert_array_equal(got["tail"], base[10:20].reshape(2, 5))
    np.testing.assert_array_equal(got["other"], other)
    assert got["scalar"].shape == () and got["scalar"] == other[5]
    got["whole"][0, 0, 0] = 99  # owned copies: no aliasing between tensors of one storage
    assert got["transposed"][0, 0] == base[0]


def test_out_of_bounds_view_raises(tmp_path: Path) -> None:
    path = tmp_path / "oob.pth"
    state = _state_pickle({"w": ("0", 4, 2, (4,), (1,))})
    _write_legacy(path, state, {"0": np.zeros(4, np.float32)})
    with pytest.raises(ModelLoadError, match="outside"):
        load_state_dict(path)


def test_hostile_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = b"\x80\x02cos\nsystem\n" + _str(f"touch {marker}") + b"\x85R."
    path = tmp_path / "evil.pth"
    path.write_bytes(
        pickle.dumps(_MAGIC, protocol=2) + pickle.dumps(1001, protocol=2) + pickle.dumps({}) + evil
    )
    with pytest.raises(ModelLoadError, match=r"os\.system"):
        load_state_dict(path)
    zipped = tmp_path / "evil_zip.pth"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("archive/data.pkl", evil)
    with pytest.raises(ModelLoadError, match="not allowed"):
        load_state_dict(zipped)
    assert not marker.exists()


def test_not_a_checkpoint(tmp_path: Path) -> None:
    for content in (b"", b"hello world", pickle.dumps(12345)):
        path = tmp_path / "junk.pth"
        path.write_bytes(content)
        with pytest.raises(ModelLoadError):
            load_state_dict(path)
    with pytest.raises(ModelLoadError):
        load_state_dict(tmp_path / "missing.pth")


@pytest.mark.parametrize(
    ("shape", "stride"),
    [((2, 2), (2,)), ((-1,), (1,)), ((3,), (-1,))],
    ids=["rank-mismatch", "negative-size", "negative-stride"],
)
def test_malformed_views_raise(
    tmp_path: Path, shape: tuple[int, ...], stride: tuple[int, ...]
) -> None:
    path = tmp_path / "bad.pth"
    _write_zip(
        path, _state_pickle({"w": ("0", 4, 0, shape, stride)}), {"0": np.zeros(4, np.float32)}
    )
    with pytest.raises(ModelLoadError):
        load_state_dict(path)


def test_huge_storage_header_raises_without_allocating(tmp_path: Path) -> None:
    path = tmp_path / "huge.pth"
    _write_legacy(
        path, _state_pickle({"w": ("0", 4, 0, (4,), (1,))}), {"0": np.zeros(4, np.float32)}
    )
    raw = bytearray(path.read_bytes())
    header = len(raw) - 16 - 8  # the int64 element count before the 16 data bytes
    for numel in (1 << 60, -5):
        raw[header : header + 8] = struct.pack("<q", numel)
        path.write_bytes(raw)
        with pytest.raises(ModelLoadError, match="truncated"):
            load_state_dict(path)
