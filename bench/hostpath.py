#!/usr/bin/env python3
"""Where a graft.load call's host time goes (issue 13), on the GPU machine:
    python3 bench/hostpath.py --only eos_1M,t5_b1 --calls 2000

Per workload, each line is the mean host time per call over --calls calls (one sync at the
end), for graft.load's fast path (session.run_device on CUDA torch tensors) and for
reduce-overhead, under four ways of passing inputs:
  same     the same input tensors every call (graft: nothing to repoint)
  rotate   4 input sets made beforehand, in turn (addresses change, no allocation)
  fresh    a clone of one of the 4 sets per call, as bench/inprocess.py and a serving loop do
  clone    the clones alone (what 'fresh' adds to every variant)
plus, for graft, the time inside the C call (gr_session_run_device) and the session's own
counters. A raw CUDA graph of torch ops with copy_ into placeholders is the floor.
"""
import argparse
import ctypes
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="eos_1M,t5_b1")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--workdir", default="/tmp/hostpath")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import torch
    import graft
    import graft.session as gs
    import inprocess

    W = inprocess.all_workloads()
    rows = []
    for name in a.only.split(","):
        mod, example, names = W[name]()
        mod = mod.eval()
        os.makedirs(os.path.join(a.workdir, name), exist_ok=True)
        path = os.path.join(a.workdir, name, "model.onnx")
        with torch.no_grad():
            inprocess.export_onnx(torch, mod, example, names, path)
        mod = mod.cuda()
        sets = [[x.cuda() + (0.001 * k if x.is_floating_point() else 0) for x in example] for k in range(4)]
        torch.cuda.synchronize()

        def timeit(fn, mode):
            k = 0
            for _ in range(20):
                fn(pick(mode, k))
                k += 1
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(a.calls):
                out = fn(pick(mode, k))
                k += 1
            del out
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) / a.calls * 1e3

        def pick(mode, k):
            if mode == "same":
                return sets[0]
            if mode == "rotate":
                return sets[k % 4]
            return [t.clone() for t in sets[k % 4]]

        res = {"workload": name}
        res["clone_ms"] = timeit(lambda xs: xs, "fresh")

        sess = graft.load(path, device="cuda", mode="graph", verbose=True)
        in_names = [t.name for t in sess.inputs]
        idx = [names.index(n) for n in in_names]
        out_name = sess.outputs[0].name

        # time inside the C call: wrap the ctypes function the fast path calls
        real = gs.lib.gr_session_run_device
        acc = [0.0, 0]

        def wrapped(*args):
            t0 = time.perf_counter_ns()
            r = real(*args)
            acc[0] += time.perf_counter_ns() - t0
            acc[1] += 1
            return r

        class Proxy:
            def __getattr__(self, k):
                return wrapped if k == "gr_session_run_device" else getattr(gs_lib, k)

        gs_lib = gs.lib
        gs.lib = Proxy()
        try:
            def g(xs):
                return torch.from_dlpack(sess.run_device({n: xs[i] for n, i in zip(in_names, idx)})[out_name])

            for mode in ("same", "rotate", "fresh"):
                acc[0], acc[1] = 0.0, 0
                before = sess.stats()
                res["graft_%s_ms" % mode] = timeit(g, mode)
                after = sess.stats()
                res["graft_%s_c_ms" % mode] = acc[0] / max(acc[1], 1) / 1e6
                n = a.calls + 20
                res["graft_%s_session_totals_per_call" % mode] = {k: (after[k] - before[k]) / n for k in
                                                   ("waits_on_host",)
                                                   if isinstance(after.get(k), (int, float))}
            res["graft_time_us_last"] = sess.stats().get("time_us")
        finally:
            gs.lib = gs_lib

        torch._dynamo.reset()
        cm = torch.compile(mod, mode="reduce-overhead", dynamic=False)

        def ro(xs):
            torch.compiler.cudagraph_mark_step_begin()
            return cm(*xs)

        with torch.no_grad():
            for mode in ("same", "rotate", "fresh"):
                res["ro_%s_ms" % mode] = timeit(ro, mode)

            # torch.compile(backend="graft"): the whole call, and the part inside graft's
            # _Compiled.__call__ (binding, the run, the output clone) and that clone alone
            import graft.torch_backend as gtb
            gtb.register()
            torch._dynamo.reset()
            gtb.reset()
            cg = torch.compile(mod, backend="graft", dynamic=False, options={"device": "cuda", "mode": "graph"})
            inner = [0, 0]
            clone_ns = [0]
            real_call = gtb._Compiled.__call__
            real_clone = torch.Tensor.clone

            def timed_call(self, *args):
                t0 = time.perf_counter_ns()
                r = real_call(self, *args)
                inner[0] += time.perf_counter_ns() - t0
                inner[1] += 1
                return r

            for _ in range(3):  # compile outside the timing
                cg(*sets[0])
            torch.cuda.synchronize()
            gtb._Compiled.__call__ = timed_call
            try:
                for mode in ("same", "fresh"):
                    inner[0] = inner[1] = 0
                    res["backend_%s_ms" % mode] = timeit(lambda xs: cg(*xs), mode)
                    res["backend_%s_inner_ms" % mode] = inner[0] / max(inner[1], 1) / 1e6
                # the output clones' share: the same calls with Tensor.clone timed inside the call
                def counting_clone(t, *a, **k):
                    t0 = time.perf_counter_ns()
                    r = real_clone(t, *a, **k)
                    clone_ns[0] += time.perf_counter_ns() - t0
                    return r
                torch.Tensor.clone = counting_clone
                inner[0] = inner[1] = 0
                timeit(lambda xs: cg(*xs), "same")
                res["backend_same_output_clone_ms"] = clone_ns[0] / max(inner[1], 1) / 1e6
            finally:
                gtb._Compiled.__call__ = real_call
                torch.Tensor.clone = real_clone
            res["backend_waits_on_host"] = sum(st.get("waits_on_host", 0) for r in gtb.reports() for st in r.session_stats())

            # the floor: one torch CUDA graph, inputs copied into its placeholders (not every
            # model captures under torch.cuda.graph as is: then no floor)
            try:
                res.update(raw_graph(torch, mod, sets, timeit))
            except Exception as e:  # noqa: BLE001
                res["rawgraph_error"] = str(e).splitlines()[-1][:200]
            torch.cuda.synchronize()
        print(json.dumps(res), flush=True)
        rows.append(res)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def raw_graph(torch, mod, sets, timeit):
    res = {}
    static = [t.clone() for t in sets[0]]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            mod(*static)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = mod(*static)

    def raw(xs):
        for d, x in zip(static, xs):
            d.copy_(x)
        graph.replay()
        return static_out

    for mode in ("same", "fresh"):
        res["rawgraph_%s_ms" % mode] = timeit(raw, mode)
    return res


if __name__ == "__main__":
    main()
