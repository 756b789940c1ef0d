#!/usr/bin/env python3
"""The in-process scoreboard (issue 13, item 5): every workload of bench/workloads.py and the
Hugging Face models (GPT-2, BERT, T5 encoder, a small Llama) as nn.Modules, timed in one
process per workload as a serving loop calls them:

  eager            PyTorch eager
  compile          torch.compile(model)
  reduce-overhead  torch.compile(model, mode="reduce-overhead")   (CUDA graphs)
  graft            torch.compile(model, backend="graft", options={"mode": "graph"})
  graft.load       the module exported with torch.onnx.export, graft.load(onnx, mode="graph"),
                   called through Session.run_device with the caller's tensors (zero-copy)

Every timed call gets freshly allocated inputs: a pool of 4 distinct input sets lives on the
device and each call clones one of them (the same clone for every variant, so its kernel and
allocation are in every variant's time). Outputs of the first call on pool[0] and of a call on
pool[1] are checked against eager (relative L2 error).

Per variant: ms/call (median over --repeats of --iters calls, synchronised), GPU ms/call
(torch.profiler, every CUDA kernel/memcpy/memset the process ran over 10 calls, graft's graph
replays included), GPU memory (the device's used bytes, cudaMemGetInfo, after the variant ran
minus before it was built: graphs and pools included), first-call seconds (build, compile,
capture and the first call; graft.load: load + first call, the export apart in export_s).

Usage on the GPU machine (graft built with CUDA; GRAFT_LIBRARY names libgraft.so, or the
in-tree build/lib is used):
    python3 bench/inprocess.py --out DIR [--only gpt2_b1,bert_b1] [--dtype bf16]
On a machine without a GPU, graft's simulator with CPU tensors (correctness, small counts):
    python3 bench/inprocess.py --device sim --only tiny_mlp --out DIR
Writes DIR/inprocess.jsonl (one line per workload and variant, plus one "env" line) and
DIR/inprocess.md (the table, ratios against reduce-overhead, geometric means).
"""
import argparse
import faulthandler
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

VARIANTS = ["eager", "compile", "reduce-overhead", "graft", "graft.load"]
# on request only: graft-freeze is backend="graft" with options weights="freeze" (every parameter
# a graft constant, as graft.load holds them: the ONNX import's plan, pre-transposed weights
# included, at the cost of graft's own copy of the weights); graft.load through the general per-input path (a bind per input, a host wait
# per run), what Session.run_device did before gr_session_run_device; for comparison
EXTRA_VARIANTS = ["graft.load-general", "graft-freeze"]
SIM_VARIANTS = ["eager", "graft", "graft.load"]  # CPU Inductor compiles are slow and measure nothing graft does
POOL = 4


# ---- workloads -----------------------------------------------------------------------------------

def _tiny_mlp():
    import torch
    import workloads as W
    torch.manual_seed(0)
    return W.MLP(d=32, layers=2), [torch.randn(4, 32)], ["x"]


def all_workloads():
    """name -> () -> (module, example inputs, input names). tiny_* only when asked for."""
    import workloads as W
    out = dict(W.workloads())
    out["llama_b1"] = lambda: W.hf("llama") + (["ids"],)
    out["tiny_mlp"] = _tiny_mlp
    return out


DEFAULT = ["eos_1M", "mlp_b256", "st6", "gpt2_b1", "bert_b1", "t5_b1", "llama_b1"]


# ---- measuring -----------------------------------------------------------------------------------

class Clock:
    def __init__(self, torch, cuda):
        self.torch, self.cuda = torch, cuda

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def used_mib(self):
        if not self.cuda:
            return None
        self.sync()
        free, total = self.torch.cuda.mem_get_info()
        return (total - free) / 2**20


