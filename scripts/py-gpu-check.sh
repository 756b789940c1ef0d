#!/usr/bin/env bash
# The Python package's CUDA path on a GPU machine, with PyTorch: DLPack inputs bound in
# place (zero-copy), outputs consumed by torch.from_dlpack without a copy, graph nodes
# repointed when a fresh tensor comes each call, runs ordered on a torch stream, stale
# outputs refused; and ms/call with a fresh input tensor every call.
#   bash scripts/py-gpu-check.sh [BUILD_DIR]      (default build-gpu; built with CUDA headers)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
if [ ! -f "$build/lib/libgraft.so" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j"$(nproc)" --target graft_shared
fi
python3 -c "import torch, numpy" || { echo "py-gpu-check: needs torch and numpy"; exit 1; }
PYTHONPATH="$PWD/python" GRAFT_LIBRARY="$PWD/$build/lib/libgraft.so" python3 scripts/py_gpu_check.py
