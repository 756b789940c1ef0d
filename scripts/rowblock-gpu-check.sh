#!/usr/bin/env bash
# Experiment (issue 15): rows per block of the warp-row kernels (layer norm, softmax rows), 8 (build-gpu)
# against 4 and 2 (build-gpu-w4, build-gpu-w2: -DGR_WARP_ROWS_PER_BLOCK=N): graft's GPU time per kernel on
# GPT-2 and Llama bf16 at b8 s128 and s512 (bench/realsize.py, graft only). OUT=dir bash scripts/rowblock-gpu-check.sh
export PYTHONPATH=$PWD/python GRAFT_BIN=$PWD/build-gpu/bin/graft
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > $OUT/device.txt
for b in build-gpu build-gpu-w4 build-gpu-w2; do
  GRAFT_LIBRARY=$PWD/$b/lib/libgraft.so LD_LIBRARY_PATH=$PWD/$b/lib timeout 170 python3 bench/realsize.py --models gpt2,llama --dtypes bf16 \
    --configs 8x128,8x512 --variants graft --iters 30 --warmup 10 --out $OUT/$b.jsonl --kernels $OUT/$b-kernels.jsonl > $OUT/$b.log 2>&1
  echo "$b rc $?"
  python3 -c "
import json,sys
for l in open('$OUT/$b.jsonl'):
    r=json.loads(l); print('  ', r['model'], r['batch'], r['seq'], r.get('ms_per_call'), r.get('gpu_ms'), r.get('err_vs_eager'))
"
done
# The two extra libraries, on the dev machine:
#   for w in 4 2; do cmake -S . -B build-gpu-w$w -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-DGR_WARP_ROWS_PER_BLOCK=$w
#     ninja -C build-gpu-w$w graft_shared; cp -L build-gpu/lib/libprotobuf-c.so.1 build-gpu-w$w/lib/; done
# then carry build-gpu/lib, build-gpu/bin, build-gpu-w4/lib and build-gpu-w2/lib.
