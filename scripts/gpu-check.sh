#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool): builds graft, runs
# gpucheck (every kernel on CUDA vs the simulator), then every example on CUDA
# in eager and graph mode and on the simulator, and compares the outputs:
# CUDA graph vs CUDA eager must be bit-identical, CUDA vs simulator within
# tolerance. Logs go to $OUT (or ./out/gpu-check). Exit non-zero on any mismatch.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu-check}
mkdir -p "$out"
fail=0
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  nvcc --version 2>/dev/null | tail -1
} | tee "$out/device.txt"

build=${GRAFT_BUILD:-build-gpu}
if [ ! -x "$build/bin/graft" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j"$(nproc)" 2>&1 | tail -3
fi
G="$build/bin/graft"

echo "== gpucheck =="
"$build/bin/gpucheck" 2>&1 | tee "$out/gpucheck.log" | tail -40
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gpucheck FAILED"; fail=1; }

echo "== fused attention on CUDA vs the simulator (bf16/f16/f32, causal, masks, GQA) and timed vs unfused =="
mkdir -p "$out/tmp"
n_attn=$(grep -c "^PASS attn_" "$out/gpucheck.log")
grep "TIME attention" "$out/gpucheck.log"
if grep -q "^FAIL attn_" "$out/gpucheck.log" || [ "$n_attn" -lt 41 ]; then echo "attention FAILED ($n_attn passed)"; fail=1; else echo "attention: $n_attn cases passed"; fi
for m in gpt2_dynamo llama_dynamo; do
  d=tests/data/onnx/dyn/$m/b1_s64
  for mode in fused unfused; do
    flag=--fuse-attention-f32; [ $mode = unfused ] && flag=--no-fuse-attention
    $G run tests/data/onnx/dyn/$m/model.onnx --device cuda $flag --input input_ids=$d/input_ids.npy \
      --output-dir "$out/tmp/attn-$m-$mode" > "$out/tmp/attn-$m-$mode.log" 2>&1 || { echo "$m $mode run failed"; fail=1; }
  done
  python3 -c "
import numpy as np,sys
a=np.load('$out/tmp/attn-$m-fused/last_hidden_state.npy'); b=np.load('$out/tmp/attn-$m-unfused/last_hidden_state.npy')
e=np.linalg.norm(a-b)/np.linalg.norm(b); print('$m fused vs unfused on CUDA: %.2e' % e); sys.exit(0 if e < 1e-5 else 1)" || { echo "$m attention mismatch"; fail=1; }
done

echo "== matmul epilogues (tanh-GELU, ReLU) on CUDA vs the simulator, fused vs unfused on the GPU, timed =="
grep -E "^(PASS|FAIL) (mm_.*_(gelu_tanh|relu)|gelu_epilogue_)" "$out/gpucheck.log"
grep "TIME matmul_bias_gelu_tanh" "$out/gpucheck.log"
n_epi=$(grep -cE "^PASS (mm_.*_gelu_tanh|gelu_epilogue_)" "$out/gpucheck.log")
if grep -qE "^FAIL (mm_.*_(gelu_tanh|relu)|gelu_epilogue_)" "$out/gpucheck.log" || [ "$n_epi" -lt 16 ]; then
  echo "matmul epilogues FAILED ($n_epi passed)"; fail=1
else echo "matmul epilogues: $n_epi cases passed"; fi
d=tests/data/onnx/dyn/gpt2_dynamo/b3_s7
for mode in fused unfused; do
  flag=; [ $mode = unfused ] && flag=--no-fuse-epilogue
  $G run tests/data/onnx/dyn/gpt2_dynamo/model.onnx --device cuda $flag --input input_ids=$d/input_ids.npy \
    --output-dir "$out/tmp/epi-$mode" > "$out/tmp/epi-$mode.log" 2>&1 || { echo "gpt2 epilogue $mode run failed"; fail=1; }
done
python3 -c "
import numpy as np,sys
a=np.load('$out/tmp/epi-fused/last_hidden_state.npy'); b=np.load('$out/tmp/epi-unfused/last_hidden_state.npy')
e=np.linalg.norm(a-b)/np.linalg.norm(b); print('gpt2 GELU epilogue fused vs unfused on CUDA: %.2e' % e); sys.exit(0 if e < 1e-4 else 1)" || { echo "gpt2 epilogue mismatch"; fail=1; }

echo "== device graph features on CUDA (conditional IF/IF_ELSE/WHILE, updatable nodes, node updates) =="
if [ -x "$build/tests/test_devgraph" ]; then
  "$build/tests/test_devgraph" cuda 2>&1 | tail -12 | tee "$out/devgraph.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_devgraph FAILED"; fail=1; }
