#!/usr/bin/env bash
# Real models end to end on the GPU machine (through the device tool; issue 14 item 5):
# exports ResNet-50, MobileNetV3, ConvNeXt, ViT, Whisper's encoder, CLIP's text and
# vision towers, RoBERTa, XLNet, DeBERTa-v3-style and T5 with this machine's PyTorch
# (tests/py/make_real_models.py: configs built here, random weights, no downloads;
# torch.onnx.export dynamo=True, else the TorchScript exporter), then runs each through
# `graft run` on CUDA in eager and graph mode, and on the simulator while time is left
# (tests/py/check_real_models.py), comparing with PyTorch's outputs (relative L2 error,
# tolerance 1e-3 for f32; max abs error) and graph mode's output bits with eager's.
# Time-bounded: REAL_TOTAL_S (default 450 s, 7.5 minutes) in all; the export under
# REAL_EXPORT_S (default 240; per model REAL_MODEL_S, 60), the graft runs in what is left
# (at least 60 s; per run REAL_RUN_S, 60).
#   GRAFT_BUILD=build-gpu OUT=out/real-models bash scripts/real-models-check.sh
#   REAL_MODELS_DIR=DIR ... : skip the export, check the cases already in DIR
#   REAL_DEVICES=cuda,sim (default), REAL_MODELS=resnet50,vit,... (default all)
# $OUT gets summary.txt (the table), results.json and real-models-logs.tgz (device.txt,
# export.log, check.log, one log per graft run with graft's full message, the manifests
# and index.json); at most 8 files come back. Exit status: 0 only when every model was
# exported and passed on every device and mode.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-out/real-models}
mkdir -p "$out"
build=${GRAFT_BUILD:-build-gpu}
graft="$build/bin/graft"
export LD_LIBRARY_PATH="$PWD/$build/lib:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1
work=$(mktemp -d "${TMPDIR:-/tmp}/real-models.XXXXXX")
trap 'rm -rf "$work"' EXIT
logs="$work/logs"
mkdir -p "$logs/runs"
fail=0
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "graft: $graft ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
  python3 -c "import torch, transformers, onnx; print('torch', torch.__version__, 'transformers', transformers.__version__, 'onnx', onnx.__version__)" 2>&1 | tail -1
  python3 -c "import torchvision; print('torchvision', torchvision.__version__)" 2>&1 | tail -1
  python3 -c "import onnxruntime; print('onnxruntime', onnxruntime.__version__)" 2>&1 | tail -1
} > "$logs/device.txt"
cat "$logs/device.txt"

models=${REAL_MODELS_DIR:-}
if [ -n "$models" ]; then
  echo "== export skipped: checking the cases in $models =="
else
  models="$work/models"
  echo "== export (at most ${REAL_EXPORT_S:-240}s; ${REAL_MODEL_S:-60}s a model) =="
  # the per-model limit is enforced inside; this one bounds a model stuck in native code
  timeout -k 10 "${REAL_EXPORT_S:-240}" python3 tests/py/make_real_models.py --out "$models" \
    --model-timeout "${REAL_MODEL_S:-60}" ${REAL_MODELS:+--models "$REAL_MODELS"} > "$logs/export.log" 2>&1
  rc=$?
  grep -v "^ *warnings.warn" "$logs/export.log" | tail -40
  case $rc in
    0) ;;
    1) echo "some model was not exported (export.log and index.json say why)"; fail=1 ;;
    124|137) echo "export stopped at its time limit: the models not reached are missing"; fail=1 ;;
    *) echo "export exited with status $rc"; fail=1 ;;
  esac
fi

# the graft runs get what the export left of the total (the last 30 s are for the archive)
check_s=$(( ${REAL_TOTAL_S:-450} - SECONDS - 30 ))
[ "$check_s" -ge 60 ] || check_s=60
echo "== graft: ${REAL_DEVICES:-cuda,sim}, eager and graph (at most ${check_s}s; ${REAL_RUN_S:-60}s a run) =="
if [ -d "$models" ]; then
  timeout -k 10 "$(( check_s + 20 ))" python3 tests/py/check_real_models.py "$models" --graft "$graft" \
    --devices "${REAL_DEVICES:-cuda,sim}" --modes eager,graph --tol 1e-3 --timeout "${REAL_RUN_S:-60}" \
    --budget "$check_s" --cache-dir "$work/cache" --logs "$logs/runs" \
    --summary "$out/summary.txt" --json "$out/results.json" > "$logs/check.log" 2>&1
  rc=$?
  cat "$logs/check.log"
  [ $rc -eq 0 ] || fail=1
else
  echo "no models directory ($models)" | tee "$out/summary.txt"
  fail=1
fi

# the manifests and the index (not the models or arrays) travel with the logs
if [ -d "$models" ]; then
  mkdir -p "$logs/manifests"
  cp "$models/index.json" "$logs/manifests/" 2>/dev/null
  for m in "$models"/*/manifest.json; do
    [ -f "$m" ] && cp "$m" "$logs/manifests/$(basename "$(dirname "$m")").json"
  done
fi
{
  cat "$logs/device.txt"
  echo
  cat "$out/summary.txt" 2>/dev/null
  if [ -f "$logs/export.log" ]; then
    echo
    echo "export log (tail):"
    grep -v "^ *warnings.warn" "$logs/export.log" | tail -25
  fi
  echo "real-models-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)"
} > "$work/summary.txt"
mv "$work/summary.txt" "$out/summary.txt"
tar czf "$out/real-models-logs.tgz" -C "$work" logs
echo "real-models-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL) (summary: $out/summary.txt)"
exit $fail
