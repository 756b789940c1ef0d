"""Shape arithmetic on symbolic dims, one idiom per model, as exporters write it.

Each model is built with onnx.helper, its inputs have symbolic dims named
"batch" and "seq", and its shape computations (Shape, Size, Gather, Concat,
Range, Slice, ConstantOfShape, Trilu, Expand, Where, Min/Max, integer
arithmetic) depend on them. One model file serves every length: it runs
through `graft run --device sim` at several bindings, from seq 1 to a large
one, and each run is compared with onnx's ReferenceEvaluator.

Bad bindings come last: inputs sharing a symbol but given different lengths
must be refused with a non-zero exit and a message naming both inputs and the
symbol.

Needs numpy, onnx and the graft CLI.
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
pytestmark = pytest.mark.skipif(not os.path.exists(GRAFT),
                                reason=f"graft CLI not built ({GRAFT} missing): build the graft_cli target first")

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL

# (batch, seq): seq 1, odd lengths, and a large one
BINDINGS = [(1, 1), (2, 7), (3, 33), (1, 300)]
# for the models that slice a fixed [.., 64, 64] buffer: up to its size
BINDINGS_64 = [(1, 1), (2, 7), (3, 33), (1, 64)]


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def i64(name, v):
    return numpy_helper.from_array(np.asarray(v, np.int64), name)


def f32(name, v):
    return numpy_helper.from_array(np.asarray(v, np.float32), name)


def make_model(nodes, inputs, outputs, inits=(), opset=18):
    """inputs / outputs: (name, onnx dtype, shape) triples; a shape holds ints,
    dim_param strings, or None for a dim the model does not name."""
    g = helper.make_graph(nodes, "symbolic", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs], initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def graft(*args):
    return subprocess.run([GRAFT, *map(str, args)], capture_output=True, text=True, timeout=300)


def run_at(tmp_path, path, feeds, tag):
    out = tmp_path / f"out_{tag}"
    args = ["run", path, "--device", "sim", "--output-dir", out]
    for name, a in feeds.items():
        f = tmp_path / f"{tag}_{sanitize(name)}.npy"
        np.save(f, a)
        args += ["--input", f"{name}={f}"]
    return graft(*args), out


def check(tmp_path, m, make_feeds, bindings=BINDINGS):
    """Saves m once and runs that one file at every (batch, seq) binding."""
    path = str(tmp_path / "model.onnx")
    onnx.save(m, path)
    ref_eval = ReferenceEvaluator(m)
    for batch, seq in bindings:
        feeds = make_feeds(batch, seq)
        r, out = run_at(tmp_path, path, feeds, f"b{batch}_s{seq}")
        assert r.returncode == 0, f"batch={batch} seq={seq}: graft run failed ({r.returncode}):\n{r.stderr}{r.stdout}"
        want = ref_eval.run(None, feeds)
        for o, ref in zip(m.graph.output, want):
            ref = np.asarray(ref)
            got = np.load(out / f"{sanitize(o.name)}.npy")
            where = f"batch={batch} seq={seq} output {o.name}"
            assert got.shape == ref.shape, f"{where}: shape {got.shape} != {ref.shape}"
            if ref.dtype.kind == "f":
                np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=1e-4, atol=1e-5,
                                           err_msg=where)
            else:
                np.testing.assert_array_equal(got, ref, err_msg=where)


def rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


# ==== one idiom per model ======================================================================

def test_reshape_to_heads_from_shape(tmp_path):
    """Shape -> Gather -> Div/Mul/Mod/Add/Sub -> Unsqueeze -> Concat -> Reshape:
    [b, s, 64] to [b, s, 4, 16] (then [b, 4, s, 16]) and to [b*s, 64], the
    split-heads idiom of every attention export; the shape arithmetic itself
    is also an output."""
    nodes = [
        node("Shape", ["x"], ["shp"]),
        node("Gather", ["shp", "c0"], ["b"], axis=0),
        node("Gather", ["shp", "c1"], ["s"], axis=0),
        node("Gather", ["shp", "c2"], ["h"], axis=0),
        node("Div", ["h", "c4"], ["hd"]),
        node("Div", ["h", "hd"], ["nh"]),
        node("Mul", ["b", "s"], ["bs"]),
        node("Mod", ["s", "c4"], ["s_mod4"]),
        node("Add", ["s", "c1"], ["s_plus1"]),
        node("Sub", ["s", "c1"], ["s_minus1"]),
        *[node("Unsqueeze", [v, "ax0"], [v + "_1"]) for v in ("b", "s", "h", "hd", "nh", "bs", "s_mod4", "s_plus1",
                                                               "s_minus1")],
        node("Concat", ["b_1", "s_1", "nh_1", "hd_1"], ["heads_shape"], axis=0),
        node("Reshape", ["x", "heads_shape"], ["heads"]),
        node("Transpose", ["heads"], ["y"], perm=[0, 2, 1, 3]),
        node("Concat", ["bs_1", "h_1"], ["flat_shape"], axis=0),
        node("Reshape", ["x", "flat_shape"], ["flat"]),
        node("Concat", ["b_1", "s_1", "s_mod4_1", "s_plus1_1", "s_minus1_1", "bs_1"], ["meta"], axis=0),
    ]
    inits = [i64("c0", 0), i64("c1", 1), i64("c2", 2), i64("c4", 4), i64("ax0", [0])]
    m = make_model(nodes, [("x", F, ["batch", "seq", 64])],
                   [("y", F, ["batch", 4, "seq", 16]), ("flat", F, [None, 64]), ("meta", I64, [6])], inits)
    rng = np.random.RandomState(0)
    check(tmp_path, m, lambda b, s: {"x": rand(rng, b, s, 64)})


def test_range_position_ids(tmp_path):
    """Range(0, seq, 1) position ids gathered from a position table and added
    to the token embedding, as GPT-2 and BERT exports compute them."""
    rng = np.random.RandomState(1)
    nodes = [
        node("Shape", ["ids"], ["shp"]),
        node("Gather", ["shp", "c1"], ["s"], axis=0),
        node("Range", ["c0", "s", "c1"], ["pos"]),
        node("Gather", ["wpe", "pos"], ["pe"], axis=0),
        node("Gather", ["wte", "ids"], ["te"], axis=0),
        node("Add", ["te", "pe"], ["y"]),
    ]
    inits = [i64("c0", 0), i64("c1", 1), f32("wte", rand(rng, 50, 16)), f32("wpe", rand(rng, 512, 16))]
    m = make_model(nodes, [("ids", I64, ["batch", "seq"])], [("y", F, ["batch", "seq", 16]), ("pos", I64, ["seq"])],
                   inits)
    check(tmp_path, m, lambda b, s: {"ids": rng.randint(0, 50, (b, s)).astype(np.int64)})


def test_causal_mask_sliced_from_buffer(tmp_path):
    """Slice(buffer[1, 1, 64, 64], ends=[seq, seq]) -> Where -> Softmax: the
    fixed lower-triangular buffer GPT-2's TorchScript export slices."""
    buf = np.tril(np.ones((64, 64), np.bool_))[None, None]
    nodes = [
        node("Shape", ["scores"], ["s"], start=2, end=3),
        node("Concat", ["s", "s"], ["ends"], axis=0),
        node("Slice", ["buf", "starts", "ends", "axes"], ["mask"]),
        node("Where", ["mask", "scores", "neg"], ["masked"]),
        node("Softmax", ["masked"], ["y"], axis=-1),
    ]
    inits = [numpy_helper.from_array(buf, "buf"), i64("starts", [0, 0]), i64("axes", [2, 3]), f32("neg", -1e4)]
    m = make_model(nodes, [("scores", F, ["batch", 4, "seq", "seq"])],
                   [("y", F, ["batch", 4, "seq", "seq"]), ("mask", B, [1, 1, "seq", "seq"])], inits)
    rng = np.random.RandomState(2)
    check(tmp_path, m, lambda b, s: {"scores": rand(rng, b, 4, s, s)}, BINDINGS_64)


