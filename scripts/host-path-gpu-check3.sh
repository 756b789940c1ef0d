#!/usr/bin/env bash
# Real sizes in one session per model (as bench/realsize.py runs them) after this session's two
# runtime fixes (runs of dynamic models queue on the device; auto keeps exact for segments that
# call cuBLASLt): GPT-2 and Llama bf16, reduce-overhead and graft, per-kernel GPU time and the
# session's counters after each configuration. OUT=dir bash scripts/host-path-gpu-check3.sh
export GRAFT_LIBRARY=$PWD/build-gpu/lib/libgraft.so LD_LIBRARY_PATH=$PWD/build-gpu/lib PYTHONPATH=$PWD/python GRAFT_BIN=$PWD/build-gpu/bin/graft
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } > $OUT/device.txt
timeout 560 python3 bench/realsize.py --models ${RS_MODELS:-gpt2,llama} --dtypes bf16 --configs 1x128,1x512,8x128,8x512 --variants reduce-overhead,graft --iters 30 --warmup 10 --out $OUT/realsize.jsonl --kernels $OUT/kernels.jsonl > $OUT/rs.log 2>&1; echo rs rc $?
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/realsize.jsonl"):
    r = json.loads(l)
    print(r.get("model"), r.get("dtype"), r.get("batch"), r.get("seq"), r.get("variant"), r.get("ms_per_call"), r.get("gpu_ms"), r.get("err_vs_eager"), r.get("graft_stats"), (r.get("graft_policy") or [""])[-1][:120])
PY
