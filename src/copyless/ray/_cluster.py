"""Where a batch job runs: a private local Ray started for it, or a running cluster.

:func:`local_ray` starts a single-node Ray for the duration of a ``with`` block and stops it
at the end. It is quiet and leaves nothing behind: no dashboard, no usage statistics, worker
output not forwarded to the terminal, its session files (logs, sockets, spilled objects) in a
fresh directory under the temporary directory that is removed at the end, and
``RAY_AUTH_MODE=disabled`` unless the caller set it (a fresh local cluster would otherwise
generate a token and write it to ``~/.ray/auth_token``). At the end its autoscaler monitor is
killed before ``ray.shutdown()``: Ray stops the GCS first and then the monitor, whose SIGTERM
handler reports to the stopped GCS until Ray kills it a second later (measured: shutdown
1.35 s, 0.35 s without the wait). A private single-node Ray has nothing to autoscale.

:func:`join_cluster` connects to the head of a cluster started with ``ray start --head``
(``HOST:PORT``, or ``auto``). It first checks that something accepts connections there, so an
unreachable address fails in seconds with :class:`ClusterError`: ``ray.init`` itself keeps
retrying an unreachable head for minutes. Authentication follows Ray's own rules (the token
in ``RAY_AUTH_TOKEN`` or ``~/.ray/auth_token`` when the cluster uses one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import ray

from ..types import Address, CopylessError, OptionError, parse_address

logger = logging.getLogger(__name__)

#: How long the reachability check waits for the head's port.
CONNECT_TIMEOUT_S = 5.0
#: Cap on the object store of a local Ray (Ray's own default is 30% of the memory).
LOCAL_OBJECT_STORE_BYTES = 1 << 30
#: Ray puts Unix sockets about 65 bytes below its session directory and AF_UNIX paths end
#: at 107 bytes: below a longer temporary directory than this, Ray would fail to start.
_MAX_TEMP_ROOT = 24

_QUIET_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


class ClusterError(CopylessError):
    """No Ray cluster at the address given, or none could be started."""


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What the job sees of the cluster it runs on."""

    address: str  # the GCS address (HOST:PORT)
    cpus: float
    gpus: float
    nodes: int
    local: bool  # True: started by local_ray() for this job


@contextlib.contextmanager
def local_ray(
    num_cpus: int | None = None, object_store_bytes: int | None = LOCAL_OBJECT_STORE_BYTES
) -> Iterator[ClusterInfo]:
    """A private single-node Ray for the ``with`` block (see the module docstring).

    ``num_cpus`` is the logical CPU count Ray schedules with (default: the cores here).
    Raises :class:`ClusterError` when Ray is already initialised in this process or fails
    to start.
    """
    if ray.is_initialized():
        raise ClusterError("Ray is already initialised in this process; use it directly")
    temp_dir = tempfile.mkdtemp(prefix="copyless-", dir=_temp_root())
    try:
        with _environment(_QUIET_ENV):
            try:
                ray.init(
                    num_cpus=num_cpus,
                    object_store_memory=object_store_bytes,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                    _temp_dir=temp_dir,
                )
            except Exception as exc:  # Ray raises a variety of types when it cannot start
                raise ClusterError(f"could not start a local Ray: {exc}") from exc
            try:
                yield _info(ray.get_runtime_context().gcs_address, local=True)
            finally:
                _kill_monitor()
                ray.shutdown()
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


@contextlib.contextmanager
def join_cluster(address: str) -> Iterator[ClusterInfo]:
    """Connect to the cluster whose head is at ``address`` (``HOST:PORT`` or ``auto``) for
    the ``with`` block, and disconnect at its end (the cluster keeps running).

    Raises :class:`ClusterError` at once when nothing listens at ``address``.
    """
    if address != "auto":
        check_reachable(address)
    if ray.is_initialized():
        raise ClusterError("Ray is already initialised in this process; use it directly")
    with _environment({"RAY_USAGE_STATS_ENABLED": "0"}):
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except Exception as exc:  # ConnectionError, RuntimeError (auth, version), ValueError
            reason = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            raise ClusterError(
                f"could not join the Ray cluster at {address}: {reason or type(exc).__name__}"
            ) from exc
        try:
            yield _info(address, local=False)
        finally:
            ray.shutdown()


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`ClusterError` unless a TCP connection to ``HOST:PORT`` succeeds."""
    try:  # the parser copyless-serve's and copyless-video's addresses go through
        parsed: Address | None = parse_address(address, default_host="", unix=False)
    except OptionError:
        parsed = None
    if parsed is None or not parsed.host or parsed.port == 0:  # a head to reach: both named
        raise ClusterError(f"--address must be HOST:PORT (e.g. 10.0.0.5:6379), got {address!r}")
    host, port_text = parsed.host, str(parsed.port)
    try:
        with socket.create_connection((host, parsed.port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ClusterError(
            f"no Ray cluster at {address}: {reason}. Start one with "
            f"`ray start --head --port={port_text}` on {host}, or leave out --address to "
            "run on a local Ray"
        ) from None


def _info(address: str, *, local: bool) -> ClusterInfo:
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    alive = [node for node in ray.nodes() if node.get("Alive")]  # type: ignore[no-untyped-call]
    return ClusterInfo(
        address=address,
        cpus=float(resources.get("CPU", 0.0)),
        gpus=float(resources.get("GPU", 0.0)),
        nodes=len(alive),
        local=local,
    )


#: The autoscaler monitor's script, as a word of its command line ends.
_MONITOR = b"ray/autoscaler/_private/monitor.py"


def _kill_monitor() -> None:
    """SIGKILL the autoscaler monitor of the Ray this process started (a child of this
    process running :data:`_MONITOR`); Ray's shutdown then finds it dead and goes on. Nothing
    happens when none is found (another Ray version): the shutdown takes its usual second."""
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            if parent != me:
                continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                words = cmdline.read().split(b"\0")
        except (OSError, ValueError, IndexError):  # gone meanwhile, or not readable
            continue
        if any(word.endswith(_MONITOR) for word in words):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
            logger.debug("killed Ray's autoscaler monitor (pid %s) before shutdown", entry.name)


def _temp_root() -> str | None:
    root = tempfile.gettempdir()
    if len(root) <= _MAX_TEMP_ROOT:
        return root
    logger.debug("temporary directory %s too long for Ray's sockets; using /tmp", root)
    return "/tmp"


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set each variable the caller has not set (Ray's processes inherit them); restore the
    environment at the end."""
    added = [key for key in values if key not in os.environ]
    for key in added:
        os.environ[key] = values[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
