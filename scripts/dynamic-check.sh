#!/usr/bin/env bash
# Symbolic shapes on the GPU machine (through the device tool): regenerates the
# dynamic-axis fixtures with this machine's PyTorch (tests/py/make_dynamic_fixtures.py:
# GPT-2, BERT, Llama-style exports with dynamic batch and seq, PyTorch's outputs at six
# bindings), then runs on CUDA against them: test_dynamic (one session over every
# binding, eager and graph, arena per binding and max shape, vs PyTorch) and
# test_generic_onnx (a new length compiles and loads nothing), and the same on the
# simulator; then graft bench at each binding (prepare time, kernel counters).
# Logs and the fixtures (dyn-fixtures.tgz) go to $OUT. Exit non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/dynamic-check}
mkdir -p "$out"
build=${GRAFT_BUILD:-build-gpu}
export LD_LIBRARY_PATH="$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
fail=0
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  python3 -c "import torch, transformers, onnx; print('torch', torch.__version__, 'transformers', transformers.__version__, 'onnx', onnx.__version__)" 2>&1
} | tee "$out/device.txt"

echo "== fixtures: exported here (DYN_EXPORT=0: use the committed ones) =="
rm -rf "$out/dyn"
if [ "${DYN_EXPORT:-1}" = 0 ]; then
  echo "skipped: the committed fixtures are used"
elif PYTHONUNBUFFERED=1 python3 tests/py/make_dynamic_fixtures.py --out "$out/dyn" > "$out/fixtures.log" 2>&1; then
  tar czf "$out/dyn-fixtures.tgz" -C "$out" dyn
  rm -rf tests/data/onnx/dyn && cp -r "$out/dyn" tests/data/onnx/dyn  # the tests read them from there
  tail -5 "$out/fixtures.log"
else
  echo "fixture export FAILED (the committed fixtures are used)"; tail -30 "$out/fixtures.log"; fail=1
fi

{
  for dev in cuda sim; do
    echo "== test_dynamic ($dev) =="
    GRAFT_TEST_DEVICE=$dev "$build/tests/test_dynamic" 2>&1 | tail -14
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_dynamic $dev FAILED"; fail=1; }
    echo "== test_generic_onnx ($dev) =="
    GRAFT_TEST_DEVICE=$dev "$build/tests/test_generic_onnx" 2>&1 | tail -14
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_generic_onnx $dev FAILED"; fail=1; }
  done
} 2>&1 | tee "$out/tests.log"
grep -q FAILED "$out/tests.log" && fail=1

echo "== bench: each binding of the dynamic GPT-2 export, a fresh process each (graph mode) =="
D=tests/data/onnx/dyn/gpt2_dynamo
for b in b1_s1 b1_s17 b1_s64 b8_s3; do
  echo "-- $b"
  "$build/bin/graft" bench "$D/model.onnx" --device cuda --mode graph --input "input_ids=$D/$b/input_ids.npy" --iters 200 --warmup 20 \
    --repeats 3 --json "$out/bench-gpt2-$b.json" 2>&1 | grep -E "^(load|compile|time/iter|gpu time|kernels)|kernel" | head -8
done 2>&1 | tee "$out/bench.log"
echo "== new binding: host time to plan a binding not seen before (graph mode, each export) =="
for m in gpt2_dynamo bert_dynamo llama_dynamo; do
  for dims in "--dim batch=1 --dim seq=64" "--dim batch=8 --dim seq=128"; do
    echo "-- $m $dims"
    # shellcheck disable=SC2086
    "$build/bin/graft" bench "tests/data/onnx/dyn/$m/model.onnx" --device cuda --mode graph $dims --iters 50 --repeats 1 \
      --json "$out/newbinding-$m-$(echo "$dims" | tr -dc '0-9_').json" 2>&1 | grep -E "^(new binding|kernels prepared|shape-generic)"
  done
done 2>&1 | tee "$out/newbinding.log"
echo "dynamic-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
