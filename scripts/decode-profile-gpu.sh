#!/usr/bin/env bash
# Issue 12 on the GPU machine: where one decode step's device time goes. Exports the benchmark's
# GPT-2 small and Llama-style step models (bench/decode.py's export, random weights), then runs
# `graft generate --profile` (prompt 32, 128 new tokens, greedy, the rewritten engine in graph mode)
# for each PROFILE_CONFIGS entry "model:dtype:batch" and keeps each run's output.
#
#   OUT=dir bash scripts/decode-profile-gpu.sh
#
# graft built in build-gpu (bin/graft, lib/libgraft.so).
set -u
out=${OUT:-/tmp/decode-profile}
work=${WORK:-/tmp/decode-profile-work}
mkdir -p "$out" "$work"
export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${LD_LIBRARY_PATH:-}"
export GRAFT_LIBRARY="$PWD/build-gpu/lib/libgraft.so" GRAFT_BIN="$PWD/build-gpu/bin/graft" PYTHONPATH="$PWD/python:$PWD/bench"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; git rev-parse --short HEAD 2>/dev/null; } > "$out/device.txt"
configs=${PROFILE_CONFIGS:-gpt2:fp32:8 gpt2:fp32:1 llama:bf16:1 llama:bf16:8}
python3 - "$work" $configs <<'EOF'
import os, sys
import numpy as np
import decode
work = sys.argv[1]
for name in sorted({c.split(":")[0] for c in sys.argv[2:]}):
    path = os.path.join(work, name + ".onnx")
    if not os.path.exists(path):
        model, n_layer, kvh, hd, vocab = decode.make_model(name, False)
        decode.export_step(model.eval(), n_layer, kvh, hd, vocab, path)
    for b in (1, 8):
        rng = np.random.default_rng(7)
        np.save(os.path.join(work, "%s-b%d.npy" % (name, b)), rng.integers(3, decode.vocab_of(name, False), size=(b, 32), dtype=np.int64))
    print("exported", path, flush=True)
EOF
for cfg in $configs; do
  IFS=: read -r m d b <<< "$cfg"
  prec=(); [ "$d" = bf16 ] && prec=(--precision bf16)
  echo "== $cfg"
  timeout 240 build-gpu/bin/graft generate "$work/$m.onnx" --prompt "$work/$m-b$b.npy" --max-new-tokens 128 --device cuda \
    --mode graph "${prec[@]}" --quiet --profile --output-dir "$work/o-$m-$d-$b" > "$out/profile-$m-$d-b$b.txt" 2>&1
  echo "exit $?"
  grep -E "ms per token|tokens/s|engine " "$out/profile-$m-$d-b$b.txt"
  sed -n '/device time per kernel class/,/per-kernel/p' "$out/profile-$m-$d-b$b.txt"
done
