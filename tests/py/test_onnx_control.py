"""ONNX control flow kept as control flow (issue 14, item 3): while-loops (a Loop whose body
computes its condition) and If nodes predication does not take (a large branch, a loop in a
branch) run through the control runner (src/runtime/control.c). Each case runs several inputs
through ONE session, in eager and graph mode on the simulator, against
onnx.reference.ReferenceEvaluator; the condition takes different values in the same session,
so the same plan takes different paths. Hostile nesting is a clear error."""
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
graft = pytest.importorskip("graft")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

DEVICE = os.environ.get("GRAFT_TEST_DEVICE", "sim")
MODES = ["eager", "graph"]
FT = TensorProto.FLOAT
T = {np.dtype(np.float32): FT, np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}
rng = np.random.default_rng(3)


def make(nodes, ins, outs, inits=(), opset=18):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, T[np.dtype(d)], list(s)) for k, (d, s) in ins.items()],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def const(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def body(nodes, outs, ins, inits=()):
    return helper.make_graph(nodes, "body", [helper.make_tensor_value_info(n, t, s) for n, t, s in ins],
                             [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs], initializer=list(inits))


def run_session(tmp_path, m, feed_list, mode, ref_model=None):
    """ref_model: what the reference runs when it differs (onnx.reference runs no iteration of a
    Loop whose condition input is left out, where ONNX runs until the body's condition is false)."""
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    ref = ReferenceEvaluator(ref_model or m)
    outs = [o.name for o in m.graph.output]
    with graft.load(path, device=DEVICE, mode=mode) as s:
        for feeds in feed_list:
            got = s.run(**feeds)
            want = ref.run(None, feeds)
            for name, w in zip(outs, want):
                w, g = np.asarray(w), np.asarray(got[name])
                assert g.shape == w.shape and g.dtype == w.dtype, f"{name}: {g.shape} {g.dtype} against {w.shape} {w.dtype}"
                if w.dtype.kind == "f":
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"{name} for {feeds}")
                else:
                    np.testing.assert_array_equal(g, w, err_msg=f"{name} for {feeds}")
        return s.explain()


