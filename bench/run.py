#!/usr/bin/env python3
"""graft's scoreboard: every workload in PyTorch eager, torch.compile,
torch.compile(mode="reduce-overhead") and graft (eager and graph mode) on the
same inputs in one run on one GPU; graft's outputs checked against PyTorch's.

Usage (on the GPU machine, from the repository root, graft built in BUILD):
    python3 bench/run.py [--build build-gpu] [--out bench/results] [--only NAME ...]
Writes <out>/<date>-<gpu>.json and .md.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads as W  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

ITERS, REPEATS, WARMUP = 100, 5, 20
SIM = False


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def time_torch(fn):
    """Median over REPEATS of the mean ms/iter of ITERS calls (synchronized)."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(ITERS):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / ITERS * 1e3)
    return statistics.median(samples), samples


def torch_kernel_time(fn, iters=20):
    """GPU kernel time and kernels per iteration from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    total, n = 0.0, 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total += getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
            n += 1
    return total / iters / 1e3, n / iters


def mem_used_mb():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**20


def export_onnx(model, inputs, names, path):
    """dynamo exporter first (opset 18), TorchScript exporter as the fallback."""
    errors = []
    for dynamo in (True, False):
        try:
            torch.onnx.export(model, tuple(inputs), path, input_names=names, output_names=["out"],
                              opset_version=18, dynamo=dynamo, external_data=dynamo)
            return "dynamo" if dynamo else "torchscript"
        except TypeError:
            try:
                torch.onnx.export(model, tuple(inputs), path, input_names=names, output_names=["out"],
                                  opset_version=18, dynamo=dynamo)
                return "dynamo" if dynamo else "torchscript"
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e)[:300])
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e)[:300])
    raise RuntimeError("ONNX export failed: " + " | ".join(errors))


def graft(build, args, timeout=900):
    cmd = [os.path.join(build, "bin", "graft")] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / (nb if nb else 1.0))


def run_workload(name, make, build, work):
    res = {"workload": name, "systems": {}}
    model, inputs, names = make()
    model = model.eval()
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    onnx_path = os.path.join(d, "model.onnx")
    with torch.inference_mode():
        ref = model(*inputs)
    t0 = time.perf_counter()
    res["exporter"] = export_onnx(model, inputs, names, onnx_path)
    res["export_s"] = round(time.perf_counter() - t0, 1)
    in_args = []
    for n, x in zip(names, inputs):
        f = os.path.join(d, n + ".npy")
        np.save(f, x.numpy())
        in_args += ["--input", f"{n}={f}"]

    dev = "cuda"
    model = model.to(dev)
    gin = [x.to(dev) for x in inputs]
    with torch.inference_mode():
        fe = lambda: model(*gin)  # noqa: E731
        ms, samples = time_torch(fe)
        gpu_ms, kern = torch_kernel_time(fe)
        res["systems"]["torch_eager"] = {"ms": ms, "samples": samples, "gpu_ms": gpu_ms, "kernels": kern,
                                         "share_in_graphs": 0.0, "bytes_copied": 0}
        for mode, key in ((None, "torch_compile"), ("reduce-overhead", "torch_compile_ro")):
            torch._dynamo.reset()
            torch.cuda.empty_cache()
            before = mem_used_mb()
            t0 = time.perf_counter()
            try:
                cm = torch.compile(model, mode=mode) if mode else torch.compile(model)
                fc = lambda: cm(*gin)  # noqa: E731
                for _ in range(3):
                    fc()
                torch.cuda.synchronize()
                compile_s = time.perf_counter() - t0
                ms, samples = time_torch(fc)
                gpu_ms, kern = torch_kernel_time(fc)
                out = fc()
                res["systems"][key] = {"ms": ms, "samples": samples, "gpu_ms": gpu_ms, "kernels": kern,
                                       "compile_s": round(compile_s, 1), "mem_mb": round(mem_used_mb() - before, 1),
                                       "share_in_graphs": 1.0 if mode else 0.0,
                                       "rel_err_vs_eager": rel_err(out.float().cpu(), ref.float())}
            except Exception as e:  # noqa: BLE001
                res["systems"][key] = {"error": repr(e)[:400]}
        if name == "st6":
            # the speech transformer's numpy-scalar temperature, under reduce-overhead
            torch._dynamo.reset()
            try:
                npm = W.ST6Numpy(model).to(dev)
                cm = torch.compile(npm, mode="reduce-overhead")
                for _ in range(3):
                    cm(gin[0])
                ms, samples = time_torch(lambda: cm(gin[0]))
                res["systems"]["torch_compile_ro_numpy_scalar"] = {"ms": ms, "samples": samples}
            except Exception as e:  # noqa: BLE001
                res["systems"]["torch_compile_ro_numpy_scalar"] = {"error": repr(e)[:400]}
    del model
    torch.cuda.empty_cache()

    if SIM:
        # the simulator: the same kernels interpreted on the CPU (correctness only, no timing)
        outd = os.path.join(d, "out-sim")
        t0 = time.perf_counter()
        rc, so, se = graft(build, ["run", onnx_path, "--device", "sim", "--output-dir", outd] + in_args, timeout=1800)
        if rc != 0:
            res["sim"] = {"error": (se.strip().splitlines() or ["?"])[-1][:400]}
        else:
            outs = sorted(f for f in os.listdir(outd) if f.endswith(".npy"))
            got = np.load(os.path.join(outd, outs[0]))
            res["sim"] = {"rel_err_vs_torch": rel_err(got, ref.float().numpy()) if got.shape == tuple(ref.shape) else None,
                          "host_s": round(time.perf_counter() - t0, 1)}
    for mode in ("eager", "graph"):
        key = "graft_" + mode
        outd = os.path.join(d, "out-" + mode)
        rc, so, se = graft(build, ["run", onnx_path, "--device", "cuda", "--mode", mode, "--output-dir", outd] + in_args)
        if rc != 0:
            res["systems"][key] = {"error": (se.strip().splitlines() or ["?"])[-1][:400]}
            continue
        outs = sorted(f for f in os.listdir(outd) if f.endswith(".npy"))
        got = np.load(os.path.join(outd, outs[0])) if outs else None
        err = rel_err(got, ref.float().numpy()) if got is not None and got.shape == tuple(ref.shape) else None
        jf = os.path.join(d, f"bench-{mode}.json")
        rc, so, se = graft(build, ["bench", onnx_path, "--device", "cuda", "--mode", mode, "--iters", str(ITERS),
                                   "--repeats", str(REPEATS), "--warmup", str(WARMUP), "--json", jf] + in_args)
        if rc != 0:
            res["systems"][key] = {"error": (se.strip().splitlines() or ["?"])[-1][:400], "rel_err_vs_torch": err}
            continue
        with open(jf) as f:
            b = json.load(f)
        k = b.get("kernels_per_iter") or 0
        res["systems"][key] = {"ms": b["ms_per_iter"], "samples": b.get("ms_samples"), "gpu_ms": b.get("gpu_ms_per_iter"),
                               "kernels": k, "share_in_graphs": (b.get("kernels_in_graphs", 0) / k) if k else 0.0,
                               "bytes_copied": b.get("bytes_copied_per_iter"),
                               # beyond the weights (arena, placeholders, graphs): comparable to what compiling adds in PyTorch
                               "mem_mb": (b.get("device_bytes", 0) - b.get("weight_bytes", 0)) / 2**20,
                               "compile_s": (b.get("compile_ms", 0) + b.get("capture_ms", 0)) / 1e3,
                               "rel_err_vs_torch": err}
    return res


def table(results, meta):
    cols = ["torch_eager", "torch_compile", "torch_compile_ro", "graft_eager", "graft_graph"]
    lines = [f"# graft vs PyTorch — {meta['gpu']}, driver {meta['driver']}, {meta['date']}", "",
             f"PyTorch {meta['torch']}; ms/iter = median of {REPEATS} repeats of {ITERS} iterations after {WARMUP} warm-up; "
             "fp32, TF32 off. GPU kernel time from the PyTorch profiler (PyTorch) or CUDA events around the "
             "iteration (graft). Command: `python3 bench/run.py` on the GPU machine.", "",
             "| workload | system | ms/iter | GPU ms | kernels/iter | in graphs | bytes copied/iter | extra GPU MB | compile+capture s | rel. err | graft speedup |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['workload']} | — | {r['error']} | | | | | | | | |")
            continue
        S = r["systems"]
        best_graft = min((S[c]["ms"] for c in ("graft_eager", "graft_graph") if "ms" in S.get(c, {})), default=None)
        for c in cols + [c for c in S if c not in cols]:
            s = S.get(c)
            if s is None:
                continue
            if "error" in s:
                lines.append(f"| {r['workload']} | {c} | fails: {s['error'][:120]} | | | | | | | | |")
                continue
            f = lambda k, fmt: (fmt % s[k]) if s.get(k) is not None else "–"  # noqa: E731
            err = s.get("rel_err_vs_torch", s.get("rel_err_vs_eager"))
            sp = f"{s['ms'] / best_graft:.2f}×" if best_graft and c.startswith("torch") else ""
            lines.append(f"| {r['workload']} | {c} | {s['ms']:.3f} | {f('gpu_ms', '%.3f')} | {f('kernels', '%.0f')} | "
                         f"{100 * s.get('share_in_graphs', 0):.0f}% | {f('bytes_copied', '%d')} | {f('mem_mb', '%.1f')} | "
                         f"{f('compile_s', '%.1f')} | {('%.1e' % err) if err is not None else '–'} | {sp} |")
    lines += ["", "graft speedup = that PyTorch system's ms/iter over graft's best mode's ms/iter (>1: graft faster). "
              "extra GPU MB: PyTorch: device memory added by compiling (graphs, pools); graft: device memory the session "
              "holds beyond the weights (activation arena, placeholders, graphs). rel. err: PyTorch compiled vs PyTorch eager; "
              "graft vs PyTorch eager.", ""]
    sims = [(r["workload"], r["sim"]) for r in results if "sim" in r]
    if sims:
        lines += ["graft on the simulator (CPU interpreter of the same kernels) vs PyTorch eager on the GPU:", ""]
        for name, sm in sims:
            lines.append(f"- {name}: " + (f"rel. err {sm['rel_err_vs_torch']:.1e} ({sm['host_s']} s on the host)"
                                          if "error" not in sm else "fails: " + sm["error"]))
        lines.append("")
    for name, why in W.PENDING.items():
        lines.append(f"- {name}: not in this table — {why}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-gpu")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--work", default="/tmp/graft-bench")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--sim", action="store_true", help="also run graft on the simulator and check it against PyTorch")
    args = ap.parse_args()
    global SIM
    SIM = args.sim
    os.makedirs(args.out, exist_ok=True)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().split(", ")
    meta = {"gpu": smi[0] if smi else torch.cuda.get_device_name(), "driver": smi[1] if len(smi) > 1 else "?",
            "date": datetime.date.today().isoformat(), "torch": torch.__version__}
    results = []
    for name, make in W.workloads().items():
        if args.only and name not in args.only:
            continue
        log(f"== {name}")
        try:
            r = run_workload(name, make, args.build, args.work)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            r = {"workload": name, "error": repr(e)[:400]}
        results.append(r)
        log(json.dumps(r)[:2000])
        md = write(args.out, meta, results)  # after every workload: a cut-off run keeps what it measured
    print(md)


def write(out, meta, results):
    tag = re.sub(r"[^A-Za-z0-9]+", "-", meta["gpu"]).strip("-").lower()
    base = os.path.join(out, f"{meta['date']}-{tag}")
    with open(base + ".json", "w") as f:
        json.dump({"meta": meta, "results": results, "pending": W.PENDING}, f, indent=1)
    md = table(results, meta)
    with open(base + ".md", "w") as f:
        f.write(md)
    return md


if __name__ == "__main__":
    main()
