"""The public surface: ``copyless.__all__`` is curated, and every API.md name is there.

When a name is added to ``copyless/__init__.py`` it must be added to ``CURATED`` here too,
so the top-level API only grows on purpose.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.resources
from typing import Any

import pytest

import copyless as cl

CURATED = [
    "CompiledModel",
    "CopylessError",
    "DataType",
    "DeviceSession",
    "ExecuteAsyncCallback",
    "HostMemory",
    "JobError",
    "JobHandle",
    "LayoutError",
    "MemoryLayout",
    "MemoryType",
    "MemoryTypeError",
    "ModelLoadError",
    "NpuTensor",
    "NpuTensorInfo",
    "OptionError",
    "OutOfMemoryError",
    "Pipeline",
    "PipelineStats",
    "QuantParameters",
    "Result",
    "RoundingMode",
    "Runner",
    "RunnerClosedError",
    "RunnerFactory",
    "RunnerOptions",
    "RunnerType",
    "StatusCode",
    "TensorDirection",
    "TensorError",
    "TensorType",
    "UnknownTensorError",
    "UnsupportedError",
    "__version__",
    "compile_model",
    "compile_to_memory",
    "ipc",
    "layout",
    "load_model",
]

# API.md, section "Enums": members exactly these names, in this order.
ENUMS: dict[str, list[str]] = {
    "DataType": [
        "UNKNOWN",
        "BOOLEAN",
        "INT8",
        "UINT8",
        "INT16",
        "UINT16",
        "BF16",
        "FP16",
        "INT32",
        "UINT32",
        "FLOAT32",
        "INT64",
        "UINT64",
    ],
    "MemoryLayout": [
        "UNKNOWN",
        "NC",
        "NCH",
        "NHC",
        "NHW",
        "NWC",
        "NHWC",
        "NCHW",
        "NHWC4",
        "NHWC8",
        "NC4HW4",
        "NC8HW8",
        "HCWNC4",
        "HCWNC8",
        "HCWNC16",
        "GENERIC",
    ],
    "MemoryType": ["UNKNOWN", "XRT_BO", "DMA_FD", "USER_POINTER_CMA", "USER_POINTER_NON_CMA"],
    "TensorDirection": ["INPUT", "OUTPUT"],
    "TensorType": ["CPU", "HW"],
    "StatusCode": [
        "SUCCESS",
        "FAILURE",
        "INVALID_INPUT",
        "INVALID_OUTPUT",
        "OUT_OF_MEMORY",
        "RUNTIME_ERROR",
        "JOB_PENDING",
        "INVALID_JOB_ID",
        "RESOURCE_UNAVAILABLE",
        "UNSUPPORTED",
    ],
    "RoundingMode": ["UNKNOWN", "ROUND_TO_NEAREST_EVEN", "ROUND_TOWARD_ZERO"],
    "RunnerType": ["VAIML", "ONNXRUNTIME", "OPENVINO"],
}

NPU_TENSOR_API = [
    "info",
    "memory_type",
    "get_info",
    "get_memory_type",
    "get_buffer",
    "get_virtual_address",
    "numpy",
    "sync_buffer",
    "export_buffer",
    "__dlpack__",
    "__dlpack_device__",
]


def test_all_is_exactly_the_curated_list() -> None:
    assert len(cl.__all__) == len(set(cl.__all__)), "duplicates in copyless.__all__"
    assert sorted(cl.__all__) == sorted(CURATED)


@pytest.mark.parametrize("name", CURATED)
def test_every_exported_name_resolves(name: str) -> None:
    assert getattr(cl, name) is not None


def test_star_import_gives_the_curated_names() -> None:
    namespace: dict[str, Any] = {}
    exec("from copyless import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(CURATED)


@pytest.mark.parametrize(("name", "members"), ENUMS.items(), ids=list(ENUMS))
def test_enum_members(name: str, members: list[str]) -> None:
    enum_type = getattr(cl, name)
    assert issubclass(enum_type, enum.Enum)
    assert [m.name for m in enum_type] == members


def test_metadata_signatures() -> None:
    fields = [f.name for f in dataclasses.fields(cl.NpuTensorInfo)]
    assert fields == [
        "name",
        "data_type",
        "direction",
        "tensor_type",
        "memory_layout",
        "shape",
        "memory_layout_order",
        "strides",
    ]
    info = cl.NpuTensorInfo(
        "x",
        cl.DataType.UINT8,
        cl.TensorDirection.INPUT,
        cl.TensorType.CPU,
        cl.MemoryLayout.NC,
        (2, 3),
    )
    assert (info.memory_layout_order, info.strides, info.size, info.size_in_bytes) == (
        (),
        None,
        6,
        6,
    )
    quant = cl.QuantParameters(0.5)
    assert (quant.zero_point, quant.rounding_mode) == (0, cl.RoundingMode.ROUND_TO_NEAREST_EVEN)
    assert [f.name for f in dataclasses.fields(cl.JobHandle)] == ["status", "job_id"]
    for cls in (cl.NpuTensorInfo, cl.QuantParameters, cl.JobHandle):
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen and "__slots__" in cls.__dict__


@pytest.mark.parametrize("attribute", NPU_TENSOR_API)
def test_npu_tensor_api(attribute: str) -> None:
    assert hasattr(cl.NpuTensor, attribute)


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        ("ModelLoadError", ()),
        ("OptionError", (ValueError,)),
        ("LayoutError", (ValueError,)),
        ("MemoryTypeError", (ValueError,)),
        ("UnsupportedError", ()),
        ("TensorError", (ValueError,)),
        ("UnknownTensorError", (KeyError,)),
        ("RunnerClosedError", ()),
        ("OutOfMemoryError", (MemoryError,)),
    ],
)
def test_error_tree(error: str, bases: tuple[type[Exception], ...]) -> None:
    error_type = getattr(cl, error)
    assert issubclass(error_type, cl.CopylessError)
    for base in bases:
        assert issubclass(error_type, base)
    assert issubclass(cl.CopylessError, RuntimeError)  # VART's std::runtime_error


def test_a_ported_except_runtime_error_catches_copyless_errors(tmp_path) -> None:
    """Seed code ``catch (const std::runtime_error&)`` ported as ``except RuntimeError``."""
    with pytest.raises(RuntimeError, match="no such file"):
        cl.RunnerFactory.create_runner(tmp_path / "missing.rai")
    with pytest.raises(RuntimeError, match="unknown option"):
        cl.RunnerFactory.create_runner(tmp_path / "missing.rai", {"no_such_option": 1})


def test_unknown_tensor_error_reads_well() -> None:
    assert str(cl.UnknownTensorError("no tensor 'x'")) == "no tensor 'x'"


def test_out_of_memory_error_carries_the_numbers() -> None:
    error = cl.OutOfMemoryError(4096, "mmap failed")
    assert (error.requested, error.detail) == (4096, "mmap failed")
    assert "4096 bytes" in str(error)


def test_layout_module_api() -> None:
    assert callable(cl.layout.hw_info_for) and callable(cl.layout.convert)
    hw = cl.layout.hw_info_for(
        cl.NpuTensorInfo(
            "x",
            cl.DataType.FLOAT32,
            cl.TensorDirection.INPUT,
            cl.TensorType.CPU,
            cl.MemoryLayout.NCHW,
            (1, 3, 224, 224),
        ),
        cl.MemoryLayout.HCWNC4,
        cl.DataType.FLOAT32,
    )
    assert hw.shape == (224, 1, 224, 1, 4) and hw.tensor_type is cl.TensorType.HW


def test_version_and_typing_marker() -> None:
    assert isinstance(cl.__version__, str) and cl.__version__.count(".") == 2
    assert importlib.resources.files("copyless").joinpath("py.typed").is_file()


@pytest.mark.parametrize(
    "layer",
    ["types", "memory", "ipc", "layout", "model", "backends", "runner", "pipeline", "vision",
     "apps"],
)
def test_every_layer_imports(layer: str) -> None:
    importlib.import_module(f"copyless.{layer}")


def test_execution_boundary_is_typed() -> None:
    """execute/execute_async/wait carry real types, so ``mypy --strict`` checks the most used
    calls (``runner.execute(x, y)`` with bare tensors is a type error)."""
    import typing
    from collections.abc import Callable, Sequence

    tensors = Sequence[Sequence[cl.NpuTensor]]
    assert typing.get_type_hints(cl.Runner.execute) == {
        "inputs": tensors, "outputs": tensors, "return": cl.StatusCode,
    }  # fmt: skip
    hints = typing.get_type_hints(cl.Runner.execute_async)
    assert (hints["inputs"], hints["outputs"], hints["return"]) == (tensors, tensors, cl.JobHandle)
    assert hints["callback"] == cl.ExecuteAsyncCallback | None
    assert cl.ExecuteAsyncCallback == Callable[[cl.JobHandle], None]
    assert typing.get_type_hints(cl.Runner.wait) == {
        "job_handle": cl.JobHandle, "timeout_ms": int, "return": cl.StatusCode,
    }  # fmt: skip


def test_the_api_is_documented_in_the_repository() -> None:
    """docs/api.md (cited by copyless/__init__.py) names every exported name."""
    from pathlib import Path

    doc = Path(__file__).resolve().parents[1] / "docs" / "api.md"
    assert "docs/api.md" in (cl.__doc__ or "")
    text = doc.read_text()
    missing = [name for name in CURATED if name != "__version__" and f"`{name}" not in text
               and f"{name}(" not in text and f" {name} " not in text]  # fmt: skip
    assert not missing, f"docs/api.md does not document {missing}"
