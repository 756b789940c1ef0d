#!/usr/bin/env python3
"""Where one call's time goes, per shape policy and length (a diagnostic, not the benchmark).

GPT-2 small (fp32, batch 1, dynamic seq, the sweep's export) under graft's shape policies: every
length 1..L is run 3 times (warm-up, capture), then at a few probe lengths N synchronized calls
are timed (wall clock), with graft's stats of the last run (host time, device time, kernels,
copies, table refreshes) and CUPTI's GPU time of those calls. With --host, also the real-size
bf16 GPT-2 at b1 s128 (bench/realsize.py's model): enqueue time per call without a wait, and a
cProfile of 300 calls of the Python package's fast path.

  python3 bench/percall_probe.py --out DIR
"""
import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import graft  # noqa: E402
import torch  # noqa: E402

PROBES = (1, 8, 33, 64, 65, 96, 100, 128)


def cupti_ms(fn, calls=10):
    import realsize
    return realsize.gpu_time(lambda _: fn(), [None], calls=calls)


def policies(a, onnx_path, out):
    ids = torch.randint(0, 1000, (1, a.max_len), device="cuda")
    per_len = {n: ids[:, :n].contiguous() for n in range(1, a.max_len + 1)}
    rows = []
    for name, kw in (("exact", dict(shapes="exact")), ("generic", dict(shapes="generic")),
                     ("generic fused-f32", dict(shapes="generic", fuse_attention_f32=True)),
                     ("auto", dict(shapes="auto")), ("auto fused-f32", dict(shapes="auto", fuse_attention_f32=True)),
                     ("eager", dict(mode="eager"))):
        if a.policies and name not in a.policies.split(","):
            continue
        kw = dict(kw)
        mode = kw.pop("mode", "graph")
        s = graft.load(onnx_path, device="cuda", mode=mode, dims={"seq": (1, a.max_len)}, arena="max",
                       max_rerecords=100000, cache_dir="/tmp/probe-cache-" + name.replace(" ", "_"), **kw)

        def call(n, s=s):
            return s.run_device(input_ids=per_len[n])
        t0 = time.perf_counter()
        for p in range(3):
            for n in range(1, a.max_len + 1):
                call(n)
                torch.cuda.synchronize()
        warm_s = time.perf_counter() - t0
        row = {"policy": name, "three_passes_s": round(warm_s, 3), "lengths": {}}
        for n in PROBES:
            if n > a.max_len:
                continue
            ts = []
            for _ in range(a.iters):
                t = time.perf_counter()
                call(n)
                torch.cuda.synchronize()
                ts.append(time.perf_counter() - t)
            st = s.stats()
            # enqueue only: the call's host time with nothing waited for
            t = time.perf_counter()
            for _ in range(a.iters):
                call(n)
            enq = (time.perf_counter() - t) / a.iters
            torch.cuda.synchronize()
            g, ops = cupti_ms(lambda: call(n))
            ts.sort()
            row["lengths"][n] = {"wall_ms_median": round(1e3 * ts[len(ts) // 2], 4), "wall_ms_min": round(1e3 * ts[0], 4),
                                 "enqueue_ms": round(1e3 * enq, 4), "cupti_gpu_ms": round(g, 4), "cupti_ops": ops,
                                 "stats": {k: st[k] for k in ("time_us", "gpu_time_us", "kernels", "kernels_in_graphs",
                                                              "graph_launches", "copies", "bytes_copied", "generic_replays",
                                                              "table_refreshes", "table_bytes", "waits_on_host", "captures",
                                                              "exec_updates", "nodes_updated")}}
            print(name, n, row["lengths"][n], flush=True)
        if name.startswith("auto"):
            row["explain"] = s.explain()[-3000:]
        rows.append(row)
        del s
        torch.cuda.synchronize()
    return rows


def host(a, out):
    import realsize
    model, vocab = realsize.build("gpt2", "sdpa")
    path = "/tmp/probe_gpt2_rs.onnx"
    realsize.export(model, path)
    res = {}
    for prec in ("bf16",):
        s = graft.load(path, device="cuda", mode="graph", precision=prec)
        pool = [torch.randint(0, vocab, (1, 128), device="cuda") for _ in range(4)]

        def fn(x, s=s):
            return torch.from_dlpack(s.run_device(input_ids=x)["last_hidden_state"])
        for i in range(20):
            fn(pool[i % 4])
        torch.cuda.synchronize()
        n = 300
        t = time.perf_counter()
        for i in range(n):
            fn(pool[i % 4])
        enq = (time.perf_counter() - t) / n
        torch.cuda.synchronize()
        tot = (time.perf_counter() - t) / n
        # the C call alone (no torch.from_dlpack, no DeviceTensor)
        t = time.perf_counter()
        for i in range(n):
            s._enqueue((), {"input_ids": pool[i % 4]})
        cenq = (time.perf_counter() - t) / n
        torch.cuda.synchronize()
        g, ops = cupti_ms(lambda: fn(pool[0]))
        pr = cProfile.Profile()
        pr.enable()
        for i in range(n):
            fn(pool[i % 4])
        pr.disable()
        torch.cuda.synchronize()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(25)
        st = s.stats()
        res[prec] = {"enqueue_ms": round(1e3 * enq, 4), "total_ms": round(1e3 * tot, 4), "enqueue_c_path_ms": round(1e3 * cenq, 4),
                     "cupti_gpu_ms": round(g, 4), "cupti_ops": ops, "stats": {k: st[k] for k in ("time_us", "gpu_time_us", "kernels",
                     "graph_launches", "copies", "bytes_copied", "nodes_updated", "inputs_in_place", "waits_on_host", "captures",
                     "exec_updates")}, "cprofile": buf.getvalue()[:6000]}
        print(json.dumps({k: v for k, v in res[prec].items() if k != "cprofile"}), flush=True)
        print(res[prec]["cprofile"], flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--host", action="store_true")
    ap.add_argument("--no-policies", action="store_true")
    ap.add_argument("--policies", default="", help="comma-separated subset (default: all)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    res = {"device": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")}
    if not a.no_policies:
        import shapes_sweep
        onnx_path = "/tmp/probe_gpt2_dyn.onnx"
        shapes_sweep.export_gpt2(onnx_path, a.max_len)
        res["policies"] = policies(a, onnx_path, a.out)
    if a.host:
        res["host"] = host(a, a.out)
    with open(os.path.join(a.out, "percall.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