def rel_err(torch, a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if a.shape != b.shape:
        return float("inf")
    return float((a - b).norm() / max(b.norm().item(), 1e-30))


def first_tensor(torch, y):
    while isinstance(y, (tuple, list)):
        y = y[0]
    if isinstance(y, dict):
        y = next(iter(y.values()))
    return y


def time_calls(clock, fn, fresh, iters, repeats, warmup):
    """Median over repeats of the mean ms of `iters` calls, each on fresh inputs."""
    for i in range(warmup):
        fn(fresh(i))
    clock.sync()
    samples = []
    k = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            out = fn(fresh(k))
            k += 1
        del out
        clock.sync()
        samples.append((time.perf_counter() - t0) / iters * 1e3)
    return statistics.median(samples), samples


def gpu_time(torch, fn, fresh, calls=10):
    """GPU ms and device ops per call (torch.profiler / CUPTI)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(fresh(i))
        torch.cuda.synchronize()
    total, n = 0.0, 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total += getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
            n += 1
    return total / calls / 1e3, n / calls


def export_onnx(torch, model, inputs, names, path):
    """What a user does: torch.onnx.export (the dynamo exporter, the TorchScript one as the fallback)."""
    errors = []
    for dynamo in (True, False):
        for external in (False, True):
            try:
                kw = {"dynamo": dynamo}
                if dynamo:
                    kw["external_data"] = external
                elif external:
                    continue
                torch.onnx.export(model, tuple(inputs), path, input_names=names, output_names=["out"],
                                  opset_version=18, **kw)
                return "dynamo" if dynamo else "torchscript"
            except Exception as e:  # noqa: BLE001
                errors.append("%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else ""))
    raise RuntimeError("ONNX export failed: " + " | ".join(errors))


# ---- one workload (in its own process) -----------------------------------------------------------

def run_one(a, name):
    import torch
    import graft
    import graft.torch_backend as gtb

    faulthandler.enable()
    cuda = a.device == "cuda"
    dev = "cuda" if cuda else "cpu"
    gdev = "cuda" if cuda else "sim"
    clock = Clock(torch, cuda)
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    gtb.register()
    tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[a.dtype]

    model, example, names = all_workloads()[name]()
    model = model.eval()
    workdir = os.path.join(a.workdir, name)
    os.makedirs(workdir, exist_ok=True)
    onnx_path = os.path.join(workdir, "model.onnx")
    base = {"workload": name, "device": a.device, "dtype": a.dtype}

    def emit(row):
        row = dict(base, **row)
        with open(a.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    variants = a.variants.split(",")
    export_info = {}
    if any(v.startswith("graft.load") for v in variants):
        # exported in f32 on the host before anything moves: graft converts at load (precision=)
        try:
            t0 = time.perf_counter()
            with torch.no_grad():
                export_info["exporter"] = export_onnx(torch, model, example, names, onnx_path)
            export_info["export_s"] = round(time.perf_counter() - t0, 2)
        except Exception as e:  # noqa: BLE001
            export_info["error"] = str(e)[:400]

    def cast(t):
        return t.to(device=dev, dtype=tdt if t.is_floating_point() else t.dtype)

    model = model.to(device=dev, dtype=tdt)
    g = torch.Generator().manual_seed(7)
    pool = [None] * POOL
    for p in range(POOL):
        # distinct contents per pool entry; integer inputs (token ids) stay in the example's range
        row = []
        for x in example:
            if x.is_floating_point():
                y = x if p == 0 else x + 0.01 * p * torch.randn(x.shape, generator=g, dtype=x.dtype)
            elif x.dim() > 0:
                hi = int(x.max()) + 1
                y = x if p == 0 else torch.randint(0, max(hi, 2), x.shape, generator=g, dtype=x.dtype)
            else:
                y = x
            row.append(cast(y))
        pool[p] = row

    def fresh(i):
        return [t.clone() for t in pool[i % POOL]]  # a newly allocated input per call, as a serving loop gets

    with torch.no_grad():
        refs = [first_tensor(torch, model(*pool[p])).float().clone() for p in (0, 1)]
    clock.sync()
    tol = 1e-3 if a.dtype == "f32" else 3e-2

    for v in variants:
        row = {"variant": v}
        sess = None
        try:
            if v.startswith("graft.load") and "error" in export_info:
                raise RuntimeError(export_info["error"])
            torch._dynamo.reset()
            if cuda:
                torch.cuda.empty_cache()
            before = clock.used_mib()
            t0 = time.perf_counter()
            if v == "eager":
                fn = model
            elif v in ("compile", "reduce-overhead"):
                cm = torch.compile(model, mode=None if v == "compile" else "reduce-overhead", dynamic=False)
                fn = cm
            elif v in ("graft", "graft-freeze"):
                cm = torch.compile(model, backend="graft", dynamic=False,
                                   options=dict({"device": gdev, "mode": a.graft_mode},
                                                **({"weights": "freeze"} if v == "graft-freeze" else {})))
                fn = cm
            elif v in ("graft.load", "graft.load-general"):
                row.update(export_info)
                sess = graft.load(onnx_path, device=gdev, mode=a.graft_mode,
                                  precision=None if a.dtype == "f32" else a.dtype)
                sess._fast_run = v == "graft.load"
                out_name = sess.outputs[0].name
                in_names = [t.name for t in sess.inputs]
                if len(in_names) != len(names):
                    # (an exporter may drop an unused input, e.g. a constant-folded scalar)
                    row["note"] = "ONNX inputs %s for the module's %s" % (in_names, names)
                pick = [names.index(n) for n in in_names]

                def fn(*xs, s=sess, pick=pick, in_names=in_names, out_name=out_name):
                    feeds = {n: xs[k] for n, k in zip(in_names, pick)}
                    return torch.from_dlpack(s.run_device(feeds)[out_name])
            else:
                raise ValueError("unknown variant %r" % v)

            def call(xs, fn=fn):
                return fn(*xs)

            with torch.no_grad():
                y0 = first_tensor(torch, call(pool[0]))
                clock.sync()
                row["first_call_s"] = round(time.perf_counter() - t0, 3)
                row["err_vs_eager"] = rel_err(torch, y0.float(), refs[0])
                # a second call after warm-up on other inputs: stale or shape-specialised outputs show here
                for i in range(3):
                    call(fresh(i))
                y1 = first_tensor(torch, call(fresh(1)))
                row["err_vs_eager_2"] = rel_err(torch, y1.float(), refs[1])
                del y0, y1
                ms, samples = time_calls(clock, call, fresh, a.iters, a.repeats, a.warmup)
                row["ms_per_call"] = round(ms, 4)
                row["ms_samples"] = [round(s, 4) for s in samples]
                if cuda:
                    row["gpu_ms"], row["gpu_ops_per_call"] = gpu_time(torch, call, fresh)
                    row["gpu_ms"] = round(row["gpu_ms"], 4)
            after = clock.used_mib()
            if before is not None:
                row["mem_mib"] = round(after - before, 1)
            row["ok"] = max(row["err_vs_eager"], row["err_vs_eager_2"]) <= tol
            if sess is not None:
                st = sess.stats()
                for k in ("kernels", "kernels_in_graphs", "graph_launches", "copies", "bytes_copied", "nodes_updated",
                          "inputs_in_place", "device_bytes", "weight_bytes", "waits_on_host"):
                    row[k] = st[k]
            if v in ("graft", "graft-freeze"):
                reps = [r for r in gtb.reports()]
                row["graft_subgraphs"] = sum(r.subgraphs for r in reps)
                row["graft_fallbacks"] = [r.fallback for r in reps if r.fallback]
                left = sorted({k for r in reps for k in r.left})
                if left:
                    row["left_to_pytorch"] = left
                # what graft holds and copies (parameters are bound inputs: placeholders show here)
                stats = [st for r in reps for st in r.session_stats()]
                for k in ("device_bytes", "weight_bytes", "bytes_copied", "copies", "inputs_in_place", "nodes_updated", "waits_on_host"):
                    row["graft_" + k] = sum(st[k] for st in stats)
        except Exception as e:  # noqa: BLE001 - one variant failing never stops the rest
            row["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
            traceback.print_exc()
        finally:
            fn = cm = None  # noqa: F841
            if sess is not None:
                clock.sync()
                sess.close()
            gtb.reset()
        emit(row)


# ---- the table -----------------------------------------------------------------------------------

def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def table(rows, env):
    runs = [r for r in rows if "variant" in r]
    names = list(dict.fromkeys(r["workload"] for r in runs))
    lines = ["# graft in-process scoreboard: %s" % env.get("device_name", "?"), "",
             "%s; torch %s; CUDA %s; driver %s; graft %s; %s; dtype %s; TF32 %s. ms/call: median of %d repeats of %d "
             "calls after %d warm-up, each call on freshly allocated inputs (a clone of one of %d input sets). "
             "GPU ms: torch.profiler over 10 calls (includes the input clone). mem: device memory used after the "
             "variant ran minus before it was built (MiB). first s: build + compile + first call. err: relative L2 "
             "error against eager (worst of two inputs). vs r-o: reduce-overhead's ms/call over this one's (>1: faster)."
             % (env.get("date"), env.get("torch"), env.get("cuda"), env.get("driver"), env.get("graft_commit"),
                env.get("device"), env.get("dtype"), env.get("tf32"), env.get("repeats"), env.get("iters"),
                env.get("warmup"), POOL), "",
             "| workload | variant | ms/call | GPU ms | vs r-o | mem MiB | first s | err | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratios = {}
    for n in names:
        rs = [r for r in runs if r["workload"] == n]
        ro = next((r for r in rs if r["variant"] == "reduce-overhead" and "ms_per_call" in r), None)
        for r in rs:
            if "error" in r:
                lines.append("| %s | %s | fails | | | | | | %s |" % (n, r["variant"], r["error"][:160].replace("|", "/")))
                continue
            ratio = ro["ms_per_call"] / r["ms_per_call"] if ro else None
            if ratio is not None:
                ratios.setdefault(r["variant"], []).append((n, ratio))
            err = max(r.get("err_vs_eager", 0), r.get("err_vs_eager_2", 0))
            notes = [] if r.get("ok", True) else ["WRONG"]
            if r.get("graft_fallbacks"):
                notes.append("fallback: " + "; ".join(r["graft_fallbacks"])[:100])
            if r.get("left_to_pytorch"):
                notes.append("left to PyTorch: " + ", ".join(r["left_to_pytorch"])[:100])
            if "graft_device_bytes" in r:
                notes.append("graft holds %.0f MiB, copied %d B/call" % (r["graft_device_bytes"] / 2**20, r["graft_bytes_copied"]))
            if "bytes_copied" in r:
                notes.append("copied %d B/call, %d nodes updated" % (r["bytes_copied"], r.get("nodes_updated", 0)))
            lines.append("| %s | %s | %.3f | %s | %s | %s | %s | %.1e | %s |" % (
                n, r["variant"], r["ms_per_call"], "%.3f" % r["gpu_ms"] if "gpu_ms" in r else "-",
                "%.2fx" % ratio if ratio else "-", r.get("mem_mib", "-"), r.get("first_call_s", "-"), err,
                "; ".join(notes).replace("|", "/")))
    lines += ["", "| variant | geomean vs reduce-overhead | workloads | slower than reduce-overhead on |", "|---|---|---|---|"]
    for v in VARIANTS + EXTRA_VARIANTS:
        if v in ratios:
            gm = geomean([x for _, x in ratios[v]])
            slower = [n for n, x in ratios[v] if x < 1.0]
            lines.append("| %s | %s | %d | %s |" % (v, "%.2fx" % gm if gm else "-", len(ratios[v]), ", ".join(slower) or "none"))
    lines += ["", "Target (issue 13 item 5): graft >= 1.5x reduce-overhead as a geometric mean, never slower on any workload.", ""]
    return "\n".join(lines)


def environment(a):
    import torch
    env = {"env": True, "date": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "device": a.device, "dtype": a.dtype, "tf32": a.tf32,
           "iters": a.iters, "repeats": a.repeats, "warmup": a.warmup, "graft_mode": a.graft_mode}
    try:
        import transformers
        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:  # GRAFT_COMMIT names it where the tree has no .git (a copy on the GPU machine)
        env["graft_commit"] = os.environ.get("GRAFT_COMMIT") or subprocess.run(["git", "-C", os.path.dirname(HERE), "rev-parse", "--short", "HEAD"],
                                             capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    except Exception:  # noqa: BLE001
        env["graft_commit"] = "?"
    env["graft_library"] = os.environ.get("GRAFT_LIBRARY", "(default)")
    if a.device == "cuda" and torch.cuda.is_available():
        env["device_name"] = torch.cuda.get_device_name()
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except Exception:  # noqa: BLE001
            env["driver"] = "?"
    else:
        env["device_name"] = "graft simulator (CPU tensors)"
        env["driver"] = "-"
    return env


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/inprocess", help="folder for inprocess.jsonl and inprocess.md")
    ap.add_argument("--only", default="", help="comma-separated workloads (default: %s)" % ",".join(DEFAULT))
    ap.add_argument("--variants", default="", help="comma-separated, of %s (sim default: %s)" % (
        ",".join(VARIANTS), ",".join(SIM_VARIANTS)))
    ap.add_argument("--device", default="cuda", choices=["cuda", "sim"])
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"])
    ap.add_argument("--tf32", action="store_true", help="let PyTorch's f32 matmuls use TF32 (off: f32 as graft runs it)")
    ap.add_argument("--graft-mode", default="graph", choices=["graph", "eager", "auto"])
    ap.add_argument("--iters", type=int, default=None, help="calls per repeat (cuda 50, sim 2)")
    ap.add_argument("--repeats", type=int, default=None, help="(cuda 5, sim 2)")
    ap.add_argument("--warmup", type=int, default=None, help="(cuda 10, sim 1)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per workload process")
    ap.add_argument("--workdir", default=None, help="exports go here (default OUT/work)")
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)
    ap.add_argument("--jsonl", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    sim = a.device == "sim"
    a.iters = a.iters if a.iters is not None else (2 if sim else 50)
    a.repeats = a.repeats if a.repeats is not None else (2 if sim else 5)
    a.warmup = a.warmup if a.warmup is not None else (1 if sim else 10)
    a.variants = a.variants or ",".join(SIM_VARIANTS if sim else VARIANTS)
    a.workdir = a.workdir or os.path.join(a.out, "work")
    for v in a.variants.split(","):
        if v not in VARIANTS + EXTRA_VARIANTS:
            ap.error("unknown variant %r (of %s)" % (v, ", ".join(VARIANTS + EXTRA_VARIANTS)))
    if a.one:
        run_one(a, a.one)
        return 0
    names = [n for n in a.only.split(",") if n] or DEFAULT
    known = all_workloads()
    for n in names:
        if n not in known:
            ap.error("unknown workload %r (of %s)" % (n, ", ".join(known)))
    os.makedirs(a.out, exist_ok=True)
    jsonl = os.path.join(a.out, "inprocess.jsonl")
    env = environment(a)
    with open(jsonl, "w") as f:
        f.write(json.dumps(env) + "\n")
    child = [sys.executable, os.path.abspath(__file__), "--device", a.device, "--dtype", a.dtype, "--variants", a.variants,
             "--graft-mode", a.graft_mode, "--iters", str(a.iters), "--repeats", str(a.repeats), "--warmup", str(a.warmup),
             "--workdir", a.workdir, "--jsonl", jsonl] + (["--tf32"] if a.tf32 else [])
    rc_all = 0
    for n in names:
        # one process per workload: a crash or a stuck compile loses that workload only
        t0 = time.perf_counter()
        print("== %s" % n, flush=True)
        try:
            rc = subprocess.call(child + ["--one", n], timeout=a.timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout after %d s" % a.timeout
        if rc != 0:
            rc_all = 1
            with open(jsonl, "a") as f:
                f.write(json.dumps({"workload": n, "variant": "(process)", "error": "process exit %s" % rc}) + "\n")
        print("== %s: %.1f s" % (n, time.perf_counter() - t0), flush=True)
    rows = [json.loads(line) for line in open(jsonl) if line.strip()]
    md = table(rows, env)
    with open(os.path.join(a.out, "inprocess.md"), "w") as f:
        f.write(md)
    print(md)
    return rc_all


if __name__ == "__main__":
    sys.exit(main())
