#!/usr/bin/env bash
# Issue 11 on the GPU machine, in one device call: builds graft (build-gpu, if missing), runs the
# shape-policy tests (test_shapes on CUDA: cuMemGetInfo-measured graph memory and budgets;
# test_shape_policies on the simulator and on CUDA: update with the real cuGraphExecUpdate, pad,
# auto, capture ahead against eager), then bench/shapes_sweep.py: GPT-2 small (random weights,
# fp32, batch 1, dynamic seq) at every length 1..128 increasing and shuffled under graft's shape
# policies, PyTorch eager, torch.compile(mode="reduce-overhead") and (..., dynamic=True), with the
# ablation. Usage: OUT=dir bash scripts/shapes-gpu-check.sh  (SHAPES_MAX_LEN, SHAPES_TIMEOUT,
# SHAPES_ONLY="variant,variant" narrow it). Writes $OUT/shapes/shapes_sweep.{json,md} and logs.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/shapes-gpu}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  date -u; git rev-parse --short HEAD 2>/dev/null; } | tee "$out/device.txt"
build=${GRAFT_BUILD:-build-gpu}
if [ ! -f "$build/lib/libgraft.so" ] || [ ! -x "$build/tests/test_shape_policies" ] || [ ! -x "$build/tests/test_shape_auto" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > "$out/cmake.log" 2>&1 && cmake --build "$build" -j"$(nproc)" > "$out/build.log" 2>&1
  tail -3 "$out/build.log"
fi
export LD_LIBRARY_PATH="$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
export GRAFT_LIBRARY="$PWD/$build/lib/libgraft.so" GRAFT_BIN="$PWD/$build/bin/graft"
fail=0
{
  echo "== test_shapes (cuda)"
  timeout 120 "$build/tests/test_shapes" cuda 2>&1 | tail -6
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_shapes cuda FAILED"; }
  echo "== test_shape_auto (sim: auto's per-segment measuring, persisted decisions, capture ahead under generic)"
  timeout 120 "$build/tests/test_shape_auto" 2>&1 | tail -3
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_shape_auto FAILED"; }
  for dev in sim cuda; do
    echo "== test_shape_policies ($dev)"
    timeout 120 "$build/tests/test_shape_policies" $([ $dev = cuda ] && echo cuda) 2>&1 | tail -6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_shape_policies $dev FAILED"; }
  done
} 2>&1 | tee "$out/tests.log"
grep -q FAILED "$out/tests.log" && fail=1
echo "== bench/shapes_sweep.py"
only=()
[ -n "${SHAPES_ONLY:-}" ] && only=(--only "$SHAPES_ONLY")
timeout "${SHAPES_TIMEOUT:-420}" python3 bench/shapes_sweep.py --out "$out/shapes" --max-len "${SHAPES_MAX_LEN:-128}" "${only[@]}" \
  2>&1 | tee "$out/bench.log" | grep -v '^graft: capturing' | tail -40
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "shapes_sweep FAILED or a variant failed (see $out/bench.log)"; fail=1; }
echo "shapes-gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
