#!/usr/bin/env bash
# Issue 11's sweep alone on the GPU machine (the build carried in build-gpu): test_shape_policies on
# CUDA first, then bench/shapes_sweep.py with every variant (SHAPES_TIMEOUT, default 500 s).
# Usage: OUT=dir bash scripts/shapes-sweep-gpu.sh   Writes $OUT/shapes/shapes_sweep.{json,md}, logs.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/shapes-sweep}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  date -u; git rev-parse --short HEAD 2>/dev/null || echo "(no .git)"; python3 -c "import torch; print('torch', torch.__version__)"; } | tee "$out/device.txt"
build=${GRAFT_BUILD:-build-gpu}
export LD_LIBRARY_PATH="$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
export GRAFT_LIBRARY="$PWD/$build/lib/libgraft.so" GRAFT_BIN="$PWD/$build/bin/graft" PYTHONPATH="$PWD/python"
fail=0
timeout 120 "$build/tests/test_shape_policies" cuda 2>&1 | tail -4 | tee "$out/tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
timeout "${SHAPES_TIMEOUT:-500}" python3 bench/shapes_sweep.py --out "$out/shapes" --max-len "${SHAPES_MAX_LEN:-128}" \
  2>&1 | tee "$out/bench.log" | grep -v '^graft: capturing' | tail -45
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1
echo "shapes-sweep-gpu: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
