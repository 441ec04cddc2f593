"""A model repository: one subdirectory per model, named as the model, holding its versions
(:mod:`._layout`: flat or Triton's numbered folders, an optional ``config.pbtxt``).

Models load on a thread of their own, after the server is listening: meanwhile each is
LOADING and the server is not ready (``/v2/health/ready`` false), as Triton reports it. A
model that fails to load is UNAVAILABLE with its reason; the others are served.

Model control, Triton's modes:

* ``none``: every model is loaded at start; the repository never changes under the server;
* ``poll``: the repository is scanned every ``poll_s`` seconds; new models load, removed ones
  unload, a version added, removed or replaced in place (its files changed) is loaded or
  unloaded as its policy says;
* ``explicit``: only the models named at start (``--load-model``; ``*``: all) load; the
  repository extension's ``load`` and ``unload`` calls do the rest.

Zero downtime: a version is loaded and warmed *before* it takes requests; then it replaces
its predecessor at once, and the predecessor answers what it had admitted before closing. A
version that fails to load leaves what was serving in place, with one error line. A request
that reached a version just as it was replaced is routed to its successor
(:class:`~._model.ModelRetired`), so a reload loses none.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..types import ModelLoadError, OptionError
from ._chain import CHAIN_BACKENDS, ServedChain
from ._errors import Refusal, RequestError
from ._layout import CONFIG_FILE, ModelPolicy, read_policy, signature, versions_on_disk
from ._metrics import ServeMetrics
from ._model import ModelState, Served, ServedModel
from ._settings import ServeSettings

__all__ = ["ControlMode", "ModelEntry", "ModelRepository", "find_models"]

logger = logging.getLogger(__name__)


class ControlMode(enum.Enum):
    """How the repository may change under a running server (Triton's
    ``--model-control-mode``)."""

    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


def _is_model_folder(folder: Path) -> bool:
    return bool(versions_on_disk(folder)) or (folder / CONFIG_FILE).is_file()


def find_models(repository: Path, required: bool = True) -> dict[str, Path]:
    """Model name -> its folder; raises :class:`ModelLoadError` for a repository that is
    not a directory, or (``required``) holds no model (folders without one are named in a
    warning)."""
    if not repository.is_dir():
        raise ModelLoadError(f"model repository {str(repository)!r} is not a directory")
    found, skipped = {}, []
    for folder in sorted(repository.iterdir()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        if _is_model_folder(folder):
            found[folder.name] = folder
        else:
            skipped.append(folder.name)
    if skipped:
        logger.warning("%s: skipped %s: no .rai or vaiml_par_0 inside (nor in a numbered "
                       "version folder)", repository, ", ".join(skipped))  # fmt: skip
    if not found and required:
        raise ModelLoadError(
            f"model repository {str(repository)!r} holds no model: each model is a "
            "subdirectory named as the model, with a compiled .rai or a vaiml_par_0 inside "
            "(or in numbered version folders: MODEL/1/, MODEL/2/)"
        )
    return found


@dataclass(frozen=True, slots=True)
class _Attempt:
    signature: tuple[object, ...]
    reason: str


class ModelEntry:
    """One model name: its folder and the versions it serves (thread-safe)."""

    def __init__(self, name: str, folder: Path, settings: ServeSettings,
                 metrics: ServeMetrics) -> None:  # fmt: skip
        self.name, self.folder = name, folder
        self._settings, self._metrics = settings, metrics
        self._served: dict[int, Served] = {}
        self._signatures: dict[int, tuple[object, ...]] = {}
        self._failed: dict[int, _Attempt] = {}
        self._loading: dict[int, Served] = {}
        self._error = ""
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()  # one load at a time per model
        self.loaded = False  # asked to load (explicit mode: by a load call)

    # -- state ---------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        with self._lock:
            return any(m.ready for m in self._served.values())

    @property
    def reason(self) -> str:
        """Why nothing serves ('' while something does)."""
        with self._lock:
            if any(m.ready for m in self._served.values()):
                return ""
            if self._loading:
                return "loading"
            failed = [f"version {v}: {a.reason}" for v, a in sorted(self._failed.items())]
            return self._error or "; ".join(failed) or ("not loaded" if not self.loaded
                                                          else "no version")  # fmt: skip

    def served(self) -> list[Served]:
        with self._lock:
            return [self._served[v] for v in sorted(self._served)]

    def versions(self) -> list[str]:
        """The versions serving now, oldest first."""
        with self._lock:
            return [str(v) for v, m in sorted(self._served.items()) if m.ready]

    def get(self, version: str) -> Served:
        """The served version ``version`` ('' : the newest one ready); NOT_FOUND else."""
        with self._lock:
            if not version:
                ready = [m for v, m in sorted(self._served.items()) if m.ready]
                if ready:
                    return ready[-1]
                if self._served:
                    return self._served[max(self._served)]
            elif version.isdigit() and int(version) in self._served:
                return self._served[int(version)]
            have = ", ".join(str(v) for v in sorted(self._served)) or "none"
        if not version:
            raise RequestError(Refusal.UNAVAILABLE, f"model {self.name!r} is not ready: "
                               f"{self.reason}")  # fmt: skip
        raise RequestError.not_found(f"model {self.name!r} has no version {version!r} "
                                     f"(serving: {have})")  # fmt: skip

    def index(self) -> list[dict[str, str]]:
        """Triton's repository index rows: one per version known (serving, loading, failed);
        one for the model when it has none."""
        with self._lock:
            rows: dict[int, dict[str, str]] = {}
            for v, attempt in self._failed.items():
                rows[v] = {"version": str(v), "state": ModelState.UNAVAILABLE.value,
                           "reason": attempt.reason}  # fmt: skip
            for v, model in {**self._served, **self._loading}.items():
                rows[v] = {"version": str(v), "state": model.state.value}
                if model.reason:
                    rows[v]["reason"] = model.reason
            error = self._error
        if not rows:
            return [{"name": self.name, "version": "", "state": ModelState.UNAVAILABLE.value,
                     "reason": error or ("not loaded" if not self.loaded else "no version")}]
        return [{"name": self.name, **rows[v]} for v in sorted(rows)]

    # -- loading -------------------------------------------------------------------------
    def sync(self) -> None:
        """Load what the folder and its policy ask for, replacing changed versions and
        unloading the others (see the module docstring). Never raises: a failure is one
        error line and the entry's reason."""
        with self._sync_lock:
            self.loaded = True
            try:
                policy = read_policy(self.folder)
                available = versions_on_disk(self.folder)
                if policy.backend in CHAIN_BACKENDS:  # a chain: it opens its own parts
                    available = {1: self.folder}
                elif policy.backend:
                    chains = " or ".join(repr(b) for b in CHAIN_BACKENDS)
                    raise ModelLoadError(f"backend {policy.backend!r} is not one copyless "
                                         f"serves (a compiled model, {chains})")
                wanted = policy.select(available)
                config = self._config_signature()
            except (ModelLoadError, OSError) as exc:
                self._refuse(f"{exc}")
                return
            if not wanted:
                self._refuse("no version to serve: no compiled model in the folder nor in "
                             "numbered version folders")  # fmt: skip
                return
            self._error = ""
            for version in wanted:
                self._load_version(version, available[version], policy, config)
            with self._lock:
                serving = [v for v in wanted if v in self._served and self._served[v].ready]
            if not serving:  # what it should serve failed: keep what serves now
                return
            for version in sorted(set(self._served) - set(wanted)):
                self._retire(version, "its version policy no longer serves it")

    def _config_signature(self) -> tuple[object, ...]:
        path = self.folder / CONFIG_FILE
        try:
            info = path.stat()
        except OSError:
            return ()
        return (info.st_size, info.st_mtime_ns)

    def _refuse(self, reason: str) -> None:
        """The folder or its config is wrong: keep what serves, say why once."""
        if reason != self._error:
            serving = self.versions()
            logger.error("model %r: %s%s", self.name, reason,
                         f"; version(s) {', '.join(serving)} keep serving" if serving else "")
        self._error = reason

    def _load_version(self, version: int, folder: Path, policy: ModelPolicy,
                      config: tuple[object, ...]) -> None:  # fmt: skip
        sig = (config, signature(folder))
        if version in self._served and self._signatures.get(version) == sig:
            return
        failed = self._failed.get(version)
        if failed is not None and failed.signature == sig:
            return  # the same broken files: no second attempt until they change
        model: Served
        if policy.backend in CHAIN_BACKENDS:
            model = ServedChain(self.name, folder, self._settings, self._metrics, str(version),
                                policy)  # fmt: skip
        else:
            model = ServedModel(self.name, folder, self._settings, self._metrics, str(version),
                                policy)  # fmt: skip
        with self._lock:
            self._loading[version] = model
        model.load()
        with self._lock:
            self._loading.pop(version, None)
            if not model.ready:
                self._failed[version] = _Attempt(sig, model.reason)
                old = self._served.get(version)
            else:
                self._failed.pop(version, None)
                old = self._served.get(version)
                self._served[version] = model
                self._signatures[version] = sig
        if not model.ready:
            serving = self.versions()
            logger.error("model %r version %d failed to load: %s%s", self.name, version,
                         model.reason, f"; version(s) {', '.join(serving)} keep serving"
                         if serving else "")  # fmt: skip
            model.drain(0.0)
            return
        logger.info("model %r version %d ready on %s", self.name, version, model.engine)
        if old is not None:
            _drain_later(old)

    def _retire(self, version: int, why: str) -> None:
        with self._lock:
            old = self._served.pop(version, None)
            self._signatures.pop(version, None)
        if old is not None:
            logger.info("model %r version %d unloads: %s", self.name, version, why)
            _drain_later(old)

    def unload(self) -> None:
        """Unload every version (what was admitted is answered first)."""
        with self._sync_lock:
            self.loaded = False
            for version in sorted(self._served):
                self._retire(version, "unloaded")
            self._failed.clear()
            self._error = ""

    def drain(self, timeout_s: float) -> None:
        with self._lock:
            models = list(self._served.values())
            self._served.clear()
        threads = [threading.Thread(target=m.drain, args=(timeout_s,), daemon=True)
                   for m in models]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout_s + 2.0)


