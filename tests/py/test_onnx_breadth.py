"""Model-breadth ONNX ops (issue 14) on run-time tensors, through the graft CLI
on the simulator, against onnx.reference: ArgMax/ArgMin, TopK, Mod, Tile,
OneHot, ScatterElements, ScatterND, GatherND with batch_dims, ReduceProd,
CumSum, and the clear errors for what is refused (TopK with K past the axis, an
arg reduction over an empty axis). NonZero and Range on run-time scalars:
test_onnx_datadep.py.

Every data input is a graph input (a run-time tensor); only the inputs graft
needs when planning (K, repeats, depth, axes) are initializers.
On a GPU machine, GRAFT_TEST_DEVICE=cuda runs the same cases on CUDA.
"""
import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from test_onnx_import import DEVICE, GRAFT, graft, make_model, run_model  # noqa: E402

pytestmark = pytest.mark.skipif(not __import__("os").path.exists(GRAFT), reason="graft CLI not built")

ONNX_T = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.float64: TensorProto.DOUBLE,
          np.int64: TensorProto.INT64, np.int32: TensorProto.INT32, np.int8: TensorProto.INT8,
          np.uint8: TensorProto.UINT8}
rng = np.random.default_rng(14)


def model(nodes, feeds, outs, inits=(), opset=18):
    ins = [(k, ONNX_T[v.dtype.type], list(v.shape)) for k, v in feeds.items()]
    return make_model(nodes, ins, [(o, TensorProto.UNDEFINED, None) for o in outs], inits, opset=opset)


def check(tmp_path, nodes, feeds, outs, inits=(), opset=18):
    run_model(tmp_path, model(nodes, feeds, outs, inits, opset), feeds)


def refused(tmp_path, nodes, feeds, outs, inits=(), opset=18):
    """Runs a model graft must refuse; returns stderr (non-zero exit asserted)."""
    m = model(nodes, feeds, outs, inits, opset)
    path = tmp_path / "bad.onnx"
    onnx.save(m, str(path))
    args = ["run", str(path), "--output-dir", str(tmp_path / "o"), "--device", DEVICE]
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp_path / f'{k}.npy'}"]
    r = graft(*args, check=False)
    assert r.returncode != 0, "graft accepted a model it must refuse"
    return r.stderr


def const(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


# ---- ArgMax / ArgMin -------------------------------------------------------------------
ARG_X = np.array([[1, 3, 3, np.nan, 2], [5, np.nan, 5, np.nan, -1], [0, 0, -1, -1, 7], [2, 2, 2, 2, 2]], np.float32)


@pytest.mark.parametrize("op,axis,keepdims,last", list(itertools.product(["ArgMax", "ArgMin"], [0, 1, -1, -2], [0, 1], [0, 1])))
def test_arg_nan_ties(tmp_path, op, axis, keepdims, last):
    check(tmp_path, [helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)],
          {"x": ARG_X}, ["y"])


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_dtypes_3d(tmp_path, op, dtype):
    x = rng.integers(0, 4, (3, 4, 5)).astype(dtype)  # small range: many ties
    for axis in (0, 1, 2):
        check(tmp_path, [helper.make_node(op, ["x"], ["y"], axis=axis)], {"x": x}, ["y"])


def test_arg_default_attrs_and_infinities(tmp_path):
    x = np.array([[-np.inf, 1], [np.inf, np.inf], [0, -np.inf]], np.float32)
    check(tmp_path, [helper.make_node("ArgMax", ["x"], ["a"]), helper.make_node("ArgMin", ["x"], ["b"])],
          {"x": x}, ["a", "b"])


