"""One model naming across the apps: every built-in name an app's ``-m`` takes is a
``copyless-zoo --list`` name or a detector's task name for one, and either spelling works."""

from __future__ import annotations

from pathlib import Path

import pytest

from copyless.apps import detect, infer_async, zerocopy
from copyless.apps._models import CLASSIFIER, TASK_MODELS, builtin_alias
from copyless.apps.video._tasks import BUILTIN as VIDEO_MODELS
from copyless.model import zoo

APPS = {
    "copyless-zerocopy": zerocopy.MODELS,
    "copyless-detect": detect.TASKS,
    "copyless-video": VIDEO_MODELS,
    "copyless-infer-async": infer_async.MODELS,
    "copyless-batch": (CLASSIFIER,),
}


@pytest.mark.parametrize("app", list(APPS))
def test_every_builtin_name_is_a_zoo_name_or_its_task(app: str) -> None:
    for name in APPS[app]:
        assert TASK_MODELS.get(name, name) in zoo.names(), (app, name)


@pytest.mark.parametrize("app", list(APPS))
def test_the_zoo_name_and_the_task_name_are_one(app: str) -> None:
    accepted = APPS[app]
    for task, zoo_name in TASK_MODELS.items():
        if task in accepted or zoo_name in accepted:
            assert builtin_alias(task, accepted) in accepted
            assert builtin_alias(zoo_name, accepted) in accepted
            assert builtin_alias(task, accepted) == builtin_alias(zoo_name, accepted)


def test_a_path_is_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert builtin_alias("face", detect.TASKS) == "face"
    Path("face").mkdir()  # a compiled model folder of that name
    assert builtin_alias("face", detect.TASKS) is None
    assert builtin_alias("no-such-model", detect.TASKS) is None
    assert builtin_alias(None, detect.TASKS) is None


def test_detect_takes_the_zoo_name(tmp_path: Path) -> None:
    args = detect.parse_args(["-i", "x.jpg", "-m", "centerface"])
    assert (args.model, args.model_dir) == ("face", None)
    args = zerocopy.parse_args(["-i", "x.jpg", "-m", "text"])
    assert (args.model, args.model_dir) == ("ppocr-det", None)
