"""copyless.model.class_names: the one rule that names a compiled model's classes (the user's
file, the model's record, a zoo model's own names, else none)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from copyless.model import class_names, compile_to_memory, read_class_names, zoo
from copyless.types import OptionError
from model_helpers import conv_net


def test_a_user_model_has_no_names_until_its_file_gives_them(tmp_path: Path) -> None:
    model = compile_to_memory(conv_net(), name="mine")  # [N, 10] logits, no record
    assert class_names(model) == []
    names = tmp_path / "names.txt"
    names.write_text("".join(f" class {chr(97 + i)}\n" for i in range(10)) + "\n\n")
    assert class_names(model, names) == [f"class {chr(97 + i)}" for i in range(10)]


@pytest.mark.parametrize(
    ("text", "reason"),
    [("a\nb\n", "has 2 names; mine has 10 classes"), ("", "has no name"),
     ("a\n\nb\n", "has an empty line 2")],
)  # fmt: skip
def test_a_names_file_that_does_not_fit_is_one_clear_error(
    tmp_path: Path, text: str, reason: str
) -> None:
    model = compile_to_memory(conv_net(), name="mine")
    names = tmp_path / "names.txt"
    names.write_text(text)
    with pytest.raises(OptionError, match=reason):
        class_names(model, names)
    with pytest.raises(OptionError, match="cannot read"):
        read_class_names(tmp_path / "none.txt")


def test_the_record_names_a_detector_and_the_zoo_its_own_models() -> None:
    model = compile_to_memory(conv_net(), name="mine")
    record = {**json.loads(model.metadata["task"]), "labels": ["cat", "dog"]}
    recorded = dataclasses.replace(model, metadata={**model.metadata, "task": json.dumps(record)})
    assert class_names(recorded) == ["cat", "dog"]
    # a model compiled before the task record: its "labels" key
    legacy = {k: v for k, v in model.metadata.items() if k != "task"}
    older = dataclasses.replace(model, metadata={**legacy, "labels": json.dumps(["cat", "dog"])})
    assert class_names(older) == ["cat", "dog"]
    lite0 = compile_to_memory(zoo.build("efficientnet-lite0", progress=False))
    names = class_names(lite0)
    assert len(names) == 1000 and names[285] == "Egyptian cat"
    # the zoo's file, renamed by the user: no longer known as the zoo's model
    assert class_names(compile_to_memory(zoo.build("efficientnet-lite0", progress=False),
                                         name="lite0")) == []  # fmt: skip
