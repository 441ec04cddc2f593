"""A model file deleted, truncated or rewritten while it loads or after a runner was built.

The loader memory-maps the ``.rai``, copies the graphs out and unmaps it: a runner never
touches its file again, and a file cut short during a load is a ModelLoadError, not SIGBUS
(every read of the map is guarded, see ``copyless/model/_mapped.c``; an earlier unguarded
map killed the process). The truncation cases run in a child process so a signal is a
failure.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
from reliability_helpers import WORKER, truncation_race

import copyless as cl
from copyless.model import compile_model

HELPERS = str(WORKER.parent)


def _run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=HELPERS,
    )


def _execute(runner: cl.Runner, x: np.ndarray) -> np.ndarray:
    (in_info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.CPU)
    (out_info,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.CPU)
    out = np.zeros(out_info.shape, np.float32)
    host = cl.MemoryType.USER_POINTER_NON_CMA
    status = runner.execute(
        [[cl.NpuTensor(in_info, x, host)]], [[cl.NpuTensor(out_info, out, host)]]
    )
    assert status is cl.StatusCode.SUCCESS
    return out


def _expected(net: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(net.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"input": x})[0])


def test_rai_deleted_after_create_runner_still_executes(
    net: onnx.ModelProto, tmp_path: Path
) -> None:
    path = compile_model(net, tmp_path / "m.rai")
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    with cl.RunnerFactory.create_runner(path) as runner:
        path.unlink()
        np.testing.assert_allclose(_execute(runner, x), _expected(net, x), rtol=1e-5, atol=1e-5)


def test_par_directory_deleted_after_create_runner_still_executes(
    net: onnx.ModelProto, tmp_path: Path
) -> None:
    root = compile_model(net, tmp_path / "compiled")
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    with cl.RunnerFactory.create_runner(root) as runner:
        shutil.rmtree(root)
        np.testing.assert_allclose(_execute(runner, x), _expected(net, x), rtol=1e-5, atol=1e-5)


def test_rai_truncated_after_create_runner_no_sigbus(tmp_path: Path) -> None:
    result = _run_child(f"""
        import numpy as np, os
        import copyless as cl
        from reliability_helpers import small_net
        from copyless.model import compile_model
        path = compile_model(small_net(), {str(tmp_path / "m.rai")!r})
        runner = cl.RunnerFactory.create_runner(path)
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        x, y = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)
        x.numpy()[...] = 1.0
        assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
        before = y.numpy().copy()
        for size in (100, 0):
            os.truncate(path, size)
            y.numpy()[...] = 0
            assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
            assert (y.numpy() == before).all()
        runner.close()
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_rai_truncated_and_rewritten_while_loading_no_sigbus(tmp_path: Path) -> None:
    """A writer thread keeps cutting the file short and writing it back while the main
    thread loads it: every load is a CompiledModel or ModelLoadError; the child survives.
    A 4 MB graph keeps the checksum loop long enough to race."""
    w = onh.from_array(np.ones((1000, 1000), np.float32), "w")
    g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"])], "big",
                      [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1000])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1000])],
                      [w])  # fmt: skip
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 10
    path = compile_model(m, tmp_path / "big.rai")
    loaded, rejected, result = truncation_race(path, 2.0, cut=100)
    assert result.returncode == 0, f"child died ({result.returncode}): {result.stderr[-3000:]}"
    assert loaded + rejected > 0 and rejected > 0


def test_rai_cut_short_between_checks_is_a_load_error(tmp_path: Path) -> None:
    """Deterministic form of the race: the file is truncated right after the loader's
    first checksum (the header), before it reads the manifest. Regression: with an unguarded
    map the next read of it killed the process with SIGBUS."""
    result = _run_child(f"""
        import os, zlib
        from reliability_helpers import small_net
        from copyless.model import compile_model, load_model
        from copyless.types import ModelLoadError
        path = compile_model(small_net(), {str(tmp_path / "m.rai")!r})
        real = zlib.crc32
        def cut_then_crc(data, *args):
            zlib.crc32 = real
            os.truncate(path, 0)  # every page of a map beyond EOF now
            return real(data, *args)
        zlib.crc32 = cut_then_crc
        try:
            load_model(path)
        except ModelLoadError as exc:
            print("rejected:", exc)
    """)
    assert result.returncode == 0, f"child died ({result.returncode}): {result.stderr[-3000:]}"
    assert result.stdout.startswith("rejected:") and "changed while loading" in result.stdout