else
  echo "test_devgraph not built (cmake --build $build --target test_devgraph)"; fail=1
fi

echo "== shape-generic kernels on CUDA (a symbolic model at new lengths compiles nothing; graph mode patches scalars) =="
if [ -x "$build/tests/test_generic" ]; then
  "$build/tests/test_generic" cuda 2>&1 | tail -12 | tee "$out/generic.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_generic FAILED"; fail=1; }
else
  echo "test_generic not built (cmake --build $build --target test_generic)"; fail=1
fi

echo "== many shapes on CUDA (exact policy: sweep vs eager bit for bit, graph memory budget measured with cuMemGetInfo, persisted auto decisions) =="
if [ -x "$build/tests/test_shapes" ]; then
  "$build/tests/test_shapes" cuda 2>&1 | tail -12 | tee "$out/shapes.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_shapes FAILED"; fail=1; }
else
  echo "test_shapes not built (cmake --build $build --target test_shapes)"; fail=1
fi

echo "== convolutions on CUDA (examples/cnn.onnx at batch 1, 4, 2, 3 in one session, eager and graph) =="
if [ -x "$build/tests/test_cnn_session" ]; then
  GRAFT_TEST_DEVICE=cuda "$build/tests/test_cnn_session" 2>&1 | tail -12 | tee "$out/cnn-session.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "test_cnn_session FAILED"; fail=1; }
else
  echo "test_cnn_session not built (cmake --build $build --target test_cnn_session)"; fail=1
fi

echo "== kernel cache: cold vs warm start =="
export XDG_CACHE_HOME="$out/tmp/cache"; rm -rf "$XDG_CACHE_HOME"
cold=$($G bench examples/transformer.gir --device cuda --iters 1 --warmup 0 2>/dev/null | grep '^compile')
n_cubins=$(ls "$XDG_CACHE_HOME"/graft/kernels 2>/dev/null | wc -l)
warm=$($G bench examples/transformer.gir --device cuda --iters 1 --warmup 0 2>/dev/null | grep '^compile')
echo "cold: $cold; $n_cubins cubins cached"; echo "warm: $warm"
unset XDG_CACHE_HOME

# cnn.onnx (examples/gen_cnn.py): direct, depthwise and im2col+cuBLASLt convolutions, pools, pad, resize
for m in examples/mlp.gir examples/eos.gir examples/transformer.gir examples/cnn.onnx; do
  ex=$(basename "${m%.*}")
  dims=""; [ "$ex" = cnn ] && dims="--dim N=2"   # its batch is symbolic
  rm -rf "$out/tmp"; mkdir -p "$out/tmp"
  # the same random inputs for every run: generated once by the simulator run
  $G run "$m" $dims --device sim --output-dir "$out/tmp/sim" --save-inputs "$out/tmp/in" > "$out/tmp/sim.log" 2>&1 || { echo "$ex sim run failed"; cat "$out/tmp/sim.log"; fail=1; continue; }
  ins=""
  for f in "$out"/tmp/in/*.npy; do n=$(basename "$f" .npy); ins="$ins --input $n=$f"; done
  for mode in eager graph; do
    $G run "$m" --device cuda --mode $mode $ins --output-dir "$out/tmp/cuda-$mode" > "$out/tmp/cuda-$mode.log" 2>&1 || { echo "$ex cuda $mode failed"; cat "$out/tmp/cuda-$mode.log"; fail=1; }
  done
  python3 tools/compare_npy.py "$out/tmp/cuda-graph" "$out/tmp/cuda-eager" --bitwise --tol 0 --label "$ex graph-vs-eager" || fail=1
  python3 tools/compare_npy.py "$out/tmp/cuda-eager" "$out/tmp/sim" --tol 1e-4 --label "$ex cuda-vs-sim" || fail=1
  for mode in eager graph; do
    echo "== bench $ex $mode =="
    $G bench "$m" $dims --device cuda --mode $mode --iters 200 --warmup 20 --repeats 5 --profile --json "$out/bench-$ex-$mode.json" 2>&1 | tee -a "$out/bench.log" | grep -E "time/iter|gpu time|kernel time sum|kernels/iter|in graphs|warning|error"
  done
done
echo "gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
