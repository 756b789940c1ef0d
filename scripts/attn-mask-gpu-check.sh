#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool): the fused attention with the mask tile
# table (src/device/cuda/cuda-attn.c: attn_mask_cls classifies the mask once per call, the
# attention blocks read the table). Every step runs even when an earlier one fails; each
# step's exit status goes to $OUT/status.txt and the summary at the end.
#   1. gpucheck attn: every attention case on CUDA against the simulator (dead tiles, orphan
#      rows, per-head mask planes, the table under graph capture) and the TIME lines (fused
#      vs unfused; "f32 causal mask" is GPT-2's export mask [8,1,512,512]).
#   2. test_attention, test_dynamic with GRAFT_TEST_DEVICE=cuda (exports through sessions,
#      eager and graph mode).
#   3. GPT-2 small bf16 b1 s128 and b8 s512 end to end with per-kernel GPU time
#      (bench/realsize.py, graft only), when torch and transformers are importable.
#   usage: OUT=dir bash scripts/attn-mask-gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/attn-mask-gpu-check}
mkdir -p "$out"
: > "$out/status.txt"
fail=0
step() { # step NAME STATUS: record and remember
  echo "$1: exit $2" | tee -a "$out/status.txt"
  [ "$2" -eq 0 ] || fail=1
}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
} | tee "$out/device.txt"

build=${GRAFT_BUILD:-build-gpu}
if [ ! -x "$build/bin/gpucheck" ] || [ ! -x "$build/tests/test_attention" ] || [ ! -x "$build/tests/test_dynamic" ]; then
  { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j"$(nproc)"; } > "$out/build.log" 2>&1
  step build $?
  tail -3 "$out/build.log"
fi

echo "== gpucheck attn =="
"$build/bin/gpucheck" attn > "$out/gpucheck-attn.log" 2>&1
step "gpucheck attn" $?
grep -E "^FAIL|capture_mask|deadtiles[89]|^TIME attention|passed, " "$out/gpucheck-attn.log"

echo "== test_attention on CUDA =="
GRAFT_TEST_DEVICE=cuda "$build/tests/test_attention" > "$out/test_attention.log" 2>&1
step "test_attention cuda" $?
tail -3 "$out/test_attention.log"

echo "== test_dynamic on CUDA =="
GRAFT_TEST_DEVICE=cuda "$build/tests/test_dynamic" > "$out/test_dynamic.log" 2>&1
step "test_dynamic cuda" $?
tail -3 "$out/test_dynamic.log"

echo "== GPT-2 small bf16 end to end (bench/realsize.py, graft) =="
lib=$(ls "$build"/lib/libgraft.so 2>/dev/null | head -1)
if python3 -c "import torch, transformers" 2>/dev/null && [ -n "$lib" ]; then
  GRAFT_LIBRARY="$lib" PYTHONDONTWRITEBYTECODE=1 python3 bench/realsize.py --models gpt2 --dtypes bf16 \
    --configs 1x128,8x512 --variants graft --iters 20 --warmup 5 --out "$out/realsize.jsonl" \
    --kernels "$out/kernels.jsonl" > "$out/realsize.log" 2>&1
  step "realsize gpt2 bf16" $?
  tail -8 "$out/realsize.log"
  # the attention kernels' share: the table kernel and the tensor-core kernel
  python3 - "$out/kernels.jsonl" <<'EOF' 2>&1 | tee "$out/attention-kernels.txt"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    for name, ms, n in r.get("kernels", []):  # [name, GPU ms per call, launches in the 10 profiled calls]
        if "attn" in name:
            print("b%s s%s %-22s %8.4f ms/call %5d launches in 10 calls %7.2f us each" % (r["batch"], r["seq"], name, ms, n, ms / (n / 10) * 1e3))
EOF
else
  echo "realsize: skipped (torch/transformers or $build/lib/libgraft.so missing)" | tee -a "$out/status.txt"
fi

echo "attn-mask-gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)" | tee "$out/result.txt"
exit $fail
