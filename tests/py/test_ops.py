"""Every op of src/ir/ops.c against numpy, through `graft run` on the simulator.

numpy (and math.erf) is the independent reference: float results are computed
in float64 from the (already rounded) inputs and compared with a normalized
error ||out - ref|| / ||ref|| under a per-op tolerance; movement, integer and
comparison ops are checked bit for bit. bfloat16 has no numpy type, so bf16 is
reached through cast (graft run writes bf16 outputs as f32).
"""
import math
import zlib

import numpy as np
import pytest

from gir_builder import Graph, GraftError, assert_close, assert_exact, run_op

F32, F16, F64 = np.float32, np.float16, np.float64
I64, I32, I8, U8, BOOL = np.int64, np.int32, np.int8, np.uint8, np.bool_
FLOATS = [F32, F16, F64]
INTS = [I64, I32, I8, U8]
ALL = FLOATS + INTS + [BOOL]
GIR_NAME = {F32: "f32", F16: "f16", F64: "f64", I64: "i64", I32: "i32", I8: "i8", U8: "u8", BOOL: "bool"}

# tolerances on the normalized error, by kind of op and dtype
TOL = {
    "exact": {F32: 1e-6, F16: 1e-3, F64: 1e-12, "bf16": 1e-2},
    "trans": {F32: 1e-5, F16: 1e-3, F64: 1e-12, "bf16": 1e-2},
    "reduce": {F32: 1e-5, F16: 1e-3, F64: 1e-12, "bf16": 1e-2},
}


def tol(kind, dtype):
    return TOL[kind][dtype if dtype == "bf16" else np.dtype(dtype).type]


