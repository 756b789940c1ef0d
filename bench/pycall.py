#!/usr/bin/env python3
"""Per-call host cost of graft's Python path, apart from the device's own run time.

A tiny model (one input, one output: x -> relu(x) + 1 on a [4, 8] f32 tensor, so the
device's work is next to nothing) run three ways on the same session, per call:

  raw C       the C calls a run needs, arguments prebuilt (gr_session_set_input or
              gr_session_bind_input_device, gr_session_run[_on_stream], gr_session_output,
              gr_session_output_device_ptr, gr_session_wait): graft's own floor
  run_device  Session.run_device(x=...) with the output taken (torch.from_dlpack when the
              input is a torch tensor, else .data_ptr), what graft.load's callers do
  backend     torch.compile(module, backend="graft") on the same op (when torch is installed)

us/call = wall time / calls (median of --repeats). "python" = run_device - raw C: what the
Python layer adds. --device sim (default) or cuda; --profile prints cProfile's top entries
of run_device, and the count of ctypes calls per run.
    python3 bench/pycall.py [--device sim|cuda] [--calls 20000] [--profile]
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import graft  # noqa: E402
from graft import _capi as C  # noqa: E402
from graft._capi import lib  # noqa: E402
from graft.builder import GraphBuilder  # noqa: E402


def session(device):
    b = GraphBuilder()
    x = b.input("x", "f32", [4, 8])
    y = b.node("relu", [x])
    one = b.constant("one", "f32", [], np.array(1.0, np.float32))
    b.output(b.node("add", [y, one]), "y")
    return b.compile(device=device, mode="graph")


def per_call(fn, calls, repeats, sync):
    for _ in range(min(200, calls)):
        fn()
    sync()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="sim", choices=["sim", "cuda"])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    s = session(a.device)
    h = s._handle
    cuda = s.device_kind == "cuda"
    try:
        import torch
    except ImportError:
        torch = None
    host = np.random.rand(4, 8).astype(np.float32)
    if torch is not None:
        xt = torch.from_numpy(host).to("cuda" if cuda else "cpu")
    sync = (lambda: torch.cuda.synchronize()) if cuda and torch is not None else (lambda: lib.gr_session_wait(h))

    # ---- raw C: what a run needs, arguments built once ----
    dims = (ctypes.c_int64 * 2)(4, 8)
    o = C.Output()
    p = ctypes.c_void_p()
    legacy = ctypes.c_void_p(1)
    if cuda:
        ptr, nbytes = xt.data_ptr(), xt.numel() * 4

        def raw():
            lib.gr_session_bind_input_device(h, b"x", 0, 2, dims, ptr, nbytes)
            lib.gr_session_run_on_stream(h, legacy)
            lib.gr_session_output(h, 0, ctypes.byref(o))
            lib.gr_session_output_device_ptr(h, o, ctypes.byref(p))
    else:
        data = host.ctypes.data

        def raw():
            lib.gr_session_set_input(h, b"x", 0, 2, dims, data, 128)
            lib.gr_session_run(h)
            lib.gr_session_output(h, 0, ctypes.byref(o))
            lib.gr_session_output_device_ptr(h, o, ctypes.byref(p))

    rows = [("raw C", per_call(raw, a.calls, a.repeats, sync))]
    rows.append(("run_device(numpy)", per_call(lambda: s.run_device(x=host)["y"].data_ptr, a.calls, a.repeats, sync)))
    if torch is not None:
        rows.append(("run_device(torch) + from_dlpack",
                     per_call(lambda: torch.from_dlpack(s.run_device(x=xt)["y"]), a.calls, a.repeats, sync)))
        if cuda:  # the general path: one bind per input, a host wait per run
            s._fast_run = False
            rows.append(("  same, general path",
                         per_call(lambda: torch.from_dlpack(s.run_device(x=xt)["y"]), a.calls, a.repeats, sync)))
            s._fast_run = True
        import graft.torch_backend as gtb
        gtb.register()
        m = torch.nn.ReLU()
        with torch.no_grad():
            cm = torch.compile(lambda t: m(t) + 1.0, backend="graft", options={"device": a.device, "mode": "graph"})
            cm(xt)
            rows.append(("torch.compile(backend=graft)", per_call(lambda: cm(xt), a.calls // 2, a.repeats, sync)))
            ro = None
            if cuda:
                ro = torch.compile(lambda t: m(t) + 1.0, mode="reduce-overhead")
                for _ in range(5):
                    ro(xt)
                rows.append(("torch.compile(reduce-overhead)", per_call(lambda: ro(xt), a.calls // 2, a.repeats, sync)))
            rows.append(("torch eager", per_call(lambda: m(xt) + 1.0, a.calls, a.repeats, sync)))
    base = rows[0][1]
    print("%-34s %10s %10s" % ("path (%s)" % s.device_name, "us/call", "over raw C"))
    for name, us in rows:
        print("%-34s %10.2f %10.2f" % (name, us, us - base))
    if a.profile:
        import cProfile
        import pstats
        fn = (lambda: torch.from_dlpack(s.run_device(x=xt)["y"])) if torch is not None else (lambda: s.run_device(x=host))
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(2000):
            fn()
        pr.disable()
        st = pstats.Stats(pr)
        st.sort_stats("tottime").print_stats(18)
        n = sum(v[1] for k, v in st.stats.items() if k[0] == "~" and "CFuncPtr" in k[2] or "gr_" in k[2])
        print("ctypes-level calls per run (cProfile, approximate): %.1f" % (n / 2000))


if __name__ == "__main__":
    main()
