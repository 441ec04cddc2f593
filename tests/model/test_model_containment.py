"""Model directories stay inside (issue 44): a directory someone gave you cannot make the
loader read outside it (external data, symlinks), block (a FIFO) or read unbounded bytes.
Each load runs in a child process (a hang there is a failure, not a stuck suite); every
refusal is one ModelLoadError naming why."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import external_data_helper, numpy_helper

import copyless as cl
from child_helpers import run_in_child
from copyless.model import compile_model, compile_to_memory, load_model
from copyless.model._archive import write_archive
from model_helpers import conv_net

PAR = "vaiml_par_0"


def load_in(cwd: str, path: str) -> list[float]:
    """Child: load and run the model at ``path`` from ``cwd``; the first output's values."""
    os.chdir(cwd)
    # one engine for every child: VAIML measures each model afresh on a session's cache,
    # and onnxruntime and OpenVINO differ in the last digits (5e-6)
    with cl.RunnerFactory.create_runner(path, None, cl.RunnerType.ONNXRUNTIME) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        outs = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        x, ys = runner.allocate_npu_tensor(i), [runner.allocate_npu_tensor(o) for o in outs]
        x.numpy()[...] = 0.5
        assert runner.execute([[x]], [ys]) is cl.StatusCode.SUCCESS
        return [float(v) for v in ys[0].numpy().reshape(-1)]


def _refused(path: Path, cwd: Path | None = None, timeout: float = 60) -> str:
    """The ModelLoadError message of loading ``path`` in a child (fails on anything else)."""
    outcome = run_in_child(load_in, str(cwd or path.parent), str(path), timeout=timeout)
    assert outcome.exitcode == 0, f"child ended {outcome.exitcode}: a signal or a hang"
    assert outcome.error is not None and outcome.error[0] == "ModelLoadError", outcome
    return outcome.error[1]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """conv_net compiled with a CPU tail: par_0.onnx (conv) and par_1.onnx (Gemm)."""
    return compile_model(conv_net(), tmp_path / "model", cpu_tail=True)


def _reseal(folder: Path, name: str, data: bytes | None = None) -> None:
    """Point the manifest's entry for ``name`` at the file's (or ``data``'s) size and crc."""
    manifest = json.loads((folder / "manifest.json").read_text())
    data = (folder / name).read_bytes() if data is None else data
    for part in manifest["partitions"]:
        if part["blob"]["path"] == name:
            part["blob"].update(size=len(data), crc32=zlib.crc32(data))
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _with_external_weights(graph: bytes, location: str) -> tuple[bytes, bytes]:
    """The graph with its Gemm weights moved to external file ``location`` (and its bytes)."""
    model = onnx.ModelProto.FromString(graph)
    (fc,) = [t for t in model.graph.initializer if t.name == "fc"]
    weights = numpy_helper.to_array(fc).tobytes()
    external_data_helper.set_external_data(fc, location=location, offset=0, length=len(weights))
    fc.data_location = onnx.TensorProto.EXTERNAL
    fc.ClearField("raw_data")
    fc.ClearField("float_data")
    return model.SerializeToString(), weights


def test_external_data_is_refused_and_never_read(model_dir: Path, tmp_path: Path) -> None:
    """Before: copyless read secret.bin from the working directory and returned its bytes."""
    folder = model_dir / PAR
    graph, _ = _with_external_weights((folder / "par_1.onnx").read_bytes(), "secret.bin")
    (folder / "par_1.onnx").write_bytes(graph)
    _reseal(folder, "par_1.onnx")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for where in (cwd, folder):
        os.mkfifo(where / "secret.bin")  # opening it would block the child: never opened
    message = _refused(model_dir, cwd)
    assert "par_1: tensor 'fc' points to external data file 'secret.bin'" in message
    assert "refused (not read)" in message
    # The .rai form is checked by the same code.
    model = compile_to_memory(conv_net(), cpu_tail=True)
    parts = list(model.partitions)
    parts[1] = dataclasses.replace(parts[1], onnx_bytes=graph)
    rai = write_archive(dataclasses.replace(model, partitions=tuple(parts)), tmp_path / "m.rai")
    assert "points to external data file 'secret.bin'" in _refused(rai, cwd)