# ---- while-loops ------------------------------------------------------------------------------
# v <- v + x (x read from the outer graph), n <- n + i; go on while sum(v) < limit
WHILE_BODY = body([helper.make_node("Add", ["v", "x"], ["v2"]), helper.make_node("Add", ["n", "i"], ["n2"]),
                   helper.make_node("ReduceSum", ["v2"], ["s"], keepdims=0), helper.make_node("Less", ["s", "limit"], ["cout"])],
                  ["cout", "v2", "n2"],
                  [("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2, 3]), ("n", TensorProto.INT64, [])])


def while_model(m_input, cond_input):
    ins = {"x": (np.float32, (2, 3)), "v0": (np.float32, (2, 3)), "limit": (np.float32, ())}
    if m_input == "input":
        ins["M"] = (np.int64, ())
    if cond_input == "input":
        ins["c0"] = (np.bool_, ())
    inits = [const("n0", np.int64(0))]
    if m_input == "const":
        inits.append(const("M", np.int64(6)))
    loop_in = ["M" if m_input else "", "c0" if cond_input else "", "v0", "n0"]
    if cond_input == "const":
        inits.append(const("c0", np.array(True)))
    nodes = [helper.make_node("Loop", loop_in, ["vf", "nf"], body=WHILE_BODY, name="wl"),
             helper.make_node("Mul", ["vf", "vf"], ["sq"])]
    return make(nodes, ins, ["vf", "nf", "sq"], inits)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("m_input,cond_input", [(None, None), ("const", None), ("input", None), ("input", "input"),
                                                (None, "const")])
def test_while_loop(tmp_path, mode, m_input, cond_input):
    m = while_model(m_input, cond_input)
    x = np.abs(rng.standard_normal((2, 3))).astype(np.float32) + 0.1
    feeds = []
    for limit, mm, c0 in ((5.0, 10, True), (0.0, 10, True), (40.0, 3, True), (12.0, 0, True), (20.0, 10, False), (25.0, 100, True)):
        f = {"x": x, "v0": x * 0.5, "limit": np.float32(limit)}
        if m_input == "input":
            f["M"] = np.int64(mm)
        if cond_input == "input":
            f["c0"] = np.array(c0)
        feeds.append(f)
    ref = while_model(m_input, cond_input or "const")
    text = run_session(tmp_path, m, feeds, mode, ref_model=ref)
    assert "loop 'wl': a while-loop" in text
    if mode == "graph":  # kept on the device: one WHILE node captured once, launched per run that iterates
        assert "one device WHILE conditional node (1 captures" in text, text


def test_while_loop_without_end_is_an_error_not_a_hang(tmp_path):
    b = body([helper.make_node("Identity", ["v"], ["v2"]), helper.make_node("Constant", [], ["cout"], value=const("t", np.array(True))),
              helper.make_node("And", ["cout", "flag"], ["c2"])], ["c2", "v2"],
             [("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [1])])
    m = make([helper.make_node("Loop", ["", "", "v0"], ["vf"], body=b, name="forever")], {"v0": (np.float32, (1,)), "flag": (np.bool_, ())},
             ["vf"])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    with graft.load(path, device=DEVICE, mode="eager") as s:
        got = s.run(v0=np.ones(1, np.float32), flag=np.array(False))  # stops after one iteration
        np.testing.assert_array_equal(got["vf"], [1])
        # the cap is 2^20 iterations: the simulator takes a while per iteration, so the error is checked in the C test


def test_while_loop_changing_shape_is_refused(tmp_path):
    b = body([helper.make_node("Concat", ["v", "v"], ["v2"], axis=0), helper.make_node("ReduceSum", ["v2"], ["s"], keepdims=0),
              helper.make_node("Less", ["s", "ten"], ["cout"])], ["cout", "v2"],
             [("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2])], [const("ten", np.float32(10))])
    m = make([helper.make_node("Loop", ["", "", "v0"], ["vf"], body=b, name="grows")], {"v0": (np.float32, (2,))}, ["vf"])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    with pytest.raises(graft.GraftError) as e:
        graft.load(path, device=DEVICE, mode="eager")
    assert "'grows'" in str(e.value) and "keep their type and shape" in str(e.value)


def scan_while_model(m_input, ref=False):
    """v <- v + 1 while v[0] < lim, scan output: [v, v * i] per iteration; M constant 6, an input, or absent."""
    b = body([helper.make_node("Add", ["v", "one"], ["v2"]), helper.make_node("Gather", ["v2", "zero"], ["v0s"], axis=0),
              helper.make_node("Less", ["v0s", "lim"], ["cout"]), helper.make_node("Cast", ["i"], ["fi"], to=FT),
              helper.make_node("Mul", ["v2", "fi"], ["vi"])], ["cout", "v2", "vi"],
             [("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2])],
             [const("one", np.float32(1)), const("zero", np.int64(0))])
    ins = {"v0": (np.float32, (2,)), "lim": (np.float32, ())}
    inits = [const("t", np.array(True))]
    if m_input == "input":
        ins["M"] = (np.int64, ())
    if m_input == "const":
        inits.append(const("M", np.int64(6)))
    loop_in = ["M" if m_input else "", "t" if ref else "", "v0"]
    return make([helper.make_node("Loop", loop_in, ["vf", "vs"], body=b, name="scanning")], ins, ["vf", "vs"], inits)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("m_input", [None, "const", "input"])
def test_while_loop_scan_outputs(tmp_path, mode, m_input):
    """Scan outputs of a while-loop: their length is the iteration count, a data-dependent dim."""
    feeds = []
    for v0, lim, mm in (((0, 5), 3, 10), ((2.5, 0), 7, 4), ((0, 0), 1.5, 10), ((-3, 1), 30, 2), ((0, 5), 3, 10)):
        f = {"v0": np.array(v0, np.float32), "lim": np.float32(lim)}
        if m_input == "input":
            f["M"] = np.int64(mm)
        feeds.append(f)
    text = run_session(tmp_path, scan_while_model(m_input), feeds, mode, ref_model=scan_while_model(m_input, ref=True))
    assert "partition break: Loop 'scanning'" in text


def test_while_loop_scan_outputs_past_the_limit(tmp_path):
    path = str(tmp_path / "m.onnx")
    onnx.save(scan_while_model(None), path)
    with graft.load(path, device=DEVICE, mode="eager") as s:
        with pytest.raises(graft.GraftError) as e:
            s.run(v0=np.zeros(2, np.float32), lim=np.float32(1000))
        assert "Loop 'scanning'" in str(e.value) and "outside 0..256" in str(e.value)
        got = s.run(v0=np.zeros(2, np.float32), lim=np.float32(2))  # and the session goes on
        assert got["vs"].shape == (2, 2)


# ---- If: conditional execution ----------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("m_input", [False, True])
def test_trip_count_past_the_unroll_limit(tmp_path, mode, m_input):
    """M = 1000 (past the 256 iterations graft unrolls; a constant, or a run-time input given 1000
    and 300), cond left out, no scan outputs: a loop step instead of an error. The expected values are computed here: the
    reference evaluator treats the omitted cond as false and runs no iteration, while the ONNX
    spec says an omitted cond means the loop runs M times."""
    bd = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["co"]), helper.make_node("Add", ["v", "one"], ["vo"])], "b",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("co", TensorProto.BOOL, []), helper.make_tensor_value_info("vo", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    ins = [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])]
    if m_input:
        ins.append(helper.make_tensor_value_info("M", TensorProto.INT64, []))
    g = helper.make_graph([helper.make_node("Loop", ["M", "", "v0"], ["vf"], body=bd, name="lp")], "g", ins,
                          [helper.make_tensor_value_info("vf", TensorProto.FLOAT, [2])],
                          [] if m_input else [numpy_helper.from_array(np.array(1000, np.int64), "M")])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    with graft.load(path, device=DEVICE, mode=mode) as s:
        for x, m in ((np.array([1, -2], np.float32), 1000), (np.array([0.5, 3], np.float32), 300),
                     (np.array([2, 2], np.float32), 1000)):
            feeds = {"v0": x, "M": np.array(m, np.int64)} if m_input else {"v0": x}
            np.testing.assert_array_equal(np.asarray(s.run(**feeds)["vf"]), x + (m if m_input else 1000))


def branch(nodes, out, inits=()):
    return helper.make_graph(nodes, "b", [], [helper.make_tensor_value_info(out, TensorProto.UNDEFINED, None)], initializer=list(inits))


def if_model(n):
    """y = sum(x) > 0 ? tanh(x) * 2 : x - 1 over x of n elements (n large: conditional execution)."""
    then_b = branch([helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Mul", ["t", "two"], ["ty"])], "ty", [const("two", np.float32(2))])
    else_b = branch([helper.make_node("Sub", ["x", "one"], ["ey"])], "ey", [const("one", np.float32(1))])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "z"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b, name="big_if"),
             helper.make_node("Add", ["y", "x"], ["out"])]
    return make(nodes, {"x": (np.float32, (n,))}, ["out"], [const("z", np.float32(0))])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n,strategy", [(8, "predicated"), (1 << 20, "conditional execution")])
def test_if_strategy_by_branch_size(tmp_path, mode, n, strategy):
    m = if_model(n)
    base = rng.standard_normal(n).astype(np.float32)
    feeds = [{"x": base + 1}, {"x": base - 1}, {"x": base + 2}, {"x": base - 3}]  # both paths, twice, one session
    if n > 1024:
        feeds = [{"x": np.full(n, v, np.float32)} for v in (0.5, -0.5, 0.25, -1.0)]
    text = run_session(tmp_path, m, feeds, mode)
    assert "if 'big_if'" in text and strategy in text
    if mode == "graph" and n > 1024:  # one IF_ELSE graph took both paths
        assert "one device IF_ELSE conditional node (1 captures, 4 launches)" in text, text


def loop_in_if_model(ref=False):
    """If whose then branch holds a while-loop (never predicated). ref: the loop's condition input given."""
    wb = body([helper.make_node("Mul", ["v", "two"], ["v2"]), helper.make_node("ReduceSum", ["v2"], ["s"], keepdims=0),
               helper.make_node("Less", ["s", "hundred"], ["cout"])], ["cout", "v2"],
              [("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [3])],
              [const("two", np.float32(2)), const("hundred", np.float32(100))])
    then_b = branch([helper.make_node("Loop", ["", "t" if ref else "", "x"], ["lv"], body=wb, name="inner_loop")], "lv",
                    [const("t", np.array(True))] if ref else [])
    else_b = branch([helper.make_node("Neg", ["x"], ["ey"])], "ey")
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "z"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b, name="outer_if")]
    return make(nodes, {"x": (np.float32, (3,))}, ["y"], [const("z", np.float32(0))])


@pytest.mark.parametrize("mode", MODES)
def test_loop_nested_in_if(tmp_path, mode):
    feeds = [{"x": np.array(v, np.float32)} for v in ([1, 2, 3], [-1, -2, 0], [0.5, 0.1, 0.2], [-4, 1, 1], [30, 40, 50])]
    text = run_session(tmp_path, loop_in_if_model(), feeds, mode, ref_model=loop_in_if_model(ref=True))
    assert "if 'outer_if': conditional execution" in text
    if mode == "graph":  # the branch holds a loop (a host step of its plan): host-driven if
        assert "host-driven: the subgraph holds a host step" in text, text


@pytest.mark.parametrize("mode", MODES)
def test_while_loop_nested_in_while_loop(tmp_path, mode):
    """outer: v <- inner(v) + 1 while sum(v) < 200; inner: w <- w * 1.5 while max(w) < 10 (reads `x` two levels up)."""
    ib = body([helper.make_node("Mul", ["w", "x"], ["w2"]), helper.make_node("ReduceMax", ["w2"], ["mx"], keepdims=0),
               helper.make_node("Less", ["mx", "ten"], ["ic"])], ["ic", "w2"],
              [("j", TensorProto.INT64, []), ("icin", TensorProto.BOOL, []), ("w", FT, [2])], [const("ten", np.float32(10))])
    ob = body([helper.make_node("Loop", ["", "", "v"], ["vi"], body=ib, name="inner"), helper.make_node("Add", ["vi", "one"], ["v2"]),
               helper.make_node("ReduceSum", ["v2"], ["s"], keepdims=0), helper.make_node("Less", ["s", "lim"], ["oc"])],
              ["oc", "v2"], [("i", TensorProto.INT64, []), ("cin", TensorProto.BOOL, []), ("v", FT, [2])],
              [const("one", np.float32(1)), const("lim", np.float32(200))])
    m = make([helper.make_node("Loop", ["M", "", "v0"], ["vf"], body=ob, name="outer")],
             {"M": (np.int64, ()), "v0": (np.float32, (2,)), "x": (np.float32, ())}, ["vf"])
    feeds = [{"M": np.int64(k), "v0": np.array([1, 2], np.float32), "x": np.float32(f)} for k, f in ((10, 1.5), (2, 2.0), (50, 1.25))]
    ob_ref = onnx.helper.make_graph(list(ob.node), "body", list(ob.input), list(ob.output), list(ob.initializer))
    for n in ob_ref.node:
        if n.op_type == "Loop":
            n.input[1] = "t"
    ob_ref.initializer.append(const("t", np.array(True)))
    ref = make([helper.make_node("Loop", ["M", "t", "v0"], ["vf"], body=ob_ref, name="outer")],
               {"M": (np.int64, ()), "v0": (np.float32, (2,)), "x": (np.float32, ())}, ["vf"], [const("t", np.array(True))])
    run_session(tmp_path, m, feeds, mode, ref_model=ref)


# ---- hostile nesting --------------------------------------------------------------------------
def test_deep_if_nesting_is_a_clear_error(tmp_path):
    """If inside If inside If ... 30 levels (protobuf itself stops near 32): refused with the depth limit."""
    g = branch([helper.make_node("Identity", ["x"], ["y0"])], "y0")
    for d in range(30):
        e = branch([helper.make_node("Identity", ["x"], [f"e{d}"])], f"e{d}")
        g = branch([helper.make_node("If", ["c"], [f"y{d + 1}"], then_branch=g, else_branch=e, name=f"if{d}")], f"y{d + 1}")
    m = make(list(g.node), {"x": (np.float32, (1,)), "c": (np.bool_, ())}, [g.output[0].name])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    with pytest.raises(graft.GraftError) as e:
        graft.load(path, device=DEVICE, mode="eager")
    assert "nest more than 16 levels" in str(e.value)


@pytest.mark.parametrize("mode", MODES)
def test_nesting_within_the_limit_runs(tmp_path, mode):
    """8 nested run-time Ifs (each predicated: small) run and match the reference."""
    g = branch([helper.make_node("Neg", ["x"], ["y0"])], "y0")
    for d in range(8):
        e = branch([helper.make_node("Add", ["x", "one"], [f"e{d}"])], f"e{d}", [const("one", np.float32(d))])
        g = branch([helper.make_node("If", [f"c{d % 2}"], [f"y{d + 1}"], then_branch=g, else_branch=e, name=f"if{d}")], f"y{d + 1}")
    m = make(list(g.node), {"x": (np.float32, (2,)), "c0": (np.bool_, ()), "c1": (np.bool_, ())}, [g.output[0].name])
    feeds = [{"x": np.array([1, -2], np.float32), "c0": np.array(a), "c1": np.array(b)} for a in (True, False) for b in (True, False)]
    run_session(tmp_path, m, feeds, mode)


@pytest.mark.parametrize("mode", MODES)
def test_while_loop_scan_outputs_zero_iterations(tmp_path, mode):
    """M = 0: no iteration; the carried values are the initial ones, the scan output is [0, 2]
    (the reference cannot stack an empty list, so this is checked here)."""
    path = str(tmp_path / "m.onnx")
    onnx.save(scan_while_model("input"), path)
    with graft.load(path, device=DEVICE, mode=mode) as s:
        for m in (0, 3, 0):
            got = s.run(v0=np.array([1, 2], np.float32), lim=np.float32(100), M=np.int64(m))
            vs = np.asarray(got["vs"])  # CUDA sessions return device tensors
            assert vs.shape == (m, 2) and vs.dtype == np.float32
            np.testing.assert_array_equal(got["vf"], np.array([1, 2], np.float32) + m)
