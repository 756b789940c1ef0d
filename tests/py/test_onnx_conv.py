"""The convolution family end to end: ONNX models built with onnx.helper, run by
`graft run --device sim`, compared with onnx's ReferenceEvaluator (or with a
float64 numpy reference where the evaluator has no answer: grouped
ConvTranspose, negative Pad pads).

Covers Conv (1-D/2-D/3-D, groups, depthwise, dilations, strides, every
auto_pad, asymmetric pads, bias; both the direct kernel and the im2col +
matmul path), ConvTranspose, MaxPool / AveragePool (ceil_mode,
count_include_pad, dilations, auto_pad), the global pools,
BatchNormalization (decomposed, and folded into a preceding Conv),
Instance/GroupNormalization, Pad (every mode, negative pads, axes), Resize
(nearest and linear coordinate modes, scales and sizes), symbolic batch and
spatial dims, the CNN example (examples/cnn.onnx), and the errors for what is
not supported: each names the node and exits non-zero.

Needs numpy, onnx, pytest and the graft CLI ($GRAFT_BIN or build/bin/graft).
"""
import itertools
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
    return os.path.join(ROOT, "build", "bin", "graft")


GRAFT = _graft_bin()
pytestmark = pytest.mark.skipif(not os.path.exists(GRAFT), reason=f"graft CLI not built ({GRAFT} missing)")
F = TensorProto.FLOAT
rng = np.random.default_rng(7)


def rand(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def make_model(nodes, inputs, inits=(), opset=18, out_shape=None):
    """inputs: name -> shape (ints or dim_param strings); one float output 'y'."""
    ins = [helper.make_tensor_value_info(k, F, list(v)) for k, v in inputs.items()]
    outs = [helper.make_tensor_value_info("y", F, out_shape)]
    g = helper.make_graph(nodes, "t", ins, outs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def graft(*args, check=True):
    r = subprocess.run([GRAFT, *args], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, f"graft {' '.join(args)} failed ({r.returncode}):\n{r.stderr}{r.stdout}"
    return r


def run_graft(tmp_path, m, feeds, tag="m", out_name="y"):
    path = tmp_path / f"{tag}.onnx"
    onnx.save(m, str(path))
    out = tmp_path / f"out_{tag}"
    args = ["run", str(path), "--output-dir", str(out), "--device", "sim"]
    for name, arr in feeds.items():
        f = tmp_path / f"{tag}_in_{name}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    graft(*args)
    return np.load(out / f"{out_name}.npy")


def check(tmp_path, m, feeds, want=None, rtol=1e-4, atol=1e-4, tag="m", out="y"):
    got = run_graft(tmp_path, m, feeds, tag, out)
    if want is None:
        want = ReferenceEvaluator(m).run(None, feeds)[0]
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    return got


def plan_steps(tmp_path, m, tag="plan"):
    path = tmp_path / f"{tag}.onnx"
    onnx.save(m, str(path))
    r = graft("explain", str(path), "--device", "sim")
    return [ln.split()[2] for ln in r.stdout.splitlines() if re.match(r"\s*\[\s*\d+\]\s+(kernel|matmul|view)", ln)]


# ---- Conv ---------------------------------------------------------------------------------------
# (x shape, weight shape, attrs): each row one attribute combination
CONV_CASES = {
    "1d": ((2, 3, 11), (4, 3, 3), dict(pads=[1, 2], strides=[2])),
    "1d_dil_same_lower": ((1, 2, 10), (3, 2, 3), dict(auto_pad="SAME_LOWER", dilations=[2], strides=[3])),
    "2d_default": ((2, 3, 7, 6), (5, 3, 3, 3), {}),
    "2d_asym_pads_stride_dil": ((2, 4, 9, 8), (6, 4, 3, 2), dict(pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2])),
    "2d_same_upper": ((1, 3, 7, 8), (4, 3, 3, 4), dict(auto_pad="SAME_UPPER", strides=[2, 3])),
    "2d_same_lower": ((1, 3, 7, 8), (4, 3, 4, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2])),
    "2d_valid": ((2, 3, 8, 7), (2, 3, 3, 3), dict(auto_pad="VALID", strides=[2, 2])),
    "2d_group2": ((2, 4, 6, 6), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    "2d_depthwise": ((2, 4, 7, 7), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1], strides=[2, 2])),
    "2d_depthwise_mult2": ((1, 3, 6, 5), (6, 1, 3, 3), dict(group=3, dilations=[2, 1], pads=[2, 1, 2, 1])),
    "3d": ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[1, 1, 0, 0, 1, 1])),
    "3d_group": ((1, 4, 4, 5, 4), (4, 2, 3, 3, 3), dict(group=2, pads=[1, 1, 1, 1, 1, 1], dilations=[1, 1, 2])),
    # im2col + matmul path: group 1, C_in * kernel >= 32, C_out >= 8
    "gemm_2d": ((2, 16, 9, 8), (8, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
    "gemm_2d_asym_stride": ((3, 8, 10, 9), (16, 8, 3, 3), dict(pads=[1, 0, 2, 1], strides=[2, 2], dilations=[1, 2])),
    "gemm_1x1": ((2, 32, 5, 5), (16, 32, 1, 1), {}),
    "gemm_1x1_stride": ((1, 32, 7, 7), (16, 32, 1, 1), dict(strides=[2, 2])),
    "gemm_1d": ((2, 32, 20), (8, 32, 5), dict(auto_pad="SAME_UPPER")),
    "gemm_3d": ((1, 4, 5, 6, 7), (16, 4, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1])),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("bias", [False, True])
def test_conv(tmp_path, case, bias):
    xs, ws, attrs = CONV_CASES[case]
    inits = [init("w", rand(*ws))]
    ins = ["x", "w"]
    if bias:
        inits.append(init("b", rand(ws[0])))
        ins.append("b")
    m = make_model([helper.make_node("Conv", ins, ["y"], kernel_shape=list(ws[2:]), **attrs)], {"x": xs}, inits)
    check(tmp_path, m, {"x": rand(*xs)})


def test_conv_paths(tmp_path):
    """A group-1 conv with a long reduction is im2col + matmul; depthwise stays one direct kernel
    (unrolled: no inner dims, 'x inner' absent from explain's line; a longer window reduces)."""
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": (1, 16, 6, 6)},
                   [init("w", rand(8, 16, 3, 3))])
    assert "matmul" in plan_steps(tmp_path, m, "g")
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=16, pads=[1, 1, 1, 1])], {"x": (1, 16, 6, 6)},
                   [init("w", rand(16, 1, 3, 3))])
    assert plan_steps(tmp_path, m, "d") == ["kernel"]
    path = tmp_path / "d.onnx"
    assert "x inner" not in graft("explain", str(path), "--device", "sim").stdout
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])], {"x": (1, 16, 6, 6)},
                   [init("w", rand(8, 2, 3, 3))])
    assert plan_steps(tmp_path, m, "d2") == ["kernel"]
    assert "x inner=18" in graft("explain", str(tmp_path / "d2.onnx"), "--device", "sim").stdout


