#!/usr/bin/env bash
# Builds graft and runs its main job: the bundled transformer block and MLP on
# the best device present (CUDA when a GPU and driver are there, else the
# simulator), in eager and graph mode.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"
echo "== graft run examples/transformer.gir =="
./build/bin/graft run examples/transformer.gir --device auto --output-dir out
for mode in eager graph; do
  echo "== graft bench examples/mlp.gir --mode $mode =="
  ./build/bin/graft bench examples/mlp.gir --device auto --mode "$mode" --iters 20
done
