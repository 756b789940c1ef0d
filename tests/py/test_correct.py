"""Hostile inputs that once crashed graft or gave a silently wrong result
(issue 17), through `graft run` on the simulator, against numpy and onnx's
reference evaluator:

- slices with extreme starts, ends and steps (INT64_MIN .. INT64_MAX), in
  .gir and in ONNX models (run time and import-time folding);
- a data-dependent `if` whose untaken branch gathers out of range;
- tensors too large for int64 arithmetic, reached every way (fill, reshape,
  expand, range, concat, unsqueeze + expand, inputs, constants): a clear
  error, exit 1, never a crash, a hang or a bogus .npy;
- attributes outside an op's schema;
- @host constants.
"""
import os

import numpy as np
import pytest

from gir_builder import Graph, GraftError, assert_exact, run_graft

I64_MIN, I64_MAX = -(2 ** 63), 2 ** 63 - 1
BOUNDS = [I64_MIN, I64_MIN + 1, -7, -6, -5, -4, -1, 0, 1, 4, 5, 6, I64_MAX - 1, I64_MAX]
STEPS = [I64_MIN, I64_MIN + 1, -6, -5, -2, -1, 1, 2, 5, 6, I64_MAX - 1, I64_MAX]
LIMIT = 2 ** 40  # GR_MAX_NUMEL


# ==== slices ==========================================================================================
@pytest.mark.parametrize("step", STEPS)
def test_slice_extremes_1d(tmp_path, step):
    """Every start x end of BOUNDS for one step, on a 5-element vector: numpy's x[s:e:step]."""
    x = np.arange(10, 15, dtype=np.float32)
    g = Graph()
    xi = g.input(x)
    outs, refs = [], []
    for s in BOUNDS:
        for e in BOUNDS:
            outs.append(g.node("slice", xi, starts=[s], ends=[e], steps=[step]))
            refs.append(x[s:e:step])
    g.output(*outs)
    got = g.run(tmp_path)
    for (s, e), o, r in zip([(s, e) for s in BOUNDS for e in BOUNDS], got, refs):
        assert_exact(o, r, "x[%d:%d:%d]" % (s, e, step))


def test_slice_extremes_2d_and_empty(tmp_path):
    """Two axes at once (negative axes), and a zero-size dim."""
    x = np.arange(30, dtype=np.int64).reshape(5, 6)
    z = np.zeros((0, 3), dtype=np.float32)
    g = Graph()
    xi, zi = g.input(x), g.input(z)
    outs, refs = [], []
    for s0, e0, st0 in [(I64_MAX, I64_MIN, -2), (0, I64_MAX, I64_MAX), (-1, I64_MIN, I64_MIN), (I64_MIN, 3, 1)]:
        for s1, e1, st1 in [(I64_MIN, I64_MAX, 5), (5, -7, -1), (2, 2, I64_MAX), (-6, I64_MAX, I64_MIN + 1)]:
            outs.append(g.node("slice", xi, starts=[s1, s0], ends=[e1, e0], axes=[-1, 0], steps=[st1, st0]))
            refs.append(x[s0:e0:st0, s1:e1:st1])
    for s, e, st in [(0, I64_MAX, 1), (I64_MAX, I64_MIN, -1), (I64_MIN, I64_MAX, I64_MAX), (-1, -2, I64_MIN)]:
        outs.append(g.node("slice", zi, starts=[s], ends=[e], steps=[st]))
        refs.append(z[s:e:st])
    g.output(*outs)
    for o, r in zip(g.run(tmp_path), refs):
        assert_exact(o, r, "2-D / empty slice")