def test_conv_weight_as_input(tmp_path):
    """The weight and bias may be graph inputs (computed at run time)."""
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[0, 1, 0, 1])],
                   {"x": (2, 16, 5, 6), "w": (8, 16, 3, 3), "b": (8,)})
    check(tmp_path, m, {"x": rand(2, 16, 5, 6), "w": rand(8, 16, 3, 3), "b": rand(8)})


def test_conv_symbolic(tmp_path):
    """Symbolic batch and spatial dims: one model file, several bindings."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 0, 2, 1], strides=[2, 3], dilations=[1, 2]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("Conv", ["p", "w2"], ["y"], group=2, auto_pad="SAME_UPPER", strides=[2, 2])]
    m = make_model(nodes, {"x": ("N", 3, "H", "W")}, [init("w", rand(4, 3, 3, 2)), init("b", rand(4)), init("w2", rand(6, 2, 3, 3))],
                   out_shape=None)
    for i, (n, h, w) in enumerate([(1, 9, 11), (3, 16, 13), (2, 7, 30)]):
        check(tmp_path, m, {"x": rand(n, 3, h, w)}, tag=f"s{i}")


# ---- ConvTranspose --------------------------------------------------------------------------------
def convt_ref(x, w, b, strides, pads, dil, out_pad, group, out_shape=None):
    """float64 ConvTranspose: y[o] += x[i] * w[k] where o = i*stride + k*dil - pad_begin."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, cin = x.shape[:2]
    s = x.ndim - 2
    ks = w.shape[2:]
    cout_g = w.shape[1]
    cin_g = cin // group
    if out_shape is None:
        out_shape = [strides[d] * (x.shape[2 + d] - 1) + out_pad[d] + dil[d] * (ks[d] - 1) + 1 - pads[d] - pads[s + d]
                     for d in range(s)]
    y = np.zeros((n, cout_g * group, *out_shape))
    for g in range(group):
        xg = x[:, g * cin_g:(g + 1) * cin_g]
        wg = w[g * cin_g:(g + 1) * cin_g]
        for kk in itertools.product(*[range(k) for k in ks]):
            contrib = np.einsum("nc...,co->no...", xg, wg[(slice(None), slice(None)) + kk])
            for ii in itertools.product(*[range(x.shape[2 + d]) for d in range(s)]):
                o = [ii[d] * strides[d] + kk[d] * dil[d] - pads[d] for d in range(s)]
                if all(0 <= o[d] < out_shape[d] for d in range(s)):
                    y[(slice(None), slice(g * cout_g, (g + 1) * cout_g)) + tuple(o)] += contrib[(slice(None), slice(None)) + ii]
    if b is not None:
        y += b.reshape((1, -1) + (1,) * s)
    return y


