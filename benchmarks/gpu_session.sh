#!/bin/bash
# One short session on a GPU machine, from the repository root: the environment, the `cuda` tests,
# then the GPU benchmark, each written to OUT (default benchmarks/results) as it finishes, within
# LIMIT seconds in all (default 300: what a lease allows). Usage:
#   OUT=DIR bash benchmarks/gpu_session.sh [LIMIT] [--cuda-only rope|attention]
# Packages the machine lacks (transformers at the pinned version, Liger-Kernel, the other references)
# can be given as wheels in .whl/: they are installed into /tmp/site first.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-benchmarks/results}
start=$(date +%s)
limit=${1:-300}
shift || true
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
} > "$OUT/cuda-env.txt" 2>&1
export PYTHONPATH=/tmp/site:$PWD
python3 -c "import transformers; print('transformers', transformers.__version__)" >> "$OUT/cuda-env.txt" 2>&1
# every test the device fixture runs on cuda, the CUDA-graph capture, and the fake-CUDA checks
timeout 120 python3 -m pytest -n 8 -q -p no:cacheprovider -k "cuda and not test_benchmarks_cuda" -rfEs \
  --junitxml="$OUT/cuda-tests.xml" tests > "$OUT/cuda-tests.log" 2>&1
echo "tests rc=$? at $(( $(date +%s) - start )) s" >> "$OUT/cuda-env.txt"
timeout $(( limit - ($(date +%s) - start) )) python3 -m benchmarks --device cuda --out "$OUT" "$@" \
  > "$OUT/cuda-bench.log" 2>&1
echo "bench rc=$? at $(( $(date +%s) - start )) s" >> "$OUT/cuda-env.txt"
