"""Matmul epilogues from ONNX (passes/epilogue.c, issue 15): the tanh-GELU that GPT-2's
NewGELUActivation exports as a chain of ops, Gelu(approximate="tanh") of opset 20, and
Relu after a MatMul + bias are fused into the matmul's library call. Through the graft
CLI: `graft dump` shows the epilogue on the matmul (fused count > 0) and none with
--no-fuse-epilogue; `graft run` gives the same outputs either way (f32 within 1e-5,
f16 within 2e-3, normalised L2) and matches onnx.reference; near misses (a wrong
constant, the pre-activation also a model output) stay unfused and still run correctly.
GRAFT_TEST_DEVICE=cuda runs the same cases on CUDA.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from test_onnx_import import DEVICE, GRAFT, graft  # noqa: E402

pytestmark = pytest.mark.skipif(not __import__("os").path.exists(GRAFT), reason="graft CLI not built")

SQRT_2_OVER_PI = float(np.sqrt(2 / np.pi))
rng = np.random.default_rng(15)
ONNX_T = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def scalar(name, value, dtype, as_node):
    """A scalar constant as an initializer, or as a Constant node (exporters do both)."""
    t = numpy_helper.from_array(np.array(value, dtype), name)
    return (helper.make_node("Constant", [], [name], value=t), None) if as_node else (None, t)


def gelu_chain(x, out, dtype, cub=0.044715, c1=SQRT_2_OVER_PI, half=0.5, swapped=False, cube="pow", as_nodes=False):
    """0.5*x*(1 + tanh(c1*(x + cub*x^3))) as torch exports NewGELUActivation; `swapped`
    puts every Mul/Add operand the other way round and multiplies 0.5 last."""
    nodes, inits = [], []
    for name, v in (("half", half), ("one", 1.0), ("three", 3.0), ("cub", cub), ("c1", c1)):
        n, t = scalar(name, v, dtype, as_nodes)
        nodes += [n] if n else []
        inits += [t] if t else []
    mk = helper.make_node
    if cube == "pow":
        nodes.append(mk("Pow", [x, "three"], ["p3"]))
    else:
        nodes += [mk("Mul", [x, x], ["sq"]), mk("Mul", ["sq", x] if swapped else [x, "sq"], ["p3"])]
    if swapped:
        nodes += [mk("Mul", ["cub", "p3"], ["q"]), mk("Add", ["q", x], ["s"]), mk("Mul", ["c1", "s"], ["t"]),
                  mk("Tanh", ["t"], ["th"]), mk("Add", ["one", "th"], ["o1"]), mk("Mul", [x, "o1"], ["h"]),
                  mk("Mul", ["h", "half"], [out])]
    else:
        nodes += [mk("Mul", [x, "half"], ["h"]), mk("Mul", ["p3", "cub"], ["q"]), mk("Add", [x, "q"], ["s"]),
                  mk("Mul", ["s", "c1"], ["t"]), mk("Tanh", ["t"], ["th"]), mk("Add", ["th", "one"], ["o1"]),
                  mk("Mul", ["h", "o1"], [out])]
    return nodes, inits


def mlp(dtype, activation, extra_outputs=(), opset=18, casts=False):
    """x [batch, seq, 32] @ W [32, 48] + b, then the activation (nodes reading "pre")."""
    w = numpy_helper.from_array((rng.standard_normal((32, 48)) * 0.3).astype(dtype), "W")
    b = numpy_helper.from_array((rng.standard_normal(48) * 0.5).astype(dtype), "b")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["pre"])]
    src = "pre"
    if casts:  # an f16 model computing its GELU in f32, as mixed-precision exports do
        nodes.append(helper.make_node("Cast", ["pre"], ["pre32"], to=TensorProto.FLOAT))
        src = "pre32"
    act_out = "act32" if casts else "y"
    act_nodes, inits = activation(src, act_out)
    nodes += act_nodes
    if casts:
        nodes.append(helper.make_node("Cast", ["act32"], ["y"], to=ONNX_T[dtype]))
    outs = [helper.make_tensor_value_info("y", ONNX_T[dtype], None)]
    outs += [helper.make_tensor_value_info(o, ONNX_T[dtype], None) for o in extra_outputs]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", ONNX_T[dtype], ["batch", "seq", 32])], outs,
                          initializer=[w, b] + inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def fused_count(path, *flags):
    text = graft("dump", str(path), "--dim", "batch=2", "--dim", "seq=5", *flags).stdout
    fuse = text[text.index("== after fuse:"):]
    return sum(1 for line in fuse.splitlines() if line.startswith("step") and "libcall matmul" in line
               and "epilogue=none" not in line)


def run(tmp_path, path, x, tag, *flags):
    out = tmp_path / f"out_{tag}"
    xf = tmp_path / "x.npy"
    np.save(xf, x)
    graft("run", str(path), "--device", DEVICE, "--input", f"x={xf}", "--output-dir", str(out), *flags)
    return np.load(out / "y.npy")


def rel(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def check(tmp_path, m, dtype, want_fused, tol):
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    assert fused_count(path) == want_fused
    assert fused_count(path, "--no-fuse-epilogue") == 0
    x = (rng.standard_normal((2, 5, 32)) * 1.5).astype(dtype)
    fused = run(tmp_path, path, x, "fused")
    unfused = run(tmp_path, path, x, "unfused", "--no-fuse-epilogue")
    ref = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert fused.shape == ref.shape and fused.dtype == ref.dtype
    assert rel(fused, unfused) <= tol, rel(fused, unfused)
    assert rel(fused, ref) <= tol, rel(fused, ref)


@pytest.mark.parametrize("swapped", [False, True])
@pytest.mark.parametrize("cube", ["pow", "mul"])
@pytest.mark.parametrize("as_nodes", [False, True])
def test_gpt2_gelu_chain_f32(tmp_path, swapped, cube, as_nodes):
    m = mlp(np.float32, lambda x, o: gelu_chain(x, o, np.float32, swapped=swapped, cube=cube, as_nodes=as_nodes))
    check(tmp_path, m, np.float32, 1, 1e-5)


def test_gpt2_gelu_chain_f16(tmp_path):
    m = mlp(np.float16, lambda x, o: gelu_chain(x, o, np.float16))
    check(tmp_path, m, np.float16, 1, 2e-3)


def test_gelu_chain_in_f32_between_casts(tmp_path):
    m = mlp(np.float16, lambda x, o: gelu_chain(x, o, np.float32), casts=True)
    check(tmp_path, m, np.float16, 1, 2e-3)


def test_gelu_op_tanh_opset20(tmp_path):
    m = mlp(np.float32, lambda x, o: ([helper.make_node("Gelu", [x], [o], approximate="tanh")], []), opset=20)
    check(tmp_path, m, np.float32, 1, 1e-5)


def test_relu(tmp_path):
    m = mlp(np.float32, lambda x, o: ([helper.make_node("Relu", [x], [o])], []))
    check(tmp_path, m, np.float32, 1, 1e-6)


def test_gelu_op_erf_not_fused(tmp_path):
    m = mlp(np.float32, lambda x, o: ([helper.make_node("Gelu", [x], [o])], []), opset=20)
    check(tmp_path, m, np.float32, 0, 1e-5)


@pytest.mark.parametrize("which", ["cub", "c1"])
def test_wrong_constant_not_fused(tmp_path, which):
    kw = {"cub": 0.05} if which == "cub" else {"c1": 0.75}
    m = mlp(np.float32, lambda x, o: gelu_chain(x, o, np.float32, **kw))
    check(tmp_path, m, np.float32, 0, 1e-5)


def test_pre_activation_also_an_output_not_fused(tmp_path):
    m = mlp(np.float32, lambda x, o: gelu_chain(x, o, np.float32), extra_outputs=["pre"])
    check(tmp_path, m, np.float32, 0, 1e-5)


def test_python_package_option(tmp_path):
    """graft.load(..., fuse_epilogue=False) is the reference path: the same outputs."""
    graft_pkg = pytest.importorskip("graft")
    m = mlp(np.float32, lambda x, o: gelu_chain(x, o, np.float32))
    path = tmp_path / "model.onnx"
    onnx.save(m, str(path))
    x = (rng.standard_normal((2, 5, 32)) * 1.5).astype(np.float32)
    outs = []
    for fuse in (True, False):
        s = graft_pkg.load(str(path), device="sim", fuse_epilogue=fuse)
        outs.append(np.array(s.run(x=x)["y"]))
        explain = s.explain()
        assert ("+gelu_tanh" in explain) == fuse, explain
    assert rel(outs[0], outs[1]) <= 1e-5
