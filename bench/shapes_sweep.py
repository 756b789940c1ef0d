#!/usr/bin/env python3
"""Issue 11's benchmark: one model run at every length 1..L (increasing, then shuffled) under
graft's shape policies and PyTorch, in one process on one GPU.

Model: GPT-2 small (124M, transformers.GPT2Config(), random weights seeded, fp32, batch 1),
exported to ONNX with a dynamic seq axis (or --onnx PATH). Variants:
  graft eager; graft graph with shape policy exact, update, pad (GPT-2's attention keeps seq from
  being padded: exact, with the reason in explain), generic (one graph per power-of-two bucket of
  seq, kernels reading their dims from a device table; attention's products as generated kernels)
  and auto (graph mode's default: per segment exact, update or generic, measured at the segment's
  first binding and re-chosen as the calls per binding seen grow; with no budget and under a 15 MB
  one; then again in a new session on the same cache_dir, which reads the decisions and the saved
  ratio instead of measuring: "decisions from the file"; and with 45 extra untimed passes before
  the timed warm one: "48 passes", a serving loop's many calls per length)
  (each with the one arena of the largest binding, --arena max, and lazy capture), and with the
  range captured ahead (capture_range, largest first); the ablation turns each mechanism off in
  turn (the shared arena, the exec update: exact under the 15 MB budget evicts and re-captures);
  PyTorch eager, torch.compile(mode="reduce-overhead") and (..., dynamic=True).
Per variant and pass (increasing = cold: lazy capture/compilation included; shuffled = warm):
total time, time per call, extra device memory (cudaMemGetInfo before the variant vs after it),
warm-up/capture time, graft's own counters (graph memory measured with cuMemGetInfo around
captures, captures, instantiations, exec updates, bytes copied per run). Logits are compared with
PyTorch eager at a few lengths. Writes shapes_sweep.json and shapes_sweep.md into --out.

  python3 bench/shapes_sweep.py --out DIR                 # the H100 run (scripts/shapes-gpu-check.sh)
  python3 bench/shapes_sweep.py --onnx tests/data/onnx/dyn/gpt2_dynamo/model.onnx --device sim \\
      --max-len 6 --no-torch --out /tmp/sw                 # a smoke run without torch or GPU
"""
import argparse
import gc
import json
import os
import random
import sys
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import graft  # noqa: E402

VOCAB_CHECK_LENS = (1, 7, 64, 128)
CACHE_ROOT = None  # a fresh directory per run (main): auto's decisions files
FIXED_DIMS = {}  # --fix-dim NAME=V: other symbolic dims of an --onnx model, declared V..V


# ==== model =============================================================================================
def export_gpt2(path, max_len):
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(attn_implementation="eager")
    cfg.use_cache = False
    model = transformers.GPT2LMHeadModel(cfg).eval()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False).logits

    wrapped = Logits(model).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 8))
    # the dynamo exporter, as users export today (transformers 5's mask code uses aten::diff,
    # which the TorchScript exporter refuses); the TorchScript exporter where dynamo fails
    with torch.no_grad():
        try:
            from torch.export import Dim
            torch.onnx.export(wrapped, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                              dynamic_shapes={"input_ids": {1: Dim("seq", max=max(max_len, 16))}}, opset_version=18,
                              dynamo=True, external_data=False)
        except Exception as e:  # noqa: BLE001
            print("dynamo export failed (%s: %s); TorchScript exporter" % (type(e).__name__, str(e)[:200]), flush=True)
            torch.onnx.export(wrapped, (ids,), path, input_names=["input_ids"], output_names=["logits"],
                              dynamic_axes={"input_ids": {1: "seq"}, "logits": {1: "seq"}}, opset_version=17,
                              dynamo=False)
    return wrapped, cfg.vocab_size


# ==== measurement helpers ===============================================================================
class Device:
    def __init__(self, kind):
        self.kind = kind
        self.torch = None
        if kind == "cuda":
            import torch
            self.torch = torch

    def sync(self):
        if self.torch is not None:
            self.torch.cuda.synchronize()

    def free_bytes(self):
        if self.torch is None:
            return 0
        self.torch.cuda.synchronize()
        return self.torch.cuda.mem_get_info()[0]

    def cleanup(self):
        gc.collect()
        if self.torch is not None:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()