CONVT_CASES = {
    "2d_default": ((1, 2, 3, 4), (2, 3, 3, 3), {}),
    "2d_strides_pads_outpad": ((2, 2, 4, 3), (2, 3, 3, 2), dict(strides=[2, 3], pads=[1, 0, 0, 1], output_padding=[1, 2])),
    "2d_dilations": ((1, 1, 3, 3), (1, 2, 2, 2), dict(dilations=[2, 2])),
    "2d_output_shape": ((1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 8])),
    "2d_same_upper": ((1, 2, 3, 4), (2, 2, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "2d_same_lower": ((1, 2, 3, 4), (2, 2, 3, 2), dict(auto_pad="SAME_LOWER", strides=[2, 3])),
    "1d": ((2, 3, 5), (3, 2, 3), dict(strides=[2], pads=[1, 0])),
    "3d": ((1, 2, 3, 2, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], pads=[0, 1, 0, 1, 0, 0])),
}


@pytest.mark.parametrize("case", sorted(CONVT_CASES))
def test_conv_transpose(tmp_path, case):
    xs, ws, attrs = CONVT_CASES[case]
    m = make_model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)], {"x": xs},
                   [init("w", rand(*ws)), init("b", rand(ws[1]))])
    check(tmp_path, m, {"x": rand(*xs)})


@pytest.mark.parametrize("attrs", [dict(), dict(strides=[2, 2], pads=[1, 0, 0, 1], dilations=[1, 2], output_padding=[1, 1])])
def test_conv_transpose_group(tmp_path, attrs):
    """onnx.reference cannot run grouped ConvTranspose with C_out/group > 1: a numpy reference."""
    x, w, b = rand(2, 4, 3, 4), rand(4, 3, 3, 2), rand(6)
    m = make_model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, **attrs)], {"x": x.shape},
                   [init("w", w), init("b", b)])
    s = attrs.get("strides", [1, 1])
    want = convt_ref(x, w, b, s, attrs.get("pads", [0] * 4), attrs.get("dilations", [1, 1]), attrs.get("output_padding", [0, 0]), 2)
    check(tmp_path, m, {"x": x}, want=want)


