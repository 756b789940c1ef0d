"""--precision bf16|f16: an f32 model run in half precision (passes/precision.c,
docs/precision.md), and `graft bench --profile`'s kernel classes.

Every case runs the same model twice on the simulator, as exported (f32) and with
--precision, and compares ||out - ref|| / ||ref|| with the tolerance documented per op
in docs/precision.md (TOL below is that table). The converted IR is inspected through
`graft dump`: inputs and outputs keep their dtypes, the sensitive ops stay f32, the
matmuls run in half, and the fused attention is used.

Needs numpy and the graft CLI; the ONNX cases need a build with ONNX import.
"""
import glob
import json
import os
import re

import numpy as np
import pytest

from gir_builder import Graph, rel_err, run_graft, graft_bin, ROOT

needs_graft = pytest.mark.skipif(not os.path.exists(graft_bin()), reason="graft CLI not built")
DYN = os.path.join(ROOT, "tests", "data", "onnx", "dyn")

# docs/precision.md, "Tolerances": ||out - ref|| / ||ref|| against the f32 model
TOL = {
    # one op whose inputs are f32 graph inputs
    "matmul": {"bf16": 6e-3, "f16": 8e-4},
    "matmul_bias_gelu": {"bf16": 6e-3, "f16": 8e-4},
    "conv": {"bf16": 6e-3, "f16": 8e-4},
    "attention": {"bf16": 6e-3, "f16": 8e-4},
    "matmul_layer_norm": {"bf16": 6e-3, "f16": 8e-4},
    "matmul_softmax": {"bf16": 1e-2, "f16": 1.5e-3},
    "matmul_exp_reduce_sum": {"bf16": 4e-3, "f16": 5e-4},
    "sensitive_f32": {"bf16": 0.0, "f16": 0.0},   # softmax, layer_norm, exp, ... of f32 inputs: unchanged
    "elementwise_f32": {"bf16": 0.0, "f16": 0.0},  # no matmul anywhere: nothing converted
    # whole models (tests/data/onnx/dyn, every binding)
    "model": {"bf16": 1.5e-2, "f16": 2e-3},
}

RNG = np.random.default_rng(7)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def run_both(g, tmp_path, prec):
    ref = g.run(tmp_path, stem="f32")
    got = g.run(tmp_path, stem=prec, extra=["--precision", prec])
    return ref, got


def dump_after_precision(path, *extra):
    r = run_graft("dump", path, *extra)
    assert r.returncode == 0, r.stderr
    m = re.search(r"== after precision ==\n(.*?)\n== after", r.stdout, re.S)
    assert m, "no precision pass in the dump:\n" + r.stdout[:2000]
    return m.group(1)


def out_types(ir):
    """name -> dtype of every node output line `name = op(...)  # dtype[...]` of a dump."""
    types = {}
    for line in ir.splitlines():
        m = re.match(r"(?:\[[^\]]*\] )?\"?([^\s\"]+)\"? = (\w+)\(.*#\s*(\w+)\[", line)
        if m:
            types[m.group(1)] = (m.group(2), m.group(3))
    return types


# ---- ops ---------------------------------------------------------------------------------------
def g_matmul():
    g = Graph()
    y = g.node("matmul", g.input(rand(64, 128)), g.input(rand(128, 96, scale=0.1)))
    g.output(y)
    return g


def g_matmul_bias_gelu():
    g = Graph()
    y = g.node("matmul", g.input(rand(64, 128)), g.input(rand(96, 128, scale=0.1)), g.input(rand(96)), trans_b=1)
    g.output(g.node("gelu", y))
    return g


def g_conv():
    g = Graph()
    g.output(g.node("conv", g.input(rand(2, 4, 12, 12)), g.input(rand(8, 4, 3, 3, scale=0.2)), pads=[1, 1, 1, 1]))
    return g


def g_attention():
    """The exported pattern: matmul(q, kT) * scale + mask, softmax, matmul(., v)."""
    g = Graph()
    q, kt, v = g.input(rand(2, 4, 16, 32)), g.input(rand(2, 4, 32, 16)), g.input(rand(2, 4, 16, 32))
    s = g.node("matmul", q, kt)
    s = g.node("mul", s, g.const(np.float32(0.17677669)))
    mask = np.triu(np.full((16, 16), -1e4, np.float32), 1)
    s = g.node("add", s, g.input(mask))
    g.output(g.node("matmul", g.node("softmax", s, axis=-1), v))
    return g


