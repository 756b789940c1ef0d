"""Activation and rounding ONNX ops that exporters emit (Clip for ReLU6, HardSwish and
HardSigmoid for MobileNetV3, LeakyRelu, PRelu, Elu, Celu, Softsign, Mish,
ThresholdedRelu, Sign, Round, Floor, Ceil, Sum, Mean, LogSoftmax), decomposed at import
(src/frontend/onnx/onnx-activations.c), through the graft CLI against onnx.reference:
default and explicit attributes, NaN/inf/ties, broadcasting, and
the refusals (bad input dtype, non-scalar Clip bound) naming the node.
GRAFT_TEST_DEVICE=cuda runs the same cases on CUDA.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from test_onnx_breadth import check, const, model, refused  # noqa: E402
from test_onnx_import import GRAFT, run_model  # noqa: E402

pytestmark = pytest.mark.skipif(not __import__("os").path.exists(GRAFT), reason="graft CLI not built")

rng = np.random.default_rng(15)
X = (rng.standard_normal((3, 4, 5)) * 4).astype(np.float32)
SPECIAL = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.0, 3.0, -3.0, 2.5, -2.5, 0.5, -0.5, 1.5, 6.0, 7.0]], np.float32)


def unary(tmp_path, op, x, **attrs):
    check(tmp_path, [helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, ["y"])


@pytest.mark.parametrize("op,attrs", [
    ("HardSwish", {}), ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Elu", {}), ("Elu", {"alpha": 0.7}),
    ("Celu", {}), ("Celu", {"alpha": 2.0}), ("Softsign", {}), ("Mish", {}),
    ("ThresholdedRelu", {}), ("ThresholdedRelu", {"alpha": 0.3}), ("Sign", {}), ("Round", {}),
    ("Floor", {}), ("Ceil", {}),
])
@pytest.mark.parametrize("which", ["random", "special"])
def test_unary(tmp_path, op, attrs, which):
    unary(tmp_path, op, X if which == "random" else SPECIAL, **attrs)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("op", ["HardSwish", "LeakyRelu", "Elu", "Round", "Sign"])
def test_other_float_dtypes(tmp_path, op, dtype):
    # f16: graft computes a fused chain in f32 and rounds once on store (kir.h); the
    # reference rounds after every numpy step, so they may differ by a few f16 ulps
    x = X.astype(dtype)
    tol = dict(rtol=5e-3, atol=5e-3) if dtype == np.float16 else {}
    run_model(tmp_path, model([helper.make_node(op, ["x"], ["y"])], {"x": x}, ["y"]), {"x": x}, **tol)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8])
def test_sign_integers(tmp_path, dtype):
    unary(tmp_path, "Sign", np.array([[-5, 0, 3, -1, 7]], dtype))


def test_round_halves_to_even(tmp_path):
    x = np.arange(-6, 6.5, 0.5, dtype=np.float32).reshape(1, -1)
    unary(tmp_path, "Round", x)


@pytest.mark.parametrize("lo,hi", [(0.0, 6.0), (-1.0, None), (None, 2.0), (None, None), (3.0, 1.0)])
def test_clip_inputs(tmp_path, lo, hi):
    names, inits = ["x"], []
    for n, v in (("lo", lo), ("hi", hi)):
        if v is None:
            names.append("")
        else:
            names.append(n)
            inits.append(const(n, np.float32(v)))
    while names and names[-1] == "":
        names.pop()
    check(tmp_path, [helper.make_node("Clip", names, ["y"])], {"x": np.concatenate([X.ravel(), SPECIAL.ravel()])[None]},
          ["y"], inits)


def test_clip_runtime_bounds_and_ints(tmp_path):
    check(tmp_path, [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
          {"x": X, "lo": np.array(-1.5, np.float32), "hi": np.array(2.0, np.float32)}, ["y"])
    check(tmp_path, [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
          {"x": np.array([[-9, -1, 0, 4, 100]], np.int64)}, ["y"],
          [const("lo", np.int64(-2)), const("hi", np.int64(5))])


@pytest.mark.parametrize("slope_shape", [(1,), (5,), (4, 1), (3, 4, 5)])
def test_prelu_broadcast(tmp_path, slope_shape):
    slope = rng.uniform(0.05, 0.5, slope_shape).astype(np.float32)
    check(tmp_path, [helper.make_node("PRelu", ["x", "s"], ["y"])], {"x": X, "s": slope}, ["y"])


@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_sum_mean_broadcast(tmp_path, op, n):
    shapes = [(3, 4, 5), (4, 5), (1, 5), (3, 1, 1)][:n]
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    check(tmp_path, [helper.make_node(op, list(feeds), ["y"])], feeds, ["y"])


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_log_softmax(tmp_path, axis):
    x = X.copy()
    x[0, 0, 0] = 80.0  # exp would overflow without the max shift
    unary(tmp_path, "LogSoftmax", x, axis=axis)


def test_log_softmax_default_axis_and_f64(tmp_path):
    unary(tmp_path, "LogSoftmax", X.astype(np.float64))


def test_refusals_name_the_node(tmp_path):
    err = refused(tmp_path, [helper.make_node("HardSwish", ["x"], ["y"], name="hs")],
                  {"x": np.array([[1, 2]], np.int64)}, ["y"])
    assert "hs" in err and "float" in err
    err = refused(tmp_path, [helper.make_node("Clip", ["x", "lo"], ["y"], name="clipper")], {"x": X}, ["y"],
                  [const("lo", np.array([0.0, 1.0], np.float32))])
    assert "clipper" in err and "scalar" in err
    err = refused(tmp_path, [helper.make_node("LogSoftmax", ["x"], ["y"], name="ls", axis=3)], {"x": X}, ["y"])
    assert "ls" in err and "axis" in err
