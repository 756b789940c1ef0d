#!/usr/bin/env bash
# Issue 12 on the GPU machine: the decode tests on CUDA (the decode loop on the device included),
# bench/decode.py's harness on the CPU (--dry-run), then bench/decode.py: graft against Hugging Face
# generate eager and static-cache + torch.compile(reduce-overhead), each variant in its own process.
#
#   OUT=dir bash scripts/decode-gpu-check.sh
#
# graft built in build-gpu. DECODE_CONFIGS="model:dtype:batches:beams ..." picks the benchmark runs
# (first to last: the ones that matter most first); DECODE_BUDGET (seconds, default 420) bounds the
# whole benchmark so that the script ends inside one 10-minute command: a config that does not fit
# is skipped and said so, and each config writes its own files, so a later call with the remaining
# configs (SKIP_TESTS=1) completes the set. DECODE_NEW / DECODE_REPEATS: new tokens, repeats. A config
# whose beams field is "s" samples (--sample --top-k 50 --top-p 0.9: graft's device-side sample op
# against HF generate(do_sample=True), eager and static-cache reduce-overhead; ids not compared).
# The CUDA tests include the sample kernel against the host definition (test_decode: exact at vocab 8,
# by frequency, and at GPT-2's 50257 with the number of flipped draws printed) and sampled generation
# reproducible by seed on the device; the beam kernels (beam_step against gr_beam_step_row step by
# step: ids exact, scores to 1e-5, GPT-2's vocabulary and 16 beams included; beam_reorder) and beam 4
# through the rewritten engine on CUDA (the ids that differ from the reference engine's and HF's printed).
# A config whose beams field is k > 1 runs beam search of width k: graft (auto: the rewritten engine, the
# beam step and the cache reorder on the device inside the WHILE graph) against HF generate(num_beams=k,
# do_sample=False, early_stopping=True), ids compared. DECODE_CONFIGS=beam picks the beam set
# (gpt2 and llama, fp32 and bf16, batch 1 and 8, beam 4).
set -u
out=${OUT:-/tmp/decode-gpu}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${LD_LIBRARY_PATH:-}"
export GRAFT_LIBRARY="$PWD/build-gpu/lib/libgraft.so" GRAFT_BIN="$PWD/build-gpu/bin/graft"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; git rev-parse --short HEAD 2>/dev/null; } > "$out/device.txt"
fail=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  {
    for t in test_decode test_generate; do
      echo "== $t (cuda)"
      GRAFT_TEST_DEVICE=cuda timeout 300 build-gpu/tests/$t 2>&1 | grep -v '^ok' | tail -12
      [ "${PIPESTATUS[0]}" -eq 0 ] || echo "$t cuda FAILED"
    done
    echo "== bench/decode.py --dry-run (the harness: a crashing variant must not touch the others)"
    timeout 120 python3 bench/decode.py --dry-run --models gpt2 --batches 1 --beams 1 --variants hf-eager,graft,graft-reference \
      --dry-run-fail graft-reference --out "$out/dry-run" > "$out/dry-run.log" 2>&1
    if grep -q '| graft | .* | match |' "$out/dry-run.md" 2>/dev/null && grep -q 'graft-reference (exit 3)' "$out/dry-run.md"; then
      echo "dry run: ok"
    else
      echo "dry run FAILED"; tail -5 "$out/dry-run.log"
    fi
  } 2>&1 | tee "$out/tests.log"
  grep -q FAILED "$out/tests.log" && fail=1
fi
budget=${DECODE_BUDGET:-420}
start=$(date +%s)
configs=${DECODE_CONFIGS:-gpt2:fp32:1:1,4 gpt2:fp32:1:s llama:fp32:1:1,4 gpt2:fp32:8:1 gpt2:bf16:1:1 llama:bf16:1:1}
[ "$configs" = beam ] && configs="gpt2:fp32:1:4 gpt2:fp32:8:4 llama:fp32:1:4 gpt2:bf16:1:4 llama:fp32:8:4 llama:bf16:1:4"
for cfg in $configs; do
  IFS=: read -r m d b k <<< "$cfg"
  left=$(( budget - ($(date +%s) - start) ))
  if [ "$left" -lt 60 ]; then echo "== skipped $cfg: ${left}s left of DECODE_BUDGET=$budget (run it with DECODE_CONFIGS=$cfg SKIP_TESTS=1)"; continue; fi
  if [ "$k" = s ]; then mode_args=(--beams 1 --sample --top-k 50 --top-p 0.9); else mode_args=(--beams "$k"); fi
  echo "== bench/decode.py $m $d batch $b ${mode_args[*]} (${left}s left)"
  timeout "$left" python3 bench/decode.py --models "$m" --dtypes "$d" --batches "$b" "${mode_args[@]}" --new "${DECODE_NEW:-128}" \
    --repeats "${DECODE_REPEATS:-3}" --timeout "$left" --out "$out/decode-$m-$d-b${b//,/_}-k${k//,/_}" 2>&1 | grep '^|' | tail -20
done 2>&1 | tee "$out/bench.log"
echo "decode-gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