def run_pass(call, lengths, dev):
    """Total and per-call wall time of one pass (each call synchronized)."""
    times = []
    t_all = time.perf_counter()
    for n in lengths:
        t0 = time.perf_counter()
        call(n)
        dev.sync()
        times.append(time.perf_counter() - t0)
    total = time.perf_counter() - t_all
    return {"total_s": total, "per_call_ms_mean": 1e3 * total / len(lengths), "per_call_ms_median": 1e3 * float(np.median(times)),
            "per_call_ms_max": 1e3 * max(times), "first_call_ms": 1e3 * times[0]}


# ==== graft variants ====================================================================================
def graft_variant(name, onnx_path, dev, max_len, lengths_inc, lengths_shuf, ids_of, mode, shapes=None, arena="max",
                  capture=False, budget_mb=0, fuse_f32=False, cache=None, extra_passes=0):
    free0 = dev.free_bytes()
    t0 = time.perf_counter()
    # cache: a decisions directory (auto: the first variant naming it measures, later ones read)
    s = graft.load(onnx_path, device=dev.kind, mode=mode, dims=dict(FIXED_DIMS, seq=(1, max_len)), arena=arena, shapes=shapes,
                   graph_memory_mb=budget_mb, max_rerecords=100000, fuse_attention_f32=fuse_f32,
                   cache_dir=os.path.join(CACHE_ROOT, cache) if cache else None)
    load_s = time.perf_counter() - t0
    # shapes None: the library's default (auto in graph mode for this symbolic model); recorded as resolved
    rec = {"variant": name, "kind": "graft", "mode": mode, "shapes": s.shape_policy, "shapes_default": shapes is None,
           "extra_passes": extra_passes, "arena": arena, "capture_range": capture,
           "fuse_attention_f32": fuse_f32,
           "graph_memory_mb": budget_mb, "load_s": load_s}
    if capture:
        rec["capture_report"] = s.capture_range("seq", 1, max_len, progress=True)
        rec["warmup_s"] = rec["capture_report"]["total_ms"] / 1e3
    outs = {}

    def call(n):
        r = s.run_device(input_ids=ids_of(n))
        outs["last"] = r

    rec["increasing"] = run_pass(call, lengths_inc, dev)
    st_inc = s.stats()
    rec["shuffled"] = run_pass(call, lengths_shuf, dev)
    st = s.stats()
    # a serving loop calls each length many times: extra shuffled passes (untimed) raise the calls per
    # binding that auto observes before the warm pass is timed
    for k in range(extra_passes):
        run_pass(call, random.Random(k + 1).sample(lengths_shuf, len(lengths_shuf)), dev)
    if extra_passes:
        st = s.stats()
    rec["shuffled_again"] = run_pass(call, lengths_shuf, dev)
    if not capture:
        # lazy: a length's first run warms up (and compiles), its second captures: the excess of the first
        # two passes over two warm passes is the warm-up
        rec["warmup_s"] = max(0.0, rec["increasing"]["total_s"] + rec["shuffled"]["total_s"] - 2 * rec["shuffled_again"]["total_s"])
    rec["stats"] = {k: st[k] for k in ("graph_bytes", "graph_bytes_peak", "captures", "instantiations", "exec_updates",
                                       "exec_updates_refused", "padded_runs", "evictions", "graphs_live", "bytes_copied", "copies",
                                       "arena_bytes", "weight_bytes", "device_bytes", "segments", "segments_in_graphs",
                                       "generic_runs", "generic_replays", "table_refreshes", "table_bytes",
                                       "shape_decisions_measured", "shape_decisions_loaded", "shape_measure_runs")}
    if rec["shapes"] == "auto":
        # per segment: the policy auto chose (explain's "shape policy auto: X (...)" lines)
        import re
        chosen = {}
        for m in re.finditer(r"shape policy auto: (exact|update|generic) \((measured in this session|from the decisions file|not measured)\); "
                             r"per call:(.*)", s.explain()):
            chosen[m.group(1)] = chosen.get(m.group(1), 0) + 1
            rec.setdefault("auto_explain", []).append(m.group(0))
        rec["auto_segments"] = chosen
        # the adaptive rule: calls per binding seen, revisions and changes, and per segment its ratio and last change
        rec["auto_adaptive"] = re.findall(r"calls per binding seen: .*|chosen for .*", s.explain())
    rec["stats"]["captures_after_increasing"] = st_inc["captures"]
    rec["extra_device_bytes"] = free0 - dev.free_bytes() if dev.torch is not None else st["device_bytes"]
    checks = {}
    for n in VOCAB_CHECK_LENS:
        if n <= max_len:
            checks[n] = np.array(next(iter(s.run_device(input_ids=ids_of(n, host=True)).values())).numpy())
    rec["_logits"] = checks
    s.close()
    del outs
    dev.cleanup()
    return rec