def g_matmul_layer_norm():
    g = Graph()
    y = g.node("matmul", g.input(rand(64, 128)), g.input(rand(128, 96, scale=0.1)))
    g.output(g.node("layer_norm", y, g.input(rand(96)), g.input(rand(96)), axis=-1))
    return g


def g_matmul_softmax():
    g = Graph()
    y = g.node("matmul", g.input(rand(64, 128)), g.input(rand(128, 96, scale=0.1)))
    g.output(g.node("softmax", y, axis=-1))
    return g


def g_matmul_exp_reduce_sum():
    g = Graph()
    y = g.node("matmul", g.input(rand(64, 128)), g.input(rand(128, 96, scale=0.1)))
    g.output(g.node("reduce_sum", g.node("exp", y), axes=[-1], keepdims=0))
    return g


def g_sensitive_f32():
    g = Graph()
    x = g.input(rand(32, 64))
    a = g.node("layer_norm", x, g.input(rand(64)), g.input(rand(64)), axis=-1)
    b = g.node("softmax", a, axis=-1)
    c = g.node("exp", g.node("log", g.node("add", g.node("abs", x), g.const(np.float32(1.0)))))
    g.output(b, g.node("reduce_mean", g.node("erf", c), axes=[1], keepdims=1))
    return g


def g_elementwise_f32():
    g = Graph()
    x, y = g.input(rand(256)), g.input(rand(256))
    g.output(g.node("tanh", g.node("add", g.node("mul", x, y), g.const(np.float32(0.5)))))
    return g


OPS = [n[2:] for n in dir() if n.startswith("g_")]


@needs_graft
@pytest.mark.parametrize("prec", ["bf16", "f16"])
@pytest.mark.parametrize("case", sorted(TOL.keys() - {"model"}))
def test_op_tolerance(tmp_path, case, prec):
    g = globals()["g_" + case]()
    ref, got = run_both(g, tmp_path, prec)
    for r, o in zip(ref, got):
        assert o.dtype == r.dtype == np.float32  # outputs keep their declared dtype
        err = rel_err(o, r)
        assert err <= TOL[case][prec], "%s %s: rel err %.3g > %.3g" % (case, prec, err, TOL[case][prec])
        if TOL[case][prec] > 0:
            assert err > 0, "%s %s: bit-identical to f32: nothing ran in %s" % (case, prec, prec)


@needs_graft
def test_converted_ir(tmp_path):
    """matmuls bf16, softmax / layer_norm / exp / reduce_sum f32, inputs and outputs f32."""
    g = Graph()
    x = g.input(rand(8, 32))
    h = g.node("matmul", x, g.input(rand(32, 32, scale=0.1)))
    n = g.node("layer_norm", h, g.input(rand(32)), g.input(rand(32)), axis=-1)
    s = g.node("softmax", g.node("matmul", n, g.input(rand(32, 32, scale=0.1))), axis=-1)
    e = g.node("reduce_sum", g.node("exp", s), axes=[-1], keepdims=1)
    r = g.node("relu", g.node("add", h, g.const(np.full(32, 0.5, np.float32))))
    g.output(s, e, r)
    path, _ = g.write(tmp_path)
    ir = dump_after_precision(path, "--precision", "bf16")
    t = out_types(ir)
    assert t[h] == ("matmul", "bf16")
    assert t[n] == ("layer_norm", "f32") and t[s] == ("softmax", "f32") and t[e] == ("reduce_sum", "f32")
    # relu(h + c) follows its half input; the constant became a bf16 copy
    assert re.search(r"= add\(%s, \w+\.bf16\)  # bf16" % h, ir), ir
    assert re.search(r"^input %s: f32\[8, 32\]" % x, ir, re.M)
    # every output is f32 again, under its own name
    for name in (s, e, r):
        assert t[name][1] == "f32", (name, t[name])
    # the cast back keeps r's name: its half value is r.bf16
    assert t[r] == ("cast", "f32") and t[r + ".bf16"] == ("relu", "bf16")
    # and the run agrees
    (ref_s, ref_e, ref_r) = g.run(tmp_path, stem="a")
    (got_s, got_e, got_r) = g.run(tmp_path, stem="b", extra=["--precision", "bf16"])
    assert rel_err(got_r, ref_r) < 1e-2 and rel_err(got_s, ref_s) < 1e-2


