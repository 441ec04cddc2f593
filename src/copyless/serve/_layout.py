"""A model's folder in the repository: its versions on disk and its policy.

Two layouts, as API.md fixes them:

* flat: ``MODEL/model.rai`` (or ``MODEL/vaiml_par_0/``): one version, ``1``;
* Triton's: ``MODEL/1/model.rai``, ``MODEL/2/...``: one version per folder named by a
  number, each holding a compiled model.

An optional ``MODEL/config.pbtxt`` is read as Triton reads it (its ``ModelConfig``, through the
protocol modules tritonclient ships) for what applies to copyless: ``version_policy``
(``latest { num_versions }``, ``all {}``, ``specific { versions }``; Triton's default: the
latest one) and ``dynamic_batching``'s queue policy (``max_queue_delay_microseconds``,
``priority_levels``, ``default_priority_level``, ``default_queue_policy { max_queue_size,
default_timeout_microseconds, allow_timeout_override }``), and ``backend`` with its
``parameters`` (``copyless-ocr``, ``copyless-crops``: chains, :mod:`._chain`). A config
that does not parse, or a policy naming versions the folder lacks, is that model's one
error line; the other models are served.

A version's *signature* (its files' names, sizes and modification times) tells a poll that
a version was replaced in place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import Error as ProtobufError
from tritonclient.grpc import model_config_pb2

from ..types import ModelLoadError

__all__ = ["CONFIG_FILE", "ModelPolicy", "holds_model", "read_policy", "signature",
           "versions_on_disk"]  # fmt: skip

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.pbtxt"
_PARTITIONS = ("vaiml_par_0", "par_0")
#: A version's files: what changes when it is replaced.
Signature = tuple[tuple[str, int, int], ...]


def holds_model(folder: Path) -> bool:
    """Whether ``folder`` holds a compiled model (a ``.rai`` or a partition directory)."""
    try:
        if any((folder / name).is_dir() for name in _PARTITIONS):
            return True
        return any(p.suffix == ".rai" and p.is_file() for p in folder.iterdir())
    except OSError:
        return False


def versions_on_disk(folder: Path) -> dict[int, Path]:
    """Version -> its folder: numbered subfolders holding a model (Triton's layout), else
    ``{1: folder}`` for a flat one, else empty."""
    numbered = {}
    try:
        children = list(folder.iterdir())
    except OSError:
        return {}
    for child in children:
        if child.name.isdigit() and child.is_dir() and holds_model(child):
            numbered[int(child.name)] = child
    if numbered:
        return dict(sorted(numbered.items()))
    return {1: folder} if holds_model(folder) else {}


def signature(folder: Path) -> Signature:
    """The files of a version folder (recursively): name, size, modification time."""
    rows = []
    for path in sorted(folder.rglob("*")):
        if path.parent != folder and path.parent.name.isdigit() and path.parent.parent == folder:
            continue  # another version's folder (a flat model never has numbered ones)
        try:
            info = path.stat()
        except OSError:
            continue
        if path.is_file():
            rows.append((str(path.relative_to(folder)), info.st_size, info.st_mtime_ns))
    return tuple(rows)


@dataclass(frozen=True, slots=True)
class ModelPolicy:
    """What a model's ``config.pbtxt`` says (see the module docstring); ``None`` fields: the
    server's settings decide."""

    versions: str = "latest"  # latest | all | specific
    latest: int = 1
    specific: tuple[int, ...] = ()
    max_queue_size: int | None = None
    max_queue_delay_ms: float | None = None
    priority_levels: int = 0
    default_priority: int = 0
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    backend: str = ""  # a chain (._chain: copyless-ocr, copyless-crops), not a model
    parameters: tuple[tuple[str, str], ...] = ()  # the config's string parameters

    def timeout_us(self, requested: int) -> int:
        """A request's queue timeout, microseconds (0: none): its own where the model sets
        none; the model's default where it sets one, shortened by the request's own only
        where ``allow_timeout_override`` (Triton's rule)."""
        if not requested or not self.default_timeout_us:
            return requested or self.default_timeout_us
        if self.allow_timeout_override:
            return min(requested, self.default_timeout_us)
        return self.default_timeout_us

    def select(self, available: dict[int, Path]) -> list[int]:
        """The versions to serve among ``available``; raises :class:`ModelLoadError` for a
        policy naming versions the folder lacks."""
        if self.versions == "all":
            return sorted(available)
        if self.versions == "specific":
            missing = sorted(set(self.specific) - set(available))
            if missing:
                raise ModelLoadError(
                    f"its version policy names version(s) {missing}, which the folder lacks "
                    f"(it has {sorted(available) or 'none'})"
                )
            return sorted(self.specific)
        return sorted(available)[-self.latest :]


def read_policy(folder: Path) -> ModelPolicy:
    """The policy in ``folder/config.pbtxt`` (defaults without one); raises
    :class:`ModelLoadError` for one that does not parse or says nonsense."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        return ModelPolicy()
    try:
        config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    except (ProtobufError, UnicodeDecodeError, OSError) as exc:
        raise ModelLoadError(f"{path}: {exc}") from None
    choice = config.version_policy.WhichOneof("policy_choice")
    fields: dict[str, object] = {
        "backend": config.backend,
        "parameters": tuple(sorted((key, value.string_value)
                                   for key, value in config.parameters.items())),
    }
    if choice == "all":
        fields["versions"] = "all"
    elif choice == "specific":
        versions = tuple(int(v) for v in config.version_policy.specific.versions)
        if not versions:
            raise ModelLoadError(f"{path}: version_policy specific names no version")
        fields.update(versions="specific", specific=versions)
    elif choice == "latest":
        count = int(config.version_policy.latest.num_versions)
        if count < 1:
            raise ModelLoadError(f"{path}: version_policy latest needs num_versions >= 1")
        fields["latest"] = count
    if config.HasField("dynamic_batching"):
        batching = config.dynamic_batching
        queue = batching.default_queue_policy
        levels = int(batching.priority_levels)
        default = int(batching.default_priority_level)
        if levels and not 1 <= default <= levels:
            raise ModelLoadError(f"{path}: default_priority_level {default} is not one of the "
                                 f"{levels} priority levels")  # fmt: skip
        fields.update(
            max_queue_delay_ms=batching.max_queue_delay_microseconds / 1000,
            priority_levels=levels, default_priority=default,
            default_timeout_us=int(queue.default_timeout_microseconds),
            allow_timeout_override=bool(queue.allow_timeout_override),
        )  # fmt: skip
        if queue.max_queue_size:
            fields["max_queue_size"] = int(queue.max_queue_size)
    return ModelPolicy(**fields)  # type: ignore[arg-type]
