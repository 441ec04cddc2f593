"""The task record (copyless.model._task): recognised from the outputs, written by the
compiler, read back by task_of; bad input refused in one line. Small graphs built here;
the users' real exports are tests/model/test_user_models.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

import copyless as cl
from copyless.model import compile_model, load_model, task_of
from copyless.model._task import OutputDesc, recognise, yolo_anchors
from model_helpers import conv_net

F, I64 = cl.DataType.FLOAT32, cl.DataType.INT64


@pytest.mark.parametrize(
    ("outputs", "image", "task", "head"),
    [
        ([OutputDesc("logits", F, (1, 1000))], None, "classify", "logits"),
        ([OutputDesc("x", F, (1, 10, 1, 1))], None, "classify", "logits"),
        ([OutputDesc("out", F, (1, 21, 64, 64))], None, "segment", "scores"),
        ([OutputDesc("out", F, (1, 21, 64, 64)), OutputDesc("aux", F, (1, 21, 64, 64))], None,
         "segment", "scores"),
        ([OutputDesc("mask", cl.DataType.UINT8, (1, 64, 64))], None, "segment", "mask"),
        ([OutputDesc("map", F, (1, 1, 64, 64))], None, "text", "map"),
        ([OutputDesc("output0", F, (1, 84, yolo_anchors(320, 320)))], (320, 320), "detect",
         "yolo"),
        ([OutputDesc("a", F, (-1, 4)), OutputDesc("b", I64, (-1,)), OutputDesc("c", F, (-1,))],
         None, "detect", "decoded"),
        ([OutputDesc("output0", F, (1, 84, 2101))], (320, 320), None, None),
        ([OutputDesc("x", F, (1, 4, 5))], None, None, None),
    ],
)  # fmt: skip
def test_outputs_are_recognised(
    outputs: list[OutputDesc], image: tuple[int, int] | None, task: str | None, head: str | None
) -> None:
    found = recognise(outputs, image)
    assert (found.task, found.head) == (task, head)


def test_decoded_roles_follow_dtype_and_shape_when_names_say_nothing() -> None:
    found = recognise([OutputDesc("3", I64, (-1,)), OutputDesc("1", F, (-1, 4)),
                       OutputDesc("2", F, (-1,))])  # fmt: skip
    assert dict(found.roles) == {"boxes": "1", "scores": "2", "classes": "3"}


def _segmenter(classes: int = 5, size: int = 16) -> onnx.ModelProto:
    """x [1, 3, s, s] -> out [1, classes, s, s] (a 1x1 Conv): per-pixel class scores."""
    rng = np.random.default_rng(1)
    w = onh.from_array(rng.standard_normal((classes, 3, 1, 1)).astype(np.float32), "w")
    graph = oh.make_graph([oh.make_node("Conv", ["x", "w"], ["out"])], "seg",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                     [1, 3, size, size])],
                          [oh.make_tensor_value_info("out", onnx.TensorProto.FLOAT,
                                                     [1, classes, size, size])], [w])  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _unbatched(side: int = 32) -> onnx.ModelProto:
    """images [3, s, s] -> logits [1, 4] (torchvision's detection export takes [3, H, W])."""
    w = onh.from_array(np.ones((4, 3), np.float32), "w")
    nodes = [oh.make_node("ReduceMean", ["images"], ["m"], axes=[1, 2], keepdims=0),
             oh.make_node("Unsqueeze", ["m", "zero"], ["u"]),
             oh.make_node("Gemm", ["u", "w"], ["logits"], transB=1)]  # fmt: skip
    zero = onh.from_array(np.array([0], np.int64), "zero")
    graph = oh.make_graph(nodes, "unbatched",
                          [oh.make_tensor_value_info("images", onnx.TensorProto.FLOAT,
                                                     [3, side, side])],
                          [oh.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 4])],
                          [w, zero])  # fmt: skip
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_a_classifier_records_its_task_labels_and_usual_preprocessing(tmp_path: Path) -> None:
    names = [f"n{i}" for i in range(10)]
    out = compile_model(conv_net(), tmp_path / "c.rai", input_format="rgbx", mean=(1, 2, 3),
                        std=(4, 5, 6), labels=names)  # fmt: skip
    record = task_of(out)
    assert (record.task, record.head, record.classes) == ("classify", "logits", 10)
    assert record.labels == tuple(names) and record.output("logits") == "logits"
    pre = record.preprocessing
    assert pre.colour_order == "RGB" and str(pre.resize) == "crop:0.875" and not pre.missing()
    assert cl.model.class_names(load_model(out)) == names