# ---- pools ----------------------------------------------------------------------------------------
POOL_CASES = {
    "1d": ((2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    "2d_default": ((1, 2, 6, 7), dict(kernel_shape=[2, 2])),
    "2d_asym_pads": ((2, 3, 7, 6), dict(kernel_shape=[3, 2], pads=[1, 0, 2, 1], strides=[2, 1])),
    "2d_ceil": ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "2d_ceil_pads": ((1, 2, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 0], ceil_mode=1)),
    "2d_same_upper": ((1, 2, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
    "2d_same_lower": ((1, 2, 7, 6), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER")),
    "2d_valid": ((1, 2, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="VALID")),
    "2d_dilations": ((1, 2, 8, 8), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 1, 1])),
    "3d": ((1, 2, 5, 6, 4), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[0, 1, 1, 1, 1, 0])),
    # more than 16 taps: a reduction kernel instead of the unrolled one
    "2d_large_window": ((1, 2, 9, 8), dict(kernel_shape=[5, 4], strides=[2, 2], pads=[2, 1, 2, 2], ceil_mode=1)),
    "3d_large_window": ((1, 2, 5, 6, 5), dict(kernel_shape=[3, 3, 2], strides=[1, 2, 2], pads=[1, 1, 0, 1, 0, 1],
                                              dilations=[1, 1, 2])),
}


def same_pads(xs, attrs):
    """The explicit pads of auto_pad SAME_* as the ONNX spec defines them (output ceil(in/stride))."""
    s = len(xs) - 2
    k, st, dil = attrs["kernel_shape"], attrs.get("strides", [1] * s), attrs.get("dilations", [1] * s)
    begin, end = [], []
    for d in range(s):
        out = -(-xs[2 + d] // st[d])
        total = max(0, (out - 1) * st[d] + dil[d] * (k[d] - 1) + 1 - xs[2 + d])
        small = total // 2
        begin.append(small if attrs["auto_pad"] == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return begin + end


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_max_pool(tmp_path, case):
    xs, attrs = POOL_CASES[case]
    m = make_model([helper.make_node("MaxPool", ["x"], ["y"], **attrs)], {"x": xs})
    x = rand(*xs)
    want = None
    if attrs.get("auto_pad") == "SAME_LOWER":
        # onnx.reference's MaxPool computes SAME_LOWER as floor(in/stride) outputs with the odd pad
        # at the end, against the spec (and its own AveragePool): compare with the spec's explicit pads
        ref_attrs = {k: v for k, v in attrs.items() if k != "auto_pad"}
        ref = make_model([helper.make_node("MaxPool", ["x"], ["y"], pads=same_pads(xs, attrs), **ref_attrs)], {"x": xs})
        want = ReferenceEvaluator(ref).run(None, {"x": x})[0]
    check(tmp_path, m, {"x": x}, want=want)


@pytest.mark.parametrize("case", sorted(POOL_CASES))
@pytest.mark.parametrize("cip", [0, 1])
def test_avg_pool(tmp_path, case, cip):
    xs, attrs = POOL_CASES[case]
    m = make_model([helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=cip, **attrs)], {"x": xs}, opset=19)
    check(tmp_path, m, {"x": rand(*xs)})


def test_max_pool_int8(tmp_path):
    x = rng.integers(-128, 127, (1, 2, 5, 5)).astype(np.int8)
    m = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 0, 0])], {"x": x.shape})
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.INT8
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT8
    got = run_graft(tmp_path, m, {"x": x})
    # onnx.reference pads integers with NaN and fails: numpy (pad with the minimum, 2x2 windows)
    p = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 0), (1, 0)), constant_values=-1000)
    want = np.maximum(np.maximum(p[:, :, :-1, :-1], p[:, :, 1:, :-1]), np.maximum(p[:, :, :-1, 1:], p[:, :, 1:, 1:]))
    np.testing.assert_array_equal(got, want.astype(np.int8))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("xs", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_pool(tmp_path, op, xs):
    m = make_model([helper.make_node(op, ["x"], ["y"])], {"x": xs})
    x = rand(*xs)
    axes = tuple(range(2, len(xs)))
    # onnx.reference's GlobalMaxPool gets the shape wrong for ranks other than 4: numpy
    want = x.mean(axis=axes, keepdims=True) if op == "GlobalAveragePool" else x.max(axis=axes, keepdims=True)
    check(tmp_path, m, {"x": x}, want=want)


# ---- normalizations ---------------------------------------------------------------------------------
def bn_inits(c):
    return [init("s", rand(c)), init("bb", rand(c)), init("mu", rand(c)), init("var", np.abs(rand(c)) + 0.5)]


@pytest.mark.parametrize("xs", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_norm(tmp_path, xs):
    m = make_model([helper.make_node("BatchNormalization", ["x", "s", "bb", "mu", "var"], ["y"], epsilon=1e-3)], {"x": xs},
                   bn_inits(xs[1]))
    check(tmp_path, m, {"x": rand(*xs)})


def test_batch_norm_runtime_params(tmp_path):
    c = 4
    m = make_model([helper.make_node("BatchNormalization", ["x", "s", "bb", "mu", "var"], ["y"])],
                   {"x": (2, c, 3, 3), "s": (c,), "bb": (c,), "mu": (c,), "var": (c,)})
    check(tmp_path, m, {"x": rand(2, c, 3, 3), "s": rand(c), "bb": rand(c), "mu": rand(c), "var": np.abs(rand(c)) + 0.5})


@pytest.mark.parametrize("path", ["direct", "gemm"])
def test_batch_norm_folds_into_conv(tmp_path, path):
    """Conv (initializer weights) + BN becomes one conv with folded weights and bias: the same
    outputs as the reference, and no separate multiply-add in the plan."""
    cin, cout, g = (4, 6, 2) if path == "direct" else (16, 8, 1)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=g, pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"], epsilon=1e-4)]
    m = make_model(nodes, {"x": (2, cin, 6, 5)}, [init("w", rand(cout, cin // g, 3, 3)), init("b", rand(cout))] + bn_inits(cout))
    check(tmp_path, m, {"x": rand(2, cin, 6, 5)})
    steps = plan_steps(tmp_path, m)
    assert steps == (["kernel"] if path == "direct" else ["kernel", "matmul", "kernel"]), steps


def test_batch_norm_conv_output_also_used(tmp_path):
    """The conv's own output is a graph output too: both stay correct."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["n"]),
             helper.make_node("Add", ["c", "n"], ["y"])]
    m = make_model(nodes, {"x": (1, 3, 5, 5)}, [init("w", rand(4, 3, 3, 3))] + bn_inits(4))
    check(tmp_path, m, {"x": rand(1, 3, 5, 5)})


@pytest.mark.parametrize("xs", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 3)])
def test_instance_norm(tmp_path, xs):
    m = make_model([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4)], {"x": xs},
                   [init("s", rand(xs[1])), init("b", rand(xs[1]))])
    check(tmp_path, m, {"x": rand(*xs)})


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm(tmp_path, opset):
    groups, c = 2, 6
    n_param = groups if opset == 18 else c
    m = make_model([helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-4)],
                   {"x": (2, c, 4, 3)}, [init("s", rand(n_param)), init("b", rand(n_param))], opset=opset)
    check(tmp_path, m, {"x": rand(2, c, 4, 3)})


# ---- Pad ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(tmp_path, mode):
    x = rand(2, 3, 4, 5)
    inits = [init("pads", np.array([0, 1, 2, 3, 1, 0, 3, 2], np.int64))]
    ins = ["x", "pads"]
    if mode == "constant":
        inits.append(init("v", np.array(1.5, np.float32)))
        ins.append("v")
    m = make_model([helper.make_node("Pad", ins, ["y"], mode=mode)], {"x": x.shape}, inits, opset=19)
    check(tmp_path, m, {"x": x})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_negative(tmp_path, mode):
    """Negative pads crop (onnx.reference cannot: numpy reference)."""
    x = rand(3, 6, 5)
    pads = [1, -2, 2, -1, 3, -1]
    m = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)], {"x": x.shape},
                   [init("pads", np.array(pads, np.int64))], opset=19)
    pos = [(max(pads[d], 0), max(pads[3 + d], 0)) for d in range(3)]
    np_mode = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode]
    want = np.pad(x, pos, mode=np_mode)
    crop = tuple(slice(-min(pads[d], 0), want.shape[d] + min(pads[3 + d], 0)) for d in range(3))
    check(tmp_path, m, {"x": x}, want=want[crop])


def test_pad_axes(tmp_path):
    x = rand(2, 3, 4)
    m = make_model([helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], mode="reflect")], {"x": x.shape},
                   [init("pads", np.array([2, 1, 3, 0], np.int64)), init("axes", np.array([-1, 1], np.int64))], opset=19)
    check(tmp_path, m, {"x": x})


# ---- Resize ------------------------------------------------------------------------------------------
def test_resize_tf_half_pixel_for_nn(tmp_path):
    """Resize-13's tf_half_pixel_for_nn (no longer in onnx.reference): x_in = (o + 0.5) / scale."""
    x = rand(1, 2, 5, 6)
    sc = [1, 1, 2, 0.5]
    m = make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn",
                                     nearest_mode="floor")], {"x": x.shape}, [init("sc", np.array(sc, np.float32))], opset=13)
    idx = [np.clip(np.floor((np.arange(int(x.shape[d] * sc[d])) + 0.5) / sc[d]).astype(int), 0, x.shape[d] - 1) for d in range(4)]
    check(tmp_path, m, {"x": x}, want=x[np.ix_(*idx)])


@pytest.mark.parametrize("coord", ["asymmetric", "half_pixel", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"])
@pytest.mark.parametrize("nearest_mode", ["floor", "round_prefer_floor", "round_prefer_ceil", "ceil"])
def test_resize_nearest(tmp_path, coord, nearest_mode):
    x = rand(2, 3, 5, 6)
    for i, sc in enumerate([[1, 1, 2, 1.5], [1, 1, 0.6, 0.5]]):
        m = make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest", coordinate_transformation_mode=coord,
                                         nearest_mode=nearest_mode)], {"x": x.shape}, [init("sc", np.array(sc, np.float32))],
                       opset=19)
        check(tmp_path, m, {"x": x}, tag=f"r{i}")


@pytest.mark.parametrize("coord", ["asymmetric", "half_pixel", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"])
def test_resize_linear(tmp_path, coord):
    x = rand(2, 3, 5, 6)
    for i, sc in enumerate([[1, 1, 2, 1.5], [1, 1, 0.6, 0.5], [1, 1, 1, 3]]):
        m = make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear", coordinate_transformation_mode=coord)],
                       {"x": x.shape}, [init("sc", np.array(sc, np.float32))], opset=19)
        check(tmp_path, m, {"x": x}, tag=f"r{i}")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_sizes_and_axes(tmp_path, mode):
    x = rand(1, 2, 4, 7)
    m = make_model([helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode=mode, axes=[3, 2])], {"x": x.shape},
                   [init("sz", np.array([3, 9], np.int64))], opset=19)
    check(tmp_path, m, {"x": x})


def test_resize_symbolic(tmp_path):
    """An integer scale of symbolic spatial dims (as a U-Net or FPN upsample is exported)."""
    m = make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
                                     nearest_mode="floor")], {"x": ("N", 2, "H", "W")}, [init("sc", np.array([1, 1, 2, 2], np.float32))],
                   opset=19)
    for i, (n, h, w) in enumerate([(1, 3, 4), (2, 5, 2)]):
        check(tmp_path, m, {"x": rand(n, 2, h, w)}, tag=f"s{i}")


