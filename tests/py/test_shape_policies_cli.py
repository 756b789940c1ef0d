"""Shape policies beyond exact through the CLI and the Python package (issue 11):
--shapes update matches eager and reports exec updates (bench text and --json);
--capture-range captures every binding ahead, largest first, with a progress line and
its time; Session.capture_range and load(shapes=...)."""
import json

import numpy as np
import pytest

from gir_builder import run_graft

USAGE, RUNTIME = 2, 1

MODEL = """graft 1
dim S: [1, 64]
input x: f32[S, 16]
w = random_normal(shape=[16, 16], seed=1, std=0.3)
h = matmul(x, w, trans_b=1)
a = matmul(h, x, trans_b=1)
p = softmax(a, axis=1)
o = matmul(p, h)
y = gelu(o)
output y
"""


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "dyn.gir"
    path.write_text(MODEL)
    return str(path)


def ok(proc):
    assert "AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, "exit %d\nstdout: %s\nstderr: %s" % (proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_update_matches_eager(model, tmp_path):
    outs = {}
    for name, args in (("eager", ["--mode", "eager"]), ("update", ["--mode", "graph", "--shapes", "update"])):
        d = tmp_path / name
        ok(run_graft("run", model, "--device", "sim", *args, "--dim", "S=7", "--output-dir", d))
        outs[name] = (d / "y.npy").read_bytes()
    assert outs["eager"] == outs["update"]


def test_bench_capture_range_and_exec_updates(model, tmp_path):
    js = tmp_path / "b.json"
    p = ok(run_graft("bench", model, "--device", "sim", "--mode", "graph", "--shapes", "update", "--dim", "S=8",
                     "--capture-range", "S=1:16", "--iters", "3", "--warmup", "1", "--json", js))
    assert "graft: capturing S=16..1 (largest first): 16/16 bindings" in p.stderr
    assert "graft: captured 16 bindings ahead in " in p.stderr and "exec updates)" in p.stderr
    assert "exec updates " in p.stdout
    r = json.loads(js.read_text())
    assert r["shape_policy"] == "update"
    assert r["capture_range_bindings"] == 16 and r["capture_range_ms"] >= r["capture_range_capture_ms"] > 0
    assert r["capture_range_capture_ms"] >= r["capture_range_instantiate_ms"] > 0
    assert r["exec_updates"] >= 15 and r["instantiations"] < 16 and r["exec_updates_refused"] == 0


@pytest.mark.parametrize("args,code,frag", [
    (["--capture-range", "S=4"], USAGE, "--capture-range S=4: expected NAME=LO:HI"),
    (["--capture-range", "S=1:100"], RUNTIME, "S=1:100 is not a range inside the dim's range (1..64)"),
    (["--capture-range", "T=1:2"], RUNTIME, "no symbolic dim 'T' (the model's: 'S')"),
])
def test_capture_range_errors(model, args, code, frag):
    p = run_graft("bench", model, "--device", "sim", "--mode", "graph", "--dim", "S=4", "--iters", "1", *args)
    assert p.returncode == code and frag in p.stderr, p.stderr


def test_package_update_and_capture_range(tmp_path):
    graft = pytest.importorskip("graft")
    path = tmp_path / "m.gir"
    path.write_text(MODEL)
    ref = graft.load(str(path), device="sim", mode="eager")
    s = graft.load(str(path), device="sim", mode="graph", shapes="update")
    r = s.capture_range("S", 1, 6)
    assert r["bindings"] == 6 and r["exec_updates"] >= 5 and r["instantiations"] < 6
    for n in (3, 6, 1, 5):
        x = np.linspace(-1, 1, n * 16, dtype=np.float32).reshape(n, 16)
        assert np.array_equal(np.asarray(s(x=x)["y"]), np.asarray(ref(x=x)["y"]))
    st = s.stats()
    assert st["captures"] == 6 and st["exec_updates"] >= 5
    with pytest.raises(graft.InvalidError, match="unknown shape policy 'bucket'"):
        graft.load(str(path), device="sim", mode="graph", shapes="bucket")
    s.close()
    ref.close()


ROWWISE = """graft 1
dim S: [1, 40]
input x: f32[S, 16]
w = random_normal(shape=[16, 16], seed=1, std=0.3)
h = matmul(x, w, trans_b=1)
y = gelu(h)
output y
"""


def test_pad_matches_eager_and_explains(model, tmp_path):
    row = tmp_path / "row.gir"
    row.write_text(ROWWISE)
    outs = {}
    for name, args in (("eager", ["--mode", "eager"]), ("pad", ["--mode", "graph", "--shapes", "pad"])):
        d = tmp_path / name
        ok(run_graft("run", str(row), "--device", "sim", *args, "--dim", "S=5", "--output-dir", d))
        outs[name] = (d / "y.npy").read_bytes()
    assert outs["eager"] == outs["pad"]  # the real 5 rows of the run at 8
    p = ok(run_graft("explain", str(row), "--device", "sim", "--mode", "graph", "--shapes", "pad", "--dim", "S=5"))
    assert "'S' padded: no reduction, contraction or gather crosses it unmasked (this run: 5 as 8)" in p.stdout
    # attention over S: masked (-inf before the softmax, zeros before the contraction), same result
    for name, args in (("eager-att", ["--mode", "eager"]), ("pad-att", ["--mode", "graph", "--shapes", "pad"])):
        d = tmp_path / name
        ok(run_graft("run", model, "--device", "sim", *args, "--dim", "S=5", "--output-dir", d))
        outs[name] = (d / "y.npy").read_bytes()
    assert outs["eager-att"] == outs["pad-att"]
    p = ok(run_graft("explain", model, "--device", "sim", "--mode", "graph", "--shapes", "pad", "--dim", "S=5"))
    assert "2 masks inserted" in p.stdout and "(this run: 5 as 8)" in p.stdout
    # a mean over S: padding refused, exact instead, and explain says why
    mean = tmp_path / "mean.gir"
    mean.write_text(MODEL.replace("y = gelu(o)", "g = gelu(o)\ny = reduce_mean(g, axes=[0], keepdims=1)"))
    p = ok(run_graft("explain", str(mean), "--device", "sim", "--mode", "graph", "--shapes", "pad", "--dim", "S=5"))
    assert "'S' NOT padded (one graph per value, as policy exact): node 'y' (reduce_mean)" in p.stdout
    assert "reduces over the padded axis 0" in p.stdout