# ==== torch variants ====================================================================================
def torch_variant(name, model, dev, lengths_inc, lengths_shuf, ids_of, compile_kw):
    import torch
    free0 = dev.free_bytes()
    fn = model
    if compile_kw is not None:
        torch._dynamo.reset()
        for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit", "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 100000)  # one graph per length must not fall back to eager
        fn = torch.compile(model, **compile_kw)
    rec = {"variant": name, "kind": "torch", "compile": compile_kw}

    def call(n):
        with torch.no_grad():
            out = fn(ids_of(n))
            if compile_kw is not None and compile_kw.get("mode") == "reduce-overhead":
                out = out.clone()  # a cudagraph output is overwritten by the next replay
        return out

    rec["increasing"] = run_pass(call, lengths_inc, dev)
    rec["shuffled"] = run_pass(call, lengths_shuf, dev)
    rec["shuffled_again"] = run_pass(call, lengths_shuf, dev)
    # compilation and cudagraph recording happen in a length's first runs (warm-up run, then record)
    rec["warmup_s"] = max(0.0, rec["increasing"]["total_s"] + rec["shuffled"]["total_s"] - 2 * rec["shuffled_again"]["total_s"])
    rec["extra_device_bytes"] = free0 - dev.free_bytes()
    checks = {}
    for n in VOCAB_CHECK_LENS:
        if n <= len(lengths_inc):
            checks[n] = call(n).float().cpu().numpy()
    rec["_logits"] = checks
    del fn
    if compile_kw is not None:
        torch._dynamo.reset()
    dev.cleanup()
    return rec