@pytest.mark.parametrize("op,last", list(itertools.product(["ArgMax", "ArgMin"], [0, 1])))
def test_arg_long_rows(tmp_path, op, last):
    # axes of 4096+ points are reduced in chunks and then combined (passes/lower-reduce.c):
    # ties across chunks, NaNs in two chunks, a short last chunk, a strided axis
    x = rng.integers(-3, 4, (3, 5003)).astype(np.float32)
    x[0, [0, 5002]] = 9 if op == "ArgMax" else -9
    x[1, [700, 5001]] = np.nan
    check(tmp_path, [helper.make_node(op, ["x"], ["y"], axis=1, keepdims=1, select_last_index=last)], {"x": x}, ["y"])
    check(tmp_path, [helper.make_node(op, ["x"], ["y"], axis=0, keepdims=0, select_last_index=last)], {"x": x.T.copy()}, ["y"])
    v = rng.integers(-2, 3, (2, 50257)).astype(np.float32)  # GPT-2's vocabulary: 99 chunks, the last of 81 points
    v[0, 50256] = 7 if op == "ArgMax" else -7
    v[1, [3, 40000]] = np.nan
    check(tmp_path, [helper.make_node(op, ["x"], ["y"], axis=-1, keepdims=0, select_last_index=last)], {"x": v}, ["y"])


def test_arg_empty_axis_is_an_error(tmp_path):
    err = refused(tmp_path, [helper.make_node("ArgMax", ["x"], ["y"], axis=1, name="am")],
                  {"x": np.zeros((2, 0), np.float32)}, ["y"])
    assert "am" in err and "empty" in err


# ---- TopK --------------------------------------------------------------------------------
TOPK_X = np.array([[3, 1, 3, np.nan, 2, -1, np.inf], [np.nan, 0, 0, 5, np.nan, 5, -np.inf]], np.float32)


@pytest.mark.parametrize("largest,axis,k", [(l, a, k) for l in (0, 1) for a, ks in ((1, (0, 1, 3, 7)), (-1, (2,)), (0, (0, 1, 2)), (-2, (2,)))
                                           for k in ks])
def test_top_k_nan_ties(tmp_path, largest, axis, k):
    check(tmp_path, [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)], {"x": TOPK_X},
          ["v", "i"], [const("k", np.array([k], np.int64))])


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float16, np.float64])
def test_top_k_dtypes_3d(tmp_path, dtype):
    x = rng.integers(-3, 3, (3, 6, 4)).astype(dtype)
    for axis, largest in ((1, 1), (0, 0), (2, 1)):
        check(tmp_path, [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)], {"x": x},
              ["v", "i"], [const("k", np.array([2], np.int64))])


def test_top_k_unsorted_gives_sorted(tmp_path):
    # sorted=0 leaves the order to the implementation: graft's is the sorted one
    x = rng.standard_normal((2, 9)).astype(np.float32)
    check(tmp_path, [helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=0)], {"x": x}, ["v", "i"],
          [const("k", np.array([4], np.int64))])


def test_top_k_errors(tmp_path):
    x = np.zeros((2, 5), np.float32)
    err = refused(tmp_path, [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="tk")], {"x": x}, ["v", "i"],
                  [const("k", np.array([6], np.int64))])
    assert "tk" in err and "K = 6" in err
    # K computed at run time: the output shape would depend on data
    err = refused(tmp_path, [helper.make_node("TopK", ["x", "k"], ["v", "i"], name="tk2")],
                  {"x": x, "k": np.array([2], np.int64)}, ["v", "i"])
    assert "tk2" in err and "import time" in err


# ---- Mod ---------------------------------------------------------------------------------
MOD_A = np.array([-7, -5, 5, 7, 0, 3, -3, 9, -128, 127], np.int64)
MOD_B = np.array([3, -3, -3, 3, 2, -1, 0, -4, 7, -7], np.int64)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_int(tmp_path, dtype, fmod):
    with np.errstate(divide="ignore", invalid="ignore"):
        check(tmp_path, [helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)],
              {"a": MOD_A.astype(dtype), "b": MOD_B.astype(dtype)}, ["y"])


