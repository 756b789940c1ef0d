#!/usr/bin/env bash
# bench/generic/run.sh — on the GPU machine: builds graft (build-generic/), runs the
# CUDA checks of shape-generic kernels (test_devgraph cuda, test_generic cuda,
# gpucheck: every kernel literal and generic against the simulator), then benches
# the same models written with static dims (literal kernels) and with a symbolic
# dim (generic kernels), new lengths in new processes (warm kernel cache: nothing
# compiled), and compares their outputs bit for bit. Logs in $OUT (out/generic).
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
cd "$C/../.." || exit 1; OUT=${OUT:-out/generic}; mkdir -p "$OUT"
cmake -S . -B build-generic -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/cmake.log 2>&1 || { tail -20 $OUT/cmake.log; exit 1; }
ninja -C build-generic -j16 > $OUT/build.log 2>&1 || { grep -B2 -A8 "error" $OUT/build.log | head -60; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== test_devgraph cuda"; build-generic/tests/test_devgraph cuda 2>&1 | tail -15
echo "== test_generic (sim)"; build-generic/tests/test_generic 2>&1 | tail -3
echo "== test_generic cuda"; XDG_CACHE_HOME=/tmp/gencache0 build-generic/tests/test_generic cuda 2>&1 | tail -12
echo "== gpucheck"; build-generic/bin/gpucheck > $OUT/gpucheck.log 2>&1; echo "gpucheck rc=$?"
grep -c "^PASS" $OUT/gpucheck.log; grep "^FAIL" $OUT/gpucheck.log | head -20; grep "generic_shared\|gpucheck:\|^TIME" $OUT/gpucheck.log
export XDG_CACHE_HOME=/tmp/gencache; rm -rf $XDG_CACHE_HOME
G=build-generic/bin/graft
B="--device cuda --iters 200 --repeats 5 --warmup 3 --profile"
{
for mode in graph eager; do
  echo "### transformer static (literal) $mode"; $G bench $C/transformer_static.gir --mode $mode $B 2>&1 | grep -E "^(time/iter|gpu time|kernel time sum|kernels prepared|shape-generic)"
  echo "### transformer symbolic S=32 (generic) $mode"; $G bench $C/transformer_sym.gir --dim S=32 --mode $mode $B 2>&1 | grep -E "^(time/iter|gpu time|kernel time sum|kernels prepared|shape-generic)"
  echo "### eos static (literal) $mode"; $G bench $C/eos_static.gir --mode $mode $B 2>&1 | grep -E "^(time/iter|gpu time|kernel time sum|kernels prepared|shape-generic)"
  echo "### eos symbolic N=1M (generic) $mode"; $G bench $C/eos_sym.gir --dim N=1048576 --mode $mode $B 2>&1 | grep -E "^(time/iter|gpu time|kernel time sum|kernels prepared|shape-generic)"
done
for S in 33 100 257; do
  echo "### transformer symbolic S=$S (new length, new process, warm cache)"; $G bench $C/transformer_sym.gir --dim S=$S --mode graph --device cuda --iters 20 --repeats 1 --warmup 1 2>&1 | grep -E "^(time/iter|kernels prepared|shape-generic|compile)"
done
echo "== static (literal) vs symbolic (generic) outputs on CUDA"
for spec in "transformer S=32" "eos N=1048576"; do set -- $spec
  for mode in eager graph; do
    $G run $C/$1_static.gir --device cuda --mode $mode --output-dir /tmp/o/$1_static_$mode >/dev/null 2>&1
    $G run $C/$1_sym.gir --dim $2 --device cuda --mode $mode --output-dir /tmp/o/$1_sym_$mode >/dev/null 2>&1
    python3 tools/compare_npy.py /tmp/o/$1_sym_$mode /tmp/o/$1_static_$mode --bitwise --label "$1 $mode generic vs literal" 2>&1 | tail -3
  done
done
echo "### eos symbolic N=1000000 (new length, new process, warm cache)"; $G bench $C/eos_sym.gir --dim N=1000000 --mode graph --device cuda --iters 20 --repeats 1 --warmup 1 2>&1 | grep -E "^(kernels prepared|shape-generic)"
} > $OUT/bench.log 2>&1
cat $OUT/bench.log
