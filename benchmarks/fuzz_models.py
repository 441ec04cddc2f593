"""Fuzz the compiled-model loader at scale: thousands of mutated ``.rai`` files and partition
directories, each loaded (and, when it loads, run) in a child process that must never crash.

    python benchmarks/fuzz_models.py                  # 10,000 mutants
    python benchmarks/fuzz_models.py --mutants 2000 --seed 7 --keep crashes/

Mutants come from the strategies of the test suite (tests/reliability/fuzz_strategies.py),
in seven kinds: raw bytes of the file (stale checksums), the partition graph's bytes and its
ONNX structure resealed with valid checksums (they reach the ONNX parser, onnxruntime and
``execute``), manifest JSON edits and raw manifest text resealed, header lies with a valid
header checksum, and ``vaiml_par_0`` / older ``par_0`` directories with edited manifests,
damaged graphs and lying paths. Then a race: a child loads a ``.rai`` in a loop while a
thread of its own truncates and rewrites it (the map must never SIGBUS the process).

Each mutant must end as "rejected" (ModelLoadError), "loaded" (execute returned a status) or
"runner-refused" (a CopylessError at runner creation); anything else ("crash", "hang",
"bad-load", "bad-runner", "bad-execute") is a failure, saved under ``--keep`` for replay
with ``tests/reliability/load_worker.py``. Prints progress, the outcomes per kind and the
rate; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reliability"))
from fuzz_strategies import (
    BYTE_OPS,
    GRAPH_EDITS,
    HEADER_LIES,
    RAW_MANIFEST,
    apply_byte_ops,
    apply_graph_edits,
    apply_manifest_edits,
    manifest_edits,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from reliability_helpers import (
    LoadChild,
    pack_rai,
    parse_rai,
    small_net,
    truncation_race,
    write_par_dir,
)

from copyless.model import compile_model

ACCEPTABLE = {"rejected", "loaded", "runner-refused"}
#: Share of the mutants per kind.
KINDS = {"raw": 0.30, "graph-bytes": 0.15, "graph-structure": 0.15, "manifest": 0.15,
         "manifest-text": 0.05, "header": 0.05, "directory": 0.15}  # fmt: skip
PATHS = ["../../../../etc/passwd", "/etc/passwd", "par_0", "", ".", "/proc/self/mem",
         "/dev/zero", "par_0/model.onnx\0x", "par_1.onnx", "manifest.json"]  # fmt: skip


class Fuzzer:
    def __init__(self, work: Path, keep: Path | None, total: int) -> None:
        self.work, self.keep, self.total = work, keep, total
        rai = compile_model(small_net(), work / "base.rai")
        self.data = rai.read_bytes()
        self.manifest, self.blobs = parse_rai(self.data)
        self.sealed = parse_rai(pack_rai(self.manifest, self.blobs))[0]
        self.child = LoadChild(timeout_s=120)
        self.seen: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.failures: list[tuple[str, dict[str, Any], Path | None]] = []
        self.done = 0
        self.start = time.perf_counter()

    def check(self, kind: str, path: Path) -> None:
        result = self.child.load(path)
        self.seen[kind][result["outcome"]] += 1
        self.done += 1
        if result["outcome"] not in ACCEPTABLE:
            kept = None
            if self.keep is not None:
                kept = self.keep / f"{kind}-{self.done}{'.rai' if path.is_file() else ''}"
                self.keep.mkdir(parents=True, exist_ok=True)
                copy = shutil.copy if path.is_file() else shutil.copytree
                copy(path, kept)
            self.failures.append((kind, result, kept))
        if self.done % 500 == 0 or self.done == self.total:
            rate = self.done / (time.perf_counter() - self.start)
            print(f"  {self.done:6d} / {self.total} mutants, {len(self.failures)} failure(s), "
                  f"{rate:5.1f}/s", flush=True)  # fmt: skip

    def write(self, data: bytes) -> Path:
        path = self.work / "mutant.rai"
        path.write_bytes(data)
        return path


def run_kind(fuzzer: Fuzzer, kind: str, count: int, seed: int) -> None:
    """``count`` examples of ``kind`` through hypothesis (generation only: no shrinking)."""
    if count <= 0:
        return
    f = fuzzer
    runs: dict[str, Callable[..., None]] = {
        "raw": lambda ops: f.check(kind, f.write(apply_byte_ops(f.data, ops))),
        "graph-bytes": lambda ops: f.check(
            kind, f.write(pack_rai(f.manifest, [apply_byte_ops(f.blobs[0], ops)]))),
        "graph-structure": lambda ops: f.check(
            kind, f.write(pack_rai(f.manifest, [apply_graph_edits(f.blobs[0], ops)]))),
        "manifest": lambda ops: f.check(
            kind, f.write(pack_rai(f.manifest, f.blobs, apply_manifest_edits(ops)))),
        "manifest-text": lambda ops: f.check(
            kind, f.write(pack_rai(f.manifest, f.blobs, manifest_bytes=ops))),
        "header": lambda ops: f.check(kind, f.write(pack_rai(f.manifest, f.blobs, **ops))),
        "directory": lambda ops: _directory(f, *ops),
    }  # fmt: skip
    strategies = {
        "raw": BYTE_OPS, "graph-bytes": BYTE_OPS, "graph-structure": GRAPH_EDITS,
        "manifest": manifest_edits(f.sealed), "manifest-text": RAW_MANIFEST,
        "header": HEADER_LIES,
        "directory": st.tuples(st.none() | BYTE_OPS, manifest_edits(f.manifest),
                               st.none() | st.sampled_from(PATHS), st.booleans()),
    }  # fmt: skip
    config = settings(max_examples=count, deadline=None, database=None, derandomize=False,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))  # fmt: skip
    hypothesis_seed(seed)(config(given(strategies[kind])(runs[kind])))()


def _directory(f: Fuzzer, graph_ops: Any, edits: Any, path_lie: str | None, older: bool) -> None:
    root = f.work / "dir"
    shutil.rmtree(root, ignore_errors=True)
    graph = f.blobs[0] if graph_ops is None else apply_byte_ops(f.blobs[0], graph_ops)
    edit = apply_manifest_edits(edits)

    def edit_all(manifest: dict[str, Any]) -> None:
        if path_lie is not None:
            manifest["partitions"][0]["blob"]["path"] = path_lie
        edit(manifest)

    write_par_dir(root, f.manifest, graph, edit_all, older=older)
    f.check("directory", root)


def race(work: Path, seconds: float) -> tuple[int, int, int]:
    """Loads of a file truncated and rewritten under the loader's map, in a child:
    (loaded, rejected, child's exit code)."""
    path = work / "race.rai"
    shutil.copy(work / "base.rai", path)
    loaded, rejected, result = truncation_race(path, seconds)
    if result.returncode != 0:
        print(result.stderr[-2000:], file=sys.stderr)
    return loaded, rejected, result.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mutants", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--race-seconds", type=float, default=20.0)
    parser.add_argument("--keep", type=Path, help="save failing mutants here")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="copyless-fuzz-models-"))
    fuzzer = Fuzzer(work, args.keep, args.mutants)
    print(f"fuzzing {args.mutants} mutants of a real compiled model (seed {args.seed})")
    try:
        counts = {kind: int(share * args.mutants) for kind, share in KINDS.items()}
        counts["raw"] += args.mutants - sum(counts.values())
        fuzzer.total = sum(counts.values())
        for index, (kind, count) in enumerate(counts.items()):
            run_kind(fuzzer, kind, count, args.seed * 100 + index)
        loaded, rejected, code = race(work, args.race_seconds)
    finally:
        fuzzer.child.close()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - fuzzer.start
    print(f"\n{fuzzer.done} mutants in {elapsed:.0f} s ({fuzzer.done / elapsed:.1f}/s):")
    for kind, outcomes in fuzzer.seen.items():
        print(f"  {kind:16s} {dict(outcomes)}")
    print(f"race: {loaded} loads, {rejected} rejected while the file was cut and rewritten "
          f"under the map; child exit code {code}")  # fmt: skip
    for kind, result, kept in fuzzer.failures[:20]:
        print(f"FAIL {kind}: {result['outcome']}: {result['detail'][:300]} (kept: {kept})")
    failed = len(fuzzer.failures) + (code != 0)
    crashes = sum(o["crash"] for o in fuzzer.seen.values()) + (code != 0)
    print(f"{crashes} crash(es), {failed} failure(s) in {fuzzer.done} mutants and the race")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
