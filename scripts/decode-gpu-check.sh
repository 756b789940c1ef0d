#!/usr/bin/env bash
# Issue 12 on the GPU machine: the decode tests on CUDA, then bench/decode.py (graft vs Hugging Face
# generate eager and static-cache reduce-overhead). Usage: OUT=dir bash scripts/decode-gpu-check.sh
# (graft built in build-gpu; DECODE_CONFIGS="model:dtype:batches:beams ..." picks the benchmark runs).
set -u
out=${OUT:-/tmp/decode-gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${LD_LIBRARY_PATH:-}"
export GRAFT_LIBRARY="$PWD/build-gpu/lib/libgraft.so" GRAFT_BIN="$PWD/build-gpu/bin/graft"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; git rev-parse --short HEAD 2>/dev/null; } > "$out/device.txt"
fail=0
{
  for t in test_decode test_generate; do
    echo "== $t (cuda)"
    GRAFT_TEST_DEVICE=cuda timeout 300 build-gpu/tests/$t 2>&1 | grep -v '^ok' | tail -8
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$t cuda FAILED"; fail=1; }
  done
} 2>&1 | tee "$out/tests.log"
grep -q FAILED "$out/tests.log" && fail=1
for cfg in ${DECODE_CONFIGS:-gpt2:fp32:1,8:1 gpt2:bf16:1,8:1}; do
  IFS=: read -r m d b k <<< "$cfg"
  echo "== bench/decode.py $m $d batch $b beams $k"
  timeout "${DECODE_TIMEOUT:-240}" python3 bench/decode.py --models "$m" --dtypes "$d" --batches "$b" --beams "$k" \
    --repeats "${DECODE_REPEATS:-3}" --out "$out/decode-$m-$d-b${b//,/_}-k${k//,/_}" 2>&1 | tail -30
done 2>&1 | tee "$out/bench.log"
echo "decode-gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
