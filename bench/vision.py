"""ResNet-50 and ViT-B/16 on the GPU machine: graft (the ONNX export, graph mode, through the
Python package with zero-copy CUDA inputs) against PyTorch eager, torch.compile and
torch.compile(mode="reduce-overhead") on the same weights and inputs, in one process
(issue 14, item 6).

Inputs: a pool of 4 distinct input tensors, rotated every call (each call gets another
tensor at another address, as a caller refreshing its inputs does; graft repoints its graph
or copies, and says which in its stats). Timing: CUDA-synchronised wall clock over `--iters`
calls after `--warmup` calls. Memory: torch.cuda.max_memory_allocated for PyTorch's variants;
graft's device bytes from its run stats. Outputs are checked against eager (relative L2).

Writes one JSON line per (model, batch, variant) to --out and a table to stdout.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import graft  # noqa: E402


def rel_err(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(b.norm().item(), 1e-30))


def time_calls(fn, pool, iters, warmup):
    out = None
    for i in range(warmup):
        out = fn(pool[i % len(pool)])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(iters):
        out = fn(pool[i % len(pool)])
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e3, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,vit_b_16")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", default="vision.jsonl")
    ap.add_argument("--workdir", default="/tmp/vision")
    ap.add_argument("--variants", default="graft,eager,reduce-overhead,compile")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    variants = a.variants.split(",")
    torch.manual_seed(0)
    rows = []
    with open(a.out, "w") as out:
        for name in a.models.split(","):
            model = getattr(torchvision.models, name)(weights=None).cuda().eval()
            with torch.no_grad():  # torchvision zero-initialises ViT's head: outputs would all be 0
                for p in model.parameters():
                    if p.dim() > 1 and not p.any():
                        p.normal_(0, 0.02)
            for b in [int(x) for x in a.batches.split(",")]:
                pool = [torch.randn(b, 3, 224, 224, device="cuda") for _ in range(4)]
                with torch.no_grad():
                    ref = model(pool[0]).clone()
                for v in variants:
                    row = {"model": name, "batch": b, "variant": v}
                    try:
                        torch.cuda.empty_cache()
                        torch.cuda.reset_peak_memory_stats()
                        t0 = time.perf_counter()
                        if v == "eager":
                            fn = model
                        elif v in ("compile", "reduce-overhead"):
                            torch._dynamo.reset()
                            fn = torch.compile(model, mode=None if v == "compile" else "reduce-overhead")
                        else:
                            path = os.path.join(a.workdir, "%s_b%d.onnx" % (name, b))
                            if not os.path.exists(path):
                                torch.onnx.export(model, (pool[0],), path, dynamo=True, opset_version=18,
                                                  input_names=["x"], output_names=["y"])
                            row["export_s"] = round(time.perf_counter() - t0, 2)
                            s = graft.load(path, device="cuda", mode="graph")
                            iname = s.inputs[0].name if hasattr(s.inputs[0], "name") else s.inputs[0]
                            oname = s.outputs[0].name if hasattr(s.outputs[0], "name") else s.outputs[0]

                            def fn(x, s=s, iname=iname, oname=oname):
                                return torch.from_dlpack(s.run_device(**{iname: x})[oname])
                        with torch.no_grad():
                            first = time.perf_counter()
                            y = fn(pool[0])
                            torch.cuda.synchronize()
                            row["first_call_s"] = round(time.perf_counter() - first, 2)
                            row["err_vs_eager"] = rel_err(y.float(), ref.float())
                            ms, _ = time_calls(fn, pool, a.iters, a.warmup)
                        row["ms_per_call"] = round(ms, 4)
                        if v == "graft":
                            st = s.stats()
                            row["device_bytes"] = int(st.get("device_bytes", 0))
                            row["bytes_copied_per_call"] = int(st.get("bytes_copied", 0))
                            row["nodes_updated_per_call"] = int(st.get("nodes_updated", 0))
                            row["kernels_in_graphs"] = int(st.get("kernels_in_graphs", 0))
                            s.close()
                        else:
                            row["max_memory_allocated"] = int(torch.cuda.max_memory_allocated())
                    except Exception as e:  # one variant failing never stops the rest
                        row["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
                    rows.append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(json.dumps(row), flush=True)
    print("\n%-10s %5s %-16s %10s %10s %12s %s" % ("model", "batch", "variant", "ms/call", "vs r-o", "first call s", "err"))
    for r in rows:
        ro = next((x for x in rows if x["model"] == r["model"] and x["batch"] == r["batch"]
                   and x["variant"] == "reduce-overhead" and "ms_per_call" in x), None)
        ratio = "%.2fx" % (ro["ms_per_call"] / r["ms_per_call"]) if ro and "ms_per_call" in r else "-"
        print("%-10s %5d %-16s %10s %10s %12s %s" % (r["model"], r["batch"], r["variant"], r.get("ms_per_call", "-"), ratio,
                                                     r.get("first_call_s", "-"), r.get("error", "%.1e" % r.get("err_vs_eager", -1))))


if __name__ == "__main__":
    main()
