"""CUDA checks of the Python package with PyTorch (scripts/py-gpu-check.sh). Prints one
line per check and exits non-zero on any failure; timings are printed, not asserted."""
import os
import sys
import tempfile
import time

import numpy as np
import torch

import graft

failures = []


def check(cond, what):
    print("%s %s" % ("ok  " if cond else "FAIL", what))
    if not cond:
        failures.append(what)


EW = """graft 1
input x: f32[1024, 1024]
const b: f32[1024] = %s
e = exp(x)
y = add(e, b)
z = mul(y, x)
output z
""" % ("[" + ", ".join("%g" % (i % 7) for i in range(1024)) + "]")

MM = """graft 1
input x: f32[256, 512]
w = random_normal(shape=[512, 512], seed=3, std=0.05)
h = matmul(x, w)
y = relu(h)
output y
"""

tmp = tempfile.mkdtemp()


def model(name, text):
    p = os.path.join(tmp, name)
    with open(p, "w") as f:
        f.write(text)
    return p


assert torch.cuda.is_available(), "no CUDA device for torch"
dev = torch.device("cuda:0")

# ---- elementwise model, graph mode: in place, repointed on a new address ----
ew = graft.load(model("ew.gir", EW), device="cuda", mode="graph")
ref = graft.load(model("ew.gir", EW), device="sim", mode="eager")
check(ew.device_kind == "cuda", "session on %s" % ew.device_name)
x = torch.randn(1024, 1024, device=dev)
for _ in range(3):
    out = ew(x=x)
z = out["z"]
check(isinstance(z, graft.DeviceTensor), "CUDA outputs are DeviceTensor")
st = ew.stats()
check(st["inputs_in_place"] == 1 and st["bytes_copied"] == 0 and st["nodes_updated"] == 0,
      "same tensor: read in place, nothing copied or updated (%s)" % {k: st[k] for k in ("inputs_in_place", "bytes_copied", "nodes_updated", "graph_launches")})
t = torch.from_dlpack(z)
check(t.device == dev and t.data_ptr() == z.data_ptr, "torch.from_dlpack(output) shares graft's memory (no copy)")
want = ref(x=x.cpu().numpy())["z"]
check(np.allclose(t.cpu().numpy(), want, rtol=1e-5, atol=1e-5), "values match the simulator")
x2 = torch.randn(1024, 1024, device=dev)
z2 = torch.from_dlpack(ew(x=x2)["z"]).clone()
st = ew.stats()
check(st["nodes_updated"] >= 1 and st["bytes_copied"] == 0 and st["graph_launches"] >= 1,
      "new tensor: graph nodes repointed, nothing copied (%d nodes updated)" % st["nodes_updated"])
check(np.allclose(z2.cpu().numpy(), ref(x=x2.cpu().numpy())["z"], rtol=1e-5, atol=1e-5), "repointed replay reads the new tensor")
try:
    z.data_ptr
    check(False, "stale output refused")
except graft.StaleError as e:
    check("run again" in e.message, "stale output refused: %s" % e.message[:60])

# ---- a non-default torch stream: graft orders on it, torch reads after ----
s = torch.cuda.Stream()
ew.stream = s
with torch.cuda.stream(s):
    x3 = torch.randn(1024, 1024, device=dev) * 2  # produced on s
    out3 = torch.from_dlpack(ew(x=x3)["z"]) + 0  # consumed on s, no host sync
s.synchronize()
check(np.allclose(out3.cpu().numpy(), ref(x=x3.cpu().numpy())["z"], rtol=1e-5, atol=1e-5), "run ordered on a torch stream")
ew.stream = None

# ---- matmul model, graph mode: the library call's input is copied D2D ----
mm = graft.load(model("mm.gir", MM), device="cuda", mode="graph")
mmref = graft.load(model("mm.gir", MM), device="sim")
xm = torch.randn(256, 512, device=dev)
for _ in range(3):
    o = torch.from_dlpack(mm(x=xm)["y"]).clone()
st = mm.stats()
check(st["bytes_copied"] == xm.numel() * 4 and st["inputs_in_place"] == 0, "matmul input in a graph: copied D2D (%d bytes)" % st["bytes_copied"])
check(np.allclose(o.cpu().numpy(), mmref(x=xm.cpu().numpy())["y"], rtol=1e-3, atol=1e-3), "matmul values match the simulator")

# ---- ms/call with a fresh input tensor every call (what a serving loop does) ----
for name, sess, shape in (("ew 1024x1024", ew, (1024, 1024)), ("mlp 256x512", mm, (256, 512))):
    xs = [torch.randn(*shape, device=dev) for _ in range(8)]
    for i in range(20):
        sess(x=xs[i % 8])
    torch.cuda.synchronize()
    n = 200
    t0 = time.perf_counter()
    for i in range(n):
        torch.from_dlpack(sess(x=xs[i % 8])[sess.outputs[0].name])
    torch.cuda.synchronize()
    st = sess.stats()
    print("time %s: %.3f ms/call (fresh tensor each call; last call: %d nodes updated, %d bytes copied)" % (
        name, (time.perf_counter() - t0) * 1e3 / n, st["nodes_updated"], st["bytes_copied"]))

print("py-gpu-check: %d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
