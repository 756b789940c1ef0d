#!/usr/bin/env python3
"""Writes the small ONNX fixtures of tests/test_onnx.c (committed; rerun only to
change them): `python3 tests/data/onnx/make_fixtures.py`. Needs the `onnx`
and `numpy` pip packages. Also seeds the fuzz corpus (tests/fuzz/corpus/onnx)."""
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "fuzz", "corpus", "onnx")
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, inits=(), opset=18, extra_opsets=(), name="g"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=ops, producer_name="graft-fixtures")
    m.ir_version = 8
    return m


def save(m, name, check=True):
    if check:
        onnx.checker.check_model(m)
    path = os.path.join(HERE, name)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


def i64(name, vals):
    return numpy_helper.from_array(np.array(vals, dtype=np.int64), name)


def main():
    written = []
    # ---- mlp: Gemm + Relu, raw_data and float_data initializers, symbolic batch
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 8
    W = numpy_helper.from_array(w, "W")  # raw_data
    B = helper.make_tensor("B", F, [3], [0.5, -1.0, 2.0])  # float_data
    m = model([helper.make_node("Gemm", ["x", "W", "B"], ["h"], name="fc", alpha=1.0, beta=1.0),
               helper.make_node("Relu", ["h"], ["y"])],
              [vi("x", F, ["N", 4])], [vi("y", F, ["N", 3])], [W, B])
    written.append(save(m, "mlp.onnx"))

    # ---- shape chain: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, concrete dims
    def chain(xshape, yshape):
        return model([
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
            helper.make_node("Unsqueeze", ["d0", "ax0"], ["d0u"]),
            helper.make_node("Concat", ["d0u", "minus1"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"], name="flatten"),
        ], [vi("x", F, xshape)], [vi("y", F, yshape)],
            [i64("zero", 0), i64("ax0", [0]), i64("minus1", [-1])])
    written.append(save(chain([2, 3, 4], [2, 12]), "shape_chain.onnx"))
    written.append(save(chain(["batch", 3, 4], ["batch", 12]), "shape_chain_sym.onnx"))

    # ---- Shape of a partly symbolic tensor, using only its concrete dim: still folds
    m = model([
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "last"], ["d"], axis=0),
        helper.make_node("Unsqueeze", ["d", "ax0"], ["du"]),
        helper.make_node("Concat", ["minus1", "du"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ], [vi("x", F, ["S", 4])], [vi("y", F, ["S", 4])], [i64("last", -1), i64("ax0", [0]), i64("minus1", [-1])])
    written.append(save(m, "shape_partial.onnx"))

    # ---- every graft dtype as an initializer, typed fields and raw_data; outputs are the initializers
    inits = [
        helper.make_tensor("f32", F, [2], [1.5, -2.0]),
        helper.make_tensor("f64", TensorProto.DOUBLE, [2], [0.25, 1e300]),
        helper.make_tensor("i64", I64, [2], [-(2 ** 40), 7]),
        helper.make_tensor("i32", TensorProto.INT32, [2], [-5, 100000]),
        helper.make_tensor("i8", TensorProto.INT8, [2], [-128, 127]),
        helper.make_tensor("u8", TensorProto.UINT8, [2], [0, 255]),
        helper.make_tensor("bool", TensorProto.BOOL, [2], [True, False]),
        helper.make_tensor("f16", TensorProto.FLOAT16, [2], [1.0, -0.5]),  # bits in int32_data
        helper.make_tensor("bf16", TensorProto.BFLOAT16, [2], [1.5, -2.0]),
        numpy_helper.from_array(np.array([[1, 2], [3, 4]], np.int32), "raw_i32"),
        numpy_helper.from_array(np.array([0.5, 2.0], np.float16), "raw_f16"),
        helper.make_tensor("scalar", F, [], [3.25]),
        helper.make_tensor("empty", F, [0, 3], []),
    ]
    outs = [vi(t.name, t.data_type, list(t.dims)) for t in inits]
    m = model([], [], outs, inits)
    written.append(save(m, "dtypes.onnx"))

    # ---- external data: W in model.onnx.data at an offset; also short / missing variants
    wext = np.arange(6, dtype=np.float32).reshape(2, 3) - 1.0
    def ext_model(location, offset, length):
        t = TensorProto()
        t.name, t.data_type = "Wext", F
        t.dims.extend([2, 3])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        return model([helper.make_node("MatMul", ["x", "Wext"], ["y"])], [vi("x", F, [1, 2])], [vi("y", F, [1, 3])], [t])
    with open(os.path.join(HERE, "external.onnx.data"), "wb") as f:
        f.write(b"\0" * 16 + wext.tobytes())
    save(ext_model("external.onnx.data", 16, 24), "external.onnx", check=False)
    save(ext_model("external.onnx.data", 24, 24), "external_short.onnx", check=False)
    save(ext_model("missing.onnx.data", 0, 24), "external_missing.onnx", check=False)
    save(ext_model("../escape.data", 0, 24), "external_escape.onnx", check=False)

    # ---- transformer-ish block: LayerNorm, MatMul, Split, Transpose, Einsum, Softmax, masking, Gelu
    d = 8
    rng = np.random.default_rng(0)
    wqkv = numpy_helper.from_array(rng.standard_normal((d, 3 * d)).astype(np.float32), "wqkv")
    gamma = numpy_helper.from_array(np.ones(d, np.float32), "gamma")
    beta = numpy_helper.from_array(np.zeros(d, np.float32), "beta")
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1, epsilon=1e-5, name="ln1"),
        helper.make_node("MatMul", ["ln", "wqkv"], ["qkv"]),
        helper.make_node("Split", ["qkv"], ["q", "k", "v"], axis=-1, num_outputs=3, name="split_qkv"),
        helper.make_node("Reshape", ["q", "heads"], ["q4"]),
        helper.make_node("Reshape", ["k", "heads"], ["k4"]),
        helper.make_node("Reshape", ["v", "heads"], ["v4"]),
        helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        helper.make_node("Einsum", ["qt", "kt"], ["scores"], equation="bhid,bhjd->bhij", name="qk"),
        helper.make_node("Div", ["scores", "scale"], ["scaled"]),
        helper.make_node("Trilu", ["ones"], ["causal"], upper=0),
        helper.make_node("Cast", ["causal"], ["mask"], to=TensorProto.BOOL),
        helper.make_node("Where", ["mask", "scaled", "neg"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("Einsum", ["probs", "vt"], ["ctx"], equation="bhij,bhjd->bhid", name="pv"),
        helper.make_node("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctxt", "back"], ["merged"]),
        helper.make_node("Gelu", ["merged"], ["y"], approximate="tanh"),
    ]
    inits = [wqkv, gamma, beta, i64("heads", [0, 0, 2, 4]), i64("back", [0, 0, -1]),
             helper.make_tensor("scale", F, [], [2.0]), helper.make_tensor("neg", F, [], [-1e9]),
             numpy_helper.from_array(np.ones((3, 3), np.float32), "ones")]
    m = model(nodes, [vi("x", F, [1, 3, d])], [vi("y", F, [1, 3, d])], inits, opset=20)
    written.append(save(m, "attention.onnx"))

    # ---- a dim with neither dim_value nor dim_param: a fresh symbol; LayerNorm's Mean used as an output
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, [None, 4])], [vi("y", F, [None, 4])])
    written.append(save(m, "unknown_dim.onnx"))
    m = model([helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean"], name="ln")],
              [vi("x", F, [2, 4])], [vi("mean", F, [2, 1])], [helper.make_tensor("s", F, [4], [1, 1, 1, 1])])
    save(m, "layernorm_mean.onnx", check=False)

    written += exporter_forms()

    # ---- bad input -------------------------------------------------------------
    good = open(os.path.join(HERE, "mlp.onnx"), "rb").read()
    with open(os.path.join(HERE, "truncated.onnx"), "wb") as f:
        f.write(good[: len(good) * 2 // 3])
    with open(os.path.join(HERE, "garbled.onnx"), "wb") as f:
        f.write(bytes((i * 151 + 7) % 256 for i in range(300)))
    nograph = onnx.ModelProto()
    nograph.ir_version = 8
    nograph.opset_import.add().version = 18
    save(nograph, "nograph.onnx", check=False)
    m = model([helper.make_node("Relu", ["nope"], ["y"], name="r")], [vi("x", F, [2])], [vi("y", F, [2])])
    save(m, "bad_input_ref.onnx", check=False)
    bad = numpy_helper.from_array(np.zeros((2, 2), np.float32), "W")
    bad.raw_data = np.zeros(3, np.float32).tobytes()
    m = model([helper.make_node("Add", ["x", "W"], ["y"])], [vi("x", F, [2, 2])], [vi("y", F, [2, 2])], [bad])
    save(m, "bad_init_size.onnx", check=False)
    relu = lambda: [helper.make_node("Relu", ["x"], ["y"])]
    save(model(relu(), [vi("x", F, [2])], [vi("y", F, [2])], opset=12), "opset12.onnx", check=False)
    save(model(relu(), [vi("x", F, [2])], [vi("y", F, [2])], opset=22), "opset22.onnx", check=False)
    m = model([helper.make_node("LpPool", ["x"], ["y"], name="pool0", kernel_shape=[2, 2])], [vi("x", F, [1, 1, 3, 3])],
              [vi("y", F, None)])
    save(m, "unsupported_op.onnx", check=False)
    m = model([helper.make_node("FancyOp", ["x"], ["y"], domain="com.example")], [vi("x", F, [2])],
              [vi("y", F, [2])], extra_opsets=[("com.example", 1)])
    save(m, "custom_domain.onnx", check=False)
    m = model([helper.make_node("Einsum", ["x", "x"], ["y"], equation="ii,jj->ij")], [vi("x", F, [2, 2])],
              [vi("y", F, None)])
    save(m, "einsum_unsupported.onnx", check=False)

    # ---- fuzz seed corpus: the small good and bad models
    os.makedirs(CORPUS, exist_ok=True)
    for name in sorted(os.listdir(HERE)):
        if name.endswith(".onnx"):
            shutil.copy(os.path.join(HERE, name), os.path.join(CORPUS, name))


def exporter_forms():
    """Forms PyTorch's exporters write without their ONNX optimizer: torch.split
    as SplitToSequence + SequenceAt, mask arithmetic on constants through
    CastLike, CumSum, Transpose and GatherND (all folded at import time)."""
    written = []
    m = model([helper.make_node("SplitToSequence", ["x", "three"], ["seq"], name="split", axis=1),
               helper.make_node("SequenceAt", ["seq", "one"], ["b"], name="at"),
               helper.make_node("CumSum", ["k", "zero"], ["c"], name="cumsum"),
               helper.make_node("CastLike", ["c", "x"], ["cf"], name="castlike"),
               helper.make_node("Add", ["b", "cf"], ["y"], name="add"),
               helper.make_node("Transpose", ["d"], ["dt"], name="tr", perm=[1, 0]),
               helper.make_node("GatherND", ["dt", "idx"], ["z"], name="gnd"),
               helper.make_node("CastLike", ["x", "k"], ["xi"], name="castlike_rt"),
               helper.make_node("SplitToSequence", ["x"], ["seq1"], name="split1", axis=0, keepdims=0),
               helper.make_node("SequenceAt", ["seq1", "minus_one"], ["w"], name="at1")],
              [vi("x", F, [2, 6])], [vi("y", F, [2, 3]), vi("z", F, [2]), vi("xi", I64, [2, 6]), vi("w", F, [6])],
              [i64("three", 3), i64("one", 1), i64("zero", 0), i64("minus_one", -1), i64("k", [1, 2, 3]),
               numpy_helper.from_array(np.array([[10, 20, 30], [40, 50, 60]], np.float32), "d"),
               i64("idx", [[2, 1], [0, 0]])])
    written.append(save(m, "exporter_forms.onnx"))
    m = model([helper.make_node("SplitToSequence", ["x"], ["seq"], name="split", axis=1),
               helper.make_node("Relu", ["seq"], ["y"], name="relu")],
              [vi("x", F, [2, 2])], [vi("y", F, None)])
    save(m, "sequence_misuse.onnx", check=False)
    m = model([helper.make_node("CumSum", ["x", "zero"], ["y"], name="cs")], [vi("x", F, [3])], [vi("y", F, [3])],
              [i64("zero", 0)])
    save(m, "cumsum_runtime.onnx", check=False)
    return written


def control_flow():
    """If on a run-time condition whose branches read outer values (an IR `if`
    with subgraphs), If on a constant (inlined), Loop with a constant trip count
    and a scan output, Scan (both unrolled): test_onnx loads it under allocation
    failures."""
    B = TensorProto.BOOL

    def body(nodes, outs, ins=(), inits=()):
        return helper.make_graph(nodes, "b", [vi(n, t, sh) for n, t, sh in ins], [vi(o, TensorProto.UNDEFINED, None) for o in outs],
                                 initializer=list(inits))

    then_b = body([helper.make_node("Mul", ["x", "h"], ["t1"], name="t_mul"), helper.make_node("Add", ["t1", "x"], ["tout"], name="t_add")], ["tout"])
    else_b = body([helper.make_node("Sub", ["h", "x"], ["eout"], name="e_sub")], ["eout"])
    loop_b = body([helper.make_node("Add", ["v", "x"], ["v2"], name="l_add"), helper.make_node("ReduceSum", ["v2"], ["r"], name="l_sum", keepdims=1),
                   helper.make_node("Identity", ["cin"], ["cout"], name="l_id")], ["cout", "v2", "r"],
                  ins=[("i", I64, []), ("cin", B, []), ("v", F, [2, 3])])
    scan_b = body([helper.make_node("Add", ["st", "xi"], ["st2"], name="s_add"), helper.make_node("Mul", ["st2", "xi"], ["o"], name="s_mul")],
                  ["st2", "o"], ins=[("st", F, [3]), ("xi", F, [3])])
    m = model([helper.make_node("Exp", ["x"], ["h"], name="exp"), helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
               helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
               helper.make_node("If", ["c"], ["y"], name="if_rt", then_branch=then_b, else_branch=else_b),
               helper.make_node("If", ["yes"], ["y2"], name="if_const", then_branch=then_b, else_branch=else_b),
               helper.make_node("Loop", ["three", "yes", "x"], ["vf", "rs"], name="loop", body=loop_b),
               helper.make_node("Scan", ["s0", "x"], ["sf", "ys"], name="scan", body=scan_b, num_scan_inputs=1)],
              [vi("x", F, [2, 3])], [vi("y", F, None), vi("y2", F, None), vi("vf", F, None), vi("rs", F, None), vi("sf", F, None),
                                     vi("ys", F, None)],
              [numpy_helper.from_array(np.array(0, np.float32), "zero"), numpy_helper.from_array(np.array(True), "yes"),
               i64("three", 3), numpy_helper.from_array(np.zeros(3, np.float32), "s0")])
    save(m, "control_flow.onnx", check=False)
    shutil.copy(os.path.join(HERE, "control_flow.onnx"), os.path.join(CORPUS, "control_flow.onnx"))


def data_dependent():
    """Data-dependent output shapes (runtime/probe.c): NonZero feeding a Gather (x[x != 0]),
    Range over a limit computed from data (the count of x > 0), Loop with a run-time trip
    count M (a loop-carried sum of the iteration numbers and a scan output of 2 i):
    tests/test_datadep.c runs it in one session and under allocation failures."""
    B = TensorProto.BOOL
    loop_b = helper.make_graph([helper.make_node("Add", ["acc", "i"], ["acc2"], name="l_add"),
                                helper.make_node("Add", ["i", "i"], ["twice"], name="l_twice"),
                                helper.make_node("Identity", ["cin"], ["cout"], name="l_id")], "b",
                               [vi("i", I64, []), vi("cin", B, []), vi("acc", I64, [])],
                               [vi(o, TensorProto.UNDEFINED, None) for o in ("cout", "acc2", "twice")])
    m = model([helper.make_node("NonZero", ["x"], ["nz"], name="nz"),
               helper.make_node("Squeeze", ["nz", "ax0"], ["idx"], name="sq"),
               helper.make_node("Gather", ["x", "idx"], ["g"], name="gather", axis=0),
               helper.make_node("Greater", ["x", "zero"], ["pos"], name="gt"),
               helper.make_node("Cast", ["pos"], ["posi"], name="cast", to=I64),
               helper.make_node("ReduceSum", ["posi"], ["lim"], name="count", keepdims=0),
               helper.make_node("Range", ["zero_i", "lim", "one_i"], ["r"], name="rg"),
               helper.make_node("Loop", ["M", "", "zero_i"], ["accf", "scans"], name="lp", body=loop_b)],
              [vi("x", F, [6]), vi("M", I64, [])],
              [vi("g", F, None), vi("r", I64, None), vi("accf", I64, None), vi("scans", I64, None)],
              [i64("ax0", [0]), numpy_helper.from_array(np.array(0, np.float32), "zero"), i64("zero_i", 0), i64("one_i", 1)])
    save(m, "data_dependent.onnx", check=False)
    shutil.copy(os.path.join(HERE, "data_dependent.onnx"), os.path.join(CORPUS, "data_dependent.onnx"))


if __name__ == "__main__":
    main()
    control_flow()
    data_dependent()
