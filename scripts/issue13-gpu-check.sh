#!/usr/bin/env bash
# On the GPU machine (build-gpu carried): the package's and the torch backend's tests on CUDA
# (tests/py/test_pycall.py, test_torch_backend.py), then session creation time per shape policy
# (bench/load_time.py). Usage: OUT=dir bash scripts/issue13-gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/issue13}
mkdir -p "$out"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; python3 -c "import torch; print('torch', torch.__version__)"; } > "$out/device.txt" 2>&1
export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${LD_LIBRARY_PATH:-}" GRAFT_LIBRARY="$PWD/build-gpu/lib/libgraft.so"
export GRAFT_BIN="$PWD/build-gpu/bin/graft" PYTHONPATH="$PWD/python"
fail=0
(cd tests/py && GRAFT_TEST_DEVICE=cuda timeout 300 python3 -m pytest -q -rs -p no:cacheprovider test_pycall.py test_torch_backend.py) > "$out/tests.log" 2>&1 || fail=1
tail -5 "$out/tests.log"
timeout 200 python3 bench/load_time.py --out "$out/load" --repeats 3 2>&1 | tail -4 || fail=1
rm -f "$out/load/gpt2_dynamic_seq.onnx"
echo "issue13-gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
