"""The preprocessing a compiled model records for the apps (copyless.model._preprocessing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import copyless as cl
from copyless.apps import compile as compile_cli
from copyless.model import compile_model, compile_to_memory, load_model
from copyless.model._preprocessing import (
    KEY,
    InputPreprocessing,
    ResizePolicy,
    preprocessing_of,
)
from model_helpers import conv_net

MEAN, STD = (123.675, 116.28, 103.53), (58.395, 57.12, 57.375)


def test_rgbx_model_records_everything_it_was_told(tmp_path: Path) -> None:
    path = compile_model(
        conv_net(size=16), tmp_path / "m.rai", input_format="rgbx", mean=MEAN, std=STD,
        resize="crop:0.875", colour_order="bgr",
    )  # fmt: skip
    pre = preprocessing_of(load_model(path).metadata)  # through the .rai file and back
    assert pre == InputPreprocessing(
        mean=MEAN, std=STD, colour_order="BGR", resize=ResizePolicy("crop", 0.875),
        normalization="graph", resize_in="host", frame=(16, 16),
    )  # fmt: skip
    assert pre.missing() == []


def test_what_is_not_told_is_named_missing() -> None:
    bare = preprocessing_of(compile_to_memory(conv_net(size=16), input_format="rgbx").metadata)
    assert bare.missing() == ["mean/std", "colour order", "resize policy"]
    host = compile_to_memory(conv_net(size=16), mean=MEAN, std=STD, resize="letterbox")
    pre = preprocessing_of(host.metadata)  # no input_format: the app must normalise
    assert pre.normalization == "host" and pre.resize == ResizePolicy("letterbox", fill=114)
    # mean/std given and no colour order: the task's usual one (a classifier's RGB) recorded
    assert pre.missing() == [] and pre.colour_order == "RGB"


def test_graph_resized_frames_are_recorded_as_such() -> None:
    model = compile_to_memory(
        conv_net(size=16), input_format="rgbx", input_size=(32, 48), mean=MEAN, std=STD,
        resize="stretch", colour_order="rgb",
    )  # fmt: skip
    pre = preprocessing_of(model.metadata)
    assert (pre.resize_in, pre.frame, str(pre.resize)) == ("graph", (32, 48), "stretch")


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("crop", ResizePolicy("crop")),
        ("CROP:0.5", ResizePolicy("crop", crop_fraction=0.5)),
        ("letterbox:0", ResizePolicy("letterbox", fill=0)),
        (" stretch ", ResizePolicy("stretch")),
    ],
)
def test_resize_policies_parse(text: str, policy: ResizePolicy) -> None:
    assert ResizePolicy.parse(text) == policy
    assert ResizePolicy.parse(str(policy)) == policy


BAD_POLICIES = ["squash", "crop:0", "crop:1.5", "crop:x", "letterbox:300", "letterbox:1.5",
                "stretch:2", "crop:nan", 7]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_POLICIES)
def test_bad_resize_policies_are_option_errors(bad: object) -> None:
    with pytest.raises(cl.OptionError, match="resize"):
        compile_to_memory(conv_net(size=16), resize=bad)


def test_bad_colour_order_is_an_option_error() -> None:
    with pytest.raises(cl.OptionError, match="colour_order"):
        compile_to_memory(conv_net(size=16), colour_order="rgba")


def test_models_from_before_the_record_and_broken_records() -> None:
    old = {"options": json.dumps({"input_format": "rgbx", "mean": list(MEAN), "std": None})}
    pre = preprocessing_of(old)  # an older copyless recorded only its options
    assert pre.normalization == "graph" and pre.mean == MEAN and pre.std == (1.0, 1.0, 1.0)
    assert pre.missing() == ["colour order", "resize policy"]
    assert preprocessing_of({}).missing() == ["mean/std", "colour order", "resize policy"]
    for broken in ("{", "[]", '{"resize": {"policy": "zoom"}}', '{"colour_order": "RGBA"}',
                   '{"mean": [1, 2]}', '{"normalization": "maybe"}'):  # fmt: skip
        assert preprocessing_of({KEY: broken}) == InputPreprocessing()


def test_compile_cli_records_the_flags(tmp_path: Path) -> None:
    import onnx

    source = tmp_path / "m.onnx"
    onnx.save(conv_net(size=16), str(source))
    out = tmp_path / "m.rai"
    argv = [str(source), "-o", str(out), "--input-format", "rgbx", "--mean", "127,127,127",
            "--std", "128,128,128", "--resize", "letterbox:0", "--colour-order", "bgr"]  # fmt: skip
    assert compile_cli.main(argv) == 0
    pre = preprocessing_of(load_model(out).metadata)
    assert (pre.colour_order, str(pre.resize), pre.mean) == ("BGR", "letterbox:0", (127.0,) * 3)
    assert compile_cli.main([*argv[:-4], "--resize", "zoom"]) == 2


def test_shrinking_frames_in_the_graph_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="copyless.model._preprocessing"):
        compile_to_memory(conv_net(size=16), input_format="rgbx", input_size=(24, 24))
        assert not caplog.records  # 1.5x: fine
        compile_to_memory(conv_net(size=16), input_format="rgbx", input_size=(32, 40))
    (record,) = caplog.records
    message = record.getMessage()
    assert "slower than resizing on the host" in message and "2.0x" in message