def test_mod_uint8_and_broadcast(tmp_path):
    a = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    b = rng.integers(1, 20, (4,)).astype(np.uint8)
    for fmod in (0, 1):
        check(tmp_path, [helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod)], {"a": a, "b": b}, ["y"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_mod_float(tmp_path, dtype):
    a = np.array([-7.5, -5, 5.25, 7, 0, np.inf, -3, np.nan, 4.5, -0.0], dtype)
    b = np.array([3, -3, -3, 3, 2, -1, np.inf, -4, np.nan, 2], dtype)
    with np.errstate(invalid="ignore"):
        check(tmp_path, [helper.make_node("Mod", ["a", "b"], ["y"], fmod=1)], {"a": a, "b": b}, ["y"])
    # fmod=0 on floats (ONNX asks fmod=1) gets numpy's floor remainder, as the reference does
    a2, b2 = rng.uniform(-9, 9, 20).astype(dtype), rng.uniform(-4, 4, 20).astype(dtype)
    check(tmp_path, [helper.make_node("Mod", ["a", "b"], ["y"], fmod=0)], {"a": a2, "b": b2}, ["y"])


def test_mod_bad_fmod(tmp_path):
    err = refused(tmp_path, [helper.make_node("Mod", ["a", "b"], ["y"], fmod=2, name="md")],
                  {"a": MOD_A, "b": MOD_B}, ["y"])
    assert "md" in err and "fmod" in err


# ---- Tile --------------------------------------------------------------------------------
@pytest.mark.parametrize("reps", [[1, 1, 1], [2, 3, 1], [1, 1, 4], [3, 1, 2], [0, 2, 1], [2, 2, 2]])
def test_tile(tmp_path, reps):
    x = rng.standard_normal((2, 3, 2)).astype(np.float32)
    check(tmp_path, [helper.make_node("Tile", ["x", "r"], ["y"])], {"x": x}, ["y"], [const("r", np.array(reps, np.int64))])


def test_tile_int_and_1d(tmp_path):
    check(tmp_path, [helper.make_node("Tile", ["x", "r"], ["y"])], {"x": np.arange(5, dtype=np.int32)}, ["y"],
          [const("r", np.array([3], np.int64))])


def test_tile_symbolic_batch(tmp_path):
    m = make_model([helper.make_node("Tile", ["x", "r"], ["y"])], [("x", TensorProto.FLOAT, ["batch", 3])],
                   [("y", TensorProto.FLOAT, None)], [const("r", np.array([2, 3], np.int64))])
    for b in (1, 4):
        run_model(tmp_path, m, {"x": rng.standard_normal((b, 3)).astype(np.float32)})


def test_tile_errors(tmp_path):
    x = np.zeros((2, 3), np.float32)
    err = refused(tmp_path, [helper.make_node("Tile", ["x", "r"], ["y"], name="tl")], {"x": x}, ["y"],
                  [const("r", np.array([2], np.int64))])
    assert "tl" in err and "rank" in err
    err = refused(tmp_path, [helper.make_node("Tile", ["x", "r"], ["y"], name="tl2")], {"x": x}, ["y"],
                  [const("r", np.array([2, -1], np.int64))])
    assert "tl2" in err and "negative" in err


# ---- OneHot ------------------------------------------------------------------------------
ONEHOT_I = np.array([[0, 2, -1], [5, -4, 1], [-6, 3, 4]], np.int64)  # depth 5: 5 and -6 are out of range (all off)


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -2, -3])
def test_one_hot(tmp_path, axis):
    check(tmp_path, [helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)],
          {"i": ONEHOT_I, "v": np.array([0.5, 3], np.float32)}, ["y"], [const("d", np.array(5, np.int64))])


def test_one_hot_float_indices_and_depth(tmp_path):
    # integral values: ONNX casts float indices to int64 (2.7 -> 2), onnx.reference compares them as floats
    check(tmp_path, [helper.make_node("OneHot", ["i", "d", "v"], ["y"])],
          {"i": np.array([0.0, 2.0, -1.0, 9.0], np.float32), "v": np.array([1, 3], np.int64)}, ["y"],
          [const("d", np.array(4.0, np.float32))])


def test_one_hot_errors(tmp_path):
    err = refused(tmp_path, [helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=3, name="oh")],
                  {"i": ONEHOT_I, "v": np.array([0, 1], np.float32)}, ["y"], [const("d", np.array(5, np.int64))])
    assert "oh" in err and "axis" in err
    err = refused(tmp_path, [helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="oh2")],
                  {"i": ONEHOT_I, "v": np.array([0, 1, 2], np.float32)}, ["y"], [const("d", np.array(5, np.int64))])
    assert "oh2" in err and "values" in err


