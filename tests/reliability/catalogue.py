"""The bad-input catalogue as data: files, options, tensors and call orders a user can get
wrong, each with the answer copyless must give (a status or a clear error, never a crash).

Run by ``python benchmarks/bad_inputs.py`` (a table for people) and
``test_bad_input_catalogue.py``.
Each case is ``Case(area, what, expected, run)``: ``run(kit)`` returns a StatusCode or
raises; ``expected`` is a StatusCode or an exception type.
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import copyless as cl
from copyless.model import _mapped, compile_model

S = cl.StatusCode
HW, CPU = cl.TensorType.HW, cl.TensorType.CPU
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
HOST = cl.MemoryType.USER_POINTER_NON_CMA


@dataclass(frozen=True)
class Case:
    area: str
    what: str
    expected: S | type[BaseException]
    run: Callable[[Kit], Any]


@dataclass(frozen=True)
class Outcome:
    case: Case
    got: str  # "StatusCode.X" or "ErrorType: message"
    ok: bool


class Kit:
    """What the cases share: a scratch folder, the small model (a .rai and a directory), an
    open runner with a tensor pair."""

    def __init__(self, scratch: Path, net: Any) -> None:
        self.scratch = scratch
        self.rai = compile_model(net, scratch / "good.rai")
        self.folder = compile_model(net, scratch / "good-dir")
        options = {"max_concurrent_runs": 2, "warm_up": True}
        self.runner = cl.RunnerFactory.create_runner(self.rai, options)
        self.x, self.y = self.pair()

    def pair(self, view: cl.TensorType = HW) -> tuple[cl.NpuTensor, cl.NpuTensor]:
        (i,), (o,) = self.runner.get_tensors_info(IN, view), self.runner.get_tensors_info(OUT, view)
        return self.runner.allocate_npu_tensor(i), self.runner.allocate_npu_tensor(o)

    def file(self, name: str, data: bytes) -> Path:
        path = self.scratch / name
        path.write_bytes(data)
        return path

    def load(self, path: Path | str, options: dict[str, Any] | None = None) -> S:
        cl.RunnerFactory.create_runner(path, options).close()
        return S.SUCCESS

    def options(self, options: Any, runner_type: Any = cl.RunnerType.ONNXRUNTIME) -> S:
        cl.RunnerFactory.create_runner(self.rai, options, runner_type).close()
        return S.SUCCESS

    def close(self) -> None:
        self.runner.close()


def run_case(kit: Kit, case: Case) -> Outcome:
    try:
        result = case.run(kit)
    except BaseException as exc:  # noqa: BLE001 - the point: classify whatever comes
        got = f"{type(exc).__name__}: {exc}"
        clear = isinstance(exc, (cl.CopylessError, ValueError, TypeError)) and bool(str(exc))
        expected = isinstance(case.expected, type) and isinstance(exc, case.expected)
        return Outcome(case, got, clear and expected)
    return Outcome(case, str(result), result is case.expected)


# -- files ---------------------------------------------------------------------------------
def _flip_graph_bit(kit: Kit) -> S:
    data = bytearray(kit.rai.read_bytes())
    data[200] ^= 0x10
    return kit.load(kit.file("flipped.rai", bytes(data)))


def _dir_with(kit: Kit, name: str, edit: Callable[[Path], None]) -> Path:
    root = kit.scratch / name
    shutil.copytree(kit.folder, root)
    edit(root / "vaiml_par_0")
    return root


def _manifest_edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        manifest = json.loads((folder / "manifest.json").read_text())
        change(manifest)
        (folder / "manifest.json").write_text(json.dumps(manifest))

    return edit


def _escape(manifest: dict[str, Any]) -> None:
    manifest["partitions"][0]["blob"]["path"] = "../../../etc/passwd"


def _older_par_0_alone(kit: Kit) -> S:
    alone = kit.scratch / "alone"
    (alone / "par_0").mkdir(parents=True)
    shutil.copy(kit.folder / "vaiml_par_0" / "par_0.onnx", alone / "par_0" / "model.onnx")
    return kit.load(alone)


def _both_partition_dirs(kit: Kit) -> S:
    both = kit.scratch / "both"
    shutil.copytree(kit.folder / "vaiml_par_0", both / "vaiml_par_0")
    shutil.copytree(kit.folder / "vaiml_par_0", both / "par_0")
    return kit.load(both)


def _truncated_while_mapped(kit: Kit) -> S:
    path = kit.file("shrinking.rai", kit.rai.read_bytes())
    real = _mapped.copy

    def cut_then_copy(view: Any, offset: int, length: int) -> bytes:
        os.truncate(path, 0)  # every page of the map now lies past the end: SIGBUS
        return real(view, offset, length)

    _mapped.copy = cut_then_copy  # type: ignore[assignment]
    try:
        return kit.load(path)
    finally:
        _mapped.copy = real  # type: ignore[assignment]


def _unknown_op(kit: Kit) -> S:
    import onnx

    model = onnx.ModelProto.FromString(kit.runner.model.partitions[0].onnx_bytes)
    model.graph.node[0].op_type = "NoSuchOp"
    data = model.SerializeToString()
    root = _dir_with(kit, "unknown-op", lambda folder: None)
    folder = root / "vaiml_par_0"
    (folder / "par_0.onnx").write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["partitions"][0]["blob"].update(size=len(data), crc32=zlib.crc32(data))
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return kit.load(root)


def _fifo(kit: Kit) -> S:
    path = kit.scratch / "fifo.rai"
    os.mkfifo(path)
    return kit.load(path)


# fmt: off
FILES = [
    Case("file", "missing path", cl.ModelLoadError, lambda k: k.load(k.scratch / "none.rai")),
    Case("file", "empty .rai", cl.ModelLoadError, lambda k: k.load(k.file("empty.rai", b""))),
    Case("file", "random bytes .rai", cl.ModelLoadError,
         lambda k: k.load(k.file("noise.rai", os.urandom(4096)))),
    Case("file", ".rai cut in half", cl.ModelLoadError,
         lambda k: k.load(k.file("half.rai", k.rai.read_bytes()[: k.rai.stat().st_size // 2]))),
    Case("file", ".rai with one bit flipped", cl.ModelLoadError, _flip_graph_bit),
    Case("file", ".rai truncated while mapped", cl.ModelLoadError, _truncated_while_mapped),
    Case("file", "a named pipe", cl.ModelLoadError, _fifo),
    Case("file", "/dev/zero", cl.ModelLoadError, lambda k: k.load("/dev/zero")),
    Case("file", "empty directory", cl.ModelLoadError,
         lambda k: k.load(_dir_with(k, "emptied", shutil.rmtree))),
    Case("file", "partition graph deleted", cl.ModelLoadError,
         lambda k: k.load(_dir_with(k, "nograph", lambda f: (f / "par_0.onnx").unlink()))),
    Case("file", "manifest not JSON", cl.ModelLoadError,
         lambda k: k.load(_dir_with(k, "badjson",
                                    lambda f: (f / "manifest.json").write_text("{no")))),
    Case("file", "blob path leaves the directory", cl.ModelLoadError,
         lambda k: k.load(_dir_with(k, "escape", _manifest_edit(_escape)))),
    Case("file", "older par_0 copied without its manifest", cl.ModelLoadError,
         _older_par_0_alone),
    Case("file", "vaiml_par_0 and par_0 side by side", cl.ModelLoadError, _both_partition_dirs),
    Case("file", "graph with an unknown op (checksums valid)", cl.CopylessError, _unknown_op),
]
# fmt: on


# -- options -------------------------------------------------------------------------------
def _config(kit: Kit, content: Any) -> str:
    return str(kit.file("config.json", json.dumps(content).encode()))


# fmt: off
OPTIONS = [
    Case("option", "unknown key", cl.OptionError, lambda k: k.options({"no_such": 1})),
    Case("option", "max_concurrent_runs=0", cl.OptionError,
         lambda k: k.options({"max_concurrent_runs": 0})),
    Case("option", "max_concurrent_runs='2' (a string)", cl.OptionError,
         lambda k: k.options({"max_concurrent_runs": "2"})),
    Case("option", "cma_index=1 (host memory has one bank)", cl.OptionError,
         lambda k: k.options({"cma_index": 1})),
    Case("option", "options not a mapping", cl.OptionError, lambda k: k.options([("debug", 1)])),
    Case("option", "config_json that does not exist", cl.OptionError,
         lambda k: k.options({"config_json": str(k.scratch / "none.json")})),
    Case("option", "config_json for another compilation", cl.OptionError,
         lambda k: k.options({"config_json": _config(k, {"compiler": {"input_format": "rgbx"}})})),
    Case("option", "cache_path under a file", cl.OptionError,
         lambda k: k.options({"cache_path": str(k.rai / "cache")})),
    Case("option", "profile_path in a missing folder", cl.OptionError,
         lambda k: k.options({"ai_analyzer_profiling": True,
                              "profile_path": str(k.scratch / "no" / "t.json")})),
    Case("option", "device='cuda' without a GPU", cl.UnsupportedError,
         lambda k: k.options({"device": "cuda"})),
    Case("option", "runner_type given as a string", cl.OptionError,
         lambda k: k.options(None, "ONNXRUNTIME")),
]
# fmt: on


# -- tensors -------------------------------------------------------------------------------
def _closed_tensor(kit: Kit) -> S:
    x, y = kit.pair()
    x.close()
    return kit.runner.execute([[x]], [[y]])


def _closed_fd(kit: Kit) -> S:
    fd = os.memfd_create("closed")
    os.close(fd)
    cl.NpuTensor(kit.x.info, fd, cl.MemoryType.DMA_FD)
    return S.SUCCESS


def _pipe_fd(kit: Kit) -> S:
    r, w = os.pipe()
    try:
        cl.NpuTensor(kit.x.info, r, cl.MemoryType.DMA_FD)
    finally:
        os.close(r)
        os.close(w)
    return S.SUCCESS


def _with(info: cl.NpuTensorInfo, **changes: Any) -> cl.NpuTensorInfo:
    fields = {"name": info.name, "data_type": info.data_type, "direction": info.direction,
              "tensor_type": info.tensor_type, "memory_layout": info.memory_layout,
              "shape": info.shape, **changes}
    return cl.NpuTensorInfo(**fields)


def _read_only_output(kit: Kit) -> S:
    frozen = np.zeros(kit.y.info.shape, np.float32)
    frozen.flags.writeable = False
    cl.NpuTensor(_with(kit.y.info, tensor_type=CPU), frozen, HOST)
    return S.SUCCESS


# fmt: off
TENSORS = [
    Case("tensor", "inputs not a list", S.INVALID_INPUT,
         lambda k: k.runner.execute("x", [[k.y]])),  # type: ignore[arg-type]
    Case("tensor", "two tensors for a one-input model", S.INVALID_INPUT,
         lambda k: k.runner.execute([[k.x, k.x]], [[k.y]])),
    Case("tensor", "more frames than the batch size", S.INVALID_INPUT,
         lambda k: k.runner.execute([[k.x], [k.x]], [[k.y], [k.y]])),
    Case("tensor", "input of the wrong shape", S.INVALID_INPUT,
         lambda k: k.runner.execute(
             [[k.runner.allocate_npu_tensor(_with(k.x.info, shape=(1, 3, 4, 4)))]], [[k.y]])),
    Case("tensor", "output of the wrong dtype", S.INVALID_OUTPUT,
         lambda k: k.runner.execute([[k.x]], [[k.runner.allocate_npu_tensor(
             _with(k.y.info, data_type=cl.DataType.FP16))]])),
    Case("tensor", "a numpy array instead of an NpuTensor", S.INVALID_INPUT,
         lambda k: k.runner.execute([[k.x.numpy()]], [[k.y]])),  # type: ignore[list-item]
    Case("tensor", "a closed tensor", S.INVALID_INPUT, _closed_tensor),
    Case("tensor", "HW view on pageable memory", cl.MemoryTypeError,
         lambda k: cl.NpuTensor(k.x.info, np.zeros(k.x.info.shape, np.float32), HOST)),
    Case("tensor", "buffer too small", cl.TensorError,
         lambda k: cl.NpuTensor(_with(k.x.info, tensor_type=CPU), np.zeros(3, np.float32), HOST)),
    Case("tensor", "read-only buffer for an OUTPUT", cl.TensorError, _read_only_output),
    Case("tensor", "DMA_FD of a closed fd", cl.TensorError, _closed_fd),
    Case("tensor", "DMA_FD of a pipe", cl.TensorError, _pipe_fd),
    Case("tensor", "sub-tensor past its parent's end", cl.TensorError,
         lambda k: k.runner.allocate_sub_tensor(k.x, k.x.info, 4)),
    Case("tensor", "allocate_npu_tensor(memory_bank=1)", cl.TensorError,
         lambda k: k.runner.allocate_npu_tensor(k.x.info, memory_bank=1)),
]
# fmt: on


# -- call orders ---------------------------------------------------------------------------
def _wait_twice(kit: Kit) -> S:
    handle = kit.runner.execute_async([[kit.x]], [[kit.y]])
    kit.runner.wait(handle, -1)
    return kit.runner.wait(handle, -1)


def _output_busy(kit: Kit) -> S:
    release = __import__("threading").Event()
    handle = kit.runner.execute_async([[kit.x]], [[kit.y]], lambda h: release.wait(10))
    try:
        return kit.runner.execute([[kit.x]], [[kit.y]]) if _running(kit, handle) else S.FAILURE
    finally:
        release.set()
        kit.runner.wait(handle, -1)


def _running(kit: Kit, handle: cl.JobHandle) -> bool:
    return handle.status is S.SUCCESS and kit.runner.wait(handle, 0) is S.JOB_PENDING


def _over_capacity(kit: Kit) -> S:
    """Three submissions in a burst on a runner of two slots: the third is refused. (The
    burst holds the GIL, so the two jobs cannot finish in between: a long switch interval
    stands for a slow model.)"""
    import sys

    pairs = [kit.pair() for _ in range(3)]
    for x, y in pairs:  # plans built, so that the burst is short
        kit.runner.execute([[x]], [[y]])
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        handles = [kit.runner.execute_async([[x]], [[y]]) for x, y in pairs]
    finally:
        sys.setswitchinterval(interval)
    for handle in handles[:2]:
        kit.runner.wait(handle, -1)
    return handles[2].status


def _raising_callback(kit: Kit) -> S:
    def fail(handle: cl.JobHandle) -> None:
        raise RuntimeError("callback fails on purpose")

    import logging

    previous = logging.root.manager.disable
    logging.disable(max(previous, logging.ERROR))  # the runner logs the traceback
    try:
        return kit.runner.wait(kit.runner.execute_async([[kit.x]], [[kit.y]], fail), -1)
    finally:
        logging.disable(previous)


def _closed_runner(kit: Kit) -> cl.Runner:
    runner = cl.RunnerFactory.create_runner(kit.rai)
    runner.close()
    return runner


# fmt: off
CALLS = [
    Case("call", "wait on a job id never issued", S.INVALID_JOB_ID,
         lambda k: k.runner.wait(cl.JobHandle(S.SUCCESS, 10**6), 0)),
    Case("call", "wait twice on one job", S.INVALID_JOB_ID, _wait_twice),
    Case("call", "execute on an output a job still writes", S.INVALID_OUTPUT, _output_busy),
    Case("call", "a job beyond max_concurrent_runs", S.RESOURCE_UNAVAILABLE, _over_capacity),
    Case("call", "callback that raises", S.FAILURE, _raising_callback),
    Case("call", "callback that is not callable", S.INVALID_INPUT,
         lambda k: k.runner.execute_async([[k.x]], [[k.y]], 42).status),  # type: ignore[arg-type]
    Case("call", "execute on a closed runner", S.FAILURE,
         lambda k: _closed_runner(k).execute([[k.x]], [[k.y]])),
    Case("call", "queries on a closed runner", cl.RunnerClosedError,
         lambda k: _closed_runner(k).get_tensors_info(IN)),
    Case("call", "warm_up on a closed runner", cl.RunnerClosedError,
         lambda k: _closed_runner(k).warm_up()),
    Case("call", "get_batch_size('INPUT')", TypeError,
         lambda k: k.runner.get_batch_size("INPUT")),  # type: ignore[arg-type]
]
# fmt: on

CATALOGUE = [*FILES, *OPTIONS, *TENSORS, *CALLS]
