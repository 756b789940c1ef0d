#!/usr/bin/env python3
"""Session creation time per shape policy (what a pass added at load costs): GPT-2 small
exported as bench/shapes_sweep.py does (fp32, batch 1, dynamic seq declared 1..MAX), loaded
with graft.load under each policy, alternating, REPEATS times, one kernel cache shared by all
(the first load warms it and is reported apart). Writes load_time.json into --out.

  python3 bench/load_time.py --out DIR [--max-len 128] [--repeats 3] [--device cuda]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import graft  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--onnx", default=None)
    ap.add_argument("--policies", default="exact,auto,generic")
    ap.add_argument("--fix-dim", action="append", default=[], help="NAME=V: another symbolic dim, declared V..V")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = args.onnx
    if not path:
        import shapes_sweep
        path = os.path.join(args.out, "gpt2_dynamic_seq.onnx")
        shapes_sweep.export_gpt2(path, args.max_len)
    fixed = {kv.split("=")[0]: (int(kv.split("=")[1]),) * 2 for kv in args.fix_dim}
    cache = tempfile.mkdtemp(prefix="graft-load-")
    policies = args.policies.split(",")

    def load(policy):
        t0 = time.perf_counter()
        s = graft.load(path, device=args.device, mode="graph", dims=dict(fixed, seq=(1, args.max_len)), arena="max",
                       shapes=policy, cache_dir=cache)
        dt = time.perf_counter() - t0
        del s
        return dt

    first = {p: load(p) for p in policies}  # compiles and caches kernels
    times = {p: [] for p in policies}
    for _ in range(args.repeats):
        for p in policies:
            times[p].append(load(p))
    res = {"model": path, "max_len": args.max_len, "device": args.device, "first_load_s": first,
           "load_s": times, "median_s": {p: statistics.median(v) for p, v in times.items()}}
    with open(os.path.join(args.out, "load_time.json"), "w") as f:
        json.dump(res, f, indent=1)
    for p in policies:
        print("%-8s first %.3f s, then median %.3f s (%s)" % (p, first[p], res["median_s"][p],
                                                          ", ".join("%.3f" % t for t in times[p])), flush=True)


if __name__ == "__main__":
    main()
