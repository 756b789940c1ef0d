#!/usr/bin/env python3
"""Host-time profile of torch.compile(backend="graft") calls (issue 13): per workload, the
backend's report (subgraphs, ops left to PyTorch) and cProfile's top functions over N calls
on fresh inputs, next to reduce-overhead's per-call time. GPU machine:
    python3 bench/profile_backend.py --only t5_b1,eos_1M --calls 200
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="t5_b1,eos_1M,llama_b1,gpt2_b1")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    import torch
    import inprocess
    import graft.torch_backend as gtb
    gtb.register()
    W = inprocess.all_workloads()
    for name in a.only.split(","):
        mod, inputs, _ = W[name]()
        mod = mod.cuda().eval()
        pool = [[x.cuda() for x in inputs]]
        for variant, kw in (("reduce-overhead", {"mode": "reduce-overhead"}),
                            ("graft", {"backend": "graft", "options": {"mode": "graph"}})):
            torch._dynamo.reset()
            gtb.reset()
            m = torch.compile(mod, **kw)

            def call():
                xs = [x.clone() for x in pool[0]]
                if variant == "reduce-overhead":
                    torch.compiler.cudagraph_mark_step_begin()
                return m(*xs)

            with torch.no_grad():
                for _ in range(15):
                    call()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(a.calls):
                    call()
                torch.cuda.synchronize()
                ms = (time.perf_counter() - t0) * 1e3 / a.calls
                print("== %s %s: %.3f ms/call" % (name, variant, ms), flush=True)
                if variant != "graft":
                    continue
                print(gtb.explain() if hasattr(gtb, "explain") else "", flush=True)
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(a.calls):
                    call()
                torch.cuda.synchronize()
                pr.disable()
                s = io.StringIO()
                pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(a.top)
                print(s.getvalue(), flush=True)


if __name__ == "__main__":
    main()
