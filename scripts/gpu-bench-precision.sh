#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the dynamic-axis GPT-2 / BERT / Llama exports at
# batch 8, seq 64 (the fixtures' largest length), f32 and --precision bf16, graph mode, with
# the per-class kernel profile; checks bf16 accuracy against f32 (limit 1.5e-2, docs/precision.md)
# and that bf16 runs the fused attention. Results (JSON, logs) go to $OUT/precision.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}/precision
mkdir -p "$out"
build=${GRAFT_BUILD:-build-gpu}
export LD_LIBRARY_PATH="$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
G="$build/bin/graft"
fail=0
for m in gpt2_dynamo bert_dynamo llama_dynamo; do
  M=tests/data/onnx/dyn/$m/model.onnx
  for p in f32 bf16; do
    prec=(); [ "$p" = bf16 ] && prec=(--precision bf16)
    echo "== $m $p"
    "$G" bench "$M" --device cuda --mode graph --dim batch=8 --dim seq=64 "${prec[@]}" --profile --iters 100 --repeats 5 \
      --json "$out/$m-$p.json" > "$out/$m-$p.log" 2>&1 || { echo "bench FAILED"; fail=1; }
    grep -E "^(time/iter|gpu time|kernels/iter)" "$out/$m-$p.log"
    sed -n '/class/,/^$/p' "$out/$m-$p.log" | head -9
    "$G" run "$M" --device cuda --mode graph --dim batch=8 --dim seq=64 "${prec[@]}" --output-dir "$out/run-$m-$p" > /dev/null 2>&1 \
      || { echo "run FAILED"; fail=1; }
  done
  python3 - "$out/run-$m-f32" "$out/run-$m-bf16" <<'PY' || fail=1
import sys, glob, os, numpy as np
a, b = sys.argv[1], sys.argv[2]
for f in sorted(glob.glob(os.path.join(a, "*.npy"))):
    x = np.load(f).astype(np.float64); y = np.load(os.path.join(b, os.path.basename(f))).astype(np.float64)
    err = np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30)
    print("bf16 vs f32 %s: rel_err=%.3e %s" % (os.path.basename(f), err, "PASS" if err <= 1.5e-2 else "FAIL"))
    if err > 1.5e-2: sys.exit(1)
PY
  "$G" explain "$M" --device cuda --dim batch=8 --dim seq=64 --precision bf16 2>&1 | grep -cE "attn .*bf16" | sed "s/^/fused bf16 attention steps: /"
done
echo "gpu-bench-precision: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