@needs_graft
def test_bad_precision(tmp_path):
    g = g_matmul()
    path, args = g.write(tmp_path)
    for cmd in ("run", "bench", "explain", "dump"):
        r = run_graft(cmd, path, "--precision", "int8", *(args if cmd != "dump" else []))
        assert r.returncode == 2, (cmd, r.stderr)
        assert "--precision: unknown precision 'int8' (expected bf16 or f16)" in r.stderr, r.stderr


@needs_graft
def test_control_flow_refused(tmp_path):
    path = tmp_path / "if.gir"
    path.write_text("graft 1\ninput c: bool[]\ninput x: f32[4]\n"
                    "y = if(c, then_branch={ t = neg(x)\n output t }, else_branch={ e = abs(x)\n output e })\n"
                    "output y\n")
    r = run_graft("run", path, "--precision", "bf16", "--device", "sim", "--output-dir", tmp_path / "o")
    assert r.returncode == 1, r.stderr
    assert "control flow" in r.stderr and "bf16" in r.stderr, r.stderr


@needs_graft
@pytest.mark.parametrize("prec", ["bf16", "f16"])
@pytest.mark.parametrize("example", ["mlp.gir", "transformer.gir", "eos.gir", "cnn.onnx"])
def test_examples(tmp_path, example, prec):
    """The bundled examples: within the model tolerance of their f32 run (eos.gir has no
    matmul: nothing is converted, bit-identical)."""
    path = os.path.join(ROOT, "examples", example)
    outs = {}
    half = prec
    for prec in (None, half):
        d = tmp_path / (prec or "f32")
        args = ["run", path, "--device", "sim", "--output-dir", d] + (["--precision", prec] if prec else [])
        args += ["--dim", "N=2"] if example.endswith(".onnx") else []
        r = run_graft(*args)
        if r.returncode != 0 and "onnx" in r.stderr.lower() and "not" in r.stderr.lower():
            pytest.skip("no ONNX import in this build")
        assert r.returncode == 0, r.stderr
        outs[prec] = {os.path.basename(f): np.load(f) for f in glob.glob(str(d / "*.npy"))}
    assert outs[None].keys() == outs[half].keys() and outs[None]
    for k in outs[None]:
        assert outs[half][k].dtype == outs[None][k].dtype
        err = rel_err(outs[half][k], outs[None][k])
        assert err <= TOL["model"][half], (k, err)
        assert (err == 0) == (example == "eos.gir"), (k, err)


# ---- the dynamic exports -------------------------------------------------------------------------
CASES = ["gpt2_dynamo", "bert_dynamo", "llama_dynamo"]
BINDINGS = ["b1_s1", "b3_s7", "b1_s64"]


def dyn_run(case, binding, out_dir, *extra):
    d = os.path.join(DYN, case, binding)
    args = ["run", os.path.join(DYN, case, "model.onnx"), "--device", "sim", "--output-dir", out_dir, *extra]
    for f in sorted(os.listdir(d)):
        if f != "last_hidden_state.npy":
            args += ["--input", "%s=%s" % (f[:-4], os.path.join(d, f))]
    r = run_graft(*args)
    if r.returncode != 0 and "onnx" in r.stderr.lower() and "not" in r.stderr.lower():
        pytest.skip("no ONNX import in this build")
    assert r.returncode == 0, r.stderr
    return np.load(os.path.join(out_dir, "last_hidden_state.npy"))


@needs_graft
@pytest.mark.parametrize("prec", ["bf16", "f16"])
@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("case", CASES)
def test_dynamic_models(tmp_path, case, binding, prec):
    if not os.path.exists(os.path.join(DYN, case, binding)):
        pytest.skip("fixture missing")
    ref = dyn_run(case, binding, tmp_path / "f32")
    got = dyn_run(case, binding, tmp_path / prec, "--precision", prec)
    assert got.dtype == np.float32 and got.shape == ref.shape
    err = rel_err(got, ref)
    assert 0 < err <= TOL["model"][prec], "%s %s %s: rel err %.3g" % (case, binding, prec, err)