# ---- ScatterElements / ScatterND ------------------------------------------------------------
REDUCTIONS = ["none", "add", "mul", "max", "min"]


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(tmp_path, red, axis):
    d = rng.standard_normal((3, 4)).astype(np.float32)
    if axis == 0:  # duplicates only where the reduction defines them
        idx = np.array([[1, 0, -1, 2], [0, 2, 1, -3 if red != "none" else -2]], np.int64)
        upd = rng.standard_normal((2, 4)).astype(np.float32)
    else:
        idx = np.array([[1, 3], [0, -1], [2, 2 if red != "none" else 1]], np.int64)
        upd = rng.standard_normal((3, 2)).astype(np.float32)
    check(tmp_path, [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=axis, reduction=red)],
          {"d": d, "i": idx, "u": upd}, ["y"])


@pytest.mark.parametrize("red", ["add", "mul", "max", "min"])
def test_scatter_elements_int_all_duplicates(tmp_path, red):
    # every update of a row hits one position: the data value must still take part
    for seed in range(4):
        r = np.random.default_rng(seed)
        d = r.integers(-5, 5, (3, 4)).astype(np.int32)
        u = r.integers(-5, 5, (3, 2)).astype(np.int32)
        check(tmp_path, [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction=red)],
              {"d": d, "i": np.array([[1, 1], [0, 3], [2, 2]], np.int64), "u": u}, ["y"])


@pytest.mark.parametrize("red", REDUCTIONS)
def test_scatter_nd(tmp_path, red):
    d = rng.standard_normal((4, 3, 2)).astype(np.float32)
    cases = [
        (np.array([[1], [3], [-1] if red != "none" else [0]], np.int64), (3, 3, 2)),  # k=1: whole slices
        (np.array([[[1, 2], [0, 0]], [[3, 1], [1, 2] if red != "none" else [2, 2]]], np.int64), (2, 2, 2)),  # k=2
        (np.array([[1, 2, 0], [0, 0, 1], [-1, -1, -1]], np.int64), (3,)),  # k=r: elements
    ]
    for idx, ushape in cases:
        check(tmp_path, [helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=red)],
              {"d": d, "i": idx, "u": rng.standard_normal(ushape).astype(np.float32)}, ["y"])


def test_scatter_nd_int_kv_cache_update(tmp_path):
    # the decode-loop idiom: write one position of a [batch, heads, seq, dim] cache
    cache = rng.integers(-9, 9, (2, 2, 5, 3)).astype(np.int64)
    idx = np.array([[[0, 0, 3], [0, 1, 3]], [[1, 0, 3], [1, 1, 3]]], np.int64)
    upd = rng.integers(-9, 9, (2, 2, 3)).astype(np.int64)
    check(tmp_path, [helper.make_node("ScatterND", ["d", "i", "u"], ["y"])], {"d": cache, "i": idx, "u": upd}, ["y"])


def test_scatter_errors(tmp_path):
    d = np.zeros((3, 4), np.float32)
    err = refused(tmp_path, [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], reduction="avg", name="se")],
                  {"d": d, "i": np.zeros((1, 4), np.int64), "u": np.zeros((1, 4), np.float32)}, ["y"])
    assert "se" in err and "avg" in err
    err = refused(tmp_path, [helper.make_node("ScatterND", ["d", "i", "u"], ["y"], name="snd")],
                  {"d": d, "i": np.zeros((2, 1), np.int64), "u": np.zeros((2, 3), np.float32)}, ["y"])
    assert "snd" in err and "updates" in err


# ---- GatherND batch_dims, ReduceProd, CumSum -------------------------------------------------
@pytest.mark.parametrize("b,ishape", [(0, (2, 2)), (1, (2, 2)), (1, (2, 3, 1)), (2, (2, 3, 2)), (1, (2, 3)),
                                      (2, (2, 3, 4, 2)), (0, (3, 4)), (3, (2, 3, 4, 1))])
def test_gather_nd_batch_dims(tmp_path, b, ishape):
    d = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    k = ishape[-1]
    idx = np.stack([rng.integers(-d.shape[b + j], d.shape[b + j], ishape[:-1]) for j in range(k)], -1).astype(np.int64)
    check(tmp_path, [helper.make_node("GatherND", ["d", "i"], ["y"], batch_dims=b)], {"d": d, "i": idx}, ["y"])