# ==== report ============================================================================================
def markdown(result):
    lines = ["# shapes sweep: %s, lengths 1..%d, device %s" % (result["model"], result["max_len"], result["device_name"]), "",
             "Times are wall clock, each call synchronized. cold = increasing pass (first use of every length), "
             "warm = the third pass (shuffled; the second, shuffled too, holds lazy captures). Warm-up: capture ahead's "
             "time, else the first two passes' excess over two warm passes. Extra memory: device free memory before the variant minus after it "
             "(weights, arenas, graphs, pools). Graph memory: graft's cuMemGetInfo deltas around captures.", "",
             "| variant | cold total s | warm total s | warm ms/call | warm-up s | extra MiB | graph MiB | captures | "
             "instantiations | exec updates | generic replays (table KiB) | max |logit diff| vs torch eager |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["variants"]:
        if "error" in r:
            lines.append("| %s | error: %s |  |  |  |  |  |  |  |  |  |  |" % (r["variant"], r["error"].splitlines()[-1][:120]))
            continue
        st = r.get("stats", {})
        lines.append("| %s | %.3f | %.3f | %.3f | %.3f | %.1f | %s | %s | %s | %s | %s | %s |" % (
            r["variant"], r["increasing"]["total_s"], r["shuffled_again"]["total_s"], r["shuffled_again"]["per_call_ms_mean"],
            r["warmup_s"], r["extra_device_bytes"] / 2**20,
            "%.2f" % (st["graph_bytes_peak"] / 2**20) if st else "-", st.get("captures", "-"), st.get("instantiations", "-"),
            st.get("exec_updates", "-"),
            "%s (%.1f)" % (st["generic_replays"], st["table_bytes"] / 1024) if st.get("generic_runs") else "-",
            "%.2e" % r["max_abs_diff"] if r.get("max_abs_diff") is not None else "-"))
    autos = [r for r in result["variants"] if "error" not in r and r.get("auto_segments") is not None]
    if autos:
        lines += ["", "Auto's choices (segments per policy; measured / from the decisions file, measuring runs):", ""]
        for r in autos:
            st = r["stats"]
            lines.append("- %s: %s; %d measured / %d from the file, %d measuring runs" % (
                r["variant"], ", ".join("%s %d" % kv for kv in sorted(r["auto_segments"].items())) or "none",
                st.get("shape_decisions_measured", 0), st.get("shape_decisions_loaded", 0), st.get("shape_measure_runs", 0)))
    t = result.get("targets")
    if t:
        lines += ["", "Targets (issue 11): best graft policy warm total <= PT2-CG: %s; graph memory <= 15 MB: %s; warm-up <= 3 s: %s"
                  % (t["time"], t["memory"], t["warmup"])]
    return "\n".join(lines) + "\n"


def save_partial(out, result):
    """What is measured so far (a run cut short by a time limit keeps it)."""
    part = dict(result, variants=[{k: v for k, v in r.items() if not k.startswith("_")} for r in result["variants"]], partial=True)
    with open(os.path.join(out, "shapes_sweep.partial.json"), "w") as f:
        json.dump(part, f, indent=1, default=str)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--device", default="cuda", choices=["cuda", "sim"])
    ap.add_argument("--onnx", help="use this model (input_ids [1, seq] -> logits) instead of exporting GPT-2 small")
    ap.add_argument("--no-torch", action="store_true", help="graft variants only (no PyTorch baselines)")
    ap.add_argument("--only", help="comma-separated variant names")
    ap.add_argument("--fix-dim", action="append", default=[], help="NAME=V: another symbolic dim of --onnx's model, fixed")
    args = ap.parse_args()
    for kv in args.fix_dim:
        k, v = kv.split("=")
        FIXED_DIMS[k] = (int(v), int(v))
    os.makedirs(args.out, exist_ok=True)
    global CACHE_ROOT
    import tempfile
    CACHE_ROOT = tempfile.mkdtemp(prefix="graft-sweep-decisions-")  # nothing from an earlier run is read
    L = args.max_len
    lengths_inc = list(range(1, L + 1))
    lengths_shuf = lengths_inc[:]
    random.Random(0).shuffle(lengths_shuf)
    dev = Device(args.device)
    model, vocab = None, 50257
    onnx_path = args.onnx
    if not onnx_path:
        onnx_path = os.path.join(args.out, "gpt2_dynamic_seq.onnx")
        t0 = time.perf_counter()
        model, vocab = export_gpt2(onnx_path, L)
        print("exported GPT-2 small in %.1f s" % (time.perf_counter() - t0), flush=True)
    elif not args.no_torch:
        sys.exit("--onnx needs --no-torch (the PyTorch baselines need the model itself)")
    rng = np.random.default_rng(0)
    ids_host = rng.integers(0, min(vocab, 1000), size=(1, L), dtype=np.int64)
    ids_dev = None
    if dev.torch is not None:
        ids_dev = dev.torch.from_numpy(ids_host).cuda()
        if model is not None:
            model = model.cuda()

    # one device tensor per length, made once: a binding's input keeps its address from call to call
    # (graft reads a CUDA tensor in place; a new address each call would be repointed or re-recorded)
    ids_dev_of = {} if ids_dev is None else {n: ids_dev[:, :n].contiguous() for n in range(1, L + 1)}

    def ids_of(n, host=False):
        if host or ids_dev is None:
            return np.ascontiguousarray(ids_host[:, :n])
        return ids_dev_of[n]

    graph_variants = [
        ("graft eager", dict(mode="eager")),
        ("graft exact", dict(mode="graph", shapes="exact")),
        ("graft update", dict(mode="graph", shapes="update")),
        ("graft update + capture ahead", dict(mode="graph", shapes="update", capture=True)),
        ("graft exact + capture ahead", dict(mode="graph", shapes="exact", capture=True)),
        ("graft pad", dict(mode="graph", shapes="pad")),
        ("graft generic", dict(mode="graph", shapes="generic")),
        # fused f32 attention (one library call per layer): generic reads its lengths from the slot table
        ("graft exact fused-attention", dict(mode="graph", shapes="exact", fuse_f32=True)),
        ("graft generic fused-attention", dict(mode="graph", shapes="generic", fuse_f32=True)),
        # auto is graph mode's default for this symbolic model: no shapes= given
        ("graft auto", dict(mode="graph", cache="auto")),
        ("graft auto (decisions from the file)", dict(mode="graph", cache="auto")),
        # each length called 3 times (the passes above) and then 48 times: the adaptive rule's calls per binding
        ("graft auto (default), 3 passes", dict(mode="graph", cache="auto-3")),
        ("graft auto (default), 48 passes", dict(mode="graph", cache="auto-48", extra_passes=45)),
        ("graft auto fused-attention", dict(mode="graph", shapes="auto", fuse_f32=True, cache="auto-fused")),
        ("graft auto, 15 MB", dict(mode="graph", shapes="auto", budget_mb=15, cache="auto-15")),
        ("graft auto, 15 MB + capture ahead", dict(mode="graph", shapes="auto", budget_mb=15, capture=True, cache="auto-15")),
        ("ablation: auto without persisted decisions", dict(mode="graph", shapes="auto")),
        # ablation: each mechanism off in turn
        ("ablation: update, arena per shape", dict(mode="graph", shapes="update", arena="per_shape")),
        ("ablation: exact, arena per shape", dict(mode="graph", shapes="exact", arena="per_shape")),
        ("ablation: exact, 15 MB graph budget", dict(mode="graph", shapes="exact", budget_mb=15)),
    ]
    torch_variants = [("torch eager", None), ("torch reduce-overhead", {"mode": "reduce-overhead"}),
                      ("torch reduce-overhead dynamic=True", {"mode": "reduce-overhead", "dynamic": True})]
    only = set(args.only.split(",")) if args.only else None
    result = {"model": "GPT-2 small (124M, random weights, fp32, batch 1)" if not args.onnx else args.onnx, "max_len": L,
              "device": args.device, "lengths_shuffled": lengths_shuf, "variants": []}
    if dev.torch is not None:
        result["device_name"] = dev.torch.cuda.get_device_name()
        result["torch"] = dev.torch.__version__
    else:
        result["device_name"] = "graft simulator"
    ref = None
    if model is not None and not args.no_torch:
        for name, kw in torch_variants:
            if only and name not in only:
                continue
            print("== %s" % name, flush=True)
            try:
                r = torch_variant(name, model, dev, lengths_inc, lengths_shuf, ids_of, kw)
                if kw is None:
                    ref = r["_logits"]
            except Exception:
                r = {"variant": name, "kind": "torch", "error": traceback.format_exc()}
                dev.cleanup()
            result["variants"].append(r)
            print(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}, default=str)[:600], flush=True)
            save_partial(args.out, result)
    for name, kw in graph_variants:
        if only and name not in only:
            continue
        print("== %s" % name, flush=True)
        try:
            r = graft_variant(name, onnx_path, dev, L, lengths_inc, lengths_shuf, ids_of, **kw)
            if ref is None and kw.get("mode") == "eager":
                ref = r["_logits"]
        except Exception:
            r = {"variant": name, "kind": "graft", "error": traceback.format_exc()}
            dev.cleanup()
        result["variants"].append(r)
        print(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}, default=str)[:600], flush=True)
        save_partial(args.out, result)
    for r in result["variants"]:
        logits = r.pop("_logits", None)
        if logits is not None and ref is not None:
            r["max_abs_diff"] = float(max(np.max(np.abs(np.asarray(logits[n], np.float32) - np.asarray(ref[n], np.float32)))
                                          for n in logits))
    ok = [r for r in result["variants"] if "error" not in r]
    pt2 = [r for r in ok if r["variant"] == "torch reduce-overhead"]
    best = min((r for r in ok if r["kind"] == "graft" and r["mode"] == "graph" and not r["variant"].startswith("ablation")),
               key=lambda r: r["shuffled_again"]["total_s"], default=None)
    if best and pt2:
        result["targets"] = {
            "best_policy": best["variant"],
            "time": "%s (%.3f s vs PT2-CG %.3f s)" % (best["shuffled_again"]["total_s"] <= pt2[0]["shuffled_again"]["total_s"],
                                                      best["shuffled_again"]["total_s"], pt2[0]["shuffled_again"]["total_s"]),
            "memory": "%s (%.2f MB)" % (best["stats"]["graph_bytes_peak"] <= 15e6, best["stats"]["graph_bytes_peak"] / 1e6),
            "warmup": "%s (%.2f s)" % (best["warmup_s"] <= 3.0, best["warmup_s"])}
    with open(os.path.join(args.out, "shapes_sweep.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    md = markdown(result)
    with open(os.path.join(args.out, "shapes_sweep.md"), "w") as f:
        f.write(md)
    print(md)
    return 0 if all("error" not in r for r in result["variants"]) else 1


if __name__ == "__main__":
    sys.exit(main())
