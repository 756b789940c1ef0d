"""The Python package (python/graft) on the simulator: load .gir and .onnx, run with
NumPy and DLPack inputs, graft's errors as exceptions, dynamic dims, output lifetimes,
explain/stats, and the zero-copy output path (DeviceTensor, a DLPack producer).

Runs against the in-tree package (PYTHONPATH=python) and the libgraft.so named by
GRAFT_LIBRARY (ctest sets both: tests/api.cmake), or an installed graft (pip install .)."""
import gc

import numpy as np
import pytest

graft = pytest.importorskip("graft")

MLP_GIR = """graft 1
input x: f32[N, 8]
input temperature: f32[] @host
w = random_normal(shape=[8, 4], seed=7, std=0.5)
const b: f32[4] = [0.5, -1, 0.25, 2]
h = matmul(x, w)
s = div(h, temperature)
y = add(s, b)
r = relu(y)
output r
output y
"""

EW_GIR = """graft 1
input x: f32[4, 8]
const b: f32[8] = [0, 1, 2, 3, 4, 5, 6, 7]
e = exp(x)
y = add(e, b)
output y
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def mlp_reference(x, temperature, w, b):
    y = (x.astype(np.float64) @ w.astype(np.float64)) / temperature + b
    return np.maximum(y, 0), y


@pytest.fixture
def ew(tmp_path):
    return graft.load(write(tmp_path, "ew.gir", EW_GIR), device="sim", mode="graph")


def test_load_gir_run_numpy(ew):
    assert ew.device_kind == "sim"
    assert [tuple(t) for t in ew.inputs] == [("x", "f32", (4, 8))]
    assert [tuple(t) for t in ew.outputs] == [("y", "f32", (4, 8))]
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    for _ in range(3):  # eager warm-up, capture, replay
        out = ew(x=x)
        assert set(out) == {"y"} and isinstance(out["y"], np.ndarray)
        np.testing.assert_allclose(out["y"], np.exp(x) + np.arange(8, dtype=np.float32), rtol=1e-6)
    assert ew.run({"x": x})["y"].shape == (4, 8)
    st = ew.stats()
    assert st["graph_launches"] == 1 and st["kernels_in_graphs"] >= 1 and st["bytes_copied"] == x.nbytes
    assert st["nodes_updated"] == 0 and "kernel_prep" in st
    assert "device: sim" in ew.explain() and "mode: graph" in ew.explain()


def test_errors_are_exceptions_with_graft_message(ew, tmp_path):
    with pytest.raises(graft.ShapeError) as e:
        ew(x=np.zeros((4, 8), np.float64))
    assert e.value.status == "GR_ERR_SHAPE" and e.value.code == -5
    assert "input 'x': dtype f64 given, graph expects f32[4,8]" in str(e.value)
    with pytest.raises(graft.ShapeError, match=r"input 'x': dim 1 is 7, graph expects f32\[4,8\]"):
        ew(x=np.zeros((4, 7), np.float32))
    with pytest.raises(graft.NotFoundError, match="no input named 'z'"):
        ew(z=np.zeros((4, 8), np.float32))
    with pytest.raises(graft.ShapeError, match="NumPy dtype complex64 has no graft dtype"):
        ew(x=np.zeros((4, 8), np.complex64))
    assert issubclass(graft.StaleError, graft.GraftError)
    with pytest.raises(graft.IOError) as e:
        graft.load(str(tmp_path / "missing.gir"), device="sim")
    assert e.value.status == "GR_ERR_IO" and "missing.gir" in e.value.message
    with pytest.raises(graft.ParseError, match="bad.gir"):
        graft.load(write(tmp_path, "bad.gir", "graft 1\ninput x: f32[4\n"), device="sim")
    with pytest.raises(ValueError, match="mode='fast'"):
        graft.load(write(tmp_path, "ok.gir", EW_GIR), mode="fast")


def test_dynamic_model_several_lengths(tmp_path):
    s = graft.load(write(tmp_path, "mlp.gir", MLP_GIR), device="sim", mode="graph", dims={"N": (1, 64)})
    assert s.inputs[0].shape == ("N", 8)
    assert s.dims["N"] == graft.DimInfo("N", 1, 64, True)
    assert s.input_shapes(N=5)["x"] == (5, 8)
    assert "N" in s.explain()  # before any run: the symbolic plan
    rng = np.random.default_rng(0)
    w = b = None
    for n in (1, 7, 3, 64, 7):
        x = rng.standard_normal((n, 8)).astype(np.float32)
        out = s(x=x, temperature=np.float32(2.0))
        assert out["r"].shape == (n, 4) and out["y"].shape == (n, 4)
        if w is None:  # recover the weights from one run: y = x w / t + b
            b = np.array([0.5, -1, 0.25, 2], np.float32)
            eye = np.eye(8, dtype=np.float32)
            w = ((s(x=eye, temperature=2.0)["y"] - b) * 2.0).astype(np.float32)
            out = s(x=x, temperature=np.float32(2.0))
        r, y = mlp_reference(x, 2.0, w, b)
        np.testing.assert_allclose(out["y"], y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["r"], r, rtol=1e-5, atol=1e-5)
    with pytest.raises(graft.ShapeError, match="symbolic dim 'N' is 65"):
        s(x=np.zeros((65, 8), np.float32))


def test_onnx(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [numpy_helper.from_array(w, "w")])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    s = graft.load(path, device="sim")  # mode auto
    for n in (2, 5):
        x = np.linspace(-1, 1, n * 3, dtype=np.float32).reshape(n, 3)
        np.testing.assert_allclose(s(x=x)["y"], np.tanh(x @ w), rtol=1e-5, atol=1e-6)


class Producer:
    """Only the DLPack protocol (NumPy's own __dlpack__ underneath): no ndarray."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_dlpack_inputs(ew):
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    want = np.exp(x) + np.arange(8, dtype=np.float32)
    np.testing.assert_allclose(ew(x=Producer(x))["y"], want, rtol=1e-6)
    np.testing.assert_allclose(ew(x=Producer(x.T.copy().T))["y"], want, rtol=1e-6)  # strided: copied compact
    with pytest.raises(graft.ShapeError, match="input 'x': dtype i32 given"):
        ew(x=Producer(np.zeros((4, 8), np.int32)))


def test_device_outputs_and_lifetime(ew):
    x = np.ones((4, 8), np.float32)
    outs = ew.run_device(x=x)
    y = outs["y"]
    assert isinstance(y, graft.DeviceTensor) and y.shape == (4, 8) and y.dtype == "f32"
    first = y.numpy()
    np.testing.assert_allclose(first, np.broadcast_to(np.e + np.arange(8, dtype=np.float32), (4, 8)), rtol=1e-6)
    assert y.__dlpack_device__() == (1, 0)  # the simulator's device memory is host memory
    view = np.from_dlpack(y)  # zero-copy: the simulator's device buffer itself
    assert view.ctypes.data == y.data_ptr
    np.testing.assert_array_equal(view, first)
    np.testing.assert_array_equal(np.asarray(y), first)
    ew.run_device(x=x * 0)  # the next run: y is stale
    for use in (y.numpy, lambda: y.data_ptr, lambda: y.__dlpack__(), lambda: np.asarray(y)):
        with pytest.raises(graft.StaleError) as e:
            use()
        assert e.value.status == "GR_ERR_STALE" and "session has run again" in e.value.message
    # the documented hazard of a view taken earlier: it shows the new run's values
    np.testing.assert_allclose(view, 1 + np.arange(8, dtype=np.float32) + np.zeros((4, 1)), rtol=1e-6)
    del view
    gc.collect()
    from graft import _dlpack
    assert _dlpack.live_exports() == 0  # the consumer released what it took


def test_capsule_not_consumed_is_released(ew):
    from graft import _dlpack
    y = ew.run_device(x=np.ones((4, 8), np.float32))["y"]
    before = _dlpack.live_exports()
    cap = y.__dlpack__()
    assert _dlpack.live_exports() == before + 1
    del cap
    gc.collect()
    assert _dlpack.live_exports() == before


def test_precision(tmp_path):
    """precision="bf16"/"f16": the matmul runs in half (docs/precision.md tolerances), the
    outputs stay f32; an unknown value is a ValueError naming the choices."""
    path = write(tmp_path, "mlp.gir", MLP_GIR)
    x = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    t = np.array(2.0, np.float32)
    ref = graft.load(path, device="sim")(x=x, temperature=t)
    for prec, tol in (("bf16", 8e-3), ("f16", 1e-3)):
        got = graft.load(path, device="sim", precision=prec)(x=x, temperature=t)
        for name in ("r", "y"):
            assert got[name].dtype == np.float32
            err = np.linalg.norm(got[name] - ref[name]) / np.linalg.norm(ref[name])
            assert 0 < err <= tol, (prec, name, err)
    with pytest.raises(ValueError, match="precision='int8'.*'bf16', 'f16'"):
        graft.load(path, device="sim", precision="int8")


def test_closed_session(tmp_path):
    s = graft.load(write(tmp_path, "ew.gir", EW_GIR), device="sim")
    y = s.run_device(x=np.ones((4, 8), np.float32))["y"]
    s.close()
    with pytest.raises(graft.InvalidError, match="closed"):
        y.numpy()
    with pytest.raises(graft.InvalidError, match="closed"):
        s(x=np.ones((4, 8), np.float32))


def test_ctypes_struct_layout():
    """The ctypes mirrors of graft.h's structs against the C compiler's layout: every
    field's offset and each struct's size, printed by tests/api/abi_probe.c (GRAFT_ABI_PROBE)."""
    import ctypes
    import os
    import subprocess
    from graft import _capi
    probe = os.environ.get("GRAFT_ABI_PROBE")
    if not probe:
        pytest.skip("GRAFT_ABI_PROBE not set (ctest sets it)")
    c = {}
    for line in subprocess.run([probe], check=True, capture_output=True, text=True).stdout.split("\n"):
        if line:
            k, v = line.split()
            c[k] = int(v)
    mirrors = {"gr_value_info": _capi.ValueInfo, "gr_dim_info": _capi.DimInfo, "gr_session_options": _capi.SessionOptions,
               "gr_output": _capi.Output, "gr_run_stats": _capi.RunStats, "gr_kernel_stats": _capi.KernelStats,
               "gr_capture_report": _capi.CaptureReport}
    for cname, py in mirrors.items():
        assert ctypes.sizeof(py) == c[cname], cname
        fields = [f for f, _ in py._fields_]
        assert fields == [k.split(".", 1)[1] for k in c if k.startswith(cname + ".")], cname
        for f in fields:
            assert getattr(py, f).offset == c[cname + "." + f], (cname, f)
