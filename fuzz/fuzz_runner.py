"""Coverage-guided fuzzing of the runner's C fast path (``runner/_fast.c``) with atheris.

Modes (first byte of the input):

* ``CALLS``: a sequence of operations on one runner (a real onnxruntime session of a model
  with two inputs and two outputs, ``s = a + b`` and ``d = a - b``; ``b`` and ``d`` have
  NHWC4/NHWC HW views) over a pool of tensors that changes between calls: runner-allocated,
  user memory, sub-tensors near the end of their parent, read-only inputs, CPU views
  (converted by the Python path); tensors closed, dropped (weak references die), swapped,
  repeated, passed in lists or tuples, rows of the wrong length. Contract: ``execute``
  returns a StatusCode and never raises; a SUCCESS wrote exactly ``a + b`` and ``a - b``
  into the output tensors passed (so a replay never runs a stale binding).
* ``RAW``: ``FastPath`` driven directly: uninitialised objects, ``install`` with odd shapes
  and objects, engine calls that raise or re-enter the fast path (install, reset, close,
  a nested call), ``enter``/``leave`` out of order. Contract: no crash; only TypeError,
  ValueError, OverflowError, RuntimeError or the callable's own exception.

The runner is built once per process (an onnxruntime session takes milliseconds); each
input starts from a fresh tensor pool, so entries left by earlier inputs only refer to dead
tensors. Run through ``fuzz/sanitize.py``: ``.venv/bin/python fuzz/sanitize.py fuzz runner``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import onnx
import onnx.helper as oh

import copyless as cl
from copyless.layout import convert_array
from copyless.model import compile_to_memory
from copyless.runner import RunnerFactory, _fast

SHAPE = (1, 3, 2, 2)
HW, CPU = cl.TensorType.HW, cl.TensorType.CPU
IN, OUT = cl.TensorDirection.INPUT, cl.TensorDirection.OUTPUT
POOL = 6
REFUSED = (TypeError, ValueError, OverflowError, RuntimeError)


def model() -> onnx.ModelProto:
    t = onnx.TensorProto.FLOAT
    graph = oh.make_graph(
        [oh.make_node("Add", ["a", "b"], ["s"]), oh.make_node("Sub", ["a", "b"], ["d"])],
        "add_sub",
        [oh.make_tensor_value_info(n, t, list(SHAPE)) for n in "ab"],
        [oh.make_tensor_value_info(n, t, list(SHAPE)) for n in "sd"],
    )
    m = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    m.ir_version = 10
    return m


COMPILED = compile_to_memory(model(), input_layout={"b": "NHWC4"}, output_layout={"d": "NHWC"})
RUNNER = RunnerFactory.from_compiled(COMPILED, {"max_concurrent_runs": 2})
INFOS = {(d, t): RUNNER.get_tensors_info(d, t) for d in (IN, OUT) for t in (HW, CPU)}


class Slot:
    """A tensor of the pool and the logical (CPU-view) values it holds."""

    def __init__(self, tensor: cl.NpuTensor, direction: Any, index: int, view: Any) -> None:
        self.tensor, self.direction, self.index, self.view = tensor, direction, index, view
        self.values: np.ndarray[Any, Any] | None = None
        self.readonly = not tensor.bytes_view().flags.writeable

    @property
    def cpu_info(self) -> cl.NpuTensorInfo:
        return INFOS[(self.direction, CPU)][self.index]

    def write(self, values: np.ndarray[Any, Any]) -> None:
        info = self.tensor.info
        convert_array(values, self.cpu_info, self.tensor.bytes_view(), info,
                      None)  # fmt: skip
        self.values = values

    def read(self) -> np.ndarray[Any, Any]:
        out = np.empty(SHAPE, np.float32)
        convert_array(self.tensor.bytes_view(), self.tensor.info, out, self.cpu_info)
        return out

    def span(self) -> tuple[int, int]:
        return self.tensor.address, self.tensor.address + self.tensor.nbytes


def new_tensor(fdp: Any, direction: Any, index: int) -> Slot | None:
    view = HW if fdp.ConsumeIntInRange(0, 3) else CPU
    info = INFOS[(direction, view)][index]
    kind = fdp.ConsumeIntInRange(0, 4)
    try:
        if kind == 0:
            tensor = RUNNER.allocate_npu_tensor(info)
        elif kind == 1:  # user memory, device-visible
            tensor = cl.NpuTensor(info, np.zeros(info.size_in_bytes, np.uint8),
                                  cl.MemoryType.USER_POINTER_CMA)  # fmt: skip
        elif kind == 2:  # pageable memory: CPU views only
            tensor = cl.NpuTensor(info, np.zeros(info.size_in_bytes, np.uint8),
                                  cl.MemoryType.USER_POINTER_NON_CMA)  # fmt: skip
        elif kind == 3:  # a sub-tensor ending at (or past) its parent's last byte
            extra = fdp.ConsumeIntInRange(0, 64)
            parent_shape = (1, info.size_in_bytes + extra)
            parent_info = cl.NpuTensorInfo("parent", cl.DataType.UINT8, direction, HW,
                                           cl.MemoryLayout.NC, parent_shape)  # fmt: skip
            parent = RUNNER.allocate_npu_tensor(parent_info)
            offset = extra - fdp.ConsumeIntInRange(0, 2) + 1
            tensor = RUNNER.allocate_sub_tensor(parent, info, offset)
        else:  # a read-only buffer: an input may wrap it without a copy, an output may not
            frozen = np.zeros(info.size_in_bytes, np.uint8)
            frozen.flags.writeable = False
            tensor = cl.NpuTensor(info, frozen, cl.MemoryType.USER_POINTER_CMA)
    except cl.CopylessError:
        return None
    slot = Slot(tensor, direction, index, view)
    if direction is IN and kind != 4:
        slot.write(values(fdp))
    elif direction is IN:
        slot.values = np.zeros(SHAPE, np.float32)
    return slot


def values(fdp: Any) -> np.ndarray[Any, Any]:
    seed = fdp.ConsumeIntInRange(0, 2**16)
    return np.random.default_rng(seed).integers(-50, 50, SHAPE).astype(np.float32)


def rows(fdp: Any, picked: list[Any]) -> Any:
    """``[[x, y]]`` in a list or tuple, sometimes ill-formed."""
    shape = fdp.ConsumeIntInRange(0, 15)
    if shape == 0:
        return [picked[:1]]
    if shape == 1:
        return [picked, picked]
    if shape == 2:
        return picked
    if shape == 3:
        return []
    row = list(picked) if fdp.ConsumeBool() else tuple(picked)
    return [row] if fdp.ConsumeBool() else (row,)


def pick(fdp: Any, pool: list[Slot | None], direction: Any, index: int) -> Slot | None:
    """Mostly a slot of the right direction and position; sometimes any slot."""
    fitting = [s for s in pool if s and s.direction is direction and s.index == index]
    if fitting and fdp.ConsumeIntInRange(0, 7):
        return fdp.PickValueInList(fitting)  # type: ignore[no-any-return]
    live = [s for s in pool if s]
    return fdp.PickValueInList(live) if live else None  # type: ignore[no-any-return]


def execute(fdp: Any, pool: list[Slot | None]) -> None:
    slots = [pick(fdp, pool, IN, 0), pick(fdp, pool, IN, 1),
             pick(fdp, pool, OUT, 0), pick(fdp, pool, OUT, 1)]  # fmt: skip
    if any(s is None for s in slots):
        return
    a, b, s, d = slots  # type: ignore[misc]
    inputs = rows(fdp, [a.tensor, b.tensor])
    outputs = rows(fdp, [s.tensor, d.tensor])
    if fdp.ConsumeIntInRange(0, 3) == 0:
        handle = RUNNER.execute_async(inputs, outputs)
        if not isinstance(handle, cl.JobHandle):
            raise AssertionError(f"execute_async returned {handle!r}")
        status = RUNNER.wait(handle, 5000) if handle.ok else handle.status
    else:
        status = RUNNER.execute(inputs, outputs)
    if not isinstance(status, cl.StatusCode):
        raise AssertionError(f"execute returned {status!r}")
    a_values, b_values = a.values, b.values  # what was read (a or b may also be s or d)
    s.values = d.values = None  # an input slot passed as an output no longer holds its values
    if status is not cl.StatusCode.SUCCESS:
        return
    if s.readonly or d.readonly:
        raise AssertionError("SUCCESS writing outputs into read-only memory")
    spans = [x.span() for x in (a, b, s, d)]
    disjoint = all(p[1] <= q[0] or q[1] <= p[0] for i, p in enumerate(spans)
                   for q in spans[i + 1 :])  # fmt: skip
    proper = (a.direction, a.index, b.direction, b.index, s.direction, s.index, d.direction,
              d.index) == (IN, 0, IN, 1, OUT, 0, OUT, 1)  # fmt: skip
    # The runner matches tensors by view (layout, dtype, shape), not by name or direction:
    # a's tensor in b's place is a valid call. Values are checked where they are defined.
    if proper and disjoint and a_values is not None and b_values is not None:
        for slot, want in ((s, a_values + b_values), (d, a_values - b_values)):
            got = slot.read()
            if not np.array_equal(got, want):
                raise AssertionError(f"stale or wrong output\n{got}\n{want}")


def check_calls(fdp: Any) -> None:
    pool: list[Slot | None] = [new_tensor(fdp, d, i) for d in (IN, OUT) for i in (0, 1)]
    pool += [None] * (POOL - len(pool))
    for _ in range(fdp.ConsumeIntInRange(1, 24)):
        op, k = fdp.ConsumeIntInRange(0, 7), fdp.ConsumeIntInRange(0, POOL - 1)
        if op <= 1:
            direction = IN if fdp.ConsumeBool() else OUT
            pool[k] = new_tensor(fdp, direction, fdp.ConsumeIntInRange(0, 1))
        elif op == 2 and pool[k]:
            pool[k].tensor.close()  # type: ignore[union-attr]
        elif op == 3:
            pool[k] = None  # the last reference: the fast path's weak one dies with it
        elif op == 4 and pool[k] and pool[k].direction is IN:  # type: ignore[union-attr]
            with contextlib.suppress(cl.CopylessError, ValueError):  # closed or read-only
                pool[k].write(values(fdp))  # type: ignore[union-attr]
        else:
            execute(fdp, pool)


class Reenter:
    """An engine call that does something to the fast path running it."""

    def __init__(self, fdp: Any, path: Any, tensors: tuple[Any, ...]) -> None:
        self.action = fdp.ConsumeIntInRange(0, 6)
        self.path, self.tensors = path, tensors

    def __call__(self, *args: Any) -> None:
        action, path = self.action, self.path
        if action == 1:
            raise KeyError("engine failed")
        if action == 2:
            path.install(self.tensors, (1, 1), (1, 1), (), None)
        elif action == 3:
            path.reset()
        elif action == 4:
            path.close()
        elif action == 5:
            path([[self.tensors[0]]], [[self.tensors[1]]])
        elif action == 6:
            path.leave()


class Tensorish:
    """What the fast path checks: identity and a ``_span`` attribute (None when closed)."""

    def __init__(self, closed: bool) -> None:
        self._span = None if closed else b"x"


def check_raw(fdp: Any) -> None:
    path = _fast.FastPath.__new__(_fast.FastPath)
    if fdp.ConsumeIntInRange(0, 3):
        path.__init__(cl.StatusCode.SUCCESS)
    tensors = tuple(Tensorish(fdp.ConsumeIntInRange(0, 5) == 0) for _ in range(4))
    for _ in range(fdp.ConsumeIntInRange(1, 12)):
        op = fdp.ConsumeIntInRange(0, 6)
        try:
            if op == 0:
                dims = [fdp.PickValueInList([1, 1, 2, 0, -1, 2**62, 2**63 - 1]) for _ in range(4)]
                items = tensors[: fdp.ConsumeIntInRange(0, 4)]
                if fdp.ConsumeIntInRange(0, 7) == 0:
                    items = (*items, 1)  # not weak-referenceable
                calls = tuple((Reenter(fdp, path, tensors), ()) for _ in range(
                    fdp.ConsumeIntInRange(0, 2)))  # fmt: skip
                if fdp.ConsumeIntInRange(0, 7) == 0:
                    calls = ((1, 2),)  # type: ignore[assignment]
                path.install(items, tuple(dims[:2]), tuple(dims[2:]), calls, ("r", op))
            elif op == 1:
                ins = [list(tensors[:2])] if fdp.ConsumeBool() else [[tensors[0]]]
                path(ins, [[tensors[fdp.ConsumeIntInRange(0, 3)]]])
            elif op == 2:
                path.enter()
            elif op == 3:
                path.leave()
            elif op == 4:
                path.reset()
            elif op == 5:
                path.close()
            else:
                _ = path.keys, path.busy, path.others, path.count
        except (*REFUSED, KeyError):
            pass


def check(data: bytes) -> None:
    import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]

    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeIntInRange(0, 3) == 3:
        check_raw(fdp)
    else:
        check_calls(fdp)


if __name__ == "__main__":
    from harness import main

    import copyless.runner._jobs as jobs
    import copyless.runner._replay as replay
    import copyless.runner._runner as runner_module

    main(check, [runner_module, replay, jobs], check_calls, execute, new_tensor, check_raw)
