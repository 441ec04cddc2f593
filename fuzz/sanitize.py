"""The C kernels under AddressSanitizer + UndefinedBehaviorSanitizer: build, test, fuzz.

One command builds the four extensions (``layout/_kernels.c``, ``vision/_kernels.c``,
``runner/_fast.c``, ``model/_mapped.c``) with
``-fsanitize=address,undefined -fno-omit-frame-pointer`` into a copy of the package under
``build/sanitize-<flavour>/`` and runs the tests that reach them, then a short run of each
fuzz harness, against that copy::

    .venv/bin/python fuzz/sanitize.py test             # what CI runs (gcc is enough)
    .venv/bin/python fuzz/sanitize.py test -k quant    # extra arguments go to pytest
    .venv/bin/python fuzz/sanitize.py fuzz layout -max_total_time=3600   # long run (clang)

How the uninstrumented interpreter runs instrumented extensions: ASan's runtime must be the
first library loaded, so the interpreter starts with ``LD_PRELOAD`` naming it (gcc's
``libasan.so`` for ``test``; atheris' ``asan_with_fuzzer.so`` for ``fuzz``, which also
carries libFuzzer). ``PYTHONMALLOC=malloc`` sends every Python object through ASan's
allocator, so an overrun into a ``bytes``/``bytearray`` is caught too; ``detect_leaks=0``
because CPython does not free everything at exit. Any report aborts the process
(``halt_on_error``, ``-fno-sanitize-recover``), so a finding fails the run.

The ``fuzz`` flavour is built with clang and ``-fsanitize=fuzzer-no-link`` so libFuzzer sees
the C code's edges as coverage, not only the Python harness's. Its log (executions, coverage,
findings) goes to ``fuzz/logs/<harness>-<time>.log``; crashing inputs to ``fuzz/findings/``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {
    "copyless/layout/_kernels": "src/copyless/layout/_kernels.c",
    "copyless/vision/_kernels": "src/copyless/vision/_kernels.c",
    "copyless/vision/_text": "src/copyless/vision/_text.c",
    "copyless/runner/_fast": "src/copyless/runner/_fast.c",
    "copyless/model/_mapped": "src/copyless/model/_mapped.c",
}
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
FLAVOURS = {
    # flavour: (compiler, extra flags, ASan runtime to preload)
    "test": ("cc", [], "libasan.so"),  # + libstdc++ (see runtime())
    "fuzz": ("clang", ["-fsanitize=fuzzer-no-link"], "asan_with_fuzzer.so"),
}
TESTS = [
    "tests/layout",
    "tests/vision",
    "tests/runner",
    # the memory-mapped model reader (model/_mapped.c): .rai loading and files truncated under it
    "tests/model/test_compiled_formats.py",
    "tests/model/test_model_directories.py",
    "tests/reliability/test_model_file_changes.py",
]
# OpenVINO's TBB dlopens with RTLD_DEEPBIND, which ASan refuses; the C kernels run the same
# code under either backend, so the onnxruntime parametrisations cover them.
# The default runner's engine measurement (tests/runner/test_engine_choice.py) needs OpenVINO:
# under ASan it runs onnxruntime unmeasured (runner/_choice.py), so those tests stay out too.
# The precision policy (tests/runner/test_precision_policy.py) asks OpenVINO for the CPU's
# capabilities while the module is collected, so it is left out whole (--ignore), not deselected.
# VAIML's choice of where an INT8 model runs (tests/runner/test_precision_speed.py's
# test_vaiml_runs_int8_where_it_measured_it_fastest) measures both engines: out likewise.
DESELECT = [
    "-k", "not openvino and not engine_choice and not measured_it_fastest",
    "--ignore", "tests/runner/test_precision_policy.py",
]
HARNESSES = ("layout", "vision", "runner", "ipc")
ASAN_OPTIONS = (
    "detect_leaks=0:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:"
    "strict_string_checks=1:check_initialization_order=1:alloc_dealloc_mismatch=0:"
    "allocator_may_return_null=1:handle_segv=1:"
    # model/_mapped.c turns a SIGBUS from a truncated map into OSError with its own handler
    "handle_sigbus=0:allow_user_segv_handler=1"
)
UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=1"


def build(flavour: str, name: str = "") -> Path:
    """The package copied to build/sanitize-<flavour>[-name]/ with the C extensions
    instrumented (one folder per fuzz harness, so a new build never changes a running one)."""
    compiler, extra, _ = FLAVOURS[flavour]
    compiler = os.environ.get("CC", compiler) if flavour == "test" else compiler
    out = ROOT / "build" / "-".join(filter(None, ["sanitize", flavour, name]))
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(
        ROOT / "src" / "copyless", out / "copyless",
        ignore=shutil.ignore_patterns("*.so", "__pycache__"),
    )  # fmt: skip
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    include = sysconfig.get_paths()["include"]
    flags = ["-O1", "-g", "-std=c11", "-fPIC", "-shared", "-fno-strict-aliasing", "-Wall",
             "-Wno-unused-function", *SANITIZE, *extra, f"-I{include}"]  # fmt: skip
    for module, source in SOURCES.items():
        target = out / f"{module}{suffix}"
        subprocess.run([compiler, *flags, str(ROOT / source), "-o", str(target)], check=True)
    return out


def runtime(flavour: str) -> str:
    """Path of the ASan runtime the interpreter must preload for this flavour."""
    compiler, _, name = FLAVOURS[flavour]
    if flavour == "fuzz":
        import atheris  # type: ignore[import-not-found,import-untyped,unused-ignore]

        return str(Path(atheris.path()) / name)
    # libstdc++ too: ASan's __cxa_throw interceptor needs the real one loaded at start-up,
    # else the first C++ exception in onnxruntime aborts ("real___cxa_throw != 0").
    cc = os.environ.get("CC", compiler)
    paths = []
    for lib in (name, "libstdc++.so"):
        found = subprocess.run([cc, f"-print-file-name={lib}"], capture_output=True, text=True)
        path = found.stdout.strip()
        if not os.path.isabs(path):
            raise SystemExit(f"{cc} has no {lib}: install the compiler's ASan runtime (libasan)")
        paths.append(path)
    return " ".join(paths)


def environment(flavour: str, package: Path, objects: bool = True) -> dict[str, str]:
    """The interpreter's environment; ``objects``: Python objects through ASan's allocator
    too (PYTHONMALLOC=malloc), for code that handles objects (the fast path), at about half
    the speed; numpy's buffers, all the kernels read and write, always go through it."""
    env = dict(os.environ)
    env.update(
        LD_PRELOAD=runtime(flavour),
        ASAN_OPTIONS=ASAN_OPTIONS,
        UBSAN_OPTIONS=UBSAN_OPTIONS,
        PYTHONMALLOC="malloc" if objects else "pymalloc",
        PYTHONPATH=os.pathsep.join(filter(None, [str(package), env.get("PYTHONPATH")])),
        OMP_NUM_THREADS="1",
    )
    return env


