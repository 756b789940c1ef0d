#!/usr/bin/env python3
"""Compile time against graph size: generates graphs of N nodes (.gir and
.onnx), compiles each with `graft bench --verbose` on the simulator and
records wall time per phase and the peak RSS of the process.

    python3 bench/compile_time.py                      # every shape, N = 1e3 .. 1e5
    python3 bench/compile_time.py --shapes ew_chain --sizes 1000,10000
    python3 bench/compile_time.py --label after --out bench/compile-time/2026-11-23-cpu

Shapes (N counts the nodes of the graph):
  ew_chain       N elementwise ops in a chain (add/mul/tanh/sub): fusion makes one kernel
  unfusable      N ops alternating matmul and softmax: fusion cannot collapse the chain
  many_outputs   a chain of N adds whose every value is a graph output (all live at the end)
  split          one split node with N outputs, concatenated back (parser, wide nodes)
  onnx_ew_chain  ew_chain as an ONNX model, one initializer per node
  onnx_unfusable unfusable as an ONNX model
  onnx_shape     an exported-model pattern per block: Shape, Gather, Unsqueeze, Concat,
                 Reshape, Relu (import-time folding of shape arithmetic)
  matmul_gelu    N/3 layers of matmul, row-bias add, tanh-GELU (the epilogue pass's matches)
  transformer    L layers of a small transformer block (attention + MLP + layer norms,
                 about 27 nodes per layer); --sizes gives L for this shape

Phases: load (parse or ONNX import and folding), session (verify, clone, shape
inference), then the plan's passes as `graft: compile phases` prints them (the
pass pipeline's names: clone, specialize, predicate_if, fold_constants, lower,
fuse, plan_memory, partition; then prepare = kernel preparation on the
simulator). A run that passes --timeout is recorded
as such, and larger sizes of that shape are skipped.

Results: <out>.json (appended to: one entry per label) and <out>.md (a table
per label). Needs build/bin/graft (or $GRAFT_BIN).
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
from gir_builder import graft_bin  # noqa: E402

DEFAULT_SIZES = [1000, 3000, 10000, 30000, 100000]
DEFAULT_LAYERS = [16, 64, 256, 1024]


# ==== .gir generators ==========================================================================
def gir_ew_chain(n):
    lines = ["graft 1", "input x: f32[64]", "const c: f32[] = [0.5]"]
    prev = "x"
    ops = ["add(%s, c)", "mul(%s, c)", "tanh(%s)", "sub(%s, x)"]
    for i in range(n):
        lines.append("v%d = %s" % (i, ops[i % 4] % prev))
        prev = "v%d" % i
    lines.append("output " + prev)
    return "\n".join(lines) + "\n"


def gir_unfusable(n):
    w = ", ".join("%.3f" % (((i * 37) % 17 - 8) / 64.0) for i in range(64))
    lines = ["graft 1", "input x: f32[8, 8]", "const w: f32[8, 8] = [%s]" % w]
    prev = "x"
    for i in range(n):
        op = "matmul(%s, w)" % prev if i % 2 == 0 else "softmax(%s, axis=-1)" % prev
        lines.append("v%d = %s" % (i, op))
        prev = "v%d" % i
    lines.append("output " + prev)
    return "\n".join(lines) + "\n"


def gir_matmul_gelu(n):
    """n/2 layers of matmul, row bias add and tanh-GELU: the epilogue fusion's matches (one a
    layer), so its time against the graph size shows."""
    w = ", ".join("%.3f" % (((i * 37) % 17 - 8) / 64.0) for i in range(64))
    lines = ["graft 1", "input x: f32[8, 8]", "const w: f32[8, 8] = [%s]" % w,
             "const b: f32[8] = [%s]" % ", ".join(["0.01"] * 8)]
    prev = "x"
    for i in range(max(n // 3, 1)):
        lines.append("m%d = matmul(%s, w)" % (i, prev))
        lines.append("a%d = add(m%d, b)" % (i, i))
        lines.append("g%d = gelu(a%d, approximate=\"tanh\")" % (i, i))
        prev = "g%d" % i
    lines.append("output " + prev)
    return "\n".join(lines) + "\n"


def gir_many_outputs(n):
    lines = ["graft 1", "input x: f32[16]"]
    prev = "x"
    for i in range(n):
        lines.append("v%d = add(%s, x)" % (i, prev))
        prev = "v%d" % i
    lines.append("output " + ", ".join("v%d" % i for i in range(n)))
    return "\n".join(lines) + "\n"


def gir_split(n):
    names = ", ".join("s%d" % i for i in range(n))
    return "\n".join(["graft 1", "input x: f32[%d]" % n, "%s = split(x, axis=0)" % names,
                      "y = concat(%s, axis=0)" % names, "output y"]) + "\n"


def gir_transformer(layers):
    """A small transformer block (dm=32, 2 heads, dff=64, 8 tokens) repeated."""
    b, t, h, d, dm, dff = 1, 8, 2, 16, 32, 64
    lines = ["graft 1", "input x: f32[%d, %d, %d]" % (b, t, dm), "const temp: f32[] = [4.0]",
             "const one: f32[%d] = [%s]" % (dm, ", ".join(["1.0"] * dm)),
             "const zero: f32[%d] = [%s]" % (dm, ", ".join(["0.0"] * dm))]
    cnt = [0]

    def node(text):
        cnt[0] += 1
        name = "t%d" % cnt[0]
        lines.append("%s = %s" % (name, text))
        return name

    def linear(x, d_in, d_out, seed):
        w = node("random_normal(shape=[%d, %d], seed=%d, std=0.1)" % (d_out, d_in, seed))
        bias = node("random_uniform(shape=[%d], seed=%d, low=-0.1, high=0.1)" % (d_out, seed + 100000))
        return node("matmul(%s, %s, %s, trans_b=1)" % (x, w, bias))

    def heads(v):
        v = node("reshape(%s, shape=[%d, %d, %d, %d])" % (v, b, t, h, d))
        v = node("transpose(%s, perm=[2, 0, 1, 3])" % v)
        return node("reshape(%s, shape=[-1, %d, %d])" % (v, t, d))

    x = "x"
    for layer in range(layers):
        s = layer * 10
        q, k, v = (heads(linear(x, dm, dm, s + j)) for j in range(3))
        att = node("softmax(%s, axis=2)" % node("div(%s, temp)" % node("matmul(%s, %s, trans_b=1)" % (q, k))))
        o = node("matmul(%s, %s)" % (att, v))
        o = node("reshape(%s, shape=[%d, %d, %d, %d])" % (o, h, b, t, d))
        o = node("transpose(%s, perm=[1, 2, 0, 3])" % o)
        o = node("reshape(%s, shape=[%d, %d, -1])" % (o, b, t))
        r = node("add(%s, %s)" % (linear(o, dm, dm, s + 3), x))
        y1 = node("layer_norm(%s, one, zero, axis=-1, epsilon=1e-05)" % r)
        m = linear(node("gelu(%s)" % linear(y1, dm, dff, s + 4)), dff, dm, s + 5)
        x = node("layer_norm(%s, one, zero, axis=-1, epsilon=1e-05)" % node("add(%s, %s)" % (m, y1)))
    lines.append("output " + x)
    return "\n".join(lines) + "\n"


# ==== .onnx generators ==========================================================================
def onnx_model(nodes, inputs, outputs, inits):
    import onnx
    from onnx import helper
    g = helper.make_graph(nodes, "bench", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def onnx_ew_chain(n):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        out = "v%d" % i
        kind = i % 4
        if kind in (0, 1):
            c = "c%d" % i
            inits.append(numpy_helper.from_array(np.array(0.5 + i * 1e-6, np.float32), c))
            nodes.append(helper.make_node("Add" if kind == 0 else "Mul", [prev, c], [out], name="n%d" % i))
        elif kind == 2:
            nodes.append(helper.make_node("Tanh", [prev], [out], name="n%d" % i))
        else:
            nodes.append(helper.make_node("Sub", [prev, "x"], [out], name="n%d" % i))
        prev = out
    return onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                      [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)


def onnx_unfusable(n):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(((np.arange(64) * 37 % 17 - 8) / 64.0).astype(np.float32).reshape(8, 8), "w")
    nodes, prev = [], "x"
    for i in range(n):
        out = "v%d" % i
        if i % 2 == 0:
            nodes.append(helper.make_node("MatMul", [prev, "w"], [out], name="n%d" % i))
        else:
            nodes.append(helper.make_node("Softmax", [prev], [out], name="n%d" % i, axis=-1))
        prev = out
    return onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])],
                      [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], [w])


def onnx_shape(n):
    """Blocks of 6 nodes: the reshape-by-computed-shape pattern of exported models."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.array(1, np.int64), "idx1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array([0], np.int64), "axes0")]
    nodes, prev = [], "x"
    for blk in range(max(1, n // 6)):
        p = "b%d_" % blk
        nodes += [helper.make_node("Shape", [prev], [p + "shape"], name=p + "Shape"),
                  helper.make_node("Gather", [p + "shape", "idx1"], [p + "dim"], name=p + "Gather", axis=0),
                  helper.make_node("Unsqueeze", [p + "dim", "axes0"], [p + "dim1"], name=p + "Unsqueeze"),
                  helper.make_node("Concat", ["minus1", p + "dim1"], [p + "newshape"], name=p + "Concat", axis=0),
                  helper.make_node("Reshape", [prev, p + "newshape"], [p + "r"], name=p + "Reshape"),
                  helper.make_node("Relu", [p + "r"], [p + "y"], name=p + "Relu")]
        prev = p + "y"
    return onnx_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                      [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)


SHAPES = {
    "ew_chain": (".gir", gir_ew_chain),
    "unfusable": (".gir", gir_unfusable),
    "many_outputs": (".gir", gir_many_outputs),
    "split": (".gir", gir_split),
    "onnx_ew_chain": (".onnx", onnx_ew_chain),
    "onnx_unfusable": (".onnx", onnx_unfusable),
    "onnx_shape": (".onnx", onnx_shape),
    "transformer": (".gir", gir_transformer),
    "matmul_gelu": (".gir", gir_matmul_gelu),
}


# ==== measuring ====================================================================================
def count_nodes(path):
    if path.endswith(".onnx"):
        import onnx
        return len(onnx.load(path, load_external_data=False).graph.node)
    n = 0
    with open(path) as f:
        for line in f:
            if "=" in line.split("#")[0] and not line.startswith(("const", "input")):
                n += 1
    return n


def measure(path, timeout):
    """Runs graft bench once on the simulator; returns a dict of timings (ms) and peak RSS (MiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "r.json")
        rss_path = os.path.join(tmp, "rss")
        # /usr/bin/time forks graft itself: ru_maxrss read by this process would
        # include this Python process's own peak (Linux keeps it across exec)
        timer = ["/usr/bin/time", "-f", "%M", "-o", rss_path] if os.path.exists("/usr/bin/time") else []
        cmd = timer + [graft_bin(), "bench", path, "--device", "sim", "--mode", "eager", "--iters", "1", "--warmup", "0",
               "--repeats", "1", "--verbose", "--json", js]
        t0 = time.monotonic()
        err_path = os.path.join(tmp, "stderr")
        with open(err_path, "w") as err, open(os.devnull, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err)
            deadline = t0 + timeout
            while True:
                pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    pid, status, ru = os.wait4(proc.pid, 0)
                    return {"status": "timeout", "wall_ms": timeout * 1e3}
                time.sleep(0.02)
        wall = (time.monotonic() - t0) * 1e3
        stderr = open(err_path).read()
        rc = os.waitstatus_to_exitcode(status)
        rss_kib = ru.ru_maxrss
        if timer:
            try:
                rss_kib = int(open(rss_path).read().split()[-1])
            except (OSError, ValueError, IndexError):
                pass
        r = {"wall_ms": round(wall, 1), "peak_rss_mib": round(rss_kib / 1024, 1)}
        if rc != 0:
            r["status"] = "error rc=%d: %s" % (rc, stderr.strip().splitlines()[-1] if stderr.strip() else "")
            return r
        j = json.load(open(js))
        r["status"] = "ok"
        r["load_ms"] = j.get("load_ms")
        r["session_create_ms"] = j["session_create_ms"]
        r["compile_ms"] = j["compile_ms"]
        r["kernels"] = j["kernels_per_iter"]
        r["arena_bytes"] = j["arena_bytes"]
        phases = {}
        for line in stderr.splitlines():
            m = re.match(r"graft: (session|compile) phases \(ms\):(.*)", line)
            if m:
                toks = m.group(2).split()
                for k, v in zip(toks[::2], toks[1::2]):
                    k = PHASE_ALIASES.get(k, k)  # the pipeline's pass names
                    phases[("plan_" if m.group(1) == "compile" else "") + k] = float(v)
        r["phases_ms"] = phases
        # load + session create (verify, shapes, plan) = everything before the first run
        r["total_ms"] = round((r["load_ms"] or 0) + r["session_create_ms"], 1)
        return r


def run(args):
    results = []
    for shape in args.shapes:
        ext, gen = SHAPES[shape]
        sizes = args.layers if shape == "transformer" else args.sizes
        skip = False
        for n in sizes:
            entry = {"shape": shape, "size": n}
            if skip:
                entry["status"] = "skipped (a smaller size passed the time limit)"
                results.append(entry)
                print("%-15s %7d  skipped" % (shape, n), flush=True)
                continue
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "%s_%d%s" % (shape, n, ext))
                data = gen(n)
                with open(path, "wb" if isinstance(data, bytes) else "w") as f:
                    f.write(data)
                entry["nodes"] = count_nodes(path)
                entry.update(measure(path, args.timeout))
            results.append(entry)
            ok = entry["status"] == "ok"
            print("%-15s %7d  nodes %7d  %s  total %9.1f ms  (%.2f us/node)  rss %.0f MiB  %s" % (
                shape, n, entry["nodes"], entry["status"][:40], entry.get("total_ms", entry["wall_ms"]),
                entry.get("total_ms", entry["wall_ms"]) * 1e3 / units(entry), entry.get("peak_rss_mib", 0),
                " ".join("%s=%.0f" % kv for kv in sorted(entry.get("phases_ms", {}).items(), key=lambda kv: -kv[1])[:4])
                if ok else ""), flush=True)
            if not ok or entry.get("total_ms", 0) > args.skip_after * 1e3:
                skip = True
    return results


PHASE_ALIASES = {"predicate_if": "predicate", "fold_constants": "fold", "plan_memory": "memplan"}
PHASE_COLS = ["load", "verify", "shapes", "plan_fold", "plan_lower", "plan_fuse", "plan_memplan", "plan_partition",
              "plan_prepare"]


def units(r):
    """What a row's time is divided by: nodes, or outputs for the one-node split shape."""
    return max(1, r["size"] if r["shape"] == "split" else r.get("nodes", 1))


def markdown(label, meta, results):
    out = ["## %s" % label, "", "%s; graft %s; %s" % (meta["date"], meta["commit"], meta["machine"]), "",
           "| shape | N | nodes | total ms | µs/node¹ | " + " | ".join(c.replace("plan_", "") for c in PHASE_COLS) +
           " | peak RSS MiB | kernels |",
           "|---|---:|---:|---:|---:|" + "---:|" * len(PHASE_COLS) + "---:|---:|"]
    for r in results:
        if r.get("status") != "ok":
            out.append("| %s | %d | %s | %s |" % (r["shape"], r["size"], r.get("nodes", ""), r["status"]) +
                       " |" * (len(PHASE_COLS) + 3))
            continue
        ph = dict(r["phases_ms"])
        ph["load"] = r["load_ms"]
        cells = ["%.1f" % ph[c] if c in ph and ph[c] is not None else "" for c in PHASE_COLS]
        out.append("| %s | %d | %d | %.1f | %.2f | %s | %.0f | %d |" % (
            r["shape"], r["size"], r["nodes"], r["total_ms"], r["total_ms"] * 1e3 / units(r),
            " | ".join(cells), r["peak_rss_mib"], r["kernels"]))
    return "\n".join(out) + "\n"


def comparison(data):
    """One table of total compile time per (shape, N) across every label, oldest first."""
    labels = list(data)
    rows = {}
    for label in labels:
        for r in data[label]["results"]:
            rows.setdefault((r["shape"], r["size"]), {})[label] = r
    out = ["## total compile time (ms) by label", "",
           "| shape | N | nodes | " + " | ".join(labels) + (" | speedup |" if len(labels) > 1 else ""),
           "|---|---:|---:|" + "---:|" * len(labels) + ("---:|" if len(labels) > 1 else "")]

    def cell(r):
        if r is None:
            return ""
        st = r.get("status", "")
        if st == "timeout":
            return "timeout (> %.0f s)" % (r["wall_ms"] / 1e3)
        if st.startswith("skipped"):
            return "skipped²"
        if st != "ok":
            return st
        return "%.1f" % r["total_ms"]

    for (shape, size), by in rows.items():
        nodes = next((r.get("nodes") for r in by.values() if r.get("nodes")), "")
        line = "| %s | %d | %s | " % (shape, size, nodes) + " | ".join(cell(by.get(l)) for l in labels) + " |"
        if len(labels) > 1:
            a, b = by.get(labels[0]), by.get(labels[-1])
            sp = ""
            if a and b and b.get("status") == "ok":
                if a.get("status") == "ok":
                    x = a["total_ms"] / max(b["total_ms"], 1e-3)
                    sp = ("%.1f×" if x < 10 else "%.0f×") % x
                elif a.get("status") == "timeout":
                    sp = "> %.0f×" % (a["wall_ms"] / max(b["total_ms"], 1e-3))
            line += " %s |" % sp
        out.append(line)
    return "\n".join(out) + "\n"


def write_results(out, data):
    with open(out + ".json", "w") as f:
        json.dump(data, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write("# graft compile time against graph size\n\nProduced by `python3 bench/compile_time.py` "
                "(see its docstring for the shapes). total = load (parse or ONNX import) + session create "
                "(verify, shape inference, the plan's passes, kernel preparation on the simulator); "
                "phase columns in ms. Measured on a machine shared with other jobs (2 cores; the `before` run "
                "under a load average near 12, the `after` run near 4): read the growth with N, not the ratios at "
                "small N.\n\n")
        f.write(comparison(data) + "\n")
        f.write("¹ per node; per output for `split` (one node with N outputs). N is the number of layers "
                "for `transformer`.  \n² not run: a smaller N of the shape took longer than --skip-after "
                "(60 s in the runs here) or timed out.\n\n")
        for label, d in data.items():
            f.write(markdown(label, d["meta"], d["results"]) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of: " + ", ".join(SHAPES))
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="N values")
    ap.add_argument("--layers", default=",".join(map(str, DEFAULT_LAYERS)), help="L values of the transformer shape")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per compile before it counts as a timeout")
    ap.add_argument("--skip-after", type=float, default=120,
                    help="skip larger sizes of a shape once one takes longer than this many seconds")
    ap.add_argument("--label", default="run", help="name of this run in the results (e.g. before, after)")
    ap.add_argument("--out", default=None, help="results path without extension (default bench/compile-time/<date>-cpu)")
    ap.add_argument("--md-only", action="store_true", help="rewrite <out>.md from <out>.json without running")
    args = ap.parse_args()
    args.shapes = [s for s in args.shapes.split(",") if s]
    for s in args.shapes:
        if s not in SHAPES:
            ap.error("unknown shape '%s'" % s)
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    args.layers = [int(x) for x in args.layers.split(",") if x]
    date = datetime.date.today().isoformat()
    out = args.out or os.path.join(ROOT, "bench", "compile-time", date + "-cpu")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.strip()
    meta = {"date": date, "commit": commit + ("+dirty" if dirty else ""),
            "machine": "%d CPUs (%s), simulator device" % (os.cpu_count(), os.uname().machine)}
    data = {}
    if os.path.exists(out + ".json"):
        data = json.load(open(out + ".json"))
    if not args.md_only:
        data[args.label] = {"meta": meta, "results": run(args)}
    write_results(out, data)
    print("wrote %s.json and %s.md" % (os.path.relpath(out), os.path.relpath(out)))


if __name__ == "__main__":
    main()