ROWWISE = """graft 1
dim S: [1, 64]
input x: f32[S, 16]
w = random_normal(shape=[16, 16], seed=1, std=0.3)
h = matmul(x, w, trans_b=1)
y = gelu(h)
output y
"""


def test_generic_cli_and_package(tmp_path):
    """--shapes generic: the same bytes as eager; bench text and --json report the generic counters;
    explain says per segment whether it runs as its bucket's graph; load(shapes="generic")."""
    path = tmp_path / "row.gir"
    path.write_text(ROWWISE)
    outs = {}
    for name, args in (("eager", ["--mode", "eager"]), ("generic", ["--mode", "graph", "--shapes", "generic"])):
        d = tmp_path / name
        ok(run_graft("run", path, "--device", "sim", *args, "--dim", "S=7", "--output-dir", d))
        outs[name] = (d / "y.npy").read_bytes()
    assert outs["eager"] == outs["generic"]
    js = tmp_path / "g.json"
    p = ok(run_graft("bench", path, "--device", "sim", "--mode", "graph", "--shapes", "generic", "--dim", "S=7",
                     "--iters", "3", "--warmup", "1", "--json", js))
    r = json.loads(js.read_text())
    assert r["shape_policy"] == "generic"
    assert r["generic_runs"] >= 3 and r["generic_replays"] >= 1 and r["table_refreshes"] >= 1 and r["table_bytes"] > 0
    assert "generic              " in p.stdout
    e = ok(run_graft("explain", path, "--device", "sim", "--mode", "graph", "--shapes", "generic", "--dim", "S=7"))
    assert "shape policy generic: generic: runs as its bucket's graph" in e.stdout
    graft = pytest.importorskip("graft")
    s = graft.load(str(path), device="sim", mode="graph", shapes="generic")
    ref = graft.load(str(path), device="sim", mode="eager")
    for n in (5, 3, 7, 6, 5, 7):
        x = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
        a = s.run(x=x)["y"]
        b = ref.run(x=x)["y"]
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert s.stats()["generic_replays"] >= 1


def test_auto_is_graph_modes_default(tmp_path):
    """No --shapes / shapes=None: auto in graph mode for a model with symbolic dims (explain says it is
    the default and, per segment, the calls per binding it was chosen for), exact in eager mode and for a
    static model; --shapes exact still asks for exact; the default's results equal an eager session's of
    the same kernels (shapes="auto") bit for bit."""
    path = tmp_path / "row.gir"
    path.write_text(ROWWISE)
    e = ok(run_graft("explain", path, "--device", "sim", "--mode", "graph", "--dim", "S=7"))
    assert "shape policy: auto (the default of graph mode for a model with symbolic dims" in e.stdout
    assert "calls per binding seen: 1.00 (1 calls over 1 bindings)" in e.stdout
    assert "chosen for 2.00 calls per binding (prior 2.00 from the default assumption" in e.stdout
    e = ok(run_graft("explain", path, "--device", "sim", "--mode", "graph", "--shapes", "exact", "--dim", "S=7"))
    assert "shape policy: exact (one graph per binding of the symbolic dims)" in e.stdout and "shape policy auto" not in e.stdout
    js = tmp_path / "d.json"
    ok(run_graft("bench", path, "--device", "sim", "--mode", "graph", "--dim", "S=7", "--iters", "2", "--warmup", "1",
                 "--json", js))
    r = json.loads(js.read_text())
    assert r["shape_policy"] == "auto" and r["shape_policy_default"] is True
    fixed = tmp_path / "fixed.gir"
    fixed.write_text("graft 1\ninput x: f32[4, 16]\ny = tanh(x)\noutput y\n")
    ok(run_graft("bench", fixed, "--device", "sim", "--mode", "graph", "--iters", "2", "--warmup", "1", "--json", js))
    r = json.loads(js.read_text())
    assert r["shape_policy"] == "exact" and r["shape_policy_default"] is True
    graft = pytest.importorskip("graft")
    s = graft.load(str(path), device="sim", mode="graph")
    ref = graft.load(str(path), device="sim", mode="eager", shapes="auto")
    assert s.shape_policy == "auto" and graft.load(str(path), device="sim", mode="eager").shape_policy == "exact"
    assert graft.load(str(path), device="sim", mode="graph", shapes="exact").shape_policy == "exact"
    for n in (5, 3, 7, 5, 3, 7, 5):
        x = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
        assert np.array_equal(np.asarray(s.run(x=x)["y"]), np.asarray(ref.run(x=x)["y"]))
    assert s.stats()["shape_decisions_measured"] >= 1
    s.close()
    ref.close()