def rng_for(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def rand(rng, shape, dtype, lo=-2.0, hi=2.0):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind in "iu":
        lo_i = max(int(math.floor(lo)), 0) if dtype.kind == "u" else int(math.floor(lo))
        return rng.integers(lo_i, int(math.ceil(hi)) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def to_bf16(x):
    """Rounds float32 values to bfloat16 (nearest even), returned as float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    out = r.view(np.float32).copy()
    out[np.isnan(x)] = np.nan
    return out


def check(out, ref, kind, dtype, what):
    """Float dtypes: normalized error under the tolerance of `kind` (kind
    "bits" = bit-exact); other dtypes: bit-exact."""
    ref = np.asarray(ref)
    if kind == "bits" or np.dtype(ref.dtype).kind not in "f":
        assert_exact(out, ref, what)
    else:
        assert np.asarray(out).dtype == ref.dtype, "%s: dtype %s, expected %s" % (what, out.dtype, ref.dtype)
        assert_close(out, ref, tol(kind, ref.dtype.type), what)


def run_or_skip_unsupported(fn, also=()):
    try:
        return fn()
    except GraftError as e:
        if e.unsupported or any(a in e.stderr for a in also):
            pytest.skip("graft reports unsupported: " + e.stderr.strip()[:200])
        raise


# ==== elementwise binary ================================================================
BIN_SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((), (2, 3)),
    ((1,), (5,)),
    ((4, 1), (1, 1)),
    ((0, 3), (1, 3)),
    ((2, 0), (2, 1)),
]


def ref_binary(op, a, b):
    dt = a.dtype
    if dt.kind == "f":
        x, y = a.astype(F64), b.astype(F64)
        with np.errstate(all="ignore"):
            r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
                 "min": np.minimum, "max": np.maximum}[op](x, y)
        return r.astype(dt)
    x, y = a.astype(np.int64), b.astype(np.int64)
    if op == "div":
        r = np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))  # truncation toward zero
    elif op == "pow":
        r = np.ones(np.broadcast(x, y).shape, np.int64)
        xb, yb = np.broadcast_arrays(x, y)
        for _ in range(int(y.max()) if y.size else 0):
            r = np.where(yb > 0, r * xb, r)
            yb = yb - 1
    else:
        r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum}[op](x, y)
    return r.astype(dt)


def binary_inputs(rng, op, dtype, sa, sb):
    dt = np.dtype(dtype)
    if op == "pow":
        if dt.kind == "f":
            return rand(rng, sa, dtype, 0.2, 2.0), rand(rng, sb, dtype, -2.0, 2.0)
        return rand(rng, sa, dtype, -3, 3), rand(rng, sb, dtype, 0, 3)
    a = rand(rng, sa, dtype, -9, 9)
    b = rand(rng, sb, dtype, -9, 9)
    if op == "div":
        if dt.kind in "iu":
            b = np.where(b == 0, np.ones_like(b), b)
        else:
            b = np.where(np.abs(b) < 0.5, np.ones_like(b), b).astype(dtype)
    return a, b


BIN_OPS = ["add", "sub", "mul", "div", "pow", "min", "max"]


@pytest.mark.parametrize("op", BIN_OPS)
@pytest.mark.parametrize("shapes", BIN_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_binary_broadcast_f32(tmp_path, op, shapes):
    rng = rng_for(op, shapes)
    a, b = binary_inputs(rng, op, F32, *shapes)
    out = run_op(tmp_path, op, [a, b])
    check(out, ref_binary(op, a, b), "trans" if op == "pow" else "exact", F32, "%s %s" % (op, shapes))


@pytest.mark.parametrize("op", BIN_OPS)
@pytest.mark.parametrize("dtype", [F16, F64, I64, I32, I8, U8], ids=lambda d: np.dtype(d).name)
def test_binary_dtypes(tmp_path, op, dtype):
    rng = rng_for(op, dtype)
    a, b = binary_inputs(rng, op, dtype, (2, 3, 4), (3, 1))
    out = run_op(tmp_path, op, [a, b])
    check(out, ref_binary(op, a, b), "trans" if op == "pow" else "exact", dtype, "%s %s" % (op, np.dtype(dtype)))


@pytest.mark.parametrize("op", ["add", "less", "where"])
def test_dtype_mismatch_is_an_error(tmp_path, op):
    a, b = np.ones(3, F32), np.ones(3, F64)
    inputs = [np.ones(3, BOOL), a, b] if op == "where" else [a, b]
    with pytest.raises(GraftError) as e:
        run_op(tmp_path, op, inputs)
    assert e.value.returncode == 1 and "f64" in e.value.stderr, e.value.stderr


def test_int_div_truncates_toward_zero(tmp_path):
    a = np.array([7, -7, 7, -7, 0, 1, -1, 9], I32)
    b = np.array([2, 2, -2, -2, 3, 5, 5, -4], I32)
    assert_exact(run_op(tmp_path, "div", [a, b]), np.array([3, -3, -3, 3, 0, 0, 0, -2], I32), "int div")


@pytest.mark.parametrize("op", ["min", "max"])
def test_min_max_propagate_nan(tmp_path, op):
    a = np.array([1.0, np.nan, 3.0, np.nan, -np.inf], F32)
    b = np.array([np.nan, 2.0, 1.0, np.nan, 0.0], F32)
    ref = (np.minimum if op == "min" else np.maximum)(a, b)
    assert_exact(run_op(tmp_path, op, [a, b]), ref, op)


def test_float_special_values(tmp_path):
    a = np.array([1.0, -1.0, 0.0, np.inf, -np.inf, 1e38], F32)
    b = np.array([0.0, 0.0, 0.0, np.inf, 1.0, 10.0], F32)
    with np.errstate(all="ignore"):
        assert_exact(run_op(tmp_path, "div", [a, b]), (a / b).astype(F32), "div by zero")
        assert_exact(run_op(tmp_path, "mul", [a, b]), (a * b).astype(F32), "mul overflow")
        assert_exact(run_op(tmp_path, "sub", [a, b]), (a - b).astype(F32), "inf - inf")


@pytest.mark.parametrize("op", ["add", "mul", "max", "div"])
def test_binary_bf16(tmp_path, op):
    rng = rng_for("bf16", op)
    a = to_bf16(rand(rng, (3, 5), F32, -4, 4))
    b = to_bf16(rand(rng, (5,), F32, 0.5, 4))
    g = Graph()
    x = g.node("cast", g.input(a), to="bf16")
    y = g.node("cast", g.input(b), to="bf16")
    z = g.node(op, x, y)
    g.output(g.node("cast", z, to="f32"))
    (out,) = g.run(tmp_path)
    ref = to_bf16(ref_binary(op, a.astype(F64), b.astype(F64)).astype(F32))
    assert_close(out, ref, tol("exact", "bf16"), op + " bf16")


@pytest.mark.parametrize("op", ["add", "mul", "sub", "max"])
def test_binary_noncontiguous(tmp_path, op):
    """A transpose and a strided slice feed the op (views the runtime must not treat as contiguous)."""
    rng = rng_for("nc", op)
    a = rand(rng, (4, 3), F32)
    b = rand(rng, (3, 8), F32)
    g = Graph()
    at = g.node("transpose", g.input(a), perm=[1, 0])                       # [3,4]
    bs = g.node("slice", g.input(b), starts=[1], ends=[8], axes=[1], steps=[2])  # [3,4], stride 2
    g.output(g.node(op, at, bs))
    (out,) = g.run(tmp_path)
    check(out, ref_binary(op, a.T.copy(), b[:, 1:8:2].copy()), "exact", F32, op + " noncontiguous")


# ==== comparisons and logic ===============================================================
CMP = {"equal": np.equal, "less": np.less, "less_equal": np.less_equal, "greater": np.greater,
       "greater_equal": np.greater_equal}


@pytest.mark.parametrize("op", list(CMP))
@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=lambda d: np.dtype(d).name)
def test_compare(tmp_path, op, dtype):
    rng = rng_for(op, dtype)
    a = rand(rng, (3, 4), dtype, -3, 3)
    b = rand(rng, (4,), dtype, -3, 3)
    if np.dtype(dtype).kind == "f":  # make ties likely
        a, b = np.round(a).astype(dtype), np.round(b).astype(dtype)
    assert_exact(run_op(tmp_path, op, [a, b]), CMP[op](a, b), op)


@pytest.mark.parametrize("op", list(CMP))
def test_compare_nan_and_broadcast(tmp_path, op):
    a = np.array([[np.nan], [1.0], [np.inf]], F32)
    b = np.array([np.nan, 1.0, 2.0, -np.inf], F32)
    assert_exact(run_op(tmp_path, op, [a, b]), CMP[op](a, b), op + " nan")


def test_equal_bool(tmp_path):
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    assert_exact(run_op(tmp_path, "equal", [a, b]), a == b, "equal bool")


@pytest.mark.parametrize("op", ["and", "or"])
def test_logic(tmp_path, op):
    a = np.array([[True], [False]])
    b = np.array([True, False, True])
    ref = np.logical_and(a, b) if op == "and" else np.logical_or(a, b)
    assert_exact(run_op(tmp_path, op, [a, b]), ref, op)


def test_not(tmp_path):
    a = np.array([[True, False], [False, False]])
    assert_exact(run_op(tmp_path, "not", [a]), ~a, "not")


# ==== unary ==================================================================================
def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875

UNARY = {
    # op: (reference in float64, input range, tolerance kind)
    "neg": (lambda x: -x, (-3, 3), "exact"),
    "abs": (np.abs, (-3, 3), "exact"),
    "exp": (np.exp, (-3, 3), "trans"),
    "log": (np.log, (0.05, 4), "trans"),
    "sqrt": (np.sqrt, (0.0, 4), "exact"),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.05, 4), "trans"),
    "reciprocal": (lambda x: 1 / x, (0.25, 4), "exact"),
    "tanh": (np.tanh, (-3, 3), "trans"),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-6, 6), "trans"),
    "erf": (_erf, (-3, 3), "trans"),
    "relu": (lambda x: np.maximum(x, 0), (-3, 3), "exact"),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), (-4, 4), "trans"),
    "selu": (lambda x: SELU_GAMMA * np.where(x > 0, x, SELU_ALPHA * (np.exp(x) - 1)), (-3, 3), "trans"),
    "silu": (lambda x: x / (1 + np.exp(-x)), (-6, 6), "trans"),
    "sin": (np.sin, (-6, 6), "trans"),
    "cos": (np.cos, (-6, 6), "trans"),
    "softplus": (lambda x: np.logaddexp(x, 0), (-30, 30), "trans"),
}


def unary_input(rng, op, dtype, shape):
    lo, hi = UNARY[op][1]
    x = rand(rng, shape, dtype, lo, hi)
    if op == "reciprocal":
        x = (x * np.where(rng.integers(0, 2, size=shape) == 0, 1, -1)).astype(dtype)
    return x


@pytest.mark.parametrize("op", list(UNARY))
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_unary_float(tmp_path, op, dtype):
    rng = rng_for(op, dtype)
    x = unary_input(rng, op, dtype, (4, 33))
    out = run_op(tmp_path, op, [x])
    fn, _, kind = UNARY[op]
    with np.errstate(all="ignore"):
        ref = fn(x.astype(F64)).astype(dtype)
    check(out, ref, kind, dtype, "%s %s" % (op, np.dtype(dtype).name))


@pytest.mark.parametrize("op", ["exp", "tanh", "gelu", "sqrt", "neg"])
def test_unary_bf16(tmp_path, op):
    rng = rng_for("bf16u", op)
    x = to_bf16(unary_input(rng, op, F32, (64,)))
    g = Graph()
    y = g.node(op, g.node("cast", g.input(x), to="bf16"))
    g.output(g.node("cast", y, to="f32"))
    (out,) = g.run(tmp_path)
    ref = to_bf16(UNARY[op][0](x.astype(F64)).astype(F32))
    assert_close(out, ref, tol("trans", "bf16"), op + " bf16")


def test_softplus_extremes(tmp_path):
    # no overflow for large x, no loss for very negative x, NaN and infinities through
    x = np.array([-1000, -80, -20, -1e-3, 0, 1e-3, 20, 80, 1000, np.inf, -np.inf, np.nan], F32)
    out = run_op(tmp_path, "softplus", [x])
    with np.errstate(all="ignore"):
        ref = np.logaddexp(x.astype(F64), 0).astype(F32)
    assert np.array_equal(np.isnan(out), np.isnan(ref)), "softplus NaN"
    ok = ~np.isnan(ref)
    assert_close(out[ok], ref[ok], tol("trans", F32), "softplus extremes")


@pytest.mark.parametrize("op", ["neg", "abs", "relu"])
@pytest.mark.parametrize("dtype", [I64, I32, I8], ids=lambda d: np.dtype(d).name)
def test_unary_int(tmp_path, op, dtype):
    x = np.array([-100, -7, -1, 0, 1, 5, 127], dtype)
    ref = {"neg": lambda v: -v, "abs": np.abs, "relu": lambda v: np.maximum(v, 0)}[op](x).astype(dtype)
    assert_exact(run_op(tmp_path, op, [x]), ref, op)


def test_gelu_tanh(tmp_path):
    x = rand(rng_for("gelu_tanh"), (200,), F32, -5, 5)
    out = run_op(tmp_path, "gelu", [x], approximate="tanh")
    x64 = x.astype(F64)
    ref = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    assert_close(out, ref.astype(F32), 1e-5, "gelu tanh")


def test_selu_attrs(tmp_path):
    x = rand(rng_for("selu_attrs"), (100,), F32, -3, 3)
    out = run_op(tmp_path, "selu", [x], alpha=1.5, gamma=2.0)
    x64 = x.astype(F64)
    assert_close(out, (2.0 * np.where(x64 > 0, x64, 1.5 * (np.exp(x64) - 1))).astype(F32), 1e-5, "selu attrs")


def test_unary_special_values(tmp_path):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 100.0], F32)
    with np.errstate(all="ignore"):
        for op, fn in (("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("tanh", np.tanh),
                       ("abs", np.abs), ("neg", np.negative), ("relu", lambda v: np.maximum(v, 0))):
            (tmp_path / op).mkdir()
            out = run_op(tmp_path / op, op, [x])
            ref = fn(x.astype(F64)).astype(F32)
            if op in ("abs", "neg", "relu"):
                assert_exact(out, ref, op + " special")
            else:
                assert_close(out, ref, 1e-5, op + " special")


def test_unary_noncontiguous_and_zero_size(tmp_path):
    x = rand(rng_for("unc"), (6, 5), F32)
    g = Graph()
    s = g.node("slice", g.input(x), starts=[5, 0], ends=[-100, 5], axes=[0, 1], steps=[-2, 2])
    g.output(g.node("exp", s))
    (out,) = g.run(tmp_path)
    assert_close(out, np.exp(x[5::-2, 0:5:2].astype(F64)).astype(F32), 1e-5, "exp of strided slice")
    z = np.zeros((3, 0), F32)
    assert run_op(tmp_path, "tanh", [z]).shape == (3, 0)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_isnan(tmp_path, dtype):
    x = np.array([[0.0, np.nan, np.inf], [-np.inf, -1.5, np.nan]], dtype)
    assert_exact(run_op(tmp_path, "isnan", [x]), np.isnan(x), "isnan")


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_identity(tmp_path, dtype):
    x = rand(rng_for("id", dtype), (3, 2), dtype)
    assert_exact(run_op(tmp_path, "identity", [x]), x, "identity")


# ==== where =================================================================================
@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_where(tmp_path, dtype):
    rng = rng_for("where", dtype)
    c = rand(rng, (3, 1), BOOL)
    a = rand(rng, (1, 4), dtype)
    b = rand(rng, (4,), dtype)
    assert_exact(run_op(tmp_path, "where", [c, a, b]), np.where(c, a, b), "where")


def test_where_scalar_and_full_broadcast(tmp_path):
    rng = rng_for("where2")
    c = rand(rng, (2, 3, 4), BOOL)
    a = np.array(1.5, F32)
    b = rand(rng, (3, 1), F32)
    assert_exact(run_op(tmp_path, "where", [c, a, b]), np.where(c, a, b).astype(F32), "where scalar")


# ==== cast ===================================================================================
def cast_values(src, dst):
    """Values that are in range for both dtypes (out-of-range conversions are not defined)."""
    src_n, dst_n = np.dtype(src), np.dtype(dst)
    if src_n == np.bool_:
        return np.array([True, False, True, True, False])
    lo = -100
    if src_n.kind == "u" or dst_n.kind == "u":
        lo = 0
    hi = 127 if (src_n == np.int8 or dst_n == np.int8) else 250
    if src_n.kind == "f":
        vals = [-2.75, -1.5, -0.25, -0.0, 0.0, 0.25, 0.5, 1.5, 2.75, 7.0, 99.5, 100.25, 126.75]
        vals = [v for v in vals if lo <= v <= hi] + ([float(hi) - 0.5] if hi > 127 else [])
        if dst_n == np.bool_ or dst_n.kind == "f":
            vals += [np.nan, np.inf, -np.inf] if dst_n.kind == "f" or dst_n == np.bool_ else []
        return np.array(vals, src)
    vals = [v for v in [-100, -7, -1, 0, 1, 2, 7, 100, 127, 200, 250] if lo <= v <= hi]
    return np.array(vals, src)


def ref_cast(x, dst):
    dst_n = np.dtype(dst)
    if dst_n == np.bool_:
        return x != 0
    if x.dtype.kind == "f" and dst_n.kind in "iu":
        return np.trunc(x).astype(dst)
    return x.astype(dst)


@pytest.mark.parametrize("src", ALL, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("dst", ALL, ids=lambda d: np.dtype(d).name)
def test_cast(tmp_path, src, dst):
    x = cast_values(src, dst)
    out = run_op(tmp_path, "cast", [x], to=GIR_NAME[dst])
    assert_exact(out, ref_cast(x, dst), "cast %s -> %s" % (np.dtype(src).name, np.dtype(dst).name))


def test_cast_f32_to_f16_rounding(tmp_path):
    x = rand(rng_for("f16r"), (1000,), F32, -70000, 70000)
    x[:6] = [65504.0, 65520.0, 1e-8, -1e-8, 6e-5, 1.0 + 2.0 ** -11]  # max, overflow, subnormal, tie
    with np.errstate(over="ignore"):
        ref = x.astype(F16)  # overflow to inf is the expected result
    assert_exact(run_op(tmp_path, "cast", [x], to="f16"), ref, "f32->f16 rounding")


@pytest.mark.parametrize("dst", ALL, ids=lambda d: np.dtype(d).name)
def test_cast_from_bf16(tmp_path, dst):
    x = to_bf16(cast_values(F32, dst).astype(F32))
    g = Graph()
    g.output(g.node("cast", g.node("cast", g.input(x), to="bf16"), to=GIR_NAME[dst]))
    (out,) = g.run(tmp_path)
    assert_exact(out, ref_cast(x, dst), "bf16 -> %s" % np.dtype(dst).name)


@pytest.mark.parametrize("src", ALL, ids=lambda d: np.dtype(d).name)
def test_cast_to_bf16(tmp_path, src):
    """Output is bf16 (graft run writes it as f32)."""
    x = cast_values(src, F32)
    if np.dtype(src) == F32:
        x = np.concatenate([x, np.array([1.00390625, 1.01171875, 3.14159265, -1e-30, 3e38], F32),
                            rand(rng_for("bf"), (50,), F32, -1e4, 1e4)])
    out = run_op(tmp_path, "cast", [x], to="bf16")
    ref = to_bf16(x.astype(F32))  # the values here are exact in f32
    assert_exact(out, ref, "%s -> bf16" % np.dtype(src).name)


# ==== reductions ============================================================================
RED = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min}
AXES = [None, [], [0], [1], [-1], [0, 2], [-3, -1], [2, 0, 1]]


def ref_reduce(op, x, axes, keepdims):
    ax = None if not axes else tuple(axes)
    if x.dtype.kind == "f":
        with np.errstate(all="ignore"):
            r = RED[op](x.astype(F64), axis=ax, keepdims=bool(keepdims))
        return np.asarray(r).astype(x.dtype)
    if op == "reduce_sum":
        return np.asarray(np.sum(x.astype(np.int64), axis=ax, keepdims=bool(keepdims))).astype(x.dtype)
    return np.asarray(RED[op](x, axis=ax, keepdims=bool(keepdims))).astype(x.dtype)


def reduce_attrs(axes, keepdims):
    attrs = {} if keepdims is None else {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    return attrs


@pytest.mark.parametrize("op", list(RED))
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [None, 0, 1], ids=lambda k: "kd%s" % k)
def test_reduce_axes(tmp_path, op, axes, keepdims):
    x = rand(rng_for(op, axes, keepdims), (2, 3, 5), F32)
    out = run_op(tmp_path, op, [x], **reduce_attrs(axes, keepdims))
    ref = ref_reduce(op, x, axes, 1 if keepdims is None else keepdims)
    check(out, ref, "bits" if op in ("reduce_max", "reduce_min") else "reduce", F32, "%s %s" % (op, axes))


@pytest.mark.parametrize("op", list(RED))
@pytest.mark.parametrize("dtype", [F16, F64, I64, I32, I8, U8], ids=lambda d: np.dtype(d).name)
def test_reduce_dtypes(tmp_path, op, dtype):
    if op == "reduce_mean" and np.dtype(dtype).kind in "iu":
        pytest.skip("mean of integers is not defined by ops.c")
    x = rand(rng_for(op, dtype), (3, 4, 6), dtype, -3, 3)
    out = run_op(tmp_path, op, [x], axes=[1, -1], keepdims=0)
    check(out, ref_reduce(op, x, [1, 2], 0), "bits" if op in ("reduce_max", "reduce_min") else "reduce", dtype,
          "%s %s" % (op, np.dtype(dtype).name))


@pytest.mark.parametrize("op", list(RED))
def test_reduce_bf16(tmp_path, op):
    x = to_bf16(rand(rng_for("rbf", op), (4, 16), F32))
    g = Graph()
    r = g.node(op, g.node("cast", g.input(x), to="bf16"), axes=[1], keepdims=0)
    g.output(g.node("cast", r, to="f32"))
    (out,) = g.run(tmp_path)
    assert_close(out, to_bf16(ref_reduce(op, x, [1], 0)), tol("reduce", "bf16"), op + " bf16")


@pytest.mark.parametrize("op", list(RED))
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_zero_size_axis(tmp_path, op, keepdims):
    x = np.zeros((2, 0, 3), F32)
    out = run_op(tmp_path, op, [x], axes=[1], keepdims=keepdims)
    val = {"reduce_sum": 0.0, "reduce_mean": np.nan, "reduce_max": -np.inf, "reduce_min": np.inf}[op]
    assert_exact(out, np.full((2, 1, 3) if keepdims else (2, 3), val, F32), op + " over empty axis")


def test_reduce_keeps_zero_size_other_dims(tmp_path):
    x = np.zeros((0, 4), F32)
    assert run_op(tmp_path, "reduce_sum", [x], axes=[1], keepdims=1).shape == (0, 1)


def test_reduce_size_one_and_scalar(tmp_path):
    x = rand(rng_for("r1"), (1, 5, 1), F32)
    check(run_op(tmp_path, "reduce_sum", [x], axes=[0, 2], keepdims=0), x.reshape(5), "reduce", F32, "size-1 axes")
    s = np.array(2.5, F32)
    check(run_op(tmp_path, "reduce_max", [s]), s, "bits", F32, "0-d reduce")


@pytest.mark.parametrize("op", list(RED))
def test_reduce_noncontiguous(tmp_path, op):
    x = rand(rng_for("rnc", op), (5, 3, 4), F32)
    g = Graph()
    t = g.node("transpose", g.input(x), perm=[2, 0, 1])
    g.output(g.node(op, t, axes=[1], keepdims=0))
    (out,) = g.run(tmp_path)
    check(out, ref_reduce(op, np.transpose(x, (2, 0, 1)).copy(), [1], 0),
          "bits" if op in ("reduce_max", "reduce_min") else "reduce", F32, op + " of a transpose")


# ==== softmax, layer_norm ==========================================================================
def ref_softmax(x, axis):
    x = x.astype(F64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [None, -1, 0, 1, 2, -3])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_softmax(tmp_path, axis, dtype):
    x = rand(rng_for("sm", axis, dtype), (2, 3, 7), dtype, -5, 5)
    out = run_op(tmp_path, "softmax", [x], **({} if axis is None else {"axis": axis}))
    check(out, ref_softmax(x, -1 if axis is None else axis).astype(dtype), "reduce", dtype, "softmax")


def test_softmax_large_values_and_noncontiguous(tmp_path):
    x = (rand(rng_for("smbig"), (4, 6), F32) * 1000).astype(F32)
    g = Graph()
    g.output(g.node("softmax", g.node("transpose", g.input(x)), axis=1))
    (out,) = g.run(tmp_path)
    assert_close(out, ref_softmax(x.T, 1).astype(F32), 1e-5, "softmax stable + transposed")


def test_softmax_bf16(tmp_path):
    x = to_bf16(rand(rng_for("smbf"), (3, 10), F32, -3, 3))
    g = Graph()
    g.output(g.node("cast", g.node("softmax", g.node("cast", g.input(x), to="bf16")), to="f32"))
    (out,) = g.run(tmp_path)
    assert_close(out, to_bf16(ref_softmax(x, -1).astype(F32)), tol("reduce", "bf16"), "softmax bf16")


def ref_layer_norm(x, scale, bias, axis, eps):
    x = x.astype(F64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps) * scale.astype(F64)
    return y + bias.astype(F64) if bias is not None else y


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_last_axis(tmp_path, dtype, with_bias):
    rng = rng_for("ln", dtype, with_bias)
    x = rand(rng, (2, 3, 16), dtype, -3, 3)
    s = rand(rng, (16,), dtype, 0.5, 1.5)
    b = rand(rng, (16,), dtype) if with_bias else None
    out = run_op(tmp_path, "layer_norm", [x, s, b])
    check(out, ref_layer_norm(x, s, b, -1, 1e-5).astype(dtype), "reduce", dtype, "layer_norm")


@pytest.mark.parametrize("axis", [1, -2, 0])
def test_layer_norm_axis_and_broadcast_params(tmp_path, axis):
    rng = rng_for("ln_axis", axis)
    x = rand(rng, (2, 3, 8), F32, -3, 3)
    norm_shape = x.shape[axis % 3:]
    s = rand(rng, norm_shape, F32, 0.5, 1.5)
    b = rand(rng, norm_shape[-1:], F32)  # broadcast to the normalized shape
    out = run_op(tmp_path, "layer_norm", [x, s, b], axis=axis, epsilon=1e-3)
    assert_close(out, ref_layer_norm(x, s, b, axis, 1e-3).astype(F32), 1e-5, "layer_norm axis %d" % axis)


# ==== matmul ==================================================================================
def ref_matmul(a, b, bias=None, trans_a=0, trans_b=0, alpha=1.0):
    a64, b64 = a.astype(F64), b.astype(F64)
    if trans_a:
        a64 = np.swapaxes(a64, -1, -2)
    if trans_b:
        b64 = np.swapaxes(b64, -1, -2)
    r = alpha * np.matmul(a64, b64)
    if bias is not None:
        r = r + bias.astype(F64)
    return r


MATMUL_CASES = [
    # (a shape, b shape, bias shape, trans_a, trans_b, alpha)
    ((3, 4), (4, 5), None, 0, 0, 1.0),
    ((4, 3), (4, 5), None, 1, 0, 1.0),
    ((3, 4), (5, 4), None, 0, 1, 1.0),
    ((4, 3), (5, 4), None, 1, 1, 1.0),
    ((2, 1, 3, 4), (5, 4, 6), None, 0, 0, 1.0),
    ((7, 3, 4), (4, 2), None, 0, 0, 1.0),
    ((3, 4), (2, 6, 4), (6,), 0, 1, 1.0),
    ((4,), (4, 5), None, 0, 0, 1.0),
    ((3, 4), (4,), None, 0, 0, 1.0),
    ((4,), (4,), None, 0, 0, 1.0),
    ((2, 3, 4), (4,), None, 0, 0, 1.0),
    ((3, 4), (4, 5), (5,), 0, 0, 1.0),
    ((3, 4), (4, 5), (3, 5), 0, 0, 0.5),
    ((3, 4), (4, 5), (3, 1), 0, 0, -2.0),
    ((1, 1), (1, 1), None, 0, 0, 1.0),
    ((3, 0), (0, 4), None, 0, 0, 1.0),
    ((3, 0), (0, 4), (4,), 0, 0, 1.0),
    ((0, 4), (4, 5), None, 0, 0, 1.0),
    ((2, 33, 65), (65, 17), (17,), 0, 0, 1.0),
]


@pytest.mark.parametrize("case", MATMUL_CASES, ids=lambda c: "%s@%s_b%s_t%d%d_a%g" % c)
def test_matmul(tmp_path, case):
    sa, sb, sbias, ta, tb, alpha = case
    rng = rng_for("mm", case)
    a, b = rand(rng, sa, F32), rand(rng, sb, F32)
    bias = rand(rng, sbias, F32) if sbias else None
    attrs = {}
    if ta:
        attrs["trans_a"] = 1
    if tb:
        attrs["trans_b"] = 1
    if alpha != 1.0:
        attrs["alpha"] = alpha
    out = run_op(tmp_path, "matmul", [a, b] + ([bias] if bias is not None else []), **attrs)
    check(out, ref_matmul(a, b, bias, ta, tb, alpha).astype(F32), "reduce", F32, "matmul %s" % (case,))


@pytest.mark.parametrize("dtype", [F16, F64], ids=lambda d: np.dtype(d).name)
def test_matmul_dtypes(tmp_path, dtype):
    rng = rng_for("mmdt", dtype)
    a, b, bias = rand(rng, (2, 5, 8), dtype), rand(rng, (8, 3), dtype), rand(rng, (3,), dtype)
    out = run_op(tmp_path, "matmul", [a, b, bias])
    check(out, ref_matmul(a, b, bias).astype(dtype), "reduce", dtype, "matmul %s" % np.dtype(dtype).name)


def test_matmul_bf16(tmp_path):
    rng = rng_for("mmbf")
    a, b = to_bf16(rand(rng, (4, 8), F32)), to_bf16(rand(rng, (8, 3), F32))
    g = Graph()
    m = g.node("matmul", g.node("cast", g.input(a), to="bf16"), g.node("cast", g.input(b), to="bf16"))
    g.output(g.node("cast", m, to="f32"))
    (out,) = g.run(tmp_path)
    assert_close(out, to_bf16(ref_matmul(a, b).astype(F32)), tol("reduce", "bf16"), "matmul bf16")


def test_matmul_noncontiguous_operands(tmp_path):
    """Transposed and sliced views as operands (not trans_* attributes)."""
    rng = rng_for("mmnc")
    a, b = rand(rng, (4, 3), F32), rand(rng, (5, 8), F32)
    g = Graph()
    at = g.node("transpose", g.input(a), perm=[1, 0])                     # [3,4]
    bs = g.node("slice", g.input(b), starts=[0, 7], ends=[4, -100], axes=[0, 1], steps=[1, -2])  # [4,4]
    g.output(g.node("matmul", at, bs))
    (out,) = g.run(tmp_path)
    check(out, ref_matmul(a.T, b[0:4, 7::-2]).astype(F32), "reduce", F32, "matmul of views")


# ==== movement ================================================================================
@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_reshape_dtypes(tmp_path, dtype):
    x = rand(rng_for("rs", dtype), (2, 3, 4), dtype)
    assert_exact(run_op(tmp_path, "reshape", [x], shape=[4, -1]), x.reshape(4, -1), "reshape")


@pytest.mark.parametrize("src,shape", [((2, 3, 4), [-1]), ((2, 3, 4), [6, -1, 2]), ((1,), []), ((), [1, 1]),
                                       ((0, 4), [-1, 2]), ((4, 0), [0]), ((6,), [1, 6, 1])],
                         ids=str)
def test_reshape_shapes(tmp_path, src, shape):
    x = rand(rng_for("rs2", src, shape), src, F32)
    assert_exact(run_op(tmp_path, "reshape", [x], shape=shape), x.reshape(shape), "reshape %s" % shape)


def test_reshape_of_transpose(tmp_path):
    x = rand(rng_for("rst"), (3, 4), F32)
    g = Graph()
    g.output(g.node("reshape", g.node("transpose", g.input(x)), shape=[2, 6]))
    (out,) = g.run(tmp_path)
    assert_exact(out, x.T.reshape(2, 6), "reshape(transpose)")


@pytest.mark.parametrize("shape,perm", [((3, 4), None), ((2, 3, 4), [1, 0, 2]), ((2, 3, 4), [2, 0, 1]),
                                        ((2, 3, 4, 5), [3, 1, 0, 2]), ((1, 5, 1), [2, 1, 0]), ((0, 3), [1, 0]),
                                        ((2, 3, 4), None), ((), None)], ids=str)
def test_transpose(tmp_path, shape, perm):
    x = rand(rng_for("tp", shape, perm), shape, F32)
    out = run_op(tmp_path, "transpose", [x], **({} if perm is None else {"perm": perm}))
    assert_exact(out, np.transpose(x, perm), "transpose %s" % perm)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_transpose_dtypes(tmp_path, dtype):
    x = rand(rng_for("tpd", dtype), (2, 3, 5), dtype)
    assert_exact(run_op(tmp_path, "transpose", [x], perm=[2, 0, 1]), np.transpose(x, (2, 0, 1)), "transpose")


def test_transpose_of_transpose(tmp_path):
    x = rand(rng_for("tt"), (2, 3, 4), F32)
    g = Graph()
    t = g.node("transpose", g.input(x), perm=[1, 2, 0])
    g.output(g.node("transpose", t, perm=[2, 0, 1]), t)
    out, t_out = g.run(tmp_path)
    assert_exact(t_out, np.transpose(x, (1, 2, 0)), "inner transpose")
    assert_exact(out, x, "transpose of transpose")


@pytest.mark.parametrize("src,shape", [((3, 1), [2, 3, 4]), ((3, 4), [1]), ((1,), [5]), ((), [2, 2]),
                                       ((4, 1), [1, 3]), ((1, 3), [0, 3]), ((2, 1, 3), [2, 4, 1])], ids=str)
def test_expand(tmp_path, src, shape):
    x = rand(rng_for("ex", src, shape), src, F32)
    ref = x * np.ones(shape, F32)  # bidirectional broadcast
    assert_exact(run_op(tmp_path, "expand", [x], shape=shape), ref.astype(F32), "expand %s" % shape)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_expand_dtypes(tmp_path, dtype):
    x = rand(rng_for("exd", dtype), (1, 3), dtype)
    assert_exact(run_op(tmp_path, "expand", [x], shape=[2, 3]), np.broadcast_to(x, (2, 3)).copy(), "expand")


@pytest.mark.parametrize("src,axes", [((1, 3, 1, 2), None), ((1, 3, 1, 2), [0]), ((1, 3, 1, 2), [-2]),
                                      ((1, 3, 1, 2), [0, 2]), ((1,), None), ((1, 0, 1), [2])], ids=str)
def test_squeeze(tmp_path, src, axes):
    x = rand(rng_for("sq", src, axes), src, F32)
    ref = np.squeeze(x, axis=None if axes is None else tuple(axes))
    assert_exact(run_op(tmp_path, "squeeze", [x], **({} if axes is None else {"axes": axes})), ref, "squeeze")


@pytest.mark.parametrize("src,axes", [((3, 4), [0]), ((3, 4), [-1]), ((3, 4), [0, 3]), ((), [0]),
                                      ((3,), [1, 0]), ((2, 0), [1])], ids=str)
def test_unsqueeze(tmp_path, src, axes):
    x = rand(rng_for("usq", src, axes), src, F32)
    out_rank = x.ndim + len(axes)
    ref = np.expand_dims(x, tuple(sorted(a % out_rank for a in axes)))
    assert_exact(run_op(tmp_path, "unsqueeze", [x], axes=axes), ref, "unsqueeze %s" % axes)


BIG = 2 ** 62
SLICE_CASES = [
    # (shape, starts, ends, axes, steps)
    ((10,), [2], [7], None, None),
    ((10,), [-3], [BIG], None, None),
    ((10,), [-100], [100], None, None),
    ((10,), [8], [2], None, [-1]),
    ((10,), [BIG], [-BIG], None, [-1]),
    ((10,), [9], [-BIG], None, [-3]),
    ((10,), [-1], [-11], None, [-2]),
    ((10,), [5], [5], None, None),
    ((10,), [7], [3], None, None),
    ((4, 6), [1, 0], [3, 6], [0, 1], [1, 2]),
    ((4, 6), [3], [0], [0], [-1]),
    ((4, 6), [-4], [-1], [-1], None),
    ((2, 3, 4), [1, -2], [BIG, BIG], [2, 0], [2, 1]),
    ((2, 3, 4), [2], [-BIG], [-2], [-1]),
    ((0, 3), [0], [5], [0], None),
]


def py_slice(x, starts, ends, axes, steps):
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        idx[a % x.ndim] = slice(s, e, st)
    return x[tuple(idx)]


@pytest.mark.parametrize("case", SLICE_CASES, ids=str)
def test_slice(tmp_path, case):
    shape, starts, ends, axes, steps = case
    x = rand(rng_for("sl", case), shape, F32)
    attrs = {"starts": starts, "ends": ends}
    if axes is not None:
        attrs["axes"] = axes
    if steps is not None:
        attrs["steps"] = steps
    assert_exact(run_op(tmp_path, "slice", [x], **attrs), py_slice(x, starts, ends, axes, steps), "slice %s" % (case,))


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_slice_dtypes(tmp_path, dtype):
    x = rand(rng_for("sld", dtype), (5, 4), dtype)
    out = run_op(tmp_path, "slice", [x], starts=[4, 1], ends=[0, 4], axes=[0, 1], steps=[-2, 2])
    assert_exact(out, x[4:0:-2, 1:4:2], "slice")


@pytest.mark.parametrize("axis,shapes", [(0, [(2, 3), (4, 3)]), (1, [(2, 3), (2, 1), (2, 5)]),
                                         (-1, [(2, 2, 3), (2, 2, 0), (2, 2, 1)]), (0, [(0, 3), (2, 3)]),
                                         (0, [(5,)])], ids=str)
def test_concat(tmp_path, axis, shapes):
    rng = rng_for("cc", axis, shapes)
    xs = [rand(rng, s, F32) for s in shapes]
    assert_exact(run_op(tmp_path, "concat", xs, axis=axis), np.concatenate(xs, axis=axis), "concat")


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_concat_dtypes(tmp_path, dtype):
    rng = rng_for("ccd", dtype)
    xs = [rand(rng, (2, k), dtype) for k in (1, 3)]
    assert_exact(run_op(tmp_path, "concat", xs, axis=1), np.concatenate(xs, axis=1), "concat")


def test_concat_noncontiguous(tmp_path):
    rng = rng_for("ccnc")
    a, b = rand(rng, (3, 2), F32), rand(rng, (2, 4), F32)
    g = Graph()
    g.output(g.node("concat", g.node("transpose", g.input(a)), g.input(b), axis=1))
    (out,) = g.run(tmp_path)
    assert_exact(out, np.concatenate([a.T, b], axis=1), "concat of transpose")


@pytest.mark.parametrize("shape,axis,split,n", [((6, 4), 0, None, 3), ((6, 4), 1, [1, 3], 2), ((2, 3, 6), -1, [2, 0, 4], 3),
                                                ((4,), 0, None, 1), ((5, 2), 0, [5], 1), ((4, 6), -2, [1, 1, 2], 3)],
                         ids=str)
def test_split(tmp_path, shape, axis, split, n):
    x = rand(rng_for("sp", shape, axis, split), shape, F32)
    attrs = {"axis": axis}
    if split is not None:
        attrs["split"] = split
    outs = run_op(tmp_path, "split", [x], n_out=n, **attrs)
    outs = outs if isinstance(outs, list) else [outs]
    sizes = split if split is not None else [shape[axis] // n] * n
    refs = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    assert len(outs) == n
    for o, r in zip(outs, refs):
        assert_exact(o, r, "split")


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_split_dtypes(tmp_path, dtype):
    x = rand(rng_for("spd", dtype), (4, 2), dtype)
    a, b = run_op(tmp_path, "split", [x], n_out=2)
    assert_exact(a, x[:2], "split 0")
    assert_exact(b, x[2:], "split 1")


GATHER_CASES = [
    # (data shape, indices, axis)
    ((5, 3), [0, 4, 2, 2], 0),
    ((5, 3), [-1, -5, 0], 0),
    ((5, 3), [[2, 0], [1, -1]], 1),
    ((2, 3, 4), [3, 0, -2], -1),
    ((2, 3, 4), 1, 1),
    ((2, 3, 4), [[1]], 0),
    ((4,), [], 0),
    ((6, 2), [5, 5, 5, 5, 5], 0),
]


@pytest.mark.parametrize("case", GATHER_CASES, ids=str)
@pytest.mark.parametrize("idx_dtype", [I64, I32], ids=lambda d: np.dtype(d).name)
def test_gather(tmp_path, case, idx_dtype):
    shape, idx, axis = case
    x = rand(rng_for("ga", case), shape, F32)
    idx = np.array(idx, idx_dtype)
    out = run_op(tmp_path, "gather", [x, idx], axis=axis)
    assert_exact(out, np.take(x, idx, axis=axis), "gather %s" % (case,))


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_gather_dtypes(tmp_path, dtype):
    x = rand(rng_for("gad", dtype), (4, 3), dtype)
    idx = np.array([3, 0, -1], I64)
    assert_exact(run_op(tmp_path, "gather", [x, idx]), np.take(x, idx, axis=0), "gather")


def test_gather_out_of_range_is_an_error(tmp_path):
    x = rand(rng_for("gaoor"), (4, 3), F32)
    with pytest.raises(GraftError) as e:
        run_op(tmp_path, "gather", [x, np.array([0, 4], I64)])
    assert e.value.returncode != 0 and "graft:" in e.value.stderr


def test_gather_embedding_of_transpose(tmp_path):
    x = rand(rng_for("gat"), (3, 10), F32)
    idx = np.array([[9, 0], [1, 1]], I32)
    g = Graph()
    g.output(g.node("gather", g.node("transpose", g.input(x)), g.input(idx), axis=0))
    (out,) = g.run(tmp_path)
    assert_exact(out, np.take(x.T, idx, axis=0), "gather of transpose")


@pytest.mark.parametrize("shape,ishape,axis", [((3, 4), (2, 4), 0), ((3, 4), (3, 2), 1), ((2, 3, 4), (2, 3, 5), -1),
                                               ((2, 3, 4), (1, 3, 4), 0), ((3, 4), (0, 4), 0)], ids=str)
@pytest.mark.parametrize("idx_dtype", [I64, I32], ids=lambda d: np.dtype(d).name)
def test_gather_elements(tmp_path, shape, ishape, axis, idx_dtype):
    rng = rng_for("ge", shape, ishape, axis)
    x = rand(rng, shape, F32)
    n = shape[axis]
    idx = rng.integers(-n, n, size=ishape).astype(idx_dtype)
    out = run_op(tmp_path, "gather_elements", [x, idx], axis=axis)
    assert_exact(out, np.take_along_axis(x, idx.astype(np.int64), axis=axis), "gather_elements")


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 3), (2, 3, 4), (0, 3)], ids=str)
@pytest.mark.parametrize("upper", [0, 1, None])
@pytest.mark.parametrize("k", [None, 0, 1, -1, 3, -4])
def test_trilu(tmp_path, shape, upper, k):
    x = rand(rng_for("tr", shape, upper, k), shape, F32)
    attrs = {}
    if upper is not None:
        attrs["upper"] = upper
    if k is not None:
        attrs["k"] = k
    kk = 0 if k is None else k
    ref = np.triu(x, kk) if upper in (None, 1) else np.tril(x, kk)
    assert_exact(run_op(tmp_path, "trilu", [x], **attrs), ref, "trilu")


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
def test_trilu_dtypes(tmp_path, dtype):
    x = rand(rng_for("trd", dtype), (3, 3), dtype)
    assert_exact(run_op(tmp_path, "trilu", [x], upper=0), np.tril(x), "trilu")


# ==== generators ================================================================================
def run_gen(tmp_path, op, **attrs):
    g = Graph()
    g.output(g.node(op, **attrs))
    return g.run(tmp_path)[0]


@pytest.mark.parametrize("dtype,value", [(None, 2.5), (F32, -1.0), (F16, 0.1), (F64, 1e-300), (I64, 7), (I32, -3),
                                         (I8, 100), (U8, 255), (BOOL, 1)], ids=str)
def test_fill(tmp_path, dtype, value):
    attrs = {"shape": [2, 3], "value": float(value)}
    if dtype is not None:
        attrs["dtype"] = GIR_NAME[dtype]
    out = run_gen(tmp_path, "fill", **attrs)
    ref = np.full((2, 3), value, dtype or F32) if dtype != BOOL else np.full((2, 3), bool(value))
    assert_exact(out, ref, "fill")


def test_fill_shapes(tmp_path):
    assert_exact(run_gen(tmp_path, "fill", shape=[], value=3.0), np.array(3.0, F32), "fill 0-d")
    assert run_gen(tmp_path, "fill", shape=[0, 4]).shape == (0, 4)
    assert_exact(run_gen(tmp_path, "fill", shape=[3]), np.zeros(3, F32), "fill default value")


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 5, None, None), (0.5, 3.0, 0.25, F32), (10, 0, -3, I64), (5, 5, 1, I32), (5, 0, 1, I64),
    (-2.0, 2.0, 0.5, F64), (0, 7, 2, I32), (1.0, 0.0, -0.125, F16)], ids=str)
def test_range(tmp_path, start, limit, delta, dtype):
    attrs = {"start": start, "limit": limit}
    if delta is not None:
        attrs["delta"] = delta
    if dtype is not None:
        attrs["dtype"] = GIR_NAME[dtype]
    out = run_gen(tmp_path, "range", **attrs)
    d = 1 if delta is None else delta
    n = max(int(math.ceil((limit - start) / d)), 0)
    ref = (start + d * np.arange(n, dtype=F64)).astype(dtype or F32)
    assert_exact(out, ref, "range")


def splitmix_uniform(seed, n, f64=False):
    """kir.h GR_KX_RANDOM: uniform [0,1) at counters 0..n-1."""
    with np.errstate(over="ignore"):
        x = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.arange(n, dtype=np.uint64)
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    if f64:
        return (x >> np.uint64(11)).astype(F64) * 2.0 ** -53
    return (x >> np.uint64(40)).astype(F64) * 2.0 ** -24


@pytest.mark.parametrize("op", ["random_uniform", "random_normal"])
def test_random_deterministic(tmp_path, op):
    g = Graph()
    a = g.node(op, shape=[1000], seed=42)
    b = g.node(op, shape=[1000], seed=42)
    c = g.node(op, shape=[1000], seed=43)
    g.output(a, b, c)
    ra, rb, rc = g.run(tmp_path, stem="r1")
    (ra2, _, _) = g.run(tmp_path, stem="r2")
    assert_exact(ra, rb, "same seed, same node attrs")
    assert_exact(ra, ra2, "same seed, another run")
    assert not np.array_equal(ra, rc), "different seeds give the same numbers"
    assert ra.dtype == F32 and ra.shape == (1000,)


def test_random_uniform_statistics_and_bits(tmp_path):
    n = 200000
    out = run_gen(tmp_path, "random_uniform", shape=[n], seed=7, low=-2.0, high=3.0)
    assert out.min() >= -2.0 and out.max() < 3.0
    assert abs(out.mean() - 0.5) < 0.03 and abs(out.std() - 5 / math.sqrt(12)) < 0.03
    hist, _ = np.histogram(out, bins=10, range=(-2, 3))
    assert (np.abs(hist - n / 10) < 5 * math.sqrt(n / 10)).all(), hist
    # same bits on every device: the kir.h generator, scaled to [low, high)
    ref = (-2.0 + 5.0 * splitmix_uniform(7, n)).astype(F32)
    assert_close(out, ref, 1e-6, "random_uniform vs the kir.h generator")


def test_random_uniform_default_and_f64(tmp_path):
    out = run_gen(tmp_path, "random_uniform", shape=[4096], seed=3)
    assert out.dtype == F32 and out.min() >= 0 and out.max() < 1
    assert_close(out, splitmix_uniform(3, 4096).astype(F32), 1e-7, "uniform [0,1)")
    out64 = run_gen(tmp_path, "random_uniform", shape=[4096], seed=3, dtype="f64")
    assert out64.dtype == F64
    assert_close(out64, splitmix_uniform(3, 4096, f64=True), 1e-12, "uniform f64")


def test_random_normal_statistics(tmp_path):
    n = 200000
    out = run_gen(tmp_path, "random_normal", shape=[n], seed=11, mean=1.5, std=0.5)
    assert np.isfinite(out).all()
    assert abs(out.mean() - 1.5) < 0.01 and abs(out.std() - 0.5) < 0.01
    z = (out.astype(F64) - 1.5) / 0.5
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.01
    assert abs((np.abs(z) < 2).mean() - 0.9545) < 0.005
    assert abs(float(np.mean(z ** 3))) < 0.05  # symmetric
    assert abs(float(np.mean(z ** 4)) - 3.0) < 0.1  # normal kurtosis


def test_random_shapes(tmp_path):
    assert run_gen(tmp_path, "random_normal", shape=[2, 0, 3]).shape == (2, 0, 3)
    out = run_gen(tmp_path, "random_uniform", shape=[3, 4], dtype="f16", seed=1)
    assert out.dtype == F16 and out.shape == (3, 4)


# ==== control flow ============================================================================
def test_if_constant_condition(tmp_path):
    """if is predicated (both branches inlined, where() selects)."""
    x = rand(rng_for("if"), (3,), F32)
    g = Graph()
    xi = g.input(x)
    cond = g.const(np.array(True))
    g.lines.append("v99 = if(%s, then_branch={\n  t = relu(%s)\n  output t\n}, else_branch={\n  output %s\n})" %
                   (cond, xi, xi))
    g.output("v99")
    (out,) = g.run(tmp_path)
    assert_exact(out, np.maximum(x, 0), "if(true)")