def _drain_later(model: Served) -> None:
    """Retire ``model`` now (new requests go to its successor), answer what it admitted and
    close it on a thread of its own."""
    model.retire()
    threading.Thread(target=model.drain, args=(30.0,), daemon=True,
                     name=f"copyless-serve-retire-{model.name}-{model.version}").start()


class ModelRepository:
    """The repository's models and their loading (see the module docstring)."""

    def __init__(self, path: str | Path, settings: ServeSettings, metrics: ServeMetrics,
                 mode: ControlMode = ControlMode.NONE, poll_s: float = 15.0,
                 load: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.path = Path(path)
        self.mode, self._poll_s = mode, poll_s
        self._settings, self._metrics = settings, metrics
        found = find_models(self.path, required=mode is ControlMode.NONE)
        self._entries = {name: ModelEntry(name, folder, settings, metrics)
                         for name, folder in found.items()}  # fmt: skip
        if mode is ControlMode.EXPLICIT:
            unknown = [n for n in load if n != "*" and n not in self._entries]
            if unknown:
                raise OptionError(f"--load-model {', '.join(unknown)}: no such model in "
                                  f"{str(self.path)!r}")  # fmt: skip
            self._initial = list(self._entries) if "*" in load else list(load)
        else:
            self._initial = list(self._entries)
        self._lock = threading.Lock()
        self._loader: threading.Thread | None = None
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    def load(self, background: bool = True) -> None:
        """Load the models to serve at start: on a thread of their own (``background``) or
        here; in poll mode the poller starts after."""
        if not background:
            self._load_initial()
            return
        self._loader = threading.Thread(target=self._load_initial, daemon=True,
                                        name="copyless-serve-loader")  # fmt: skip
        self._loader.start()

    def _load_initial(self) -> None:
        for name in self._initial:
            self._entries[name].sync()
        if self.mode is ControlMode.POLL and not self._stop.is_set():
            self._poller = threading.Thread(target=self._poll, daemon=True,
                                            name="copyless-serve-poller")  # fmt: skip
            self._poller.start()

    def _poll(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.rescan()

    def rescan(self) -> None:
        """One poll: models added to or removed from the folder, versions changed."""
        try:
            found = find_models(self.path, required=False)
        except ModelLoadError as exc:
            logger.error("model repository: %s", exc)
            return
        with self._lock:
            for name in set(self._entries) - set(found):
                entry = self._entries.pop(name)
                logger.info("model %r left the repository: unloading", name)
                entry.unload()
            for name, folder in found.items():
                if name not in self._entries:
                    self._entries[name] = ModelEntry(name, folder, self._settings,
                                                     self._metrics)  # fmt: skip
            entries = list(self._entries.values())
        for entry in entries:
            if self._stop.is_set():
                return
            entry.sync()

    # -- the repository extension --------------------------------------------------------
    def load_model(self, name: str) -> None:
        """Load (or reload) ``name`` (explicit mode); blocks until it is loaded or failed."""
        self._check_explicit("load")
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                folder = self.path / name
                if not folder.is_dir() or name.startswith(".") or "/" in name \
                        or not _is_model_folder(folder):  # fmt: skip
                    raise RequestError.not_found(f"no model {name!r} in the repository "
                                                 f"{str(self.path)!r}")  # fmt: skip
                entry = self._entries[name] = ModelEntry(name, folder, self._settings,
                                                         self._metrics)  # fmt: skip
        entry.sync()
        if not entry.ready:
            raise RequestError(Refusal.INVALID_ARGUMENT, f"failed to load {name!r}: "
                               f"{entry.reason}")  # fmt: skip

    def unload_model(self, name: str) -> None:
        """Unload ``name`` (explicit mode): what it admitted is answered first."""
        self._check_explicit("unload")
        entry = self.entry(name)
        entry.unload()

    def _check_explicit(self, what: str) -> None:
        if self.mode is not ControlMode.EXPLICIT:
            raise RequestError(Refusal.UNSUPPORTED, f"explicit model {what} is not allowed: "
                               f"the server runs with --model-control-mode {self.mode.value} "
                               "(explicit allows it)")  # fmt: skip

    # -- lookups -------------------------------------------------------------------------
    def wait_loaded(self, timeout_s: float | None = None) -> bool:
        if self._loader is not None:
            self._loader.join(timeout_s)
            return not self._loader.is_alive()
        return True

    @property
    def ready(self) -> bool:
        """Every model asked to load serves a version."""
        with self._lock:
            entries = list(self._entries.values())
        wanted = [e for e in entries if e.loaded or e.name in self._initial]
        return all(e.ready for e in wanted)

    def entries(self) -> list[ModelEntry]:
        with self._lock:
            return list(self._entries.values())

    def __iter__(self) -> Iterator[Served]:
        """Every version served (or failed: its state says), model by model."""
        for entry in self.entries():
            yield from entry.served()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def entry(self, name: str) -> ModelEntry:
        with self._lock:
            entry = self._entries.get(name)
            names = ", ".join(map(repr, self._entries))
        if entry is None:
            raise RequestError.not_found(f"unknown model {name!r}; this server has "
                                         f"{names or 'no model'}")  # fmt: skip
        return entry

    def get(self, name: str, version: str = "") -> Served:
        return self.entry(name).get(version)

    def drain(self, timeout_s: float) -> None:
        """Stop polling; drain every model at once (each within ``timeout_s``)."""
        self._stop.set()
        self.wait_loaded(timeout_s)
        entries = self.entries()
        threads = [threading.Thread(target=e.drain, args=(timeout_s,), daemon=True)
                   for e in entries]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout_s + 2.0)

