#!/usr/bin/env bash
# The host path of dynamic models on the GPU machine (this session): CUDA tests of the queued
# run (test_pycall, test_torch_backend, gpucheck), bench/percall_probe.py --host, then
# bench/realsize.py for GPT-2 bf16. OUT=dir bash scripts/host-path-gpu-check.sh
export GRAFT_LIBRARY=$PWD/build-gpu/lib/libgraft.so LD_LIBRARY_PATH=$PWD/build-gpu/lib PYTHONPATH=$PWD/python GRAFT_BIN=$PWD/build-gpu/bin/graft
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"; } > $OUT/device.txt
(cd tests/py && GRAFT_TEST_DEVICE=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider test_pycall.py test_torch_backend.py 2>&1 | tail -15) > $OUT/tests.log 2>&1
timeout 120 build-gpu/bin/gpucheck > $OUT/gpucheck.log 2>&1; echo "gpucheck rc $?" >> $OUT/tests.log; tail -2 $OUT/gpucheck.log >> $OUT/tests.log
cat $OUT/tests.log
python3 bench/percall_probe.py --out $OUT --host --no-policies > $OUT/probe.log 2>&1; grep enqueue $OUT/probe.log
timeout 330 python3 bench/realsize.py --models gpt2 --dtypes bf16 --configs 1x128,1x512,8x128,8x512 --iters 30 --warmup 10 --out $OUT/realsize.jsonl > $OUT/rs.log 2>&1; echo rs rc $?
python3 - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/realsize.jsonl"):
    r = json.loads(l)
    print(r.get("model"), r.get("dtype"), r.get("batch"), r.get("seq"), r.get("variant"), r.get("ms_per_call"), r.get("gpu_ms"), r.get("err_vs_eager"))
PY
