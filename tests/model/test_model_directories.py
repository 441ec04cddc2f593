"""Where a compiled model lives: ``vaiml_par_0`` directories (self-contained, copied alone,
renamed ``par_0``, the older layout) and ``.rai`` files read through a memory map that never
dies of SIGBUS."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
from compiler_support import conv_net

import copyless as cl
from copyless.model import _mapped, compile_model, compile_to_memory, load_model
from copyless.types import ModelLoadError


@pytest.fixture(scope="module")
def compiled_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-partition model (npu + cpu tail) in the directory form."""
    return compile_model(conv_net(), tmp_path_factory.mktemp("dir") / "net", cpu_tail=True)


def _outputs(model_path: Path, x: np.ndarray) -> list[np.ndarray]:
    # onnxruntime for every form compared bit for bit: VAIML's choice is per model digest
    # and may be measured again (the old manifest's digest differs), picking OpenVINO
    with cl.RunnerFactory.create_runner(model_path, None, cl.RunnerType.ONNXRUNTIME) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        outs = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        a, bs = runner.allocate_npu_tensor(i), [runner.allocate_npu_tensor(o) for o in outs]
        a.numpy()[...] = x
        assert runner.execute([[a]], [bs]) is cl.StatusCode.SUCCESS
        return [b.numpy().copy() for b in bs]


def test_writes_vaiml_par_0_and_reads_it_from_the_parent_or_itself(compiled_dir: Path) -> None:
    expected = compile_to_memory(conv_net(), cpu_tail=True)
    assert (compiled_dir / "vaiml_par_0" / "manifest.json").is_file()
    assert load_model(compiled_dir) == expected
    assert load_model(compiled_dir / "vaiml_par_0") == expected


@pytest.mark.parametrize("name", ["vaiml_par_0", "par_0"])
def test_a_partition_directory_copied_alone_loads_and_runs(
    compiled_dir: Path, tmp_path: Path, name: str
) -> None:
    elsewhere = tmp_path / "deployed"
    shutil.copytree(compiled_dir / "vaiml_par_0", elsewhere / name)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    for got, want in zip(_outputs(elsewhere, x), _outputs(compiled_dir, x), strict=True):
        np.testing.assert_array_equal(got, want)
    assert load_model(elsewhere / name) == load_model(compiled_dir)


def test_the_older_layout_still_loads(compiled_dir: Path, tmp_path: Path) -> None:
    """copyless < 0.2 wrote ``OUT/manifest.json`` beside ``OUT/par_N/model.onnx``."""
    old = tmp_path / "old"
    manifest = json.loads((compiled_dir / "vaiml_par_0" / "manifest.json").read_text())
    for part in manifest["partitions"]:
        data = (compiled_dir / "vaiml_par_0" / f"{part['name']}.onnx").read_bytes()
        (old / part["name"]).mkdir(parents=True)
        (old / part["name"] / "model.onnx").write_bytes(data)
        part["blob"] = {"path": f"{part['name']}/model.onnx", "size": len(data),
                        "crc32": zlib.crc32(data)}  # fmt: skip
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert load_model(old) == load_model(compiled_dir)
    # Its par_0 alone has no manifest: the error says why.
    shutil.copytree(old / "par_0", tmp_path / "alone" / "par_0")
    with pytest.raises(ModelLoadError, match=r"par_0 has no manifest\.json.*whole compiled"):
        load_model(tmp_path / "alone")


def test_rewriting_an_older_layout_leaves_one_model(compiled_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "net"
    root.mkdir()
    (root / "manifest.json").write_text("{}")  # an older manifest at the top
    compile_model(conv_net(), root, cpu_tail=True)
    assert not (root / "manifest.json").exists()
    assert load_model(root) == load_model(compiled_dir)


def test_two_partition_directories_are_ambiguous(compiled_dir: Path, tmp_path: Path) -> None:
    both = tmp_path / "both"
    shutil.copytree(compiled_dir / "vaiml_par_0", both / "vaiml_par_0")
    shutil.copytree(compiled_dir / "vaiml_par_0", both / "par_0")
    with pytest.raises(ModelLoadError, match="both vaiml_par_0 and par_0"):
        load_model(both)


def test_rai_is_memory_mapped_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader maps the file (it shows in /proc/self/maps while the blobs are copied out)
    and never reads it with pread/read; the map is gone when load_model returns."""
    path = compile_model(conv_net(), tmp_path / "m.rai")
    seen: list[bool] = []
    real_copy = _mapped.copy

    def spy(buffer: mmap.mmap, offset: int, length: int) -> bytes:
        seen.append(str(path) in Path("/proc/self/maps").read_text())
        return real_copy(buffer, offset, length)

    def refuse(*args: object) -> bytes:
        raise AssertionError("the .rai was read, not mapped")

    monkeypatch.setattr(_mapped, "copy", spy)
    monkeypatch.setattr(os, "pread", refuse)
    model = load_model(path)
    assert seen and all(seen)
    assert str(path) not in Path("/proc/self/maps").read_text()
    assert model == compile_to_memory(conv_net())


def test_a_truncated_map_raises_instead_of_sigbus(tmp_path: Path) -> None:
    """Touching a mapped page past a truncated file's end is SIGBUS; the guarded reads give
    OSError, and a SIGBUS elsewhere still reaches the previous handler (faulthandler)."""
    code = f"""
        import faulthandler, mmap, os
        faulthandler.enable()
        from copyless.model import _mapped
        path = {str(tmp_path / "f.bin")!r}
        with open(path, "wb") as f:
            f.write(b"\\1" * 65536)
        with open(path, "rb") as f:
            view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        assert _mapped.copy(view, 0, 8) == b"\\1" * 8 and not _mapped.is_zero(view, 0, 8)
        os.truncate(path, 0)
        for read in (_mapped.copy, _mapped.is_zero):
            try:
                read(view, 8192, 16)
            except OSError as exc:
                print("guarded:", exc, flush=True)
        view[8192]  # unguarded: the process must still die of SIGBUS, via faulthandler
        print("survived an unguarded SIGBUS")
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.count("guarded: bus error") == 2, result
    assert result.returncode == -7 and "Bus error" in result.stderr, result  # SIGBUS
    assert "survived" not in result.stdout


def test_the_model_records_no_private_module_and_older_records_still_load(
    compiled_dir: Path, tmp_path: Path
) -> None:
    """The metadata names the public compiler (``copyless.compile_model/<version>``); a model
    written when it named the private module ``copyless.model._compiler`` loads and runs."""
    recorded = load_model(compiled_dir).metadata["compiler"]
    assert recorded.startswith("copyless.compile_model/")
    assert not any(part.startswith("_") for part in recorded.split("/")[0].split("."))
    old = tmp_path / "old"
    shutil.copytree(compiled_dir, old)
    manifest_path = old / "vaiml_par_0" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    text = json.dumps(manifest)
    assert recorded in text
    manifest_path.write_text(text.replace(recorded, "copyless.model._compiler/5"))
    assert load_model(old).metadata["compiler"] == "copyless.model._compiler/5"
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    for got, want in zip(_outputs(old, x), _outputs(compiled_dir, x), strict=True):
        np.testing.assert_array_equal(got, want)