def test_causal_mask_constant_of_shape_trilu(tmp_path):
    """ConstantOfShape([seq, seq]) -> Trilu (lower, and upper with k=1 as
    torch.triu(diagonal=1) exports) -> additive mask on x @ x^T."""
    nodes = [
        node("Shape", ["x"], ["s"], start=1, end=2),
        node("Concat", ["s", "s"], ["ss"], axis=0),
        node("ConstantOfShape", ["ss"], ["ones"], value=helper.make_tensor("one", F, [1], [1.0])),
        node("Trilu", ["ones"], ["lower"], upper=0),
        node("Trilu", ["ones", "k1"], ["upper_k1"], upper=1),
        node("Mul", ["upper_k1", "neg"], ["bias"]),
        node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        node("MatMul", ["x", "xt"], ["scores"]),
        node("Add", ["scores", "bias"], ["masked"]),
        node("Softmax", ["masked"], ["y"], axis=-1),
    ]
    inits = [i64("k1", 1), f32("neg", -1e4)]
    m = make_model(nodes, [("x", F, ["batch", "seq", 8])],
                   [("y", F, ["batch", "seq", "seq"]), ("lower", F, ["seq", "seq"]), ("upper_k1", F, ["seq", "seq"])],
                   inits)
    rng = np.random.RandomState(3)
    check(tmp_path, m, lambda b, s: {"x": rand(rng, b, s, 8)})