# ---- the CNN example ------------------------------------------------------------------------------------
def test_cnn_example(tmp_path):
    """examples/cnn.onnx (examples/gen_cnn.py): conv-bn-relu-maxpool, depthwise conv, conv-bn-relu,
    resize, pad, avgpool, globalavgpool, gemm, at two batch sizes, against onnx.reference."""
    path = os.path.join(ROOT, "examples", "cnn.onnx")
    m = onnx.load(path)
    for i, n in enumerate([1, 3]):
        check(tmp_path, m, {"x": rand(n, 3, 32, 32)}, rtol=1e-3, atol=1e-3, tag=f"cnn{i}", out="logits")


# ---- errors ------------------------------------------------------------------------------------------------
def run_error(tmp_path, m, feeds):
    path = tmp_path / "bad.onnx"
    onnx.save(m, str(path))
    args = ["run", str(path), "--output-dir", str(tmp_path / "o"), "--device", "sim"]
    for name, arr in feeds.items():
        f = tmp_path / f"in_{name}.npy"
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    r = graft(*args, check=False)
    assert r.returncode != 0, r.stdout
    return r.stderr


ERRORS = {
    "kernel_shape": (lambda: make_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[5, 5], name="c1")],
                                        {"x": (1, 3, 8, 8)}, [init("w", rand(4, 3, 3, 3))]),
                     "node 'c1'.*kernel_shape \\[5,5\\] does not match the weight's kernel dims \\[3,3\\]"),
    "channels": (lambda: make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="c2")], {"x": (1, 3, 8, 8)},
                                    [init("w", rand(4, 2, 3, 3))]),
                 "node 'c2'.*x has 3 channels but the weight expects 2 x group 1"),
    "group": (lambda: make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=2, name="c3")], {"x": (1, 4, 8, 8)},
                                 [init("w", rand(3, 2, 3, 3))]),
              "node 'c3'.*3 output channels are not divisible by group 2"),
    "too_small": (lambda: make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="c4")], {"x": (1, 3, 2, 8)},
                                     [init("w", rand(4, 3, 3, 3))]),
                  "node 'c4'.*spatial dim 0: input size 2 gives an output size of 0"),
    "auto_pad": (lambda: make_model([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="FULL", name="c5")], {"x": (1, 3, 8, 8)},
                                    [init("w", rand(4, 3, 3, 3))]),
                 "node 'c5'.*auto_pad 'FULL' is not one of"),
    "pads_len": (lambda: make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[1, 1], name="p1")],
                                    {"x": (1, 3, 8, 8)}),
                 "node 'p1'.*'pads' has 2 values, expected 4"),
    "no_kernel_shape": (lambda: make_model([helper.make_node("AveragePool", ["x"], ["y"], name="p2")], {"x": (1, 3, 8, 8)}),
                        "node 'p2'.*kernel_shape' is required"),
    "indices": (lambda: make_model([helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], name="p3")], {"x": (1, 3, 8, 8)}),
                "node 'p3'.*Indices output is not supported"),
    "bn_training": (lambda: make_model([helper.make_node("BatchNormalization", ["x", "s", "bb", "mu", "var"], ["y"], training_mode=1,
                                                         name="bn")], {"x": (2, 4, 3)}, bn_inits(4)),
                    "node 'bn'.*training_mode=1 is not supported"),
    "resize_cubic": (lambda: make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="cubic", name="r1")], {"x": (1, 1, 4, 4)},
                                        [init("sc", np.array([1, 1, 2, 2], np.float32))]),
                     "node 'r1'.*mode 'cubic' is not supported"),
    "resize_crop": (lambda: make_model([helper.make_node("Resize", ["x", "", "sc"], ["y"], coordinate_transformation_mode="tf_crop_and_resize",
                                                         name="r2")], {"x": (1, 1, 4, 4)}, [init("sc", np.array([1, 1, 2, 2], np.float32))]),
                    "node 'r2'.*'tf_crop_and_resize' is not supported"),
    "pad_mode": (lambda: make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="mirror", name="pd")], {"x": (2, 3)},
                                    [init("pads", np.array([1, 1, 1, 1], np.int64))]),
                 "node 'pd'.*mode 'mirror' is not supported"),
    "pad_runtime": (lambda: make_model([helper.make_node("Pad", ["x", "pads"], ["y"], name="pr")], {"x": (2, 3), "pads": (4,)}),
                    "node 'pr'.*'pads'.*must be a constant at import time"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors(tmp_path, case):
    build, pattern = ERRORS[case]
    m = build()
    if case == "pad_runtime":
        m.graph.input[1].type.tensor_type.elem_type = TensorProto.INT64
    feeds = {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim],
                              np.int64 if i.type.tensor_type.elem_type == TensorProto.INT64 else np.float32) for i in m.graph.input}
    err = run_error(tmp_path, m, feeds)
    assert re.search(pattern, err), err