def check_loaded(env: dict[str, str], package: Path) -> None:
    """Fail unless the interpreter really imports the instrumented copies."""
    modules = [name.replace("/", ".") for name in SOURCES]
    probe = f"import importlib; print(*(importlib.import_module(m).__file__ for m in {modules}))"
    out = subprocess.run([sys.executable, "-c", probe], env=env, check=True,
                         capture_output=True, text=True).stdout.split()  # fmt: skip
    stray = [path for path in out if not path.startswith(str(package))]
    if len(out) != len(SOURCES) or stray:
        raise SystemExit(f"not the sanitizer build: {stray or out}")


def run_tests(pytest_args: list[str], smoke_runs: int) -> int:
    start = time.monotonic()
    package = build("test")
    env = environment("test", package)
    check_loaded(env, package)
    print(f"[sanitize] built in {time.monotonic() - start:.0f} s", flush=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS, *DESELECT,
           *pytest_args]  # fmt: skip
    code = subprocess.run(cmd, env=env, cwd=ROOT).returncode
    print(f"[sanitize] tests: {time.monotonic() - start:.0f} s", flush=True)
    if code or smoke_runs <= 0:
        return code
    for harness in HARNESSES:
        code = smoke(harness, env, smoke_runs)
        if code:
            return code
    print(f"[sanitize] total: {time.monotonic() - start:.0f} s", flush=True)
    return 0


def smoke(harness: str, env: dict[str, str], runs: int) -> int:
    """Replay the harness's past findings (fuzz/regressions/<harness>/), then fuzz ``runs``
    inputs from a fixed seed. Files given one by one are only executed: nothing is written."""
    script = str(ROOT / "fuzz" / f"fuzz_{harness}.py")
    saved = sorted(str(p) for p in (ROOT / "fuzz" / "regressions" / harness).glob("*"))
    commands = [[script, *saved]] if saved else []
    commands.append([script, f"-runs={runs}", "-seed=1", "-print_final_stats=1"])
    for args in commands:
        result = subprocess.run([sys.executable, *args], env=env, cwd=ROOT, capture_output=True,
                                text=True)  # fmt: skip
        stats = [line for line in result.stderr.splitlines() if "number_of_executed_units" in line]
        what = "fuzz" if stats else f"{len(saved)} saved inputs"
        print(f"[sanitize] fuzz_{harness} {what}: rc {result.returncode} {' '.join(stats)}",
              flush=True)  # fmt: skip
        if result.returncode:
            print(result.stdout[-5000:], result.stderr[-20000:], sep="\n")
            return result.returncode
    return 0


def run_fuzzer(harness: str, fuzzer_args: list[str]) -> int:
    package = build("fuzz", harness)
    env = environment("fuzz", package, objects=harness == "runner")
    check_loaded(env, package)
    corpus = ROOT / "fuzz" / "corpus" / harness
    logs, findings = ROOT / "fuzz" / "logs", ROOT / "fuzz" / "findings"
    for folder in (corpus, logs, findings):
        folder.mkdir(parents=True, exist_ok=True)
    log = logs / f"{harness}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    cmd = [sys.executable, str(ROOT / "fuzz" / f"fuzz_{harness}.py"), str(corpus),
           f"-artifact_prefix={findings}/{harness}-", "-print_final_stats=1", "-timeout=30",
           "-rss_limit_mb=3072", *fuzzer_args]  # fmt: skip
    with log.open("w") as out:
        out.write(f"# {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.run(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    print(f"[sanitize] fuzz_{harness}: rc {code.returncode}, log {log}")
    return code.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    test = sub.add_parser("test", help="build with gcc/cc, run the C-backed tests + fuzz smoke")
    test.add_argument("--smoke-runs", type=int, default=2000, help="executions per harness")
    fuzz = sub.add_parser("fuzz", help="build with clang (coverage), run one harness")
    fuzz.add_argument("harness", choices=HARNESSES)
    sub.add_parser("build", help="only build both flavours")
    args, rest = parser.parse_known_args()
    if args.command == "test":
        sys.exit(run_tests(rest, args.smoke_runs))
    if args.command == "fuzz":
        sys.exit(run_fuzzer(args.harness, rest))
    for flavour in FLAVOURS:
        print(build(flavour))


if __name__ == "__main__":
    main()
