#!/usr/bin/env bash
# Issue 11, shape policy generic, on the GPU machine in one device call. Builds nothing: expects a
# Release build in build-gpu/ (GRAFT_BUILD=dir to use another) carried to the machine.
#  1. test_shape_generic on CUDA (small models: row-wise, softmax over the symbol, a contraction
#     over it, fused attention with and without a mask reading its lengths from the slot table, a
#     matmul with the symbol in n refused; against eager runs within 1e-5), then with
#     GRAFT_TEST_DEVICE=cuda the dynamic exports (GPT-2, BERT, Llama; unfused, then with
#     fuse_attention_f32) as well, and test_render's NVRTC compiles of the slot-table form
#     (GR_RENDER_GENERIC_TABLE) and of the attention kernels (their length record);
#  1b. test_attention with GRAFT_TEST_DEVICE=cuda (the fused attention kernels against the
#     reference, exact policy: no length record) as a regression check of the kernels' entry points;
#  2. test_shape_policies cuda (the other policies, unchanged) as a regression check;
#  3. bench/shapes_sweep.py: GPT-2 small (random weights, fp32, batch 1, dynamic seq) at every
#     length 1..128 increasing then shuffled, graft generic next to exact, update, pad and eager,
#     and generic and exact with fused f32 attention (issue 11: fused attention under generic)
#     (and PyTorch eager / torch.compile reduce-overhead when torch is there): total time, per-call
#     time, graph memory, warm-up, generic replays and slot-table bytes.
# Usage: OUT=dir bash scripts/generic-gpu-check.sh   (SHAPES_MAX_LEN, SHAPES_TIMEOUT, SHAPES_ONLY
# narrow the sweep). Writes $OUT/device.txt, tests.log, bench.log and $OUT/shapes/shapes_sweep.{json,md}.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/generic-gpu}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  date -u; git rev-parse --short HEAD 2>/dev/null; } | tee "$out/device.txt"
build=${GRAFT_BUILD:-build-gpu}
for f in lib/libgraft.so bin/graft tests/test_shape_generic tests/test_shape_policies tests/test_render; do
  if [ ! -e "$build/$f" ]; then
    echo "generic-gpu-check: $build/$f missing: carry a Release build of this branch in $build/ (this script builds nothing)"
    echo "generic-gpu-check: FAIL"
    exit 1
  fi
done
export LD_LIBRARY_PATH="$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
export GRAFT_LIBRARY="$PWD/$build/lib/libgraft.so" GRAFT_BIN="$PWD/$build/bin/graft"
export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
fail=0
{
  echo "== test_shape_generic cuda (small models; dynamic exports with GRAFT_TEST_DEVICE=cuda)"
  GRAFT_TEST_DEVICE=cuda timeout 300 "$build/tests/test_shape_generic" cuda 2>&1 | grep -v 're-recorded' | tail -12
  [ "${PIPESTATUS[0]}" -eq 0 ] || echo "test_shape_generic cuda FAILED"
  echo "== test_shape_generic (sim)"
  timeout 300 "$build/tests/test_shape_generic" 2>&1 | grep -v 're-recorded' | tail -5
  [ "${PIPESTATUS[0]}" -eq 0 ] || echo "test_shape_generic sim FAILED"
  echo "== test_render (NVRTC: literal, generic and slot-table forms)"
  timeout 300 "$build/tests/test_render" 2>&1 | tail -3
  [ "${PIPESTATUS[0]}" -eq 0 ] || echo "test_render FAILED"
  if [ -e "$build/tests/test_attention" ]; then
    echo "== test_attention cuda (fused attention kernels, regression)"
    GRAFT_TEST_DEVICE=cuda timeout 180 "$build/tests/test_attention" 2>&1 | tail -4
    [ "${PIPESTATUS[0]}" -eq 0 ] || echo "test_attention cuda FAILED"
  fi
  echo "== test_shape_policies cuda (regression)"
  timeout 180 "$build/tests/test_shape_policies" cuda 2>&1 | tail -6
  [ "${PIPESTATUS[0]}" -eq 0 ] || echo "test_shape_policies cuda FAILED"
} 2>&1 | tee "$out/tests.log"
grep -q FAILED "$out/tests.log" && fail=1
echo "== bench/shapes_sweep.py (generic next to the other policies)"
only=${SHAPES_ONLY:-"torch eager,torch reduce-overhead,graft eager,graft exact,graft update,graft pad,graft generic,graft exact fused-attention,graft generic fused-attention"}
timeout "${SHAPES_TIMEOUT:-420}" python3 bench/shapes_sweep.py --out "$out/shapes" --max-len "${SHAPES_MAX_LEN:-128}" --only "$only" \
  2>&1 | tee "$out/bench.log" | grep -v '^graft: capturing\|re-recorded' | tail -30
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "shapes_sweep FAILED or a variant failed (see $out/bench.log)"; fail=1; }
echo "generic-gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
