#!/usr/bin/env bash
# torch.compile(backend="graft") on a GPU machine (issue 13): the backend's tests with CUDA
# tensors on graft's CUDA device, then the in-process scoreboard of the Hugging Face models
# (GPT-2, BERT, T5 encoder, Llama) and eos_1M against eager / compile / reduce-overhead /
# graft.load. Every step runs whatever the previous ones did; each one's exit status, output
# and time are recorded under $OUT, and the script exits non-zero if any step failed.
#   OUT=DIR bash scripts/torch-backend-gpu-check.sh      (default OUT: bench/results/torch-backend-gpu)
# Needs build-gpu/lib/libgraft.so (built here if missing) and python3 with torch (CUDA) and
# transformers.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-bench/results/torch-backend-gpu}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
status="$OUT/status.txt"
: >"$status"
failed=0

# step NAME CMD...: runs CMD, its output in $OUT/NAME.log, "NAME rc=.. s=.." in status.txt
step() {
  local name=$1
  shift
  local t0 rc
  t0=$(date +%s)
  echo "== $name: $*" | tee -a "$OUT/$name.log"
  "$@" >>"$OUT/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc s=$(($(date +%s) - t0))" | tee -a "$status"
  [ "$rc" -eq 0 ] || failed=1
  tail -n 25 "$OUT/$name.log"
  return 0
}

if [ ! -f build-gpu/lib/libgraft.so ]; then
  step build bash -c 'cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build build-gpu -j"$(nproc)" --target graft_shared'
fi
export GRAFT_LIBRARY="$PWD/build-gpu/lib/libgraft.so"
export LD_LIBRARY_PATH="$PWD/build-gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export GRAFT_COMMIT=${GRAFT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")}

step env python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name()); print("transformers", transformers.__version__)'
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true

# the backend's tests with CUDA tensors (GRAFT_TORCH_DEVICE=cuda: graft's CUDA device), then on
# the simulator (CPU tensors) as a baseline on the same machine
step pytest_cuda env GRAFT_TORCH_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider \
  --junitxml="$OUT/pytest_cuda.xml" tests/py/test_torch_backend.py
step pytest_sim python3 -m pytest -q -rs -p no:cacheprovider --junitxml="$OUT/pytest_sim.xml" tests/py/test_torch_backend.py

# the scoreboard: one process per workload (a crash loses that workload only)
step inprocess python3 bench/inprocess.py --device cuda --only gpt2_b1,bert_b1,t5_b1,llama_b1,eos_1M --out "$OUT/inproc"

# what stayed in PyTorch and how many graft subgraphs each model became (from the jsonl)
step summary python3 - "$OUT/inproc/inprocess.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("variant") == "graft":
        print("%-10s subgraphs=%s left_to_pytorch=%s fallbacks=%s ms=%s mem=%s graft_device_bytes=%s bytes_copied=%s "
              "inputs_in_place=%s err=%s %s" % (
                  r["workload"], r.get("graft_subgraphs"), r.get("left_to_pytorch", []), r.get("graft_fallbacks"),
                  r.get("ms_per_call"), r.get("mem_mib"), r.get("graft_device_bytes"), r.get("graft_bytes_copied"),
                  r.get("graft_inputs_in_place"), r.get("err_vs_eager"), r.get("error", "")))
EOF

echo "== status ($OUT/status.txt)"
cat "$status"
exit "$failed"
