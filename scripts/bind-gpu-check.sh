#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool): the host time of a new binding (issue 10,
# item 3: under 1 ms for the GPT-2 style export) on CUDA, graph mode. For the dynamic GPT-2
# export tests/data/onnx/dyn/gpt2_dynamo at batch 1 and 8 and seq 16, 32 and 64 (the export has
# 64 positions: a longer seq is refused by its position table), `graft bench` prepares 20 new
# bindings after the first and prints their median / mean / max ("new binding" line, and
# new_binding_ms in --json). Each configuration runs REPEAT times, alternating with the
# baseline build when there is one (BASE_REF, default 16df3ed: main just before these cuts were merged;
# BASE_REF= skips it), so both see the same machine state. Every step's exit status is recorded
# in $OUT/status.txt; the medians in $OUT/summary.txt. Exit non-zero when a step failed.
# The new build also runs with --no-plan-templates (tag "notpl": every new binding compiled by the
# pass pipeline), so the plan templates' effect is measured on one binary; runs.txt has the
# medians of the instantiated and the compiled bindings (new_binding_instantiated_ms / _compiled_ms).
#   usage: OUT=dir [BASE_REF=commit] [REPEAT=5] bash scripts/bind-gpu-check.sh
# (DEVICE=sim and NO_BUILD=1 GRAFT_BUILD=build try it on a machine without a GPU)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/bind-gpu-check}
mkdir -p "$out"
repeat=${REPEAT:-5}
base_ref=${BASE_REF-16df3ed}
model=tests/data/onnx/dyn/gpt2_dynamo/model.onnx
fail=0
: > "$out/status.txt"
step() { # step NAME CMD...: runs CMD, logs to $out/NAME.log, records its exit status
  local name=$1
  shift
  "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc" >> "$out/status.txt"
  [ $rc -eq 0 ] || fail=1
  return $rc
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee "$out/device.txt"
(git rev-parse HEAD 2>/dev/null || echo "no git") > "$out/commit.txt"
build=${GRAFT_BUILD:-build-gpu}
[ "${NO_BUILD:-0}" = 1 ] && [ -x "$build/bin/graft" ] ||
  step build-new bash -c "cmake -S . -B '$build' -DCMAKE_BUILD_TYPE=Release && cmake --build '$build' -j$(nproc) --target graft_cli"
bins=("new:$build/bin/graft" "notpl:$build/bin/graft")
if [ -n "$base_ref" ]; then
  basedir=$PWD/build-bind-base
  if git rev-parse --verify -q "$base_ref^{commit}" >/dev/null 2>&1 &&
     step base-checkout bash -c "rm -rf '$basedir/src' && mkdir -p '$basedir' && git archive --prefix=src/ '$base_ref' | tar -x -C '$basedir'" &&
     { [ "${NO_BUILD:-0}" = 1 ] && [ -x "$basedir/build/bin/graft" ] ||
       step build-base bash -c "cmake -S '$basedir/src' -B '$basedir/build' -DCMAKE_BUILD_TYPE=Release && cmake --build '$basedir/build' -j$(nproc) --target graft_cli"; }; then
    bins+=("base:$basedir/build/bin/graft")
  else
    echo "baseline $base_ref not available (no git history here?): new build only" | tee -a "$out/status.txt"
  fi
fi
printf "%-5s %5s %4s %10s %10s %10s %s %s %s %s %s\n" build batch seq median_ms mean_ms max_ms nvrtc n_inst inst_ms n_comp comp_ms > "$out/runs.txt"
for batch in 1 8; do
  for seq in 16 32 64; do
    for r in $(seq 1 "$repeat"); do
      for b in "${bins[@]}"; do
        tag=${b%%:*} bin=${b#*:}
        name="bench-$tag-b$batch-s$seq-r$r"
        flags=(); [ "$tag" = notpl ] && flags=(--no-plan-templates)
        if step "$name" "$bin" bench "$model" --device "${DEVICE:-cuda}" --mode graph --dim batch=$batch --dim seq=$seq \
             --iters 20 --repeats 1 "${flags[@]}" --json "$out/$name.json"; then
          python3 - "$out/$name.json" "$tag" "$batch" "$seq" >> "$out/runs.txt" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("%-5s %5s %4s %10.4f %10.4f %10.4f %s %s %.4f %s %.4f" % (sys.argv[2], sys.argv[3], sys.argv[4], d.get("new_binding_ms", -1),
      d.get("new_binding_mean_ms", -1), d.get("new_binding_max_ms", -1), d.get("new_binding_nvrtc_compiles", "?"),
      d.get("new_binding_plans_instantiated", "-"), d.get("new_binding_instantiated_ms", -1),
      d.get("new_binding_plans_compiled", "-"), d.get("new_binding_compiled_ms", -1)))
EOF
          grep "new binding" "$out/$name.log"
        fi
      done
    done
  done
done
# median over the repeats of each (build, batch, seq)
python3 - "$out/runs.txt" > "$out/summary.txt" <<'EOF'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:] if l.strip()]
by = collections.defaultdict(list)
for r in rows:
    by[(r[1], r[2], r[0])].append(float(r[3]))
print("new-binding host time, median over repeats of the per-run median of 20 new bindings (ms)")
print("%5s %4s %12s %12s %12s" % ("batch", "seq", "new", "notpl", "base"))
for b, s in sorted({(k[0], k[1]) for k in by}, key=lambda t: (int(t[0]), int(t[1]))):
    cell = lambda tag: "%.3f" % statistics.median(by[(b, s, tag)]) if by.get((b, s, tag)) else "-"
    print("%5s %4s %12s %12s %12s" % (b, s, cell("new"), cell("notpl"), cell("base")))
EOF
echo "summary python rc=$?" >> "$out/status.txt"
cat "$out/summary.txt"
echo "bind-gpu-check: $([ $fail -eq 0 ] && echo PASS || echo FAIL)" | tee "$out/result.txt"
exit $fail
