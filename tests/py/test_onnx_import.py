"""End-to-end tests of the ONNX frontend through the graft CLI.

For each supported op a small model is built with onnx.helper, saved in a tmp
dir, imported by `graft dump` and run by `graft run --device sim`; outputs are
compared with onnx's own reference evaluator. Needs the `onnx`, `numpy` and
`pytest` pip packages and a built CLI: $GRAFT_BIN, else build/bin/graft (the
whole module is skipped, saying so, when neither exists).
"""
import os
import re
import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _graft_bin():
    env = os.environ.get("GRAFT_BIN")
    if env:
        return env
    for d in ("build", "build-onnx"):
        p = os.path.join(ROOT, d, "bin", "graft")
        if os.path.exists(p):
            return p
    return os.path.join(ROOT, "build", "bin", "graft")


GRAFT = _graft_bin()
# the device run_model uses: the simulator, or cuda on a GPU machine (GRAFT_TEST_DEVICE=cuda)
DEVICE = os.environ.get("GRAFT_TEST_DEVICE", "sim")
pytestmark = pytest.mark.skipif(not os.path.exists(GRAFT),
                                reason=f"graft CLI not built ({GRAFT} missing): build the graft_cli target first")

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
NP = {F: np.float32, I64: np.int64, B: np.bool_, TensorProto.INT32: np.int32, TensorProto.DOUBLE: np.float64}


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def make_model(nodes, inputs, outputs, inits=(), opset=18):
    """inputs / outputs: (name, onnx dtype, shape) triples."""
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def graft(*args, check=True):
    r = subprocess.run([GRAFT, *args], capture_output=True, text=True, timeout=120)
    if check:
        assert r.returncode == 0, f"graft {' '.join(args)} failed ({r.returncode}):\n{r.stderr}{r.stdout}"
    return r


def run_model(tmp_path, m, feeds, rtol=1e-4, atol=1e-5):
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    symbolic = any(d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim)
    if not symbolic:  # `graft dump` compiles for one concrete shape
        graft("dump", str(path))
    args = ["run", str(path), "--output-dir", str(tmp_path / "out"), "--device", DEVICE]
    for name, arr in feeds.items():
        f = tmp_path / f"in_{sanitize(name)}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    graft(*args)
    want = ReferenceEvaluator(m).run(None, feeds)
    for out, ref in zip(m.graph.output, want):
        got = np.load(tmp_path / "out" / f"{sanitize(out.name)}.npy")
        ref = np.asarray(ref)
        assert got.shape == ref.shape, f"{out.name}: shape {got.shape} != {ref.shape}"
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=out.name)
        else:
            np.testing.assert_array_equal(got, ref, err_msg=out.name)


rng = np.random.default_rng(1)


def rand(*shape, pos=False):
    a = rng.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.1 if pos else a