@pytest.mark.parametrize("axes,keepdims", [([1], 0), ([0, 2], 1), ([], 0), ([-1], 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_reduce_prod(tmp_path, axes, keepdims, dtype):
    x = rng.integers(-3, 4, (2, 3, 4)).astype(dtype)
    inputs = ["x", "a"] if axes else ["x"]
    check(tmp_path, [helper.make_node("ReduceProd", inputs, ["y"], keepdims=keepdims)], {"x": x}, ["y"],
          [const("a", np.array(axes, np.int64))] if axes else [])


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_cumsum_exclusive_reverse(tmp_path, exclusive, reverse, dtype):
    x = rng.integers(-5, 5, (3, 4)).astype(dtype)
    for axis in (0, -1):
        check(tmp_path, [helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=exclusive, reverse=reverse)], {"x": x},
              ["y"], [const("a", np.array(axis, np.int64))])


# NonZero and Range on run-time scalars: tests/py/test_onnx_datadep.py (data-dependent dims)


# ---- Einsum: every valid equation (matmul forms map to one matmul, the rest are lowered) -----
EINSUM = [
    ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("iii->i", [(3, 3, 3)]), ("iij->j", [(3, 3, 2)]), ("iji->j", [(3, 2, 3)]),
    ("bii->bi", [(2, 3, 3)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]), ("ij", [(2, 3)]), ("ji", [(2, 3)]),
    ("...", [(2, 3)]), ("i...->...", [(3, 2, 2)]), ("i,i", [(5,), (5,)]), ("i,i->i", [(4,), (4,)]),
    ("i,j->ij", [(3,), (4,)]), ("a,b,c->abc", [(2,), (3,), (4,)]), ("ij,jk", [(2, 3), (3, 4)]),
    ("ij,j->i", [(3, 4), (4,)]), ("ij,ij->i", [(3, 4), (3, 4)]), ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]), ("...ij,...jk", [(2, 2, 3), (1, 3, 4)]),
    ("...i,...i->...", [(2, 3, 4), (3, 4)]), ("Ab,bA->", [(2, 3), (3, 2)]), ("ba,ab", [(3, 2), (2, 3)]),
    ("ijk,ikj->ik", [(2, 3, 4), (2, 4, 3)]), ("bhid,bhjd->bhij", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]), (" i j , j k -> i k ", [(2, 3), (3, 4)]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float64])
@pytest.mark.parametrize("eq,shapes", EINSUM, ids=[e for e, _ in EINSUM])
def test_einsum_any_equation(tmp_path, eq, shapes, dtype):
    feeds = {f"x{i}": (rng.standard_normal(s) * 3).astype(dtype) for i, s in enumerate(shapes)}
    check(tmp_path, [helper.make_node("Einsum", list(feeds), ["y"], equation=eq)], feeds, ["y"])


def test_einsum_symbolic_batch(tmp_path):
    m = make_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bkj->bk")],
                   [("a", TensorProto.FLOAT, ["batch", 3, 4]), ("b", TensorProto.FLOAT, ["batch", 5, 4])],
                   [("y", TensorProto.FLOAT, None)])
    for b in (1, 3):
        run_model(tmp_path, m, {"a": rng.standard_normal((b, 3, 4)).astype(np.float32),
                                "b": rng.standard_normal((b, 5, 4)).astype(np.float32)})


@pytest.mark.parametrize("eq,shapes,why", [
    ("ij,jk->ik", [(2, 3), (4, 5)], "differ"),  # the matmul form
    ("ij,jk,k->i", [(2, 3), (3, 4), (5,)], "sizes"),  # the general lowering
    ("ij->k", [(2, 3)], "no input"),
    ("ij->ii", [(2, 3)], "repeats"),
    ("i1->i", [(2, 3)], "index letter"),
    ("ijk->i", [(2, 3)], "rank"),
    ("ij,jk->ik", [(2, 3)], "terms"),
    ("i.j->i", [(2, 3)], "ellipsis"),
])
def test_einsum_errors(tmp_path, eq, shapes, why):
    feeds = {f"x{i}": np.zeros(s, np.float32) for i, s in enumerate(shapes)}
    err = refused(tmp_path, [helper.make_node("Einsum", list(feeds), ["y"], equation=eq, name="ein")], feeds, ["y"])
    assert "'ein'" in err and why in err, err


