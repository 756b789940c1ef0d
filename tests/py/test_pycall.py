"""The per-call Python path (issue 13): torch tensors bound without DLPack where that changes
nothing, a static model's output metadata read once, DLPack exports from a per-shape template,
and torch.compile(backend="graft") re-binding only the inputs that changed (weights once).
Simulator only; the torch parts are skipped without torch."""
import gc

import numpy as np
import pytest

graft = pytest.importorskip("graft")
from graft import _dlpack  # noqa: E402
from graft import session as gsession  # noqa: E402
from graft._capi import lib  # noqa: E402

EW_GIR = """graft 1
input x: f32[4, 8]
const b: f32[8] = [0, 1, 2, 3, 4, 5, 6, 7]
e = exp(x)
y = add(e, b)
output y
"""

DYN_GIR = """graft 1
input x: f32[N, 8]
y = relu(x)
output y
"""


def load(tmp_path, text, name="m.gir"):
    p = tmp_path / name
    p.write_text(text)
    return graft.load(str(p), device="sim", mode="graph")


class Counting:
    """Wraps one ctypes function of the library and counts its calls."""

    def __init__(self, monkeypatch, name):
        self.n, real = 0, getattr(lib, name)

        def f(*a):
            self.n += 1
            return real(*a)
        monkeypatch.setattr(lib, name, f)


def test_static_output_metadata_read_once(tmp_path, monkeypatch):
    s = load(tmp_path, EW_GIR)
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    first = s.run_device(x=x)["y"]
    info = Counting(monkeypatch, "gr_session_output_info")
    for k in range(3):
        y = s.run_device(x=x * k)["y"]
        assert (y.name, y.dtype, y.shape) == (first.name, first.dtype, first.shape) == ("y", "f32", (4, 8))
        np.testing.assert_allclose(y.numpy(), np.exp(x * k) + np.arange(8), rtol=1e-6)
    assert info.n == 0  # a static model's outputs: names, dtypes and shapes known after the first run
    with pytest.raises(graft.StaleError):
        first.numpy()  # the handle still carries its run's generation


def test_symbolic_output_shapes_follow_each_run(tmp_path, monkeypatch):
    s = load(tmp_path, DYN_GIR)
    info = Counting(monkeypatch, "gr_session_output_info")
    for n in (2, 5, 3):
        x = np.arange(n * 8, dtype=np.float32).reshape(n, 8) - 10
        y = s.run_device(x=x)["y"]
        assert y.shape == (n, 8)
        np.testing.assert_array_equal(y.numpy(), np.maximum(x, 0))
    assert info.n == 3  # read on every run: the shape depends on the binding


def test_exports_share_a_template_but_not_their_memory(tmp_path):
    s = load(tmp_path, EW_GIR)
    x = np.zeros((4, 8), np.float32)
    y = s.run_device(x=x)["y"]
    a, b = np.from_dlpack(y), np.from_dlpack(y)
    assert a.shape == b.shape == (4, 8) and a.ctypes.data == b.ctypes.data == y.data_ptr
    np.testing.assert_allclose(a, 1 + np.arange(8) + np.zeros((4, 1)), rtol=1e-6)
    other = load(tmp_path, EW_GIR, "n.gir").run_device(x=x + 1)["y"]
    c = np.from_dlpack(other)  # same shape and dtype, another session's memory
    assert c.ctypes.data != a.ctypes.data
    np.testing.assert_allclose(c, np.e + np.arange(8) + np.zeros((4, 1)), rtol=1e-6)
    del a, b, c
    gc.collect()
    assert _dlpack.live_exports() == 0


# ---- torch ---------------------------------------------------------------------------------------

def test_torch_tensors_skip_dlpack_where_it_changes_nothing(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    s = load(tmp_path, EW_GIR)
    x = torch.linspace(-2, 2, 32).reshape(4, 8)
    want = np.exp(x.numpy()) + np.arange(8, dtype=np.float32)

    def no_borrow(*a, **k):
        raise AssertionError("DLPack used for a contiguous CPU tensor")
    monkeypatch.setattr(_dlpack, "borrow", no_borrow)
    np.testing.assert_allclose(s(x=x)["y"], want, rtol=1e-6)
    np.testing.assert_allclose(s(x=torch.nn.Parameter(x.clone()))["y"], want, rtol=1e-6)  # requires grad: fine
    with pytest.raises(graft.ShapeError, match="input 'x': dtype i32 given"):
        s(x=torch.zeros(4, 8, dtype=torch.int32))
    with pytest.raises(graft.ShapeError, match="input 'x'"):
        s(x=torch.zeros(4, 7))
    monkeypatch.undo()
    # a strided tensor is still DLPack's: copied compact on the way in
    strided = x.t().contiguous().t()
    assert not strided.is_contiguous()
    np.testing.assert_allclose(s(x=strided)["y"], want, rtol=1e-6)
    # the input is copied (a host input): changing the tensor after the call changes nothing
    y = s.run_device(x=x)["y"]
    x.add_(1)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    out = torch.from_dlpack(s.run_device(x=x)["y"])
    torch.testing.assert_close(out, torch.exp(x) + torch.arange(8.0))


@pytest.fixture
def backend():
    torch = pytest.importorskip("torch")
    import graft.torch_backend as gtb
    gtb.register()
    torch._dynamo.reset()
    gtb.reset()
    yield torch
    torch._dynamo.reset()


def test_backend_binds_weights_once(backend, monkeypatch):
    torch = backend
    import graft.torch_backend as tb
    torch.manual_seed(0)
    # weights over FREEZE_SMALL_BYTES are bound (the biases, 1 KiB and 512 B, are frozen as constants)
    m = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128)).eval()
    assert m[0].weight.numel() * 4 > tb.FREEZE_SMALL_BYTES >= m[0].bias.numel() * 4
    calls = []
    real = gsession.Session.set_input

    def counting(self, name, value):
        calls.append(name)
        return real(self, name, value)
    monkeypatch.setattr(gsession.Session, "set_input", counting)
    with torch.no_grad():
        cm = torch.compile(m, backend="graft", options={"device": "sim", "mode": "graph"})
        xs = [torch.randn(3, 128) for _ in range(4)]
        for k, x in enumerate(xs):
            calls.clear()
            torch.testing.assert_close(cm(x.clone()), m(x))  # a fresh input tensor every call
            # first call: the input and the 2 large weights; then only the input
            assert len(calls) == (3 if k == 0 else 1), calls
        # a weight changed in place (its version moves): bound again, the result follows it
        m[0].weight.mul_(0.5)
        calls.clear()
        torch.testing.assert_close(cm(xs[0]), m(xs[0]))
        assert len(calls) == 2, calls
        # the same input tensor changed in place between calls is bound again too
        x = xs[1].clone()
        cm(x)
        x.mul_(-1)
        calls.clear()
        torch.testing.assert_close(cm(x), m(x))
        assert len(calls) == 1
        # and so is an unchanged one: same tensor, same version, nothing to bind
        calls.clear()
        torch.testing.assert_close(cm(x), m(x))
        assert len(calls) == 0
        # a frozen bias changed in place: seen, compiled again with it as an input, the result follows it
        m[2].bias.add_(1.0)
        torch.testing.assert_close(cm(x), m(x))
        torch.testing.assert_close(cm(xs[2]), m(xs[2]))