def test_a_model_compiled_from_external_data_is_self_contained(tmp_path: Path) -> None:
    """The right answer: a user's own ONNX with external weights compiles into a directory
    that holds them, which loads wherever it is copied."""
    source = tmp_path / "src"
    source.mkdir()
    onnx.save_model(conv_net(), source / "net.onnx", save_as_external_data=True,
                    location="weights.bin", size_threshold=0)  # fmt: skip
    out = compile_model(source / "net.onnx", tmp_path / "compiled")
    shutil.rmtree(source)
    outcome = run_in_child(load_in, str(tmp_path), str(out))
    assert outcome.exitcode == 0 and outcome.error is None, outcome
    reference = run_in_child(
        load_in, str(tmp_path), str(compile_model(conv_net(), tmp_path / "c2"))
    )
    np.testing.assert_allclose(outcome.value, reference.value, rtol=1e-6)


@pytest.mark.parametrize("what", ["graph", "manifest", "partition dir"])
def test_a_symlink_leaving_the_directory_is_refused(
    model_dir: Path, tmp_path: Path, what: str
) -> None:
    """Before: a partition that is a symlink to a file outside the directory was followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = model_dir / PAR
    target = {"graph": folder / "par_1.onnx", "manifest": folder / "manifest.json",
              "partition dir": folder}[what]  # fmt: skip
    moved = outside / target.name
    target.rename(moved)  # the same bytes: without the check this would load
    target.symlink_to(moved)
    message = _refused(model_dir)
    assert "outside the model directory" in message and str(moved) in message


def test_a_symlink_that_stays_inside_is_followed(model_dir: Path) -> None:
    folder = model_dir / PAR
    (folder / "graphs").mkdir()
    (folder / "par_1.onnx").rename(folder / "graphs" / "par_1.onnx")
    (folder / "par_1.onnx").symlink_to(Path("graphs") / "par_1.onnx")
    assert load_model(model_dir) == compile_to_memory(conv_net(), cpu_tail=True)


def test_a_lone_rai_symlinked_from_outside_is_refused(tmp_path: Path) -> None:
    rai = compile_model(conv_net(), tmp_path / "net.rai")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "net.rai").symlink_to(rai)
    assert "outside the model directory" in _refused(folder)
    link = tmp_path / "named.rai"  # a path the user names is theirs: followed
    link.symlink_to(rai)
    assert load_model(link) == load_model(rai)


@pytest.mark.parametrize("name", ["par_1.onnx", "manifest.json"])
def test_a_fifo_is_refused_at_once(model_dir: Path, name: str) -> None:
    """A FIFO declared as 0 bytes: before, reading it blocked the loader for ever."""
    folder = model_dir / PAR
    (folder / name).unlink()
    os.mkfifo(folder / name)
    if name == "par_1.onnx":
        _reseal(folder, name, b"")
    message = _refused(model_dir, timeout=30)
    assert f"{name} is a FIFO, not a regular file" in message


def test_a_device_file_is_refused(model_dir: Path) -> None:
    folder = model_dir / PAR
    (folder / "par_1.onnx").unlink()
    try:
        os.mknod(folder / "par_1.onnx", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    _reseal(folder, "par_1.onnx", b"")
    assert "par_1.onnx is a character device, not a regular file" in _refused(model_dir)


def test_sizes_are_checked_before_reading(model_dir: Path) -> None:
    folder = model_dir / PAR
    with open(folder / "manifest.json", "r+b") as f:
        f.truncate(65 << 20)  # sparse: nothing to read, so only a size check can refuse it
    assert "manifest.json is 68157440 bytes, more than 67108864 allowed" in _refused(model_dir)
    (folder / "manifest.json").unlink()
    compile_model(conv_net(), model_dir, cpu_tail=True)
    with open(folder / "par_1.onnx", "r+b") as f:
        f.truncate(8 << 30)  # 8 GiB (sparse) where the manifest declares kilobytes
    assert "par_1.onnx is longer than declared" in _refused(model_dir)
