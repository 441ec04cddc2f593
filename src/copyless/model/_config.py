"""The configuration file of a compilation (VART-ML's ``vitis_ai_config.json``)::

    {"compiler": {"input_format": "rgbx", "mean": [127, 127, 127], "std": [128, 128, 128]},
     "runner":   {"max_concurrent_runs": 4}}

``copyless-compile --config-json FILE`` compiles with the "compiler" section (flags given
on the command line win). The runner option ``config_json`` reads the same file: its
"runner" section gives runner options (keys given to ``create_runner`` win), and its
"compiler" section is checked against the options the compiled model records, so a runner
never silently runs a model compiled otherwise than the file says. A file with neither
section (a Vitis AI ``vitis_ai_config.json`` with "passes", "target", ...; or runner
options of earlier copyless versions) gives the runner options among its top-level keys;
the runner names the keys it ignores once, in a warning. Not JSON, or not an object:
OptionError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..types import OptionError
from ._compiled import CompiledModel
from ._options import _KNOWN, parse_options

SECTIONS = ("compiler", "runner")
#: Compiler keys that name inputs of the compilation, not properties of its result.
_INPUTS_ONLY = ("calibration", "validation", "name", "labels")


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A configuration file's sections (each a plain JSON object)."""

    path: str
    compiler: dict[str, Any] = field(default_factory=dict)
    runner: dict[str, Any] = field(default_factory=dict)
    #: False for a file with no copyless section (a Vitis AI config, or an earlier
    #: copyless's runner options): ``runner`` then holds every top-level key.
    sectioned: bool = True
    #: Top-level keys beside copyless's sections, which copyless ignores.
    ignored: tuple[str, ...] = ()


def read_config(path: str | os.PathLike[str]) -> ConfigFile:
    """Read and check a configuration file; OptionError names what is wrong."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError, RecursionError) as exc:
        raise OptionError(f"config_json: cannot read {where!r}: {exc}") from exc
    if not isinstance(data, dict):
        raise OptionError(f"config_json: {where!r} does not hold a JSON object")
    if not any(key in data for key in SECTIONS):
        return ConfigFile(where, runner=data, sectioned=False)
    ignored = tuple(sorted(set(data) - set(SECTIONS)))
    sections = [data.get(name, {}) for name in SECTIONS]
    for name, section in zip(SECTIONS, sections, strict=True):
        if not isinstance(section, dict):
            raise OptionError(f"config_json: {where!r}: section {name!r} is not an object")
    compiler, runner = sections
    bad = sorted(set(compiler) - _KNOWN)
    if bad:
        raise OptionError(
            f"config_json: {where!r}: unknown compiler option(s) {bad}; known: {sorted(_KNOWN)}"
        )
    return ConfigFile(where, compiler, runner, ignored=ignored)


def check_compiled_with(model: CompiledModel, config: ConfigFile) -> None:
    """OptionError when ``model`` was not compiled as ``config``'s "compiler" section says."""
    if not config.compiler:
        return
    record = model.metadata.get("options")
    if record is None:
        raise OptionError(
            f"config_json: {config.path!r} has a 'compiler' section but model "
            f"{model.name!r} records no compiler options to check it against"
        )
    recorded = json.loads(record)
    defaults = parse_options({}).to_json()
    wanted = _recorded_form(config.compiler, config.path)
    for key in sorted(set(config.compiler) - set(_INPUTS_ONLY)):
        have = recorded.get(key, defaults.get(key))
        if _plain(wanted[key]) != _plain(have):
            raise OptionError(
                f"config_json: {config.path!r} says {key}={config.compiler[key]!r} but model "
                f"{model.name!r} was compiled with {key}={have!r}"
            )
    name = config.compiler.get("name")
    if name is not None and str(name) != model.name:
        raise OptionError(
            f"config_json: {config.path!r} names model {name!r}, this model is {model.name!r}"
        )


def _recorded_form(section: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The section's values as the compiler records them (``CompileOptions.to_json``). A
    reduced precision needs calibration images to parse, which the check does not read: a
    stand-in takes their place."""
    raw = {k: v for k, v in section.items() if k not in _INPUTS_ONLY}
    if raw.get("precision") not in (None, "fp32") or raw.get("quantize") is not None:
        raw["calibration"] = [_STAND_IN]
    try:
        return parse_options(raw).to_json()
    except OptionError as exc:
        raise OptionError(f"config_json: {where!r}: {exc}") from exc


#: The calibration image a reduced precision's options are parsed with (never read).
_STAND_IN = object()


def _plain(value: Any) -> Any:
    """A JSON round trip: tuples and lists compare equal, as they do in the record."""
    return json.loads(json.dumps(value))