def test_expand_padding_mask(tmp_path):
    """attention_mask [b, s] -> Unsqueeze -> Cast -> Expand to [b, 4, s, s]
    (target from Shape) -> (1 - m) * -1e4: BERT's extended attention mask."""
    nodes = [
        node("Shape", ["mask"], ["shp"]),
        node("Gather", ["shp", "i0"], ["b"], axis=0),
        node("Gather", ["shp", "i1"], ["s"], axis=0),
        node("Concat", ["b", "four", "s", "s"], ["target"], axis=0),
        node("Unsqueeze", ["mask", "ax12"], ["m4"]),
        node("Cast", ["m4"], ["mf"], to=F),
        node("Expand", ["mf", "target"], ["e"]),
        node("Sub", ["one", "e"], ["inv"]),
        node("Mul", ["inv", "neg"], ["y"]),
    ]
    inits = [i64("i0", [0]), i64("i1", [1]), i64("four", [4]), i64("ax12", [1, 2]), f32("one", 1.0), f32("neg", -1e4)]
    m = make_model(nodes, [("mask", I64, ["batch", "seq"])], [("y", F, ["batch", 4, "seq", "seq"])], inits)
    rng = np.random.RandomState(4)
    check(tmp_path, m, lambda b, s: {"mask": (rng.uniform(size=(b, s)) > 0.3).astype(np.int64)})


def test_min_max_of_shape_values(tmp_path):
    """Min(seq, 8) as a Slice end and Max(seq, 4) as a ConstantOfShape dim:
    values that switch side as seq crosses 4 and 8."""
    nodes = [
        node("Shape", ["x"], ["s"], start=1, end=2),
        node("Min", ["s", "eight"], ["lo"]),
        node("Max", ["s", "four"], ["hi"]),
        node("Slice", ["x", "zero", "lo", "ax1"], ["y_head"]),
        node("Concat", ["hi", "sixteen"], ["pad_shape"], axis=0),
        node("ConstantOfShape", ["pad_shape"], ["pad"], value=helper.make_tensor("half", F, [1], [0.5])),
        node("ReduceSum", ["x", "ax1"], ["xs"], keepdims=0),
        node("Unsqueeze", ["xs", "ax1"], ["xs1"]),
        node("Add", ["xs1", "pad"], ["y_pad"]),
        node("Concat", ["lo", "hi"], ["lohi"], axis=0),
    ]
    inits = [i64("eight", [8]), i64("four", [4]), i64("zero", [0]), i64("ax1", [1]), i64("sixteen", [16])]
    m = make_model(nodes, [("x", F, ["batch", "seq", 16])],
                   [("y_head", F, ["batch", None, 16]), ("y_pad", F, ["batch", None, 16]), ("lohi", I64, [2])], inits)
    rng = np.random.RandomState(5)
    check(tmp_path, m, lambda b, s: {"x": rand(rng, b, s, 16)}, [(1, 1), (2, 4), (1, 8), (3, 9), (1, 300)])


