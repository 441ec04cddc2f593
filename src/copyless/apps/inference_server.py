"""``copyless-serve REPOSITORY [--http HOST:PORT] [--grpc HOST:PORT] [--metrics HOST:PORT]``:
every compiled model in REPOSITORY (one subdirectory per model, named as the model, with a
``.rai`` or a ``vaiml_par_0`` inside) over the Open Inference Protocol (KServe v2), REST and
gRPC, so that ``tritonclient`` works unchanged; Prometheus metrics on ``--metrics``.

Loopback and Triton's ports 8000 / 8001 / 8002 by default; ``off`` leaves a listener out;
``unix:PATH`` listens on a Unix socket (created 0600). Client shared memory is off for TCP
clients unless ``--allow-client-shm``; restricted APIs (``--http-restricted-api``,
``--grpc-restricted-protocol``, Triton's flags) answer only requests carrying their key
(docs/serve.md, "Security").
The listeners open first (live at once), then the models load (ready once all have).
SIGTERM or SIGINT drains: readiness goes false, new requests get 503 / UNAVAILABLE, the
admitted ones are answered, then the server exits 0; a second signal stops at once
(130 / 143). A usage error (no such repository, no model in it, an address in use) is one
line and exit 2.

``--json``: the same events as JSON lines on stdout (``listening`` with the URLs, a
``model`` per model, ``ready``, ``draining``, then ``summary``), for a supervisor to read.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from ..serve import (
    Address,
    InferenceServer,
    ServeSettings,
    find_models,
    parse_address,
    parse_restriction,
)
from ..types import CopylessError, OptionError
from ._output import Output, add_output_arguments
from ._setup import add_runner_argument, runner_options, runner_type
from ._signals import Interruption

PROG = "copyless-serve"
EXIT_USAGE = 2
#: How long a drain waits for the requests admitted, seconds.
DRAIN_S = 30.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("repository", metavar="REPOSITORY",
                        help="folder with one subdirectory per model (a .rai or vaiml_par_0 "
                        "inside)")  # fmt: skip
    for flag, port, what in (("--http", 8000, "REST"), ("--grpc", 8001, "gRPC"),
                             ("--metrics", 8002, "Prometheus metrics (/metrics)")):  # fmt: skip
        parser.add_argument(flag, metavar="HOST:PORT", default=f"127.0.0.1:{port}",
                            help=f"{what} address (default 127.0.0.1:{port}; unix:PATH: a Unix "
                            "socket; off: none)")  # fmt: skip
    parser.add_argument("--model-control-mode", choices=("none", "poll", "explicit"),
                        default="none", help="none: every model loads at start and stays; "
                        "poll: the repository is rescanned (--repository-poll-secs) and "
                        "changed versions reload without downtime; explicit: the repository "
                        "API's load/unload (and --load-model at start) decide (Triton's modes)")
    parser.add_argument("--repository-poll-secs", type=float, default=15.0, metavar="S",
                        help="poll mode: seconds between scans (default 15)")
    parser.add_argument("--load-model", action="append", default=[], metavar="NAME",
                        help="explicit mode: a model to load at start (repeatable; * loads "
                        "all)")
    parser.add_argument("--allow-client-shm", action="store_true",
                        help="let TCP clients register system shared memory (off by default; "
                        "over a Unix socket it is on, checked against the client's user)")
    parser.add_argument("--http-restricted-api", action="append", default=[],
                        metavar="API[,API]:KEY=VALUE", type=_restriction,
                        help="REST: answer those APIs (health, metadata, inference, "
                        "shared-memory, model-config, model-repository, statistics) only to "
                        "requests with header KEY: VALUE; a shared-memory key also opens "
                        "client shared memory to TCP clients that send it (repeatable)")
    parser.add_argument("--grpc-restricted-protocol", action="append", default=[],
                        metavar="API[,API]:KEY=VALUE", type=_restriction,
                        help="gRPC: the same, with KEY in the call's metadata (repeatable)")
    parser.add_argument("--max-queue-delay-ms", type=float, default=0.0, metavar="MS",
                        help="how long a batch waits for more requests once it has one "
                        "(Triton's max_queue_delay; default 0: run what is there)")
    parser.add_argument("--max-queue-size", type=int, default=0, metavar="ROWS",
                        help="rows waiting per model, at most; past it requests get 503 / "
                        "RESOURCE_EXHAUSTED (default: 8 batches)")
    parser.add_argument("--max-request-mb", type=float, default=256.0, metavar="MB",
                        help="largest request taken (default 256; a model's own bound, from "
                        "its inputs, is usually lower)")
    parser.add_argument("--max-inflight-mb", type=float, default=1024.0, metavar="MB",
                        help="bytes of requests held at once, at most; past it requests get "
                        "503 / RESOURCE_EXHAUSTED (default 1024)")
    parser.add_argument("--max-image-mb", type=float, default=512.0, metavar="MB",
                        help="memory one encoded image (BYTES input) may take to decode, from "
                        "its header; past it the request is a 400 (default 512)")
    parser.add_argument("--max-connections", type=int, default=0, metavar="N",
                        help="connections per listener, at most (default: the descriptor "
                        "budget's share)")
    add_runner_argument(parser)
    add_output_arguments(parser, quiet=False, json_help="print the server's events as JSON "
                         "lines on stdout instead of the human lines: 'listening' (the URLs), "
                         "a 'model' per model version, 'ready', 'draining', then 'summary'")
    return parser


def _restriction(text: str) -> object:
    try:
        return parse_restriction(text)
    except OptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _listener(text: str) -> Address | None:
    return None if text.lower() == "off" else parse_address(text)


def _server(args: argparse.Namespace) -> InferenceServer:
    settings = ServeSettings(
        max_queue_delay_ms=args.max_queue_delay_ms,
        max_queue_size=args.max_queue_size,
        runner_type=runner_type(args),
        runner_options=runner_options(args),
        max_request_bytes=int(args.max_request_mb * 1024 * 1024),
        max_inflight_bytes=int(args.max_inflight_mb * 1024 * 1024),
        max_image_bytes=int(args.max_image_mb * 1024 * 1024),
        max_connections=args.max_connections,
        allow_client_shm=args.allow_client_shm,
        model_control=args.model_control_mode,
        repository_poll_s=args.repository_poll_secs,
        load_models=tuple(args.load_model),
        http_restrictions=tuple(args.http_restricted_api),
        grpc_restrictions=tuple(args.grpc_restricted_protocol),
    )
    return InferenceServer(args.repository, http=_listener(args.http),
                           grpc_address=_listener(args.grpc),
                           metrics=_listener(args.metrics), settings=settings)  # fmt: skip


def _announce(server: InferenceServer, out: Output) -> None:
    where = {"http": "REST on http://{}", "grpc": "gRPC on {}",
             "metrics": "metrics on http://{}/metrics"}  # fmt: skip
    lines = [fmt.format(server.url(name)) for name, fmt in where.items()
             if name in server.addresses]  # fmt: skip
    out.say(f"{PROG}: {', '.join(lines)}", flush=True)
    out.record("listening", **{name: server.url(name) for name in where
                               if name in server.addresses})  # fmt: skip


def _report_models(server: InferenceServer, stop: threading.Event, out: Output) -> None:
    """One line per model once loading ends (or a signal comes)."""
    repository = server.service.repository
    while not repository.wait_loaded(0.2):
        if stop.is_set():
            return
    for entry in repository.entries():
        models = entry.served()
        if not models and (entry.loaded or server.service.settings.model_control != "explicit"):
            print(f"model {entry.name!r}: {entry.reason}", file=sys.stderr, flush=True)
            out.record("model", name=entry.name, ready=False, reason=entry.reason)
        for model in models:
            name = model.name if model.version == "1" and len(models) == 1 \
                else f"{model.name} version {model.version}"  # fmt: skip
            if model.ready:
                out.say(f"model {name!r}: ready on {model.engine}, max batch "
                        f"{model.max_batch_size}", flush=True)  # fmt: skip
                if model.precision:
                    out.say(f"model {name!r}: {model.precision}", flush=True)
            else:
                print(f"model {name!r}: {model.reason}", file=sys.stderr, flush=True)
            out.record("model", name=model.name, version=model.version, ready=model.ready,
                       engine=str(model.engine) if model.ready else None,
                       precision=model.precision or None,
                       max_batch_size=model.max_batch_size if model.ready else None,
                       reason=None if model.ready else model.reason)  # fmt: skip
    if server.service.ready:
        out.say(f"{PROG}: ready", flush=True)
        out.record("ready")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_queue_size < 0 or args.max_queue_delay_ms < 0 or args.max_request_mb <= 0 \
            or args.max_inflight_mb < 0 or args.max_connections < 0 \
            or args.max_image_mb <= 0:  # fmt: skip
        parser.error("--max-queue-size, --max-queue-delay-ms, --max-request-mb, "
                     "--max-inflight-mb, --max-image-mb and --max-connections must be "
                     "positive")
    try:
        find_models(Path(args.repository), required=args.model_control_mode == "none")
        if args.repository_poll_secs <= 0:
            raise OptionError("--repository-poll-secs must be positive")
        server = _server(args)
    except (OptionError, CopylessError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    stop = threading.Event()
    out = Output.from_args(args)
    with Interruption(PROG) as interrupted:
        interrupted.on_signal(stop.set)
        try:
            server.start()
        except OptionError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            _announce(server, out)
            _report_models(server, stop, out)
            while not stop.wait(0.5):
                pass
            out.say(f"{PROG}: draining", flush=True)
            out.record("draining")
            server.stop(DRAIN_S)
        except KeyboardInterrupt:  # a second signal: stop now
            print(f"{PROG}: stopped before the drain ended", file=sys.stderr, flush=True)
            return 128 + (interrupted.signal or 2)
    out.say(f"{PROG}: stopped", flush=True)
    out.summary(stopped=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