def test_a_segmenter_gets_its_argmax_folded_in(tmp_path: Path) -> None:
    model = _segmenter()
    plain = task_of(compile_model(model, tmp_path / "plain.rai"))  # recognised, not folded
    assert (plain.task, plain.head, plain.output("class_scores")) == ("segment", "scores", "out")
    out = compile_model(model, tmp_path / "s.rai", task="segment")
    record = task_of(out)
    assert (record.task, record.head, record.classes) == ("segment", "mask", 5)
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    import onnxruntime as ort

    scores = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    with cl.RunnerFactory.create_runner(out, runner_type=cl.RunnerType.ONNXRUNTIME) as runner:
        (i,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        (o,) = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        assert o.name == "mask" and o.data_type is cl.DataType.UINT8 and o.shape == (1, 16, 16)
        xt, yt = runner.allocate_npu_tensor(i), runner.allocate_npu_tensor(o)
        xt.numpy()[...] = x
        assert runner.execute([[xt]], [[yt]]) is cl.StatusCode.SUCCESS
        assert np.array_equal(yt.numpy(), scores.argmax(1))


def test_a_model_without_batch_dimension_gets_one_recorded(tmp_path: Path) -> None:
    out = compile_model(_unbatched(), tmp_path / "u.rai", input_format="rgbx")
    record = task_of(out)
    assert record.batch_added
    (spec,) = load_model(out).inputs
    assert spec.cpu.shape == (1, 3, 32, 32) and spec.hw.shape == (1, 32, 32, 4)
    with pytest.raises(cl.UnsupportedError, match=r"no batch dimension.*batch 1 only"):
        compile_model(_unbatched(), tmp_path / "u4.rai", batch_size=4)
    small = compile_model(_unbatched(8), tmp_path / "small.rai")  # [3, 8, 8]: no image
    assert not task_of(small).batch_added and load_model(small).inputs[0].cpu.shape == (3, 8, 8)


def test_a_task_the_outputs_contradict_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(cl.UnsupportedError) as caught:
        compile_model(conv_net(), tmp_path / "x.rai", task="segment")
    line = str(caught.value)
    assert "\n" not in line and "logits FLOAT32 [1, 10]" in line
    assert "a classify model's" in line and "[N, C, H, W]" in line


def test_an_unrecognised_layout_is_refused_naming_what_each_task_expects(tmp_path: Path) -> None:
    graph = oh.make_graph([oh.make_node("Identity", ["x"], ["y"])], "odd",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 5])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 5])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    for task in cl.model.TASKS:
        with pytest.raises(cl.UnsupportedError, match=r"y FLOAT32 \[1, 4, 5\]\) fit no task"):
            compile_model(model, tmp_path / "odd.rai", task=task)
    plain = compile_model(model, tmp_path / "odd.rai")  # no task asked: compiles, none recorded
    assert task_of(plain).task is None


def test_labels_of_the_wrong_length_are_refused(tmp_path: Path) -> None:
    with pytest.raises(cl.OptionError, match=r"labels: 3 names, but the outputs .* have 10"):
        compile_model(conv_net(), tmp_path / "x.rai", labels=["a", "b", "c"])
    names = tmp_path / "names.txt"
    names.write_text("a\nb\n")
    with pytest.raises(cl.OptionError, match="2 names"):
        compile_model(_segmenter(), tmp_path / "s.rai", labels=str(names), task="segment")


def test_thresholds_need_a_head_the_compiler_decodes(tmp_path: Path) -> None:
    with pytest.raises(cl.OptionError, match="apply to a detector"):
        compile_model(conv_net(), tmp_path / "x.rai", score_threshold=0.3)


def test_a_model_compiled_before_the_record_gets_one_from_its_outputs(tmp_path: Path) -> None:
    out = compile_model(conv_net(), tmp_path / "c.rai")
    model = load_model(out)
    metadata = {k: v for k, v in model.metadata.items() if k != "task"}
    metadata["labels"] = json.dumps([str(i) for i in range(10)])
    old = cl.CompiledModel(model.name, model.inputs, model.outputs, model.partitions,
                           metadata=metadata)  # fmt: skip
    record = task_of(old)
    assert (record.task, record.classes, record.labels[:2]) == ("classify", 10, ("0", "1"))