# ---- control flow: If, Loop, Scan -------------------------------------------------------------
FT = TensorProto.FLOAT


def body(nodes, outs, ins=(), inits=()):
    return helper.make_graph(nodes, "body", [helper.make_tensor_value_info(n, t, s) for n, t, s in ins],
                             [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
                             initializer=list(inits))


# branches read outer values (x, h) and one computes from them
THEN_B = body([helper.make_node("Mul", ["x", "h"], ["t1"]), helper.make_node("Add", ["t1", "x"], ["tout"])], ["tout"])
ELSE_B = body([helper.make_node("Sub", ["h", "x"], ["eout"])], ["eout"])
ZERO, ONE = const("zero", np.array(0, np.float32)), const("one", np.array(1, np.float32))


@pytest.mark.parametrize("sign", [1, -1])
def test_if_run_time_condition(tmp_path, sign):
    nodes = [helper.make_node("Exp", ["x"], ["h"]), helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=THEN_B, else_branch=ELSE_B, name="myif")]
    x = (np.abs(rng.standard_normal((2, 3))) * sign).astype(np.float32)
    check(tmp_path, nodes, {"x": x}, ["y"], [ZERO])


@pytest.mark.parametrize("cond", [True, False])
def test_if_import_time_condition_inlines_the_branch(tmp_path, cond):
    nodes = [helper.make_node("Exp", ["x"], ["h"]),
             helper.make_node("If", ["cc"], ["y"], then_branch=THEN_B, else_branch=ELSE_B)]
    check(tmp_path, nodes, {"x": rng.standard_normal((2, 3)).astype(np.float32)}, ["y"], [const("cc", np.array(cond))])


def test_if_constant_branch_output_keeps_folding(tmp_path):
    # an If on a shape comparison choosing a shape constant: Reshape still gets it at import time
    tb = body([helper.make_node("Constant", [], ["s1"], value=const("v", np.array([3, 2], np.int64)))], ["s1"])
    eb = body([helper.make_node("Constant", [], ["s2"], value=const("w", np.array([6], np.int64)))], ["s2"])
    nodes = [helper.make_node("Shape", ["x"], ["sh"]), helper.make_node("Gather", ["sh", "i0"], ["n"]),
             helper.make_node("Greater", ["n", "one_i"], ["c"]),
             helper.make_node("If", ["c"], ["shape"], then_branch=tb, else_branch=eb),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    check(tmp_path, nodes, {"x": rng.standard_normal((2, 3)).astype(np.float32)}, ["y"],
          [const("i0", np.array(0, np.int64)), const("one_i", np.array(1, np.int64))])


@pytest.mark.parametrize("scale", [0.1, 1.0, -1.0])
def test_if_nested_run_time(tmp_path, scale):
    inner = helper.make_node("If", ["c2"], ["io"], then_branch=body([helper.make_node("Neg", ["x"], ["a1"])], ["a1"]),
                             else_branch=body([helper.make_node("Abs", ["h"], ["a2"])], ["a2"]))
    tb = body([helper.make_node("Less", ["s", "one"], ["c2"]), inner, helper.make_node("Add", ["io", "x"], ["to"])], ["to"])
    nodes = [helper.make_node("Exp", ["x"], ["h"]), helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=tb, else_branch=ELSE_B)]
    x = (np.abs(rng.standard_normal((2, 3))) * scale).astype(np.float32)
    check(tmp_path, nodes, {"x": x}, ["y"], [ZERO, ONE])


def test_if_branches_of_different_shapes_are_refused(tmp_path):
    tb = body([helper.make_node("Identity", ["x"], ["o1"])], ["o1"])
    eb = body([helper.make_node("ReduceSum", ["x"], ["o2"], keepdims=0)], ["o2"])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=tb, else_branch=eb, name="shapeif")]
    err = refused(tmp_path, nodes, {"x": np.ones((2, 3), np.float32)}, ["y"], [ZERO])
    assert "shapeif" in err


def nested_ifs(depth):
    g = body([helper.make_node("Identity", ["x"], ["o%d" % depth])], ["o%d" % depth])
    for d in range(depth - 1, -1, -1):  # the else branches stay flat: the file grows linearly
        e = body([helper.make_node("Neg", ["x"], ["e%d" % d])], ["e%d" % d])
        g = body([helper.make_node("If", ["c"], ["o%d" % d], then_branch=g, else_branch=e)], ["o%d" % d])
    return g.node[0]


