"""Ops whose output shape depends on tensor data (issue 14): NonZero, Range on
run-time scalars, Loop with a run-time trip count. Each is a data-dependent dim that
the session's probe (src/runtime/probe.c) computes before each run, reads on the host
and binds; the rest of the graph is planned per count.

Every case runs several input values through ONE session (the plan-per-count cache),
in eager and graph mode on the simulator, against onnx.reference.ReferenceEvaluator,
through the Python package (PYTHONPATH=python, GRAFT_LIBRARY=libgraft.so: ctest sets
both), and `graft explain` through the CLI (GRAFT_BIN)."""
import os
import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
graft = pytest.importorskip("graft")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

GRAFT = os.environ.get("GRAFT_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin", "graft"))
DEVICE = os.environ.get("GRAFT_TEST_DEVICE", "sim")
MODES = ["eager", "graph"]
T = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.int64): TensorProto.INT64,
     np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.uint8): TensorProto.UINT8}
rng = np.random.default_rng(14)


def make(nodes, ins, outs, inits=(), opset=18):
    """ins: {name: (numpy dtype, shape)}; outputs untyped (graft and the reference infer them)."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, T[np.dtype(d)], list(s)) for k, (d, s) in ins.items()],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def const(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def run_session(tmp_path, m, feed_list, mode, rtol=1e-5, atol=1e-6, scans=(), zero_trip=None, ref_model=None):
    """All feeds through one session; every output compared with the reference. Loop scan outputs
    (names in scans): graft stacks the iterations on a new leading axis as ONNX Runtime does, the
    reference vstacks them; the same elements in the same order either way. The reference cannot
    run a Loop of zero iterations with scan outputs (it concatenates an empty list): zero_trip(got,
    feeds) checks those runs instead. ref_model: the model the reference runs, when it differs."""
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    ref = ReferenceEvaluator(ref_model or m)
    outs = [o.name for o in m.graph.output]
    with graft.load(path, device=DEVICE, mode=mode) as s:
        for feeds in feed_list:
            got = s.run(**feeds)
            try:
                want = ref.run(None, feeds)
            except ValueError as e:
                assert zero_trip and "at least one array" in str(e), e
                zero_trip(got, feeds)
                continue
            for name, w in zip(outs, want):
                w = np.asarray(w)
                g = np.asarray(got[name])
                if name in scans:
                    assert g.size == w.size and g.ndim == 3, f"{name}: {g.shape} against the reference's {w.shape}"
                    g = g.reshape(w.shape)
                assert g.shape == w.shape, f"{name}: shape {g.shape} != {w.shape} for {feeds}"
                assert g.dtype == w.dtype, f"{name}: dtype {g.dtype} != {w.dtype}"
                if w.dtype.kind == "f":
                    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=name)
                else:
                    np.testing.assert_array_equal(g, w, err_msg=name)
        return s.explain()


def sparse(shape, dtype, density):
    a = rng.standard_normal(shape) * (rng.random(shape) < density)
    if np.dtype(dtype) == np.bool_:
        return a != 0
    if np.dtype(dtype).kind in "iu":
        return (np.sign(a) * rng.integers(1, 5, shape) if np.dtype(dtype).kind == "i" else (a != 0) * 3).astype(dtype)
    return a.astype(dtype)


# ---- NonZero ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,dtype", [((7,), np.float32), ((3, 4), np.int64), ((2, 3, 4), np.bool_), ((2, 2, 3, 2), np.int32),
                                         ((5, 3), np.float64), ((4, 4), np.uint8)])
def test_nonzero_many_values_one_session(tmp_path, mode, shape, dtype):
    feeds = [{"x": sparse(shape, dtype, d)} for d in (0.3, 0.0, 1.0, 0.6, 0.3)]
    feeds[2]["x"] = np.ones(shape, dtype)  # all non-zero: nnz = numel
    m = make([helper.make_node("NonZero", ["x"], ["y"], name="nz")], {"x": (dtype, shape)}, ["y"])
    text = run_session(tmp_path, m, feeds, mode)
    assert "NonZero 'nz': output shape depends on tensor data" in text
    assert "one synchronisation per run" in text


def test_nonzero_nan_and_negative_zero(tmp_path):
    x = np.array([[np.nan, -0.0, 0.0], [1e-30, -1.0, 0.0]], np.float32)
    m = make([helper.make_node("NonZero", ["x"], ["y"])], {"x": (np.float32, x.shape)}, ["y"])
    run_session(tmp_path, m, [{"x": x}], "eager")


@pytest.mark.parametrize("mode", MODES)
def test_nonzero_feeds_gathernd_and_arithmetic(tmp_path, mode):
    """x[mask] as exporters write it: GatherND(x, Transpose(NonZero(mask))), then more ops on the
    data-dependent length (a reduction, a Shape, an elementwise op)."""
    nodes = [helper.make_node("Greater", ["x", "t"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["nz"], name="where_pos"),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["sel"]),
             helper.make_node("Mul", ["sel", "two"], ["y"]),
             helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0),
             helper.make_node("Shape", ["sel"], ["n"])]
    feeds = [{"x": rng.standard_normal((4, 5)).astype(np.float32)} for _ in range(4)]
    feeds.append({"x": -np.ones((4, 5), np.float32)})  # nothing selected
    m = make(nodes, {"x": (np.float32, (4, 5))}, ["y", "total", "n"], [const("t", np.float32(0.2)), const("two", np.float32(2))])
    run_session(tmp_path, m, feeds, mode)


@pytest.mark.parametrize("mode", MODES)
def test_nonzero_1d_feeds_gather(tmp_path, mode):
    nodes = [helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
             helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)]
    feeds = [{"m": (rng.random(6) < p), "x": rng.standard_normal((2, 6)).astype(np.float32)} for p in (0.5, 0.0, 1.0, 0.2)]
    m = make(nodes, {"m": (np.bool_, (6,)), "x": (np.float32, (2, 6))}, ["y"], [const("ax0", np.array([0], np.int64))])
    run_session(tmp_path, m, feeds, mode)


def test_nonzero_symbolic_input(tmp_path):
    """The input itself has a symbolic dim: the count's range is unbounded, the binding has both."""
    g = helper.make_graph([helper.make_node("NonZero", ["x"], ["y"], name="nz")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    run_session(tmp_path, m, [{"x": sparse((n, 3), np.float32, 0.5)} for n in (2, 5, 2, 1)], "eager")


def test_nonzero_of_nonzero_output(tmp_path):
    """A count that depends on another count: the probe's own probe computes the first."""
    nodes = [helper.make_node("NonZero", ["x"], ["a"], name="outer"),
             helper.make_node("NonZero", ["a"], ["b"], name="inner")]
    feeds = [{"x": sparse((3, 3), np.float32, d)} for d in (0.5, 1.0, 0.0, 0.3)]
    run_session(tmp_path, make(nodes, {"x": (np.float32, (3, 3))}, ["a", "b"]), feeds, "eager")


# ---- Range on run-time scalars -------------------------------------------------------------------
RANGE_CASES = {
    np.int64: [(0, 5, 1), (10, 2, -3), (3, 3, 1), (5, 0, 1), (-4, 9, 4), (0, 1, 1)],
    np.int32: [(1, 7, 2), (7, 1, -2), (0, 0, 5)],
    np.float32: [(0.5, 3.1, 0.5), (2.0, -1.0, -0.75), (1.0, 1.0, 0.1), (0.0, 1.0, 0.25)],
    np.float64: [(-1.5, 2.0, 0.3), (3.0, 0.0, -1.0)],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", list(RANGE_CASES))
def test_range_run_time_bounds(tmp_path, mode, dtype):
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["r"], name="rg"),
             helper.make_node("Add", ["r", "r"], ["y"])]
    scal = {k: (dtype, ()) for k in "sld"}
    feeds = [{"s": np.array(a, dtype), "l": np.array(b, dtype), "d": np.array(c, dtype)} for a, b, c in RANGE_CASES[dtype]]
    text = run_session(tmp_path, make(nodes, scal, ["r", "y"]), feeds, mode)
    assert "Range 'rg': output shape depends on tensor data" in text


@pytest.mark.parametrize("mode", MODES)
def test_range_length_from_a_tensor(tmp_path, mode):
    """Range(0, ReduceSum(x > 0), 1): the limit computed on the device from data."""
    nodes = [helper.make_node("Greater", ["x", "zf"], ["pos"]),
             helper.make_node("Cast", ["pos"], ["posi"], to=TensorProto.INT64),
             helper.make_node("ReduceSum", ["posi"], ["n"], keepdims=0),
             helper.make_node("Range", ["z", "n", "one"], ["r"]),
             helper.make_node("Mul", ["r", "r"], ["y"])]
    feeds = [{"x": rng.standard_normal(8).astype(np.float32)} for _ in range(3)] + [{"x": -np.ones(8, np.float32)}]
    m = make(nodes, {"x": (np.float32, (8,))}, ["y"], [const("zf", np.float32(0)), const("z", np.int64(0)), const("one", np.int64(1))])
    run_session(tmp_path, m, feeds, mode)


def test_range_hostile_values_are_clear_errors(tmp_path):
    m = make([helper.make_node("Range", ["s", "l", "d"], ["r"], name="rg")], {k: (np.int64, ()) for k in "sld"}, ["r"])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    with graft.load(path, device=DEVICE, mode="eager") as s:
        good = s.run(s=np.int64(0), l=np.int64(4), d=np.int64(1))
        np.testing.assert_array_equal(good["r"], np.arange(4))
        with pytest.raises(graft.GraftError) as e:  # delta 0: ONNX says it is an error
            s.run(s=np.int64(0), l=np.int64(4), d=np.int64(0))
        assert "Range 'rg'" in str(e.value) and "finite" in str(e.value)
        with pytest.raises(graft.GraftError) as e:  # 2^40 elements: refused before any allocation
            s.run(s=np.int64(0), l=np.int64(1 << 40), d=np.int64(1))
        assert "Range 'rg'" in str(e.value) and "outside" in str(e.value)
        again = s.run(s=np.int64(2), l=np.int64(-2), d=np.int64(-1))  # the session still works
        np.testing.assert_array_equal(again["r"], np.arange(2, -2, -1))


# ---- explain ------------------------------------------------------------------------------------------
def test_explain_names_the_break(tmp_path):
    m = make([helper.make_node("NonZero", ["x"], ["y"], name="nz")], {"x": (np.float32, (2, 3))}, ["y"])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    sym = subprocess.run([GRAFT, "explain", str(path)], capture_output=True, text=True)
    assert sym.returncode == 0, sym.stderr
    assert "nonzero_nz" in sym.stdout and "data-dependent" in sym.stdout
    assert "NonZero 'nz': output shape depends on tensor data; graft runs the graph up to its count, reads the count on the " \
           "host (one synchronisation per run) and plans the rest for it" in sym.stdout
    np.save(tmp_path / "x.npy", np.array([[0, 1, 2], [0, 0, 3]], np.float32))
    bound = subprocess.run([GRAFT, "explain", str(path), "--device", DEVICE, "--input", f"x={tmp_path / 'x.npy'}"],
                           capture_output=True, text=True)
    assert bound.returncode == 0, bound.stderr
    assert "partition break: NonZero 'nz'" in bound.stdout and "3 in this binding" in bound.stdout


# ---- Loop with a run-time trip count -----------------------------------------------------------
FT = TensorProto.FLOAT


def body(nodes, outs, ins, inits=()):
    return helper.make_graph(nodes, "body", [helper.make_tensor_value_info(n, t, s) for n, t, s in ins],
                             [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs], initializer=list(inits))


# v <- v * 0.5 + x (x read from the outer graph), acc <- acc + i; scans: v and i * x
LOOP_BODY = body([helper.make_node("Mul", ["v", "half"], ["vh"]), helper.make_node("Add", ["vh", "x"], ["v2"]),
                  helper.make_node("Add", ["acc", "i"], ["acc2"]),
                  helper.make_node("Cast", ["i"], ["fi"], to=FT), helper.make_node("Mul", ["fi", "x"], ["ix"]),
                  helper.make_node("Identity", ["cin"], ["cout"])],
                 ["cout", "v2", "acc2", "v2", "ix"],
                 [("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2, 3]), ("acc", TensorProto.INT64, [])],
                 [const("half", np.float32(0.5))])


def zero_iterations(got, feeds):
    """No iteration: the carried values are the initial ones, the scan outputs [0, 2, 3]."""
    np.testing.assert_array_equal(got["vf"], feeds["v0"])
    np.testing.assert_array_equal(got["af"], feeds["a0"])
    assert got["ixs"].shape == (0, 2, 3) and got["ixs"].dtype == np.float32
    seen_zero.append(1)


seen_zero = []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("with_cond", [True, False])
def test_loop_run_time_trip_count(tmp_path, mode, with_cond):
    def model(cond):
        ins = ["M", "c0" if cond else "", "v0", "a0"]
        nodes = [helper.make_node("Loop", ins, ["vf", "af", "vs", "ixs"], body=LOOP_BODY, name="lp")]
        return make(nodes, {"M": (np.int64, ()), "x": (np.float32, (2, 3)), "v0": (np.float32, (2, 3)), "a0": (np.int64, ())},
                    ["vf", "af", "vs", "ixs"], [const("c0", np.array(True))])
    m = model(with_cond)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    feeds = [{"M": np.array(k, np.int64), "x": x * (k + 1), "v0": x, "a0": np.array(7, np.int64)} for k in (3, 1, 5, 3, 0, 2)]
    # onnx.reference runs no iteration when the condition input is left out: it runs the model that gives it
    text = run_session(tmp_path, m, feeds, mode, scans=("vs", "ixs"), zero_trip=zero_iterations, ref_model=model(True))
    assert "Loop 'lp'" in text and seen_zero  # the M = 0 run was checked


@pytest.mark.parametrize("mode", MODES)
def test_loop_trip_count_computed_from_data(tmp_path, mode):
    """M = ReduceSum(mask) computed on the device; a negative M runs no iteration."""
    nodes = [helper.make_node("Cast", ["mask"], ["mi"], to=TensorProto.INT64),
             helper.make_node("ReduceSum", ["mi"], ["s"], keepdims=0),
             helper.make_node("Sub", ["s", "off"], ["M"]),
             helper.make_node("Loop", ["M", "c0", "v0", "a0"], ["vf", "af", "vs", "ixs"], body=LOOP_BODY, name="lp"),
             helper.make_node("ReduceSum", ["vs"], ["total"], keepdims=0)]
    m = make(nodes, {"mask": (np.bool_, (6,)), "x": (np.float32, (2, 3)), "v0": (np.float32, (2, 3)), "a0": (np.int64, ())},
             ["vf", "af", "ixs", "total"], [const("off", np.int64(1)), const("c0", np.array(True))])
    x = rng.standard_normal((2, 3)).astype(np.float32)
    feeds = [{"mask": rng.random(6) < p, "x": x, "v0": -x, "a0": np.array(1, np.int64)} for p in (0.5, 1.0, 0.0, 0.3)]
    run_session(tmp_path, m, feeds, mode, scans=("ixs",), zero_trip=zero_iterations)


def test_loop_run_time_trip_count_limits(tmp_path):
    nodes = [helper.make_node("Loop", ["M", "", "v0", "a0"], ["vf", "af", "vs", "ixs"], body=LOOP_BODY, name="lp")]
    m = make(nodes, {"M": (np.int64, ()), "x": (np.float32, (2, 3)), "v0": (np.float32, (2, 3)), "a0": (np.int64, ())},
             ["vf", "af"])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    x = np.ones((2, 3), np.float32)
    with graft.load(path, device=DEVICE, mode="eager") as s:
        with pytest.raises(graft.GraftError) as e:
            s.run(M=np.int64(1000), x=x, v0=x, a0=np.int64(0))
        assert "Loop 'lp'" in str(e.value) and "outside 0..256" in str(e.value)
        got = s.run(M=np.int64(2), x=x, v0=x, a0=np.int64(0))
        np.testing.assert_array_equal(got["af"], 1)


@pytest.mark.parametrize("mode", MODES)
def test_loop_while_with_run_time_trip_count(tmp_path, mode):
    """Run-time M and a body that computes its condition (a while-loop): run by the control
    runner (runtime/control.c; tests/py/test_onnx_control.py has the rest)."""
    b = body([helper.make_node("Add", ["v", "x"], ["v2"]), helper.make_node("ReduceSum", ["v2"], ["s"], keepdims=0),
              helper.make_node("Less", ["s", "ten"], ["cout"])], ["cout", "v2"],
             [("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2, 3])], [const("ten", np.float32(10))])

    def model(cond):
        return make([helper.make_node("Loop", ["M", "c0" if cond else "", "v0"], ["vf"], body=b, name="wl")],
                    {"M": (np.int64, ()), "x": (np.float32, (2, 3)), "v0": (np.float32, (2, 3))}, ["vf"],
                    [const("c0", np.array(True))])
    x = np.abs(rng.standard_normal((2, 3))).astype(np.float32)
    feeds = [{"M": np.int64(k), "x": x, "v0": x} for k in (1, 5, 0, 100)]
    text = run_session(tmp_path, model(False), feeds, mode, ref_model=model(True))
    assert "loop 'wl': a while-loop" in text


# ---- what stays refused, naming the node ---------------------------------------------------------
def test_nonzero_in_a_run_time_if_branch_is_refused(tmp_path):
    then_b = helper.make_graph([helper.make_node("NonZero", ["x"], ["t"], name="nz_in_branch")], "t", [],
                               [helper.make_tensor_value_info("t", TensorProto.UNDEFINED, None)])
    else_b = helper.make_graph([helper.make_node("Shape", ["x"], ["e"], name="shape_in_branch")], "e", [],
                               [helper.make_tensor_value_info("e", TensorProto.UNDEFINED, None)])
    m = make([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "z"], ["c"]),
              helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b, name="branchy")],
             {"x": (np.float32, (2, 2))}, ["y"], [const("z", np.float32(0))])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    with pytest.raises(graft.GraftError) as e:
        graft.load(path, device=DEVICE, mode="eager")
    assert "nz_in_branch" in str(e.value) and "If branch" in str(e.value)


def test_arena_max_is_refused_for_data_dependent_dims(tmp_path):
    m = make([helper.make_node("NonZero", ["x"], ["y"], name="nz")], {"x": (np.float32, (2, 3))}, ["y"])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    with pytest.raises(graft.GraftError) as e:
        graft.load(path, device=DEVICE, mode="eager", arena="max")
    assert "NonZero 'nz'" in str(e.value) and "data-dependent" in str(e.value)


# ---- Scan over a symbolic sequence length (a loop unrolled per binding) --------------------------
SCAN_BODY = body([helper.make_node("Add", ["st", "xi"], ["st2"]), helper.make_node("Mul", ["st2", "xi"], ["o"])],
                 ["st2", "o"], [("st", FT, [3]), ("xi", FT, [3])])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("in_dir,out_dir,in_axis,out_axis", [(0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 1, 1), (1, 1, 1, 0)])
def test_scan_symbolic_length(tmp_path, mode, in_dir, out_dir, in_axis, out_axis):
    node = helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=SCAN_BODY, num_scan_inputs=1, name="sc",
                            scan_input_directions=[in_dir], scan_output_directions=[out_dir],
                            scan_input_axes=[in_axis], scan_output_axes=[out_axis])
    xs_shape = ["T", 3] if in_axis == 0 else [3, "T"]
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("s0", FT, [3]), helper.make_tensor_value_info("xs", FT, xs_shape)],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in ("sf", "ys")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    # onnx.reference implements only the default directions and axes: numpy here, the reference as well for those
    ref = ReferenceEvaluator(m) if (in_dir, out_dir, in_axis, out_axis) == (0, 0, 0, 0) else None
    with graft.load(path, device=DEVICE, mode=mode) as sess:
        for t in (4, 1, 6, 4):
            xs = rng.standard_normal((t, 3) if in_axis == 0 else (3, t)).astype(np.float32)
            s0 = rng.standard_normal(3).astype(np.float32)
            got = sess.run(s0=s0, xs=xs)
            seq = np.moveaxis(xs, in_axis, 0)
            if in_dir:
                seq = seq[::-1]
            st, ys = s0, []
            for xi in seq:
                st = st + xi
                ys.append(st * xi)
            if out_dir:
                ys = ys[::-1]
            np.testing.assert_allclose(got["sf"], st, rtol=1e-6)
            np.testing.assert_allclose(got["ys"], np.stack(ys, axis=out_axis), rtol=1e-6)
            if ref:
                for name, w in zip(("sf", "ys"), ref.run(None, {"s0": s0, "xs": xs})):
                    np.testing.assert_allclose(got[name], w, rtol=1e-6)


def test_scan_symbolic_length_past_the_unroll_limit(tmp_path):
    g = helper.make_graph([helper.make_node("Scan", ["s0", "xs"], ["sf", "ys"], body=SCAN_BODY, num_scan_inputs=1, name="sc")], "g",
                          [helper.make_tensor_value_info("s0", FT, [3]), helper.make_tensor_value_info("xs", FT, ["T", 3])],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in ("sf", "ys")])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    with graft.load(path, device=DEVICE, mode="eager") as s:
        with pytest.raises(graft.GraftError) as e:
            s.run(s0=np.zeros(3, np.float32), xs=np.zeros((300, 3), np.float32))
        assert "sc" in str(e.value) and "more than the 256" in str(e.value)
        got = s.run(s0=np.zeros(3, np.float32), xs=np.ones((2, 3), np.float32))
        np.testing.assert_array_equal(got["sf"], 2)


@pytest.mark.parametrize("mode", MODES)
def test_scan_over_a_data_dependent_length(tmp_path, mode):
    """Scan over the rows NonZero selects: its length is the probe's count."""
    nodes = [helper.make_node("NonZero", ["m"], ["nz"], name="rows"),
             helper.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
             helper.make_node("Gather", ["x", "idx"], ["sel"], axis=0),
             helper.make_node("Scan", ["s0", "sel"], ["sf", "ys"], body=SCAN_BODY, num_scan_inputs=1, name="sc")]
    m = make(nodes, {"m": (np.bool_, (5,)), "x": (np.float32, (5, 3)), "s0": (np.float32, (3,))}, ["sf", "ys"],
             [const("ax0", np.array([0], np.int64))])
    feeds = [{"m": rng.random(5) < p, "x": rng.standard_normal((5, 3)).astype(np.float32),
              "s0": rng.standard_normal(3).astype(np.float32)} for p in (0.5, 1.0, 0.3, 0.5)]
    feeds = [f for f in feeds if f["m"].any()]  # the reference cannot stack zero steps
    run_session(tmp_path, m, feeds, mode)
