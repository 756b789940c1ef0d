#!/usr/bin/env bash
# scripts/ew-gpu-check.sh — issue 15's elementwise and norm kernels at real sizes on the GPU machine:
# gpucheck (every kernel on CUDA against the simulator: the block kernels' row cache, 8-wide bf16
# vectors), the dynamic-shape model tests on CUDA, then bench/realsize.py on GPT-2 small and the
# Llama-style model in bf16 at batch 8, seq 512 (torch.compile against graft, the GPU time by kernel).
#
#   OUT=dir bash scripts/ew-gpu-check.sh
#   STEPS="gpucheck tests" OUT=dir bash scripts/ew-gpu-check.sh   # some steps (default: all three:
#                                              # gpucheck tests realsize), e.g. one call each where
#                                              # the whole would not fit a 10-minute command
#
# graft built in build-gpu (made here if missing). Writes under $OUT: device.txt, gpucheck.log,
# test_*.log, rs.jsonl and kernels.jsonl (realsize.py's rows and per-kernel GPU times),
# realsize.log, and status.txt with each step's exit status. Exits non-zero when a step failed.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-out/ew-gpu}
mkdir -p "$out"
build=${GRAFT_BUILD:-build-gpu}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  date -u; git rev-parse --short HEAD 2>/dev/null; } > "$out/device.txt"
: > "$out/status.txt"
fail=0
STEPS=${STEPS:-gpucheck tests realsize}
want() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
step() { # step NAME STATUS
    echo "$1: exit $2" | tee -a "$out/status.txt"
    [ "$2" -eq 0 ] || fail=1
}

if [ ! -x "$build/bin/gpucheck" ] || [ ! -f "$build/lib/libgraft.so" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > "$out/build.log" 2>&1 &&
        cmake --build "$build" -j"$(nproc)" >> "$out/build.log" 2>&1
    step build $?
fi
export LD_LIBRARY_PATH="$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
export GRAFT_LIBRARY="$PWD/$build/lib/libgraft.so" GRAFT_BIN="$PWD/$build/bin/graft"

# 1. every kernel against the simulator (full run)
if want gpucheck; then
    timeout 400 "$build/bin/gpucheck" > "$out/gpucheck.log" 2>&1
    step gpucheck $?
    tail -1 "$out/gpucheck.log"
    grep -E "^FAIL" "$out/gpucheck.log" | head -20
fi

# 2. the GPT-2 / BERT / Llama exports on CUDA against PyTorch's outputs at several bindings
for t in test_dynamic test_generic_onnx; do
    if want tests && [ -x "$build/tests/$t" ]; then
        GRAFT_TEST_DEVICE=cuda timeout 300 "$build/tests/$t" > "$out/$t.log" 2>&1
        step "$t (cuda)" $?
        tail -1 "$out/$t.log"
    fi
done

# 3. real sizes: GPT-2 small and the Llama-style model, bf16, b8 s512, torch.compile vs graft
if want realsize; then
    rm -f "$out/rs.jsonl" "$out/kernels.jsonl"
    timeout 560 python3 bench/realsize.py --models gpt2,llama --dtypes bf16 --configs 8x512 --variants compile,graft \
        --iters 20 --warmup 5 --out "$out/rs.jsonl" --kernels "$out/kernels.jsonl" --one > "$out/realsize.log" 2>&1
    step realsize $?
    tail -8 "$out/realsize.log"
    grep -q '"error"' "$out/rs.jsonl" 2>/dev/null && { echo "realsize: a variant reported an error (rs.jsonl)"; fail=1; }
fi

echo "status: $([ $fail -eq 0 ] && echo ok || echo FAILED)" | tee -a "$out/status.txt"
exit $fail
