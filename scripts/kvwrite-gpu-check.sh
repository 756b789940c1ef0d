#!/usr/bin/env bash
# Issue 12 on the GPU machine: the KV-cache append as a scatter kernel (cache_write) and arg_max /
# arg_min over long rows in chunks (passes/lower-reduce.c), checked on CUDA and timed:
#   1. gpucheck: the cache-append kernel (whole cache compared, so positions other than kv - 1 must
#      be untouched; literal and generic code) and both split arg kernels (ties, select_last_index)
#      against the simulator, exact; then the arg_max timing over GPT-2's vocabulary (one block per
#      row, as before, against the split);
#   2. test_decode and test_generate on CUDA (greedy ids identical to HF's; one scatter kernel per
#      cache state over the new entries only);
#   3. the ArgMax / ArgMin ONNX tests (long rows with ties and NaNs included) on CUDA against
#      onnx.reference;
#   4. scripts/decode-profile-gpu.sh (per-kernel device time of one decode step): the cache_write,
#      arg_max and where kernels of each config are listed.
#
#   OUT=dir bash scripts/kvwrite-gpu-check.sh
#
# graft built in build-gpu (cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release; gpucheck included).
set -u
out=${OUT:-/tmp/kvwrite-gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${LD_LIBRARY_PATH:-}"
export GRAFT_LIBRARY="$PWD/build-gpu/lib/libgraft.so" GRAFT_BIN="$PWD/build-gpu/bin/graft"
fail=0
for f in cache_write arg_; do
  echo "== gpucheck $f"
  timeout 240 build-gpu/bin/gpucheck "$f" > "$out/gpucheck-$f.log" 2>&1 || { echo "gpucheck $f FAILED"; fail=1; }
  grep -E "^(FAIL|TIME)" "$out/gpucheck-$f.log"
  echo "$(grep -c '^PASS' "$out/gpucheck-$f.log") passed, $(grep -c '^FAIL' "$out/gpucheck-$f.log") failed"
done
for t in test_decode test_generate; do
  echo "== $t (cuda)"
  GRAFT_TEST_DEVICE=cuda timeout 300 build-gpu/tests/$t > "$out/$t.log" 2>&1 || { echo "$t cuda FAILED"; fail=1; }
  grep -v '^ok' "$out/$t.log" | tail -6
done
echo "== ArgMax / ArgMin on CUDA (tests/py/test_onnx_breadth.py -k arg)"
(cd tests/py && GRAFT_TEST_DEVICE=cuda timeout 300 python3 -m pytest -q -k arg test_onnx_breadth.py) > "$out/py-arg.log" 2>&1 \
  || { echo "py arg FAILED"; fail=1; }
tail -2 "$out/py-arg.log"
if [ "${SKIP_PROFILE:-0}" != 1 ]; then
  echo "== decode step profile"
  OUT="$out/profile" bash scripts/decode-profile-gpu.sh > "$out/profile.log" 2>&1
  for f in "$out"/profile/profile-*.txt; do
    [ -f "$f" ] || continue
    echo "-- $(basename "$f")"
    grep -E "ms per token|kernels|cache_write|arg_max|where" "$f" | head -20
  done
fi
exit $fail
