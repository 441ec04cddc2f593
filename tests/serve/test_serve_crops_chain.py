"""A detector and a classifier of its crops served as one model (backend "copyless-crops"):
a photo in as JPEG bytes, its objects out, each with its crop's class, equal to running the
two compiled models one after the other at the client (copyless.vision's decode and
preparers, the crops cut with PIL); a photo with nothing found is an empty answer; a missing
part or a detector without a task record is the model's one reason, the others serve."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image
from serve_helpers import start

import copyless as cl
from copyless.apps._models import builtin_classifier
from copyless.serve import InferenceServer
from copyless.vision import decode, detections, preparer_for, softmax_topk, to_image
from detector_helpers import draw_document

FRAME = (800, 608)
CONFIG = ('backend: "copyless-crops"\n'
          'parameters { key: "min_score" value { string_value: "0.3" } }\n')  # fmt: skip


def _place(part: Path, folder: Path) -> None:
    folder.mkdir(parents=True)
    if part.is_dir():
        shutil.copytree(part, folder, dirs_exist_ok=True)
    else:
        shutil.copy(part, folder / part.name)


@pytest.fixture(scope="module")
def parts(object_detector: Callable[..., Path]) -> tuple[Path, Path]:
    return object_detector("picodet-layout", FRAME), builtin_classifier(progress=False)


@pytest.fixture(scope="module")
def crops_server(parts: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[InferenceServer]:  # fmt: skip
    root = tmp_path_factory.mktemp("crops")
    _place(parts[0], root / "layout" / "detector")
    _place(parts[1], root / "layout" / "classifier")
    (root / "layout" / "config.pbtxt").write_text(CONFIG)
    served = start(root)
    yield served
    served.stop()


def _jpeg(image: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(image).save(out, "JPEG", quality=92)
    return out.getvalue()


def _expected(parts: tuple[Path, Path], data: bytes) -> list[tuple[list[float], float, int, int]]:
    """The two models run one after the other at the client: (box, score, class, crop's
    class) for each detection scoring at least 0.3."""
    photo = decode(data)
    found = []
    with cl.RunnerFactory.create_runner(parts[0], None, cl.RunnerType.ONNXRUNTIME) as det:
        (info,) = det.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        x = det.allocate_npu_tensor(info)
        outs = {o.name: det.allocate_npu_tensor(o)
                for o in det.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)}
        prepare = preparer_for(det, info)
        placed = prepare(photo, x)
        assert det.execute([[x]], [list(outs.values())]) is cl.StatusCode.SUCCESS
        roles = dict(cl.model.task_of(det.model).roles)
        scores = outs[roles["scores"]]
        rows = detections(outs[roles["boxes"]], scores, outs[roles["classes"]], [],
                          count=scores.produced_shape[0])  # fmt: skip
        for d in to_image(rows, prepare.to_photo(placed, photo.shape[:2])):
            if d.box.score >= 0.3:
                found.append(d)
    answers = []
    pil = Image.fromarray(photo)
    with cl.RunnerFactory.create_runner(parts[1], None, cl.RunnerType.ONNXRUNTIME) as cls:
        (info,) = cls.get_tensors_info(cl.TensorDirection.INPUT, cl.TensorType.HW)
        (out_info,) = cls.get_tensors_info(cl.TensorDirection.OUTPUT, cl.TensorType.HW)
        x, y = cls.allocate_npu_tensor(info), cls.allocate_npu_tensor(out_info)
        prepare = preparer_for(cls, info)
        for d in found:
            b = d.box
            box = (int(np.floor(b.x0)), int(np.floor(b.y0)), int(np.ceil(b.x1)),
                   int(np.ceil(b.y1)))  # fmt: skip
            prepare(np.asarray(pil.crop(box)), x)
            assert cls.execute([[x]], [[y]]) is cl.StatusCode.SUCCESS
            ((label, _),) = softmax_topk(y, 1, cls.get_quant_parameters(out_info.name))
            answers.append(([b.x0, b.y0, b.x1, b.y1], b.score, d.class_id, label))
    return answers


@pytest.mark.parametrize("kind", ["http", "grpc"])
def test_a_photo_in_its_objects_and_their_classes_out(
    crops_server: InferenceServer, parts: tuple[Path, Path], kind: str
) -> None:
    module = {"http": httpclient, "grpc": grpcclient}[kind]
    client = module.InferenceServerClient(crops_server.url(kind))
    data = _jpeg(draw_document(3, FRAME))
    given = module.InferInput("page", [1], "BYTES")
    given.set_data_from_numpy(np.array([data], dtype=object))
    result = client.infer("layout", [given])
    expected = _expected(parts, data)
    assert len(expected) >= 3  # title, text blocks, table
    np.testing.assert_allclose(result.as_numpy("boxes"), [e[0] for e in expected], atol=1e-3)
    np.testing.assert_allclose(result.as_numpy("scores"), [e[1] for e in expected], rtol=1e-5)
    assert result.as_numpy("classes").tolist() == [e[2] for e in expected]
    assert result.as_numpy("label_ids").tolist() == [e[3] for e in expected]
    labels = [t.decode() for t in result.as_numpy("labels")]
    assert all(labels) and len(labels) == len(expected)
    assert ((result.as_numpy("label_scores") > 0) & (result.as_numpy("label_scores") <= 1)).all()


def test_nothing_found_is_an_empty_answer_and_bad_photos_one_400(
    crops_server: InferenceServer,
) -> None:
    client = grpcclient.InferenceServerClient(crops_server.url("grpc"))
    blank = grpcclient.InferInput("page", [1], "BYTES")
    blank.set_data_from_numpy(np.array([_jpeg(np.full((400, 300, 3), 255, np.uint8))],
                                       dtype=object))  # fmt: skip
    result = client.infer("layout", [blank])
    assert result.as_numpy("boxes").shape == (0, 4)
    assert result.as_numpy("labels").shape == (0,)
    bad = grpcclient.InferInput("page", [1], "BYTES")
    bad.set_data_from_numpy(np.array([b"no photo"], dtype=object))
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match="input 'page'"):
        client.infer("layout", [bad])
    assert len(client.infer("layout", [blank]).as_numpy("scores")) == 0  # it goes on


def test_a_missing_part_is_the_models_one_reason(parts: tuple[Path, Path],
                                                 tmp_path: Path) -> None:  # fmt: skip
    from copyless.serve import Address, ServeSettings

    _place(parts[1], tmp_path / "nothing" / "classifier")
    (tmp_path / "nothing" / "config.pbtxt").write_text('backend: "copyless-crops"\n')
    _place(parts[1], tmp_path / "backwards" / "detector")  # a classifier as the detector
    _place(parts[1], tmp_path / "backwards" / "classifier")
    (tmp_path / "backwards" / "config.pbtxt").write_text('backend: "copyless-crops"\n')
    server = InferenceServer(tmp_path, http=Address("127.0.0.1", 0), grpc_address=None,
                             metrics=None, settings=ServeSettings())  # fmt: skip
    server.start()
    try:
        server.wait_ready(60)
        rows = {row["name"]: row for row in server.service.index()}
        assert rows["nothing"]["state"] == "UNAVAILABLE"
        assert "the detector is missing" in rows["nothing"]["reason"], rows
        assert rows["backwards"]["state"] == "UNAVAILABLE"
        assert "compile it with --task detect" in rows["backwards"]["reason"], rows
    finally:
        server.stop()