def _onnx_slices(tmp_path, fold):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    x = np.arange(10, 15, dtype=np.float32)
    cases = [(s, e, st) for s in BOUNDS[::2] for e in BOUNDS[1::2] for st in STEPS[::3]]
    nodes, inits, outputs = [], [], []
    if fold:  # the data is an initializer: the importer folds each slice itself
        inits.append(numpy_helper.from_array(x, "x"))
    for k, (s, e, st) in enumerate(cases):
        for nm, v in (("s", s), ("e", e), ("st", st)):
            inits.append(numpy_helper.from_array(np.array([v], dtype=np.int64), "%s%d" % (nm, k)))
        nodes.append(helper.make_node("Slice", ["x", "s%d" % k, "e%d" % k, "", "st%d" % k], ["y%d" % k]))
        outputs.append(helper.make_tensor_value_info("y%d" % k, TensorProto.FLOAT, None))
    inputs = [] if fold else [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])]
    graph = helper.make_graph(nodes, "slices", inputs, outputs, initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    path = os.path.join(str(tmp_path), "slices.onnx")
    onnx.save(m, path)
    args = ["run", path, "--device", "sim", "--output-dir", os.path.join(str(tmp_path), "out")]
    feeds = {}
    if not fold:
        np.save(os.path.join(str(tmp_path), "x.npy"), x)
        args += ["--input", "x=" + os.path.join(str(tmp_path), "x.npy")]
        feeds["x"] = x
    proc = run_graft(*args)
    assert proc.returncode == 0, proc.stderr
    want = ReferenceEvaluator(m).run(None, feeds)
    for k, ref in enumerate(want):
        got = np.load(os.path.join(str(tmp_path), "out", "y%d.npy" % k))
        assert_exact(got, np.asarray(ref), "Slice%s" % (cases[k],))


def test_slice_extremes_onnx(tmp_path):
    _onnx_slices(tmp_path, fold=False)


def test_slice_extremes_onnx_folded(tmp_path):
    _onnx_slices(tmp_path, fold=True)


# ==== if: the untaken branch cannot fail the run ==========================================================
IF_TEXT = """y = if({c}, then_branch={{
  g = gather({x}, {i})
  r = relu(g)
  output r
}}, else_branch={{
  h = slice({x}, starts=[1], ends=[3])
  output h
}})"""


def _if_graph(x, i, c):
    g = Graph()
    xi, ii, ci = g.input(x), g.input(i), g.input(np.array(c))
    g.lines.append(IF_TEXT.format(c=ci, x=xi, i=ii))
    g.output("y")
    return g


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_if_untaken_branch_gather_out_of_range(tmp_path, mode):
    x = np.array([1, -2, 3, -4], dtype=np.float32)
    bad, good = np.array([9, -1], dtype=np.int64), np.array([2, -1], dtype=np.int64)
    (out,) = _if_graph(x, bad, False).run(tmp_path, mode=mode, stem="untaken")
    assert_exact(out, x[1:3], "else taken, then gathers index 9")
    (out,) = _if_graph(x, good, True).run(tmp_path, mode=mode, stem="taken")
    assert_exact(out, np.maximum(x[[2, -1]], 0), "then taken")
    with pytest.raises(GraftError) as e:
        _if_graph(x, bad, True).run(tmp_path, mode=mode, stem="taken_bad")
    assert e.value.returncode == 1
    # the user's node, with the if it came from, at the gather's line
    assert "node 'y.then.g' (gather) at" in e.value.stderr and "index 9 out of range [-4, 4)" in e.value.stderr


# ==== sizes ================================================================================================
TOO_LARGE = [
    ("y = fill(shape=[4611686018427387904], value=1.0)", "node 'y' (fill)"),
    ("y = random_uniform(shape=[1099511627777])", "node 'y' (random_uniform)"),
    ("input x: f32[4]\ny = reshape(x, shape=[4611686018427387905, 4])", "node 'y' (reshape)"),
    ("input x: f32[4]\ny = reshape(x, shape=[1, -1, 4611686018427387905, 4])", "node 'y' (reshape)"),
    ("input x: f32[1,1]\ny = expand(x, shape=[4294967296, 4294967297])", "node 'y' (expand)"),
    ("y = range(start=0.0, limit=2e12, delta=1.0)", "node 'y' (range)"),
    ("input x: f32[1048576,1]\na = expand(x, shape=[1048576, 1048576])\ny = concat(a, a, a, axis=1)", "node 'y' (concat)"),
    ("input x: f32[1048576,1]\na = expand(x, shape=[1048576, 1048576])\nb = unsqueeze(a, axes=[0])\n"
     "y = expand(b, shape=[3, 1, 1])", "node 'y' (expand)"),
    ("input x: f32[65536,65536,257]", "shape holds more than"),
    ("input x: f32[0,9223372036854775807,2]", "shape holds more than"),
    ("const k: f32[4294967296, 4294967296] = [1]", "shape holds more than"),
]


@pytest.mark.parametrize("body,needle", TOO_LARGE)
def test_too_large_is_a_clear_error(tmp_path, body, needle):
    gir = os.path.join(str(tmp_path), "big.gir")
    outs = [ln.split("=")[0].strip() for ln in body.split("\n") if "=" in ln and not ln.startswith("const")]
    out = outs[-1] if outs else ("x" if body.startswith("input") else "k")
    with open(gir, "w") as f:
        f.write("graft 1\n%s\noutput %s\n" % (body, out))
    out_dir = os.path.join(str(tmp_path), "out")
    proc = run_graft("run", gir, "--device", "sim", "--output-dir", out_dir, timeout=120)
    assert proc.returncode == 1, "exit %d: %s" % (proc.returncode, proc.stderr)
    assert needle in proc.stderr and "more than %d elements" % LIMIT in proc.stderr, proc.stderr
    assert not os.path.exists(out_dir) or not os.listdir(out_dir)


# ==== attributes ==============================================================================================
BAD_ATTRS = [
    ("reduce_sum(x, axis=[1])", "unknown attribute 'axis' (reduce_sum takes: axes, keepdims)"),
    ("reduce_max(x, axes=[1], keepdim=0)", "unknown attribute 'keepdim' (reduce_max takes: axes, keepdims)"),
    ("softmax(x, axes=[0])", "unknown attribute 'axes' (softmax takes: axis)"),
    ("transpose(x, permutation=[1, 0])", "unknown attribute 'permutation' (transpose takes: perm)"),
    ("gelu(x, approx=\"tanh\")", "unknown attribute 'approx' (gelu takes: approximate)"),
    ("exp(x, alpha=1.0)", "unknown attribute 'alpha' (exp takes no attributes)"),
    ("reduce_sum(x, keepdims=\"no\")", "attribute 'keepdims' must be an int, got string"),
    ("cast(x, to=[1])", "attribute 'to' must be a dtype name"),
]


@pytest.mark.parametrize("expr,needle", BAD_ATTRS)
def test_unknown_attribute_is_refused(tmp_path, expr, needle):
    g = Graph()
    g.input(np.ones((2, 3), np.float32), name="x")
    g.lines.append("y = " + expr)
    g.output("y")
    with pytest.raises(GraftError) as e:
        g.run(tmp_path)
    assert e.value.returncode == 1 and "node 'y' (" in e.value.stderr and needle in e.value.stderr, e.value.stderr


def test_attributes_that_are_right_still_work(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = Graph()
    xi = g.input(x)
    a = g.node("reduce_sum", xi, axes=[1], keepdims=0)
    b = g.node("reduce_max", xi, axes=1)  # an int where a list is wanted
    c = g.node("fill", shape=[2], value=3, dtype="i32")
    g.output(a, b, c)
    ra, rb, rc = g.run(tmp_path)
    assert_exact(ra, x.sum(axis=1), "reduce_sum")
    assert_exact(rb, x.max(axis=1, keepdims=True), "reduce_max")
    assert_exact(rc, np.full(2, 3, np.int32), "fill")


# ==== @host constants ==========================================================================================
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_host_constant(tmp_path, mode):
    x = np.array([1.0, -1.0, 0.5], dtype=np.float32)
    g = Graph()
    xi = g.input(x)
    g.lines.append("const t: f32[] @host = [2]")
    g.lines.append("const v: f32[3] @host = [1, 2, 3]")
    y = g.node("mul", xi, "t")
    z = g.node("add", y, "v")
    g.output(z)
    (out,) = g.run(tmp_path, mode=mode)
    assert_exact(out, x * 2 + np.array([1, 2, 3], np.float32), "@host constants")
