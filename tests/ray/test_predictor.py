"""Predictor, the Ray Data callable class, called as Ray Data calls it: read-only frames
bound in place, the tail gathered, several jobs in flight, the same results as a plain
``execute``; from a path, a CompiledModel or an ObjectRef; clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from model_helpers import conv_net

pytest.importorskip("ray")

import copyless as cl
from copyless.model import compile_to_memory
from copyless.ray import PredictionError, Predictor
from copyless.vision import softmax_topk

HW = cl.TensorType.HW
ORT = cl.RunnerType.ONNXRUNTIME


@pytest.fixture(scope="module")
def rgbx_b4() -> cl.CompiledModel:
    """The small conv net with an RGBx 16x16 input, compiled for batch 4."""
    return compile_to_memory(conv_net("N", size=16), input_format="rgbx", batch_size=4)


def _frames(n: int) -> np.ndarray:
    frames = np.random.default_rng(n).integers(0, 256, (n, 16, 16, 4), dtype=np.uint8)
    frames.flags.writeable = False  # as Ray Data hands them over with zero_copy_batch
    return frames


def _reference(model: cl.CompiledModel, frames: np.ndarray) -> np.ndarray:
    """Each frame through a plain runner, padded into a whole batch."""
    with cl.RunnerFactory.from_compiled(model) as runner:
        x_info = runner.get_tensors_info(cl.TensorDirection.INPUT, HW)[0]
        y_info = runner.get_tensors_info(cl.TensorDirection.OUTPUT, HW)[0]
        x, y = runner.allocate_npu_tensor(x_info), runner.allocate_npu_tensor(y_info)
        rows = []
        for frame in frames:
            x.numpy()[0] = frame
            assert runner.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
            rows.append(y.numpy()[0].copy())
    return np.stack(rows)


@pytest.mark.parametrize(
    ("runner_type", "in_flight"),
    [(ORT, 1), (ORT, 2), (ORT, 3), (cl.RunnerType.OPENVINO, 2)],
    ids=["onnxruntime-1", "onnxruntime-2", "onnxruntime-3", "openvino-2"],
)
def test_frames_are_bound_in_place_and_give_executes_results(
    rgbx_b4, in_flight, runner_type
) -> None:
    frames = _frames(10)  # two whole batches of 4 and a tail of 2
    with Predictor(rgbx_b4, in_flight=in_flight, runner_type=runner_type) as predictor:
        out = predictor({"pixels": frames, "path": np.array([f"p{i}" for i in range(10)])})
        assert predictor.frames_in_place == 8 and predictor.frames_gathered == 2
        assert predictor.runner.options.max_concurrent_runs == in_flight
    assert list(out["path"]) == [f"p{i}" for i in range(10)]  # other columns pass through
    assert "pixels" not in out
    expected = _reference(rgbx_b4, frames)
    np.testing.assert_allclose(out["logits"], expected, rtol=1e-4, atol=1e-3)


def test_top_k_and_rows_with_an_error(rgbx_b4) -> None:
    frames = _frames(5)
    errors = np.array(["", "x.jpg: not a decodable image", "", "", ""], dtype=object)
    with Predictor(rgbx_b4, top_k=3) as predictor:
        out = predictor({"pixels": frames, "error": errors})
    logits = _reference(rgbx_b4, frames)
    assert out["top_class_ids"].shape == (5, 3) and out["top_scores"].shape == (5, 3)
    for row in (0, 2, 3, 4):
        top = softmax_topk(logits, 3, batch_index=row)
        assert list(out["top_class_ids"][row]) == [class_id for class_id, _ in top]
        np.testing.assert_allclose(out["top_scores"][row], [p for _, p in top], rtol=1e-5)
        assert out["class_id"][row] == top[0][0] and out["score"][row] == out["top_scores"][row, 0]
    assert out["class_id"][1] == -1 and np.isnan(out["score"][1])
    assert list(out["error"]) == list(errors)


def test_model_from_a_path_and_from_the_object_store(ray_driver, rgbx_b4, tmp_path) -> None:
    import ray

    from copyless.model._archive import write_archive

    path = write_archive(rgbx_b4, tmp_path / "net.rai")
    frames = _frames(4)
    expected = _reference(rgbx_b4, frames)
    for source in (path, str(path), rgbx_b4, ray.put(rgbx_b4)):
        with Predictor(source) as predictor:
            np.testing.assert_allclose(predictor({"pixels": frames})["logits"], expected, atol=1e-5)
    with pytest.raises(cl.UnsupportedError, match="ObjectRef holds a str"):
        Predictor(ray.put("not a model"))


def test_bad_batches_and_arguments_are_clear_errors(rgbx_b4) -> None:
    with Predictor(rgbx_b4) as predictor:
        with pytest.raises(PredictionError, match=r"no column 'pixels'.*image"):
            predictor({"image": _frames(2)})
        with pytest.raises(PredictionError, match=r"uint8 frames of shape \[8, 8, 4\]"):
            predictor({"pixels": np.zeros((2, 8, 8, 4), np.uint8)})
        strided = np.zeros((4, 16, 32, 4), np.uint8)[:, :, ::2]  # not C-contiguous: copied
        assert predictor({"pixels": strided})["logits"].shape == (4, 10)
    for bad in ({"in_flight": 0}, {"top_k": 0}, {"top_k": True}):
        with pytest.raises(cl.OptionError):
            Predictor(rgbx_b4, **bad)
    with pytest.raises(cl.ModelLoadError):
        Predictor(Path("/nonexistent/model.rai"))


def test_a_model_with_two_inputs_is_refused() -> None:
    import onnx.helper as oh

    two = oh.make_model(
        oh.make_graph(
            [oh.make_node("Add", ["a", "b"], ["c"])],
            "add",
            [oh.make_tensor_value_info(n, 1, [1, 4]) for n in "ab"],
            [oh.make_tensor_value_info("c", 1, [1, 4])],
        ),
        opset_imports=[oh.make_opsetid("", 17)],
    )
    two.ir_version = 10
    with pytest.raises(cl.UnsupportedError, match="one input; this one has 2"):
        Predictor(compile_to_memory(two))