def test_if_nesting_depth(tmp_path):
    c = const("c", np.array(True))
    for depth in (3, 16):  # 16 levels of subgraphs are the limit
        check(tmp_path, [helper.make_node("Identity", ["x"], ["xx"]), nested_ifs(depth)], {"x": np.ones(3, np.float32)},
              ["o0"], [c])
    # one more is refused before the file is parsed (a hostile file cannot drive protobuf-c's recursion)
    err = refused(tmp_path, [nested_ifs(17)], {"x": np.ones(3, np.float32)}, ["o0"], [c])
    assert "nest more than 16" in err


LOOP_BODY = body([helper.make_node("Add", ["v", "x"], ["v2"]), helper.make_node("Cast", ["i"], ["fi"], to=FT),
                  helper.make_node("Mul", ["v2", "fi"], ["m"]), helper.make_node("ReduceSum", ["m"], ["r"], keepdims=0),
                  helper.make_node("Reshape", ["r", "one1"], ["sc"]), helper.make_node("Identity", ["cin"], ["cout"])],
                 ["cout", "v2", "sc"], ins=[("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2, 3])],
                 inits=[const("one1", np.array([1], np.int64))])


@pytest.mark.parametrize("trip", [0, 1, 4])
def test_loop_unrolled_constant_trip_count(tmp_path, trip):
    # scan outputs are [1]-shaped: onnx.reference vstacks them, ONNX Runtime stacks on a new axis; both agree here
    x = rng.standard_normal((2, 3)).astype(np.float32)
    outs = ["vf", "scans"] if trip else ["vf"]
    node = helper.make_node("Loop", ["M", "c0", "v0"], outs, body=LOOP_BODY if trip else body(
        LOOP_BODY.node[:1] + [LOOP_BODY.node[-1]], ["cout", "v2"], ins=[("i", TensorProto.INT64, []),
                                                                         ("cin", TensorProto.BOOL, []), ("v", FT, [2, 3])]))
    check(tmp_path, [node], {"x": x, "v0": x}, outs, [const("M", np.array(trip, np.int64)), const("c0", np.array(True))])


def test_loop_condition_known_at_import(tmp_path):
    b = body([helper.make_node("Add", ["v", "x"], ["v2"]), helper.make_node("Less", ["i", "two"], ["cout"])], ["cout", "v2"],
             ins=[("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2, 3])],
             inits=[const("two", np.array(2, np.int64))])
    x = rng.standard_normal((2, 3)).astype(np.float32)
    check(tmp_path, [helper.make_node("Loop", ["", "c0", "v0"], ["vf"], body=b)], {"x": x, "v0": x}, ["vf"],
          [const("c0", np.array(True))])


def test_loop_while_and_too_many_iterations(tmp_path):
    """A condition the body computes at run time (a while-loop) runs (tests/py/test_onnx_control.py has
    the rest); a constant trip count past the unroll limit is refused, naming the node."""
    x = np.ones((2, 3), np.float32)
    b = body([helper.make_node("Add", ["v", "x"], ["v2"]), helper.make_node("ReduceSum", ["v2"], ["s"], keepdims=0),
              helper.make_node("Less", ["s", "ten"], ["cout"])], ["cout", "v2"],
             ins=[("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2, 3])],
             inits=[const("ten", np.array(10, np.float32))])
    check(tmp_path, [helper.make_node("Loop", ["", "c0", "v0"], ["vf"], body=b, name="lp2")], {"x": x, "v0": x},
          ["vf"], [const("c0", np.array(True))])
    err = refused(tmp_path, [helper.make_node("Loop", ["M", "c0", "v0"], ["vf", "scans"], body=LOOP_BODY, name="lp3")],
                  {"x": x, "v0": x}, ["vf", "scans"], [const("c0", np.array(True)), const("M", np.array(100000, np.int64))])
    assert "'lp3'" in err and "unroll" in err


SCAN_BODY = body([helper.make_node("Add", ["st", "xi"], ["st2"]), helper.make_node("Mul", ["st2", "xi"], ["o"])],
                 ["st2", "o"], ins=[("st", FT, [3]), ("xi", FT, [3])])


def test_scan_against_reference(tmp_path):
    xs = rng.standard_normal((4, 3)).astype(np.float32)
    check(tmp_path, [helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=SCAN_BODY, num_scan_inputs=1)],
          {"s0": np.zeros(3, np.float32), "xs": xs}, ["sf", "ys"])


@pytest.mark.parametrize("in_dir,out_dir,in_axis,out_axis", [(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1),
                                                             (1, 1, 1, -1)])
def test_scan_directions_and_axes(tmp_path, in_dir, out_dir, in_axis, out_axis):
    # onnx.reference implements only the defaults: numpy here
    xs = rng.standard_normal((3, 3)).astype(np.float32)
    node = helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=SCAN_BODY, num_scan_inputs=1,
                            scan_input_directions=[in_dir], scan_output_directions=[out_dir],
                            scan_input_axes=[in_axis], scan_output_axes=[out_axis])
    m = model([node], {"s0": np.zeros(3, np.float32), "xs": xs}, ["sf", "ys"])
    path = tmp_path / "scan.onnx"
    onnx.save(m, str(path))
    np.save(tmp_path / "s0.npy", np.zeros(3, np.float32))
    np.save(tmp_path / "xs.npy", xs)
    graft("run", str(path), "--output-dir", str(tmp_path / "o"), "--device", DEVICE, "--input", f"s0={tmp_path / 's0.npy'}",
          "--input", f"xs={tmp_path / 'xs.npy'}")
    seq = np.moveaxis(xs, in_axis, 0)
    if in_dir:
        seq = seq[::-1]
    st, ys = np.zeros(3, np.float32), []
    for xi in seq:
        st = st + xi
        ys.append(st * xi)
    if out_dir:
        ys = ys[::-1]
    np.testing.assert_allclose(np.load(tmp_path / "o" / "sf.npy"), st, rtol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "o" / "ys.npy"), np.stack(ys, axis=out_axis), rtol=1e-6)


# ---- symbolic dims (one import, several lengths) ------------------------------------------------
def test_symbolic_seq_arg_top_k_scatter(tmp_path):
    S = TensorProto.FLOAT
    nodes = [helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),        # over the symbolic dim
             helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=2),            # the axis is concrete
             helper.make_node("ScatterElements", ["x", "idx", "u"], ["se"], axis=2, reduction="add"),
             helper.make_node("Einsum", ["x", "x"], ["ein"], equation="bsd,btd->bst")]
    m = make_model(nodes, [("x", S, [2, "seq", 4]), ("idx", TensorProto.INT64, [2, "seq", 2]), ("u", S, [2, "seq", 2])],
                   [("am", TensorProto.INT64, None), ("tv", S, None), ("ti", TensorProto.INT64, None), ("se", S, None),
                    ("ein", S, None)], [const("k", np.array([2], np.int64))])
    for seq in (1, 3, 5):
        x = rng.standard_normal((2, seq, 4)).astype(np.float32)
        run_model(tmp_path, m, {"x": x, "idx": rng.integers(-4, 4, (2, seq, 2)).astype(np.int64),
                                "u": rng.standard_normal((2, seq, 2)).astype(np.float32)})


def test_nested_loops_unrolling_is_bounded(tmp_path):
    # three nested loops of 100 iterations: each alone is small, multiplied out they are not
    ins = [("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2])]
    inner = body([helper.make_node("Add", ["v", "x"], ["v2"]), helper.make_node("Identity", ["cin"], ["cout"])], ["cout", "v2"], ins=ins)
    for level in range(2):
        inner = body([helper.make_node("Loop", ["M", "c0", "v"], ["v2"], body=inner),
                      helper.make_node("Identity", ["cin"], ["cout"])], ["cout", "v2"], ins=ins)
    x = np.ones(2, np.float32)
    err = refused(tmp_path, [helper.make_node("Loop", ["M", "c0", "v0"], ["vf"], body=inner, name="outer")],
                  {"x": x, "v0": x}, ["vf"], [const("M", np.array(100, np.int64)), const("c0", np.array(True))])
    assert "outer/iter" in err and "more than 131072 nodes" in err