# ---- unary and binary elementwise ----------------------------------------------------
UNARY = ["Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Tanh", "Erf", "Sigmoid", "Relu", "Selu", "Identity"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(tmp_path, op):
    pos = op in ("Sqrt", "Log", "Reciprocal")
    m = make_model([helper.make_node(op, ["x"], ["y"])], [("x", F, [3, 4])], [("y", F, [3, 4])])
    run_model(tmp_path, m, {"x": rand(3, 4, pos=pos)})


def test_gelu(tmp_path):
    for approx in ("none", "tanh"):
        m = make_model([helper.make_node("Gelu", ["x"], ["y"], approximate=approx)], [("x", F, [8])], [("y", F, [8])],
                       opset=20)
        run_model(tmp_path, m, {"x": rand(8)})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow"])
def test_binary_broadcast(tmp_path, op):
    m = make_model([helper.make_node(op, ["a", "b"], ["y"])], [("a", F, [2, 3, 4]), ("b", F, [3, 1])],
                   [("y", F, [2, 3, 4])])
    run_model(tmp_path, m, {"a": rand(2, 3, 4, pos=op == "Pow"), "b": rand(3, 1, pos=op in ("Div", "Pow"))})


def test_pow_int_exponent_and_constant(tmp_path):
    e = numpy_helper.from_array(np.array(3, np.int64), "e")
    m = make_model([helper.make_node("Pow", ["x", "e"], ["y"])], [("x", F, [5])], [("y", F, [5])], [e])
    run_model(tmp_path, m, {"x": rand(5)})


@pytest.mark.parametrize("op", ["Min", "Max"])
def test_variadic(tmp_path, op):
    m = make_model([helper.make_node(op, ["a", "b", "c"], ["y"])], [("a", F, [4]), ("b", F, [4]), ("c", F, [1])],
                   [("y", F, [4])])
    run_model(tmp_path, m, {"a": rand(4), "b": rand(4), "c": rand(1)})


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_compare(tmp_path, op):
    m = make_model([helper.make_node(op, ["a", "b"], ["y"])], [("a", I64, [6]), ("b", I64, [6])], [("y", B, [6])])
    run_model(tmp_path, m, {"a": np.array([1, 2, 3, 4, 5, 6]), "b": np.array([3, 2, 1, 6, 5, 4])})


def test_logic_where_isnan(tmp_path):
    nodes = [helper.make_node("IsNaN", ["x"], ["n"]), helper.make_node("Not", ["n"], ["ok"]),
             helper.make_node("And", ["ok", "m"], ["k"]), helper.make_node("Or", ["k", "n"], ["kn"]),
             helper.make_node("Where", ["k", "x", "zero"], ["y"])]
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    m = make_model(nodes, [("x", F, [4]), ("m", B, [4])], [("y", F, [4]), ("kn", B, [4])], [zero])
    run_model(tmp_path, m, {"x": np.array([1, np.nan, 3, 4], np.float32), "m": np.array([1, 1, 0, 1], bool)})


def test_cast(tmp_path):
    nodes = [helper.make_node("Cast", ["x"], ["i"], to=I64), helper.make_node("Cast", ["x"], ["b"], to=B),
             helper.make_node("Cast", ["i"], ["f"], to=TensorProto.DOUBLE)]
    m = make_model(nodes, [("x", F, [5])], [("i", I64, [5]), ("b", B, [5]), ("f", TensorProto.DOUBLE, [5])])
    run_model(tmp_path, m, {"x": np.array([-2.7, -0.5, 0, 0.5, 3.9], np.float32)})


# ---- linear algebra ---------------------------------------------------------------------
def test_matmul_batched(tmp_path):
    m = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [2, 3, 4]), ("b", F, [4, 5])],
                   [("y", F, [2, 3, 5])])
    run_model(tmp_path, m, {"a": rand(2, 3, 4), "b": rand(4, 5)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ta,tb,alpha,beta", [(0, 0, 1.0, 1.0), (1, 0, 0.5, 2.0), (0, 1, 1.0, 0.0), (1, 1, 2.0, 1.0)])
def test_gemm(tmp_path, ta, tb, alpha, beta):
    a = rand(4, 3) if ta else rand(3, 4)
    b = rand(5, 4) if tb else rand(4, 5)
    C = numpy_helper.from_array(rand(5), "C")
    m = make_model([helper.make_node("Gemm", ["a", "b", "C"], ["y"], transA=ta, transB=tb, alpha=alpha, beta=beta)],
                   [("a", F, list(a.shape)), ("b", F, list(b.shape))], [("y", F, [3, 5])], [C])
    run_model(tmp_path, m, {"a": a, "b": b}, atol=1e-4)


@pytest.mark.parametrize("eq,sa,sb", [("bhid,bhjd->bhij", (1, 2, 3, 4), (1, 2, 5, 4)),
                                      ("bhij,bhjd->bhid", (1, 2, 3, 5), (1, 2, 5, 4)),
                                      ("ij,jk->ik", (3, 4), (4, 5)),
                                      ("bij,bjk->bki", (2, 3, 4), (2, 4, 5))])
def test_einsum(tmp_path, eq, sa, sb):
    m = make_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation=eq)],
                   [("a", F, list(sa)), ("b", F, list(sb))], [("y", F, None)])
    run_model(tmp_path, m, {"a": rand(*sa), "b": rand(*sb)}, atol=1e-4)


