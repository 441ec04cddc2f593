"""ONNX backend node tests through the compiler: compile each model with no options, run the
compiled partition with onnxruntime, compare with the expected outputs shipped by onnx.

The onnx 1.23 wheel ships the generators of these cases (``onnx.backend.test.case.node``)
rather than the ``data/node/*`` files; ``collect_testcases()`` builds the very same models
and input/output tensors in memory.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from compiler_support import run_compiled

from copyless.model import compile_to_memory

SAMPLE = [
    "test_abs",
    "test_add_uint8",
    "test_add_int16",
    "test_add_uint16",
    "test_and2d",
    "test_argmax_default_axis_example",
    "test_argmin_keepdims_example",
    "test_averagepool_2d_default",
    "test_batchnorm_example",
    "test_clip_default_int8_inbounds",
    "test_concat_2d_axis_0",
    "test_conv_with_strides_padding",
    "test_convtranspose",
    "test_erf",
    "test_expand_dim_changed",
    "test_gather_0",
    "test_gathernd_example_int32",
    "test_gelu_default_1",
    "test_gemm_default_no_bias",
    "test_globalaveragepool",
    "test_gru_defaults",
    "test_hardmax_example",
    "test_if",
    "test_instancenorm_example",
    "test_isnan_float16",
    "test_layer_normalization_4d_axis1",
    "test_loop11",
    "test_lrn",
    "test_lstm_defaults",
    "test_matmul_2d",
    "test_max_uint64",
    "test_maxpool_2d_pads",
    "test_min_uint32",
    "test_mish",
    "test_nonmaxsuppression_center_point_box_format",
    "test_nonzero_example",
    "test_not_2d",
    "test_pow_types_int64_int64",
    "test_qlinearmatmul_2D_uint8_float32",
    "test_reduce_sum_default_axes_keepdims_example",
    "test_reshape_reordered_all_dims",
    "test_resize_upsample_scales_nearest",
    "test_scan9_sum",
    "test_scatter_elements_with_axis",
    "test_shape",
    "test_slice",
    "test_softmax_axis_1",
    "test_split_equal_parts_1d_opset18",
    "test_tile",
    "test_top_k",
    "test_where_example",
    "test_xor_bcast3v1d",
]

#: Cases whose output shape depends on the data: the compiler must mark them dynamic. (Cases
#: whose shape comes from another *input* tensor, like Reshape's, are dynamic too.)
DYNAMIC = {"test_nonzero_example", "test_nonmaxsuppression_center_point_box_format", "test_top_k"}


@pytest.fixture(scope="module")
def cases() -> dict[str, object]:
    with warnings.catch_warnings():
        # the generators divide by zero and overflow on purpose
        warnings.simplefilter("ignore")
        from onnx.backend.test.case import node

        return {case.name: case for case in node.collect_testcases() if case.name in SAMPLE}


def test_sample_is_complete(cases: dict[str, object]) -> None:
    assert sorted(cases) == sorted(SAMPLE)


@pytest.mark.parametrize("name", SAMPLE)
def test_backend_node_case(name: str, cases: dict[str, object]) -> None:
    case = cases[name]
    compiled = compile_to_memory(case.model)  # type: ignore[attr-defined]
    inputs, expected = case.data_sets[0]  # type: ignore[attr-defined]
    assert len(compiled.inputs) == len(inputs) and len(compiled.outputs) == len(expected)
    for spec, value in zip(compiled.inputs, inputs, strict=True):
        assert spec.hw == spec.cpu.__class__(
            **{**_fields(spec.cpu), "tensor_type": spec.hw.tensor_type}
        )
        assert spec.cpu.shape == value.shape and spec.cpu.numpy_dtype == value.dtype
    got = run_compiled(compiled, {s.name: v for s, v in zip(compiled.inputs, inputs, strict=True)})
    for spec, want in zip(compiled.outputs, expected, strict=True):
        assert spec.dynamic == bool(spec.dynamic_dims)
        if name in DYNAMIC:
            assert spec.dynamic
        unknown_rank = spec.dynamic and spec.cpu.shape == (-1,) and np.ndim(want) != 1
        if not unknown_rank:  # an unknown rank is recorded as (-1,)
            assert len(spec.cpu.shape) == np.ndim(want)
            for i, (dim, real) in enumerate(zip(spec.cpu.shape, np.shape(want), strict=True)):
                if i in spec.dynamic_dims:  # a capacity that holds the result, or -1
                    assert dim == -1 or dim >= real
                else:
                    assert dim == real
        tol = {"rtol": case.rtol, "atol": case.atol}  # type: ignore[attr-defined]
        np.testing.assert_allclose(got[spec.name], want, **tol)


def _fields(info: object) -> dict[str, object]:
    return {f: getattr(info, f) for f in info.__slots__}  # type: ignore[attr-defined]