# ---- CUDA (skipped elsewhere) ----------------------------------------------------------------------

def test_cuda_run_device_queues_and_checks_staleness(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    p = tmp_path / "ew.gir"
    p.write_text(EW_GIR)
    try:
        s = graft.load(str(p), device="cuda", mode="graph")
    except graft.GraftError as e:
        pytest.skip("graft has no CUDA device here: %s" % e)
    b = torch.arange(8.0, device="cuda")
    xs = [torch.randn(4, 8, device="cuda") for _ in range(3)]
    outs = []
    for k in range(12):  # warm-up, capture, then steady replays queued back to back
        x = xs[k % 3].clone()  # a fresh buffer every call
        y = s.run_device(x=x)["y"]
        outs.append(y)
        got = torch.from_dlpack(y).clone()
        torch.testing.assert_close(got, torch.exp(xs[k % 3]) + b)
    assert s._out_ptrs is not None  # the one-call path (gr_session_run_device) ran
    with pytest.raises(graft.StaleError, match="session has run again"):
        outs[-2].data_ptr
    assert outs[-1].data_ptr != 0
    np.testing.assert_allclose(outs[-1].numpy(), (torch.exp(xs[11 % 3]) + b).cpu().numpy(), rtol=1e-5)
    # several calls enqueued without reading anything in between, then one read
    for k in range(20):
        y = s.run_device(x=xs[k % 3] * 2)["y"]
    torch.testing.assert_close(torch.from_dlpack(y), torch.exp(xs[19 % 3] * 2) + b)
    s.close()


DYN_SUM_GIR = """graft 1
input x: f32[N, 8]
const b: f32[8] = [0, 1, 2, 3, 4, 5, 6, 7]
e = exp(x)
y = add(e, b)
z = reduce_sum(y, axes=[1], keepdims=0)
output y
output z
"""


@pytest.mark.parametrize("shapes", ["exact", "generic", "auto"])
def test_cuda_run_device_dynamic_queues(tmp_path, shapes):
    """Symbolic dims on CUDA: once every binding is captured, runs alternating over them queue
    behind each other (no wait on the host), outputs have each run's dims and values."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    p = tmp_path / "dyn.gir"
    p.write_text(DYN_SUM_GIR)
    try:
        s = graft.load(str(p), device="cuda", mode="graph", dims={"N": (1, 8)}, arena="max", shapes=shapes,
                       cache_dir=str(tmp_path / "cache"))
    except graft.GraftError as e:
        pytest.skip("graft has no CUDA device here: %s" % e)
    b = torch.arange(8.0, device="cuda")
    ns = (3, 5, 8)
    xs = {n: [torch.randn(n, 8, device="cuda") for _ in range(2)] for n in ns}

    def check(n, x, outs):
        y, z = torch.from_dlpack(outs["y"]).clone(), torch.from_dlpack(outs["z"]).clone()
        assert tuple(y.shape) == (n, 8) and tuple(z.shape) == (n,)
        torch.testing.assert_close(y, torch.exp(x) + b)
        torch.testing.assert_close(z, (torch.exp(x) + b).sum(1))

    for k in range(24):  # warm-up, captures, auto's measuring
        n = ns[k % 3]
        x = xs[n][k % 2].clone()
        check(n, x, s.run_device(x=x))
    waits = s.stats()["waits_on_host"]
    for k in range(30):
        n = ns[k % 3]
        x = xs[n][k % 2]
        check(n, x, s.run_device(x=x))  # (the clone is ordered after the run on torch's stream)
    st = s.stats()
    if shapes in ("exact", "generic"):
        assert st["waits_on_host"] == waits, "steady runs waited on the host %d times" % (st["waits_on_host"] - waits)
    s.close()