# ---- normalization and reductions ---------------------------------------------------------------
def test_softmax_layernorm(tmp_path):
    s = numpy_helper.from_array(rand(6), "s")
    bias = numpy_helper.from_array(rand(6), "bias")
    nodes = [helper.make_node("Softmax", ["x"], ["p"], axis=1),
             helper.make_node("LayerNormalization", ["x", "s", "bias"], ["ln"], epsilon=1e-5)]
    m = make_model(nodes, [("x", F, [2, 3, 6])], [("p", F, [2, 3, 6]), ("ln", F, [2, 3, 6])], [s, bias])
    run_model(tmp_path, m, {"x": rand(2, 3, 6)})


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
@pytest.mark.parametrize("opset", [13, 18])
def test_reduce(tmp_path, op, opset):
    if opset >= 18 or op == "ReduceSum":
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
        inits = [numpy_helper.from_array(np.array([1, -1], np.int64), "axes")]
    else:
        node = helper.make_node(op, ["x"], ["y"], axes=[1, -1], keepdims=0)
        inits = []
    m = make_model([node], [("x", F, [2, 3, 4])], [("y", F, [2])], inits, opset=opset)
    run_model(tmp_path, m, {"x": rand(2, 3, 4)})


# ---- data movement ------------------------------------------------------------------------------------
def i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def test_reshape_copy_dim_and_transpose(tmp_path):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3])]
    m = make_model(nodes, [("x", F, [2, 3, 8])], [("y", F, [2, 2, 3, 4])], [i64("shape", [0, 0, 2, -1])])
    run_model(tmp_path, m, {"x": rand(2, 3, 8)})


def test_squeeze_unsqueeze_concat_expand(tmp_path):
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["u"]), helper.make_node("Squeeze", ["u", "ax"], ["s"]),
             helper.make_node("Concat", ["s", "x"], ["c"], axis=-1),
             helper.make_node("Expand", ["c", "eshape"], ["y"])]
    m = make_model(nodes, [("x", F, [3, 1])], [("y", F, [2, 3, 2])], [i64("ax", [0]), i64("eshape", [2, 1, 1])])
    run_model(tmp_path, m, {"x": rand(3, 1)})


def test_slice_split(tmp_path):
    nodes = [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["sl"]),
             helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3),
             helper.make_node("Split", ["x", "sizes"], ["d", "e"], axis=1)]
    inits = [i64("st", [-1, 1]), i64("en", [-1000, 100]), i64("ax", [0, 1]), i64("sp", [-2, 2]), i64("sizes", [3, 4])]
    m = make_model(nodes, [("x", F, [4, 7])],
                   [("sl", F, None), ("a", F, None), ("b", F, None), ("c", F, None), ("d", F, None), ("e", F, None)],
                   inits)
    run_model(tmp_path, m, {"x": rand(4, 7)})


def test_gather_gather_elements(tmp_path):
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
             helper.make_node("GatherElements", ["x", "ei"], ["ge"], axis=0)]
    m = make_model(nodes, [("x", F, [3, 4]), ("ei", I64, [2, 4])], [("g", F, [3, 2]), ("ge", F, [2, 4])],
                   [i64("idx", [3, -4])])
    run_model(tmp_path, m, {"x": rand(3, 4), "ei": np.array([[0, 1, 2, 0], [2, 2, 1, 0]], np.int64)})


