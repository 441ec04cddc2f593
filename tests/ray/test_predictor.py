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
        # probabilities: relative to 1 (a 4e-25 runner-up differs in its 4th digit between
        # the runner's float32 and the reference's float64 softmax)
        np.testing.assert_allclose(out["top_scores"][row], [p for _, p in top], rtol=1e-5,
                                   atol=1e-6)  # fmt: skip
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
            # the default runner measures the engines: either may serve each load, and their
            # float sums differ in the last bits (logits near 1e3: a relative tolerance)
            got = predictor({"pixels": frames})["logits"]
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
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


def _plain_onnxruntime(frames: np.ndarray) -> np.ndarray:
    """EfficientNet-Lite0's logits from a plain onnxruntime session on the zoo's float ONNX
    model, fed the same RGBx frames normalised as its record says (NCHW float32)."""
    import onnxruntime as ort

    from copyless.model import zoo

    prep = zoo.preprocessing("efficientnet-lite0")
    mean = np.asarray(prep.mean, np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(prep.std, np.float32).reshape(1, 3, 1, 1)
    x = (frames[..., :3].transpose(0, 3, 1, 2).astype(np.float32) - mean) / std
    session = ort.InferenceSession(str(zoo.build("efficientnet-lite0", progress=False)),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x[i : i + 1]})[0] for i in range(len(x))])


def test_decoding_in_the_actor_gives_plain_onnxruntime_classes_on_photos(
    photo_folder, batch_model, tmp_path
) -> None:
    """decode="path": the photos decoded in the Predictor's pipeline, straight into the
    engine's batch tensor; a bad file is an error row that never runs; 10 good photos on
    a batch-8 model: one full job in place, a tail of 2 gathered. (A row that fails in
    prepare leaves its job a row short: the bad file comes last here.)"""
    from copyless.ray import FrameSpec, decode_frames

    _, expected = photo_folder
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff" + bytes(64))
    paths = [*sorted(expected), str(bad)]
    batch = {"path": np.array(paths, dtype=object), "n": np.arange(len(paths))}
    with Predictor(batch_model, top_k=3, decode="path", runner_type=ORT) as predictor:
        out = predictor(batch)
        assert (predictor.frames_in_place, predictor.frames_gathered) == (8, 2)
        assert predictor.frames_copied == 0
    assert list(out["path"]) == paths and list(out["n"]) == list(range(len(paths)))
    good = [i for i, p in enumerate(paths) if p != str(bad)]
    frames = decode_frames({"path": np.array(paths, dtype=object)},
                           FrameSpec.for_model(batch_model))["pixels"][good]  # fmt: skip
    plain = _plain_onnxruntime(frames)
    for row, logits in zip(good, plain, strict=True):
        top = softmax_topk(logits[np.newaxis], 3)
        assert list(out["top_class_ids"][row]) == [class_id for class_id, _ in top]
        np.testing.assert_allclose(out["top_scores"][row], [p for _, p in top], atol=2e-3)
        assert out["class_id"][row] in expected[paths[row]] and out["error"][row] == ""
    broken = paths.index(str(bad))
    assert "not a decodable image" in out["error"][broken]
    assert out["class_id"][broken] == -1 and np.isnan(out["top_scores"][broken]).all()


def test_calls_from_two_threads_share_the_pipeline(rgbx_b4) -> None:
    """Ray Data calls an actor from two threads at once: both calls' rows go through the
    one pipeline (a call's tail may share a job with the other's head); each call gets its
    own rows' results."""
    import threading

    frames = [_frames(6), _frames(7)]
    outs: dict[int, dict[str, np.ndarray]] = {}
    with Predictor(rgbx_b4, runner_type=ORT) as predictor:

        def call(i: int) -> None:
            outs[i] = predictor({"pixels": frames[i]})

        threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert predictor.frames_in_place + predictor.frames_gathered == 13
        assert predictor.frames_copied == 13 and predictor.frames_in_place % 4 == 0
    for i in range(2):
        expected = _reference(rgbx_b4, frames[i])
        np.testing.assert_allclose(outs[i]["logits"], expected, rtol=1e-4, atol=1e-3)


def test_a_runner_failure_fails_the_batch_and_the_next_batch_runs(rgbx_b4) -> None:
    with Predictor(rgbx_b4, runner_type=ORT) as predictor:
        # the Pipeline runs its jobs with execute (execute_async on a native-async runner)
        real = predictor.runner.execute
        calls = {"n": 0}

        def failing(inputs, outputs, *args, **kwargs):  # the first job is refused
            calls["n"] += 1
            if calls["n"] == 1:
                return real([], [])
            return real(inputs, outputs, *args, **kwargs)

        predictor.runner.execute = failing
        with pytest.raises(PredictionError, match="a batch of 4 failed"):
            predictor({"pixels": _frames(4)})
        out = predictor({"pixels": _frames(4)})
    np.testing.assert_allclose(out["logits"], _reference(rgbx_b4, _frames(4)), atol=1e-3)
