#!/usr/bin/env bash
# Issue 15: a kernel change checked and timed against the previous commit (first written for the
# warp-row form's vector loads; since used for every row-kernel and epilogue change). On the GPU
# machine, with the new build in build-gpu and the previous commit's library
# in build-gpu-old/lib:
#   STEPS="check old" OUT=dir bash scripts/rownorm-gpu-check.sh   # gpucheck + test_shape_policies (CUDA),
#                                                                 # realsize graft-only with the old library
#   STEPS="new" OUT=dir bash scripts/rownorm-gpu-check.sh         # realsize reduce-overhead + graft, new library
#   STEPS="graft" ...                                             # realsize graft alone, new library
# MODELS, DTYPES, CONFIGS (defaults gpt2,llama / bf16 / the four sizes) and TAG (a prefix of the
# realsize files) choose another table: TAG=f32- MODELS=bert,gpt2 DTYPES=f32 STEPS="old new" ...
# The old library, on the dev machine: git worktree add /tmp/oldwt <commit>; build graft_shared there;
# copy lib/libgraft.so and libprotobuf-c.so.1 into build-gpu-old/lib.
set -u
out=${OUT:?set OUT}
export PYTHONPATH=$PWD/python GRAFT_BIN=$PWD/build-gpu/bin/graft
models=${MODELS:-gpt2,llama} dtypes=${DTYPES:-bf16} configs=${CONFIGS:-1x128,1x512,8x128,8x512} tag=${TAG:-}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } > $out/device.txt
summary() {
  python3 -c "
import json,sys
for l in open('$1'):
    r=json.loads(l); print('  ', r['model'], r['dtype'], r['batch'], r['seq'], r['variant'], r.get('ms_per_call'), r.get('gpu_ms'), r.get('err_vs_eager'))
"
}
for step in ${STEPS:-check old new}; do
  case $step in
  check)
    LD_LIBRARY_PATH=$PWD/build-gpu/lib timeout 200 ./build-gpu/bin/gpucheck > $out/gpucheck.log 2>&1; echo "gpucheck rc $?"
    grep -E "^FAIL|passed, |layer_norm.*(gather|gb_offset)|TIME" $out/gpucheck.log | head -40
    LD_LIBRARY_PATH=$PWD/build-gpu/lib timeout 150 ./build-gpu/tests/test_shape_policies cuda > $out/shape-policies.log 2>&1; echo "test_shape_policies rc $?"
    tail -2 $out/shape-policies.log ;;
  old)
    GRAFT_LIBRARY=$PWD/build-gpu-old/lib/libgraft.so LD_LIBRARY_PATH=$PWD/build-gpu-old/lib timeout 280 python3 bench/realsize.py \
      --models $models --dtypes $dtypes --configs $configs --variants graft --iters 30 --warmup 10 \
      --out $out/${tag}old-realsize.jsonl --kernels $out/${tag}old-kernels.jsonl > $out/${tag}old.log 2>&1; echo "old rc $?"
    summary $out/${tag}old-realsize.jsonl ;;
  graft)
    # graft alone with the new library (an A/B of an environment switch, e.g. GRAFT_MATMUL_TUNE=0, under its own TAG)
    GRAFT_LIBRARY=$PWD/build-gpu/lib/libgraft.so LD_LIBRARY_PATH=$PWD/build-gpu/lib timeout 400 python3 bench/realsize.py \
      --models $models --dtypes $dtypes --configs $configs --variants graft --iters 30 --warmup 10 \
      --out $out/${tag}realsize.jsonl --kernels $out/${tag}kernels.jsonl > $out/${tag}graft.log 2>&1; echo "graft rc $?"
    summary $out/${tag}realsize.jsonl ;;
  new)
    GRAFT_LIBRARY=$PWD/build-gpu/lib/libgraft.so LD_LIBRARY_PATH=$PWD/build-gpu/lib timeout 560 python3 bench/realsize.py \
      --models $models --dtypes $dtypes --configs $configs --variants reduce-overhead,graft --iters 30 --warmup 10 \
      --out $out/${tag}realsize.jsonl --kernels $out/${tag}kernels.jsonl > $out/${tag}new.log 2>&1; echo "new rc $?"
    summary $out/${tag}realsize.jsonl ;;
  esac
done