def test_where_on_shape_comparison(tmp_path):
    """Where(Equal(sizes, -1), Shape(x), sizes) -> Expand: how the dynamo
    exporter lowers expand(-1, 4, -1), and the same target used by a Reshape."""
    nodes = [
        node("Shape", ["x"], ["shp"]),
        node("Equal", ["sizes", "minus1"], ["keep"]),
        node("Where", ["keep", "shp", "sizes"], ["target"]),
        node("Expand", ["x", "target"], ["y"]),
        node("Mul", ["y", "two"], ["y2"]),
        node("Reshape", ["y2", "target"], ["z"]),
        node("Equal", ["shp", "one_i"], ["is_one"]),
        node("Where", ["is_one", "minus1", "shp"], ["one_to_minus1"]),
    ]
    inits = [i64("sizes", [-1, 4, -1]), i64("minus1", -1), f32("two", 2.0), i64("one_i", 1)]
    m = make_model(nodes, [("x", F, ["batch", 1, "seq"])],
                   [("y", F, ["batch", 4, "seq"]), ("z", F, ["batch", 4, "seq"]), ("one_to_minus1", I64, [3])],
                   inits)
    rng = np.random.RandomState(6)
    check(tmp_path, m, lambda b, s: {"x": rand(rng, b, 1, s)})


def test_size_of_symbolic_tensor(tmp_path):
    """Size(x) = batch*seq*16 divided by 16 -> Reshape to [b*s, 16]; and
    Size cast to float as the divisor of a mean."""
    nodes = [
        node("Size", ["x"], ["n"]),
        node("Div", ["n", "c16"], ["rows"]),
        node("Unsqueeze", ["rows", "ax0"], ["rows1"]),
        node("Concat", ["rows1", "c16_1"], ["target"], axis=0),
        node("Reshape", ["x", "target"], ["y"]),
        node("ReduceSum", ["x"], ["total"], keepdims=0),
        node("Cast", ["n"], ["nf"], to=F),
        node("Div", ["total", "nf"], ["mean"]),
        node("Unsqueeze", ["n", "ax0"], ["n1"]),
    ]
    inits = [i64("c16", 16), i64("c16_1", [16]), i64("ax0", [0])]
    m = make_model(nodes, [("x", F, ["batch", "seq", 16])],
                   [("y", F, [None, 16]), ("mean", F, []), ("n1", I64, [1])], inits)
    rng = np.random.RandomState(7)
    check(tmp_path, m, lambda b, s: {"x": rand(rng, b, s, 16)})


# ==== bad bindings ==============================================================================

def two_input_model(with_shape_arithmetic):
    """query_states and key_states share batch and seq; with shape arithmetic,
    a Range over seq adds position ids (so the import keeps seq symbolic)."""
    nodes = [node("Add", ["query_states", "key_states"], ["qk"])]
    inits = []
    if with_shape_arithmetic:
        nodes += [node("Shape", ["query_states"], ["shp"]),
                  node("Gather", ["shp", "c1"], ["s"], axis=0),
                  node("Range", ["c0", "s", "c1"], ["pos"]),
                  node("Cast", ["pos"], ["posf"], to=F),
                  node("Unsqueeze", ["posf", "ax1"], ["pos2"]),
                  node("Add", ["qk", "pos2"], ["y"])]
        inits = [i64("c0", 0), i64("c1", 1), i64("ax1", [1])]
    else:
        nodes += [node("Identity", ["qk"], ["y"])]
    return make_model(nodes, [("query_states", F, ["batch", "seq", 16]), ("key_states", F, ["batch", "seq", 16])],
                      [("y", F, ["batch", "seq", 16])], inits)