def test_shape_chain_and_generators(tmp_path):
    """Shape → Gather → Concat → Reshape, ConstantOfShape, Range, Trilu, Constant: folded at import."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
             helper.make_node("Concat", ["s", "m1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Shape", ["x"], ["s2"]),
             helper.make_node("ConstantOfShape", ["s2"], ["ones"], value=helper.make_tensor("v", F, [1], [1.0])),
             helper.make_node("Trilu", ["ones", "k"], ["tri"], upper=0),
             helper.make_node("Constant", [], ["lim"], value_int=5),
             helper.make_node("Range", ["zero", "lim", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Add", ["flat", "rf2"], ["y"])]
    inits = [i64("m1", [-1]), i64("k", 1), i64("zero", 0), i64("one", 1),
             numpy_helper.from_array(rand(1, 12), "rf2")]
    m = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, [2, 12]), ("tri", F, [2, 3, 4]), ("rf", F, [5])], inits)
    run_model(tmp_path, m, {"x": rand(2, 3, 4)})


def test_symbolic_batch(tmp_path):
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["N", 4])], [("y", F, ["N", 4])])
    run_model(tmp_path, m, {"x": rand(3, 4)})


def test_external_data(tmp_path):
    w = rand(4, 4)
    m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, [2, 4])], [("y", F, [2, 4])],
                   [numpy_helper.from_array(w, "w")])
    onnx.save(m, str(tmp_path / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)
    assert (tmp_path / "model.onnx.data").exists()
    x = rand(2, 4)
    np.save(tmp_path / "x.npy", x)
    graft("run", str(tmp_path / "model.onnx"), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir",
          str(tmp_path / "out"), "--device", "sim")
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), x @ w, rtol=1e-4, atol=1e-5)


# ---- errors -------------------------------------------------------------------------------------------------
def test_unsupported_op_message(tmp_path):
    m = make_model([helper.make_node("LpNormalization", ["x"], ["y"], name="hs")], [("x", F, [2])], [("y", F, [2])])
    onnx.save(m, str(tmp_path / "m.onnx"))
    r = graft("dump", str(tmp_path / "m.onnx"), check=False)
    assert r.returncode != 0
    assert "node 'hs' op 'LpNormalization' (domain '') is not supported" in r.stderr


def test_symbolic_shape_reshape(tmp_path):
    """Reshape(x, Shape(x)) with a symbolic dim: the shape folds into expressions; dump needs a binding"""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    m = make_model(nodes, [("x", F, ["N", 4])], [("y", F, ["N", 4])])
    onnx.save(m, str(tmp_path / "m.onnx"))
    r = graft("dump", str(tmp_path / "m.onnx"), check=False)
    assert r.returncode == 2 and "symbolic dim 'N' that nothing binds" in r.stderr and "--dim N=VALUE" in r.stderr
    r = graft("dump", str(tmp_path / "m.onnx"), "--dim", "N=3")
    assert "reshape" in r.stdout


def test_garbage_file(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07\x12\xff\xff\xff\xff\x0f garbage")
    r = graft("dump", str(tmp_path / "bad.onnx"), check=False)
    assert r.returncode != 0 and "bad.onnx" in r.stderr


# ---- CumSum, GatherND, Flatten on run-time values (decomposed into IR ops) --------------------
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_runtime(tmp_path, exclusive, reverse, axis):
    ax = helper.make_tensor("ax", TensorProto.INT64, [], [axis])
    for dt, arr in ((F, rand(3, 5)), (TensorProto.INT64, rng.integers(-4, 9, size=(3, 5)).astype(np.int64))):
        m = make_model([helper.make_node("CumSum", ["x", "ax"], ["y"], exclusive=exclusive, reverse=reverse)],
                       [("x", dt, [3, 5])], [("y", dt, [3, 5])], inits=[ax])
        run_model(tmp_path, m, {"x": arr})


def test_cumsum_runtime_symbolic_length(tmp_path):
    """a scan over a symbolic axis: the range mask takes the length per binding"""
    ax = helper.make_tensor("ax", TensorProto.INT64, [], [1])
    m = make_model([helper.make_node("CumSum", ["x", "ax"], ["y"])], [("x", F, [2, "seq"])], [("y", F, [2, "seq"])], inits=[ax])
    for s in (1, 4, 33):
        run_model(tmp_path, m, {"x": rand(2, s)})


@pytest.mark.parametrize("k", [1, 2, 3])
def test_gather_nd_runtime(tmp_path, k):
    """GatherND on a run-time tensor, index tuples of length k, negative components included"""
    data = rand(4, 3, 5)
    idx = np.stack([rng.integers(-d, d, size=(2, 6)) for d in (4, 3, 5)[:k]], axis=-1).astype(np.int64)
    out_shape = [2, 6] + [4, 3, 5][k:]
    m = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("GatherND", ["r", "i"], ["y"])],
                   [("x", F, [4, 3, 5]), ("i", TensorProto.INT64, [2, 6, k])], [("y", F, out_shape)])
    run_model(tmp_path, m, {"x": data, "i": idx})


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_flatten(tmp_path, axis):
    a = axis if axis >= 0 else 3 + axis
    shape = [2, 3, 4]
    outer = int(np.prod(shape[:a])) if a else 1
    m = make_model([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], [("x", F, shape)],
                   [("y", F, [outer, int(np.prod(shape)) // outer])])
    run_model(tmp_path, m, {"x": rand(*shape)})


def test_flatten_symbolic(tmp_path):
    m = make_model([helper.make_node("Flatten", ["x"], ["y"], axis=2)], [("x", F, ["b", "s", 4])], [("y", F, [None, 4])])
    for b, s in ((1, 1), (2, 7)):
        run_model(tmp_path, m, {"x": rand(b, s, 4)})