# ---- float16 --------------------------------------------------------------------------------------------------
H = TensorProto.FLOAT16


@pytest.mark.parametrize("op", ["conv_direct", "conv_gemm", "conv_transpose", "max_pool", "avg_pool", "resize_linear", "pad"])
def test_float16(tmp_path, op):
    """f16 tensors compute in f32 and round once (conv via the f16 matmul for the gemm path)."""
    x = rand(1, 16, 6, 5).astype(np.float16)
    inits, node = [], None
    if op == "conv_direct":
        inits = [init("w", rand(16, 1, 3, 3).astype(np.float16))]
        node = helper.make_node("Conv", ["x", "w"], ["y"], group=16, pads=[1, 1, 1, 1])
    elif op == "conv_gemm":
        inits = [init("w", rand(8, 16, 3, 3).astype(np.float16)), init("b", rand(8).astype(np.float16))]
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 1, 2], strides=[2, 1])
    elif op == "conv_transpose":
        inits = [init("w", rand(16, 2, 3, 3).astype(np.float16))]
        node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])
    elif op == "max_pool":
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    elif op == "avg_pool":
        node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    elif op == "resize_linear":
        inits = [init("sc", np.array([1, 1, 2, 1.5], np.float32))]
        node = helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear")
    else:
        inits = [init("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))]
        node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")
    m = make_model([node], {"x": x.shape}, inits, opset=19)
    m.graph.input[0].type.tensor_type.elem_type = H
    m.graph.output[0].type.tensor_type.elem_type = H
    got = run_graft(tmp_path, m, {"x": x})
    # reference in f32 (onnx.reference computes f16 in f16 for some ops): cast the model
    m32 = onnx.load_from_string(m.SerializeToString())
    m32.graph.input[0].type.tensor_type.elem_type = F
    m32.graph.output[0].type.tensor_type.elem_type = F
    for t in m32.graph.initializer:
        if t.data_type == H:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    want = ReferenceEvaluator(m32).run(None, {"x": x.astype(np.float32)})[0]
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-2, atol=2e-2)
