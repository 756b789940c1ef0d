#!/usr/bin/env bash
# scripts/rope-bench.sh — issue 15's RoPE kernels on the GPU machine (render-cuda.c's row-group
# loop and lazy selects): correctness against the simulator, the kernels alone, and the
# Llama-style model's profile.
#
#   OUT=dir bash scripts/rope-bench.sh
#   STEPS="gpucheck" OUT=dir bash scripts/rope-bench.sh   # some steps (default: gpucheck profile)
#
# 1. gpucheck, the RoPE and timing cases only: rope_fused_* and rope_plan_* against the simulator
#    (literal and generic code), then `TIME rope_bf16_8x12x512x64` (the model's q), `..8x4x..` (k)
#    and `silu_mul_bf16_4096x2048` (a contiguous kernel at bandwidth: the reference), literal and
#    generic (the exports run generic code). Before this change the model's kernels took 33.6 us
#    (q) and 13.1 us (k); at ~3 TB/s their compulsory traffic (12.6 MB, 4.2 MB) is ~4.2 and ~1.4 us.
# 2. the model: `graft bench llama.onnx --device cuda --mode graph --precision bf16 --dim batch=8
#    --dim seq=512 --profile` (the export of bench/realsize.py, made when missing: needs torch and
#    transformers); prints the kNNN_cast lines (the RoPE kernels, 16 of them) and their sum, and
#    the gpu time per iteration. Before: 8 x 33.6 + 8 x 13.1 = 374 us of 1801 us.
#
# graft built in build-gpu (made here if missing). Writes under $OUT: device.txt, gpucheck-rope.log,
# profile-llama.txt, status.txt. Exits non-zero when a step failed.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-out/rope-bench}
mkdir -p "$out"
build=${GRAFT_BUILD:-build-gpu}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  date -u; git rev-parse --short HEAD 2>/dev/null; } > "$out/device.txt"
: > "$out/status.txt"
fail=0
STEPS=${STEPS:-gpucheck profile}
want() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
step() { # step NAME STATUS
    echo "$1: exit $2" | tee -a "$out/status.txt"
    [ "$2" -eq 0 ] || fail=1
}

if [ ! -x "$build/bin/gpucheck" ] || [ ! -x "$build/bin/graft" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release > "$out/build.log" 2>&1 &&
        cmake --build "$build" -j"$(nproc)" >> "$out/build.log" 2>&1
    step build $?
fi
export LD_LIBRARY_PATH="$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
export GRAFT_LIBRARY="$PWD/$build/lib/libgraft.so" PYTHONPATH="$PWD/python:${PYTHONPATH:-}"

if want gpucheck; then
    : > "$out/gpucheck-rope.log"
    for f in rope silu_mul_timing; do # gpucheck's one filter argument: a substring of the case names
        timeout 300 "$build/bin/gpucheck" "$f" >> "$out/gpucheck-rope.log" 2>&1 || fail_gc=1
    done
    step gpucheck "${fail_gc:-0}"
    grep -E "^(FAIL|TIME)|passed" "$out/gpucheck-rope.log"
fi

if want profile; then
    model=${LLAMA_ONNX:-/tmp/realsize/llama.onnx}
    mkdir -p "$(dirname "$model")"
    if [ ! -f "$model" ]; then
        timeout 300 python3 -c "
import sys; sys.path.insert(0, 'bench')
import realsize
realsize.export(realsize.build('llama', 'eager')[0], '$model')" > "$out/export.log" 2>&1
        step export $?
    fi
    timeout 300 "$build/bin/graft" bench "$model" --device cuda --mode graph --precision bf16 --dim batch=8 --dim seq=512 \
        --profile > "$out/profile-llama.txt" 2>&1
    step profile $?
    grep -E "^gpu time/iter|^kernel time sum" "$out/profile-llama.txt"
    grep -E "elementwise +k[0-9]+_cast$" "$out/profile-llama.txt" |
        awk '{ s += $1; n++; print } END { printf "RoPE (_cast) kernels: %d, sum %.1f us\n", n, s }'
    grep -E "elementwise +k[0-9]+_mul$" "$out/profile-llama.txt" |
        awk '{ s += $1; n++ } END { printf "SiLU * up (_mul) kernels: %d, sum %.1f us\n", n, s }'
fi

echo "status: $([ $fail -eq 0 ] && echo ok || echo FAILED)" | tee -a "$out/status.txt"
exit $fail