@pytest.mark.parametrize("with_shape_arithmetic", [False, True], ids=["plain", "shape_arithmetic"])
@pytest.mark.parametrize("axis", ["batch", "seq"])
def test_inputs_disagree_on_a_symbol(tmp_path, with_shape_arithmetic, axis):
    m = two_input_model(with_shape_arithmetic)
    path = str(tmp_path / "model.onnx")
    onnx.save(m, path)
    # the model itself is fine: both inputs at the same binding run
    ok, _ = run_at(tmp_path, path, {"query_states": np.ones((2, 5, 16), np.float32),
                                    "key_states": np.ones((2, 5, 16), np.float32)}, "ok")
    assert ok.returncode == 0, f"the consistent binding failed ({ok.returncode}):\n{ok.stderr}"
    k_shape = (3, 5, 16) if axis == "batch" else (2, 6, 16)
    r, out = run_at(tmp_path, path, {"query_states": np.ones((2, 5, 16), np.float32),
                                     "key_states": np.ones(k_shape, np.float32)}, "bad")
    assert r.returncode > 0, f"rc {r.returncode} (0 = accepted, < 0 = killed by a signal):\n{r.stderr}{r.stdout}"
    for word in ("query_states", "key_states", axis):
        assert re.search(rf"\b{word}\b", r.stderr), f"the error does not name {word!r}:\n{r.stderr}"
    assert not (out / "y.npy").exists(), "an output was written anyway"


@pytest.mark.parametrize("with_shape_arithmetic", [False, True], ids=["plain", "shape_arithmetic"])
def test_dim_flag_disagrees_with_input(tmp_path, with_shape_arithmetic):
    m = two_input_model(with_shape_arithmetic)
    path = str(tmp_path / "model.onnx")
    onnx.save(m, path)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 5, 16), np.float32))
    r = graft("run", path, "--device", "sim", "--output-dir", tmp_path / "out", "--dim", "seq=7",
              "--input", f"query_states={x}", "--input", f"key_states={x}")
    assert r.returncode > 0, f"rc {r.returncode}:\n{r.stderr}"
    for word in ("query_states", "seq", "--dim"):
        assert re.search(rf"(?<![\w-]){re.escape(word)}\b", r.stderr), f"the error does not name {word!r}:\n{r.stderr}"


# ==== expression dim_params on graph inputs (the dynamo exporter writes "seq + 1", "seq*batch") ====
def test_expression_dim_params_bind_and_check(tmp_path):
    """x[batch, seq] and p[batch, "seq + 1"] (a cache one longer): seq binds from x, p's dim is
    checked against seq + 1; q["2*n"] alone binds n by solving 2*n = its length."""
    nodes = [node("Slice", ["p", "c1", "big", "c1"], ["p_tail"]),  # p[:, 1:]
             node("Add", ["x", "p_tail"], ["y"]),
             node("Relu", ["q"], ["z"])]
    inits = [helper.make_tensor("c1", TensorProto.INT64, [1], [1]), helper.make_tensor("big", TensorProto.INT64, [1], [1 << 40])]
    m = make_model(nodes, [("x", F, ["batch", "seq"]), ("p", F, ["batch", "seq + 1"]), ("q", F, ["2*n"])],
                   [("y", F, ["batch", "seq"]), ("z", F, ["2*n"])], inits)
    path = str(tmp_path / "model.onnx")
    onnx.save(m, path)
    rng = np.random.RandomState(11)
    for b, s, n in ((1, 1, 1), (2, 9, 3)):
        feeds = {"x": rand(rng, b, s), "p": rand(rng, b, s + 1), "q": rand(rng, 2 * n)}
        r, out = run_at(tmp_path, path, feeds, f"e{b}_{s}_{n}")
        assert r.returncode == 0, r.stderr
        ref = ReferenceEvaluator(m).run(None, feeds)
        np.testing.assert_allclose(np.load(out / "y.npy"), ref[0], rtol=1e-6)
        np.testing.assert_allclose(np.load(out / "z.npy"), ref[1], rtol=1e-6)
    # p not one longer than x: refused, naming the input, the dim and the expression
    feeds = {"x": rand(rng, 2, 5), "p": rand(rng, 2, 5), "q": rand(rng, 4)}
    r, _ = run_at(tmp_path, path, feeds, "bad1")
    assert r.returncode != 0 and "input 'p': dim 1 is 5, but the graph says it is seq + 1 = 6" in r.stderr, r.stderr
    # an odd length for 2*n: no n solves it
    feeds = {"x": rand(rng, 2, 5), "p": rand(rng, 2, 6), "q": rand(rng, 3)}
    r, _ = run_at(tmp_path, path, feeds, "bad2")
    assert r.returncode != 0 and "'n'" in r.stderr, r.stderr
