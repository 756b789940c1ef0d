#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool): control flow kept on the device
# (docs/design.md §3c) on CUDA: tests/test_control.c (while-loops and a conditional If,
# graph mode == eager mode bit for bit and == the host, swapped state, the iteration cap,
# allocation failures) and tests/py/test_onnx_control.py (against onnx.reference, eager and
# graph) with GRAFT_TEST_DEVICE=cuda, so the WHILE / IF_ELSE conditional nodes are the CUDA
# driver's. Logs go to $OUT (or ./out/control-gpu-check). Exit non-zero on any failure.
#   usage: OUT=dir bash scripts/control-gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/control-gpu-check}
mkdir -p "$out"
fail=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee "$out/device.txt"
build=${GRAFT_BUILD:-build-gpu}
if [ ! -x "$build/tests/test_control" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j"$(nproc)" 2>&1 | tail -3
fi
echo "== test_control on CUDA =="
GRAFT_TEST_DEVICE=cuda "$build/tests/test_control" 2>&1 | tee "$out/test_control.log" | tail -5
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_control FAILED"; fail=1; }
echo "== test_onnx_control.py on CUDA =="
lib=$(ls "$build"/lib/libgraft.so 2>/dev/null | head -1)
GRAFT_TEST_DEVICE=cuda GRAFT_BIN="$build/bin/graft" PYTHONPATH=python GRAFT_LIBRARY="$lib" PYTHONDONTWRITEBYTECODE=1 \
  python3 -m pytest -q -p no:cacheprovider tests/py/test_onnx_control.py 2>&1 | tee "$out/pytest.log" | tail -5
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_onnx_control FAILED"; fail=1; }
echo "control-gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)" | tee "$out/result.txt"
exit $fail