@needs_graft
@pytest.mark.parametrize("case", CASES)
def test_dynamic_models_fused_attention(case):
    """bf16 uses the fused attention: the dump of the symbolic model and explain of a binding show it."""
    model = os.path.join(DYN, case, "model.onnx")
    r = run_graft("explain", model, "--dim", "batch=2", "--dim", "seq=9", "--precision", "bf16", "--device", "sim")
    if r.returncode != 0 and "onnx" in r.stderr.lower() and "not" in r.stderr.lower():
        pytest.skip("no ONNX import in this build")
    assert r.returncode == 0, r.stderr
    assert re.search(r"precision: bf16 \(converted at load: \d+ weights", r.stdout), r.stdout[:500]
    attn = re.findall(r"\] attn .* bf16", r.stdout)
    assert len(attn) == 2, r.stdout  # two layers
    assert "2 attentions fused first" in r.stdout
    matmuls = re.findall(r"\] matmul .*? (\w+)(?: \+bias)?  \(from", r.stdout)
    assert matmuls and all(t == "bf16" for t in matmuls[:4]), matmuls


# ---- bench --profile: kernel classes -------------------------------------------------------------
CLASSES = {"matmul", "attention", "elementwise", "norm/reduction", "copy/movement", "other"}


@needs_graft
def test_profile_classes(tmp_path):
    model = os.path.join(DYN, "gpt2_dynamo", "model.onnx")
    js = tmp_path / "b.json"
    r = run_graft("bench", model, "--dim", "batch=2", "--dim", "seq=16", "--precision", "bf16", "--profile",
                  "--device", "sim", "--iters", "1", "--warmup", "1", "--json", js)
    if r.returncode != 0 and "onnx" in r.stderr.lower() and "not" in r.stderr.lower():
        pytest.skip("no ONNX import in this build")
    assert r.returncode == 0, r.stderr
    d = json.loads(js.read_text())
    cls = d["kernel_classes"]
    assert {c["class"] for c in cls} == CLASSES
    times = [c["ms"] for c in cls]
    assert times == sorted(times, reverse=True)  # slowest first
    assert abs(sum(times) - d["kernel_sum_ms"]) <= 1e-5 * max(1.0, d["kernel_sum_ms"])
    assert abs(sum(c["share"] for c in cls) - 1) < 1e-4
    by = {c["class"]: c for c in cls}
    # GPT-2: 2 layers of 4 linear matmuls, 2 fused attentions, 5 layer norms, casts in elementwise
    assert by["matmul"]["kernels"] == 8 and by["attention"]["kernels"] == 2
    assert by["norm/reduction"]["kernels"] >= 5 and by["elementwise"]["kernels"] >= 1 and by["copy/movement"]["kernels"] >= 1
    assert sum(c["kernels"] for c in cls) == d["kernels_per_iter"]
    # the table: one line per class with kernels, in the same order, then the per-kernel list with its class
    m = re.search(r"device time per kernel class \(slowest first\), sum ([\d.]+) us:\n  class.*\n((?:  \S.*\n)+?)per-kernel",
                  r.stdout)
    assert m, r.stdout
    rows = [re.split(r"\s{2,}", line.strip()) for line in m.group(2).splitlines()]
    assert [row[0] for row in rows] == [c["class"] for c in cls if c["kernels"]]
    assert re.search(r"\[\s*\d+\] matmul\s+k\d+_matmul", r.stdout)


@needs_graft
def test_profile_classes_unfused(tmp_path):
    """Unfused f32 attention: no attention class time; softmax counts as norm/reduction."""
    js = tmp_path / "b.json"
    g = g_attention()
    path, args = g.write(tmp_path)
    r = run_graft("bench", path, *args, "--profile", "--device", "sim", "--iters", "1", "--json", js)
    assert r.returncode == 0, r.stderr
    by = {c["class"]: c for c in json.loads(js.read_text())["kernel_classes"]}
    assert by["attention"]["kernels"] == 0 and by["matmul"]["kernels"] == 2 and by["norm/reduction"]["kernels"] >= 1
    r = run_graft("bench", path, *args, "--profile", "--device", "sim", "--iters", "1", "--json", js, "--precision", "bf16")
    assert r.returncode == 0, r.stderr
    by = {c["class"]: c for c in json.loads(js.read_text())["kernel_classes"]}
    assert by["attention"]["kernels"] == 1 and by["matmul"]["kernels"] == 0
