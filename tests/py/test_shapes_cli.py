"""graft's CLI over many shapes (issue 11): --shapes, --graph-memory-mb, --cache-dir;
graph memory and decision counters in `graft bench` (text and --json) and `graft explain`;
mode auto's decisions saved by one process and loaded by the next; a corrupt decisions
file ignored with a warning (stderr under --verbose, and in explain)."""
import json
import os

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


def sanitizer_clean(proc):
    assert "AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr


def ok(proc):
    sanitizer_clean(proc)
    assert proc.returncode == 0, "exit %d\nstdout: %s\nstderr: %s" % (proc.returncode, proc.stdout, proc.stderr)
    return proc


def fails(proc, code, *fragments):
    sanitizer_clean(proc)
    assert proc.returncode == code, "exit %d, expected %d; stderr: %s" % (proc.returncode, code, proc.stderr)
    for frag in fragments:
        assert frag in proc.stderr, "%r not in stderr: %r" % (frag, proc.stderr)


# ==== options ===============================================================================
@pytest.mark.parametrize("cmd", ["run", "bench", "explain"])
def test_generic_needs_a_bound(tmp_path, cmd):
    """generic (implemented now) needs every symbolic dim's upper bound, and says which one lacks it."""
    path = tmp_path / "open.gir"
    path.write_text(MODEL.replace("dim S: [1, 64]\n", ""))
    extra = ["--output-dir", str(tmp_path / "out")] if cmd == "run" else []
    p = run_graft(cmd, path, "--device", "sim", "--mode", "graph", "--dim", "S=4", "--shapes", "generic", *extra)
    fails(p, RUNTIME, "shape policy 'generic' needs an upper bound for every symbolic dim; 'S' has none")
    p = run_graft(cmd, path, "--device", "sim", "--mode", "graph", "--dim", "S=4", "--dim-range", "S=1:8", "--shapes", "generic",
                  *extra)
    ok(p)


@pytest.mark.parametrize("args,frag", [
    (["--shapes", "bucket"], "--shapes: unknown policy 'bucket' (expected exact, pad, generic, update, auto or default)"),
    (["--shapes"], "option '--shapes' needs a value"),
    (["--graph-memory-mb", "-1"], "--graph-memory-mb: '-1' is not a positive size in MiB"),
    (["--graph-memory-mb", "0"], "--graph-memory-mb: '0' is not a positive size"),
    (["--graph-memory-mb", "12abc"], "--graph-memory-mb: '12abc' is not a positive size"),
    (["--graph-memory-mb", "nan"], "--graph-memory-mb: 'nan' is not a positive size"),
    (["--cache-dir", ""], "--cache-dir: empty directory name"),
])
def test_bad_option_values(model, args, frag):
    fails(run_graft("bench", model, "--device", "sim", "--dim", "S=4", *args), USAGE, frag)


def test_dump_refuses_shape_options(model):
    fails(run_graft("dump", model, "--dim", "S=4", "--shapes", "exact"), USAGE, "does not apply to this command")


def test_exact_runs_and_matches_eager(model, tmp_path):
    outs = {}
    for mode in ("eager", "graph"):
        d = tmp_path / mode
        ok(run_graft("run", model, "--device", "sim", "--mode", mode, "--shapes", "exact", "--graph-memory-mb", "0.5",
                     "--dim", "S=7", "--output-dir", d))
        outs[mode] = (d / "y.npy").read_bytes()
    assert outs["eager"] == outs["graph"]


# ==== bench and explain report graph memory =================================================
def test_bench_reports_graph_memory(model, tmp_path):
    js = tmp_path / "b.json"
    p = ok(run_graft("bench", model, "--device", "sim", "--mode", "graph", "--dim", "S=8", "--iters", "3", "--warmup", "2",
                     "--graph-memory-mb", "1", "--json", js))
    assert "graph memory" in p.stdout and "graph memory budget" in p.stdout
    assert "instantiations" in p.stdout and "evictions" in p.stdout
    r = json.loads(js.read_text())
    # no --shapes: the default, auto for a model with symbolic dims in graph mode
    assert r["shape_policy"] == "auto" and r["shape_policy_default"] is True
    assert r["graph_budget_bytes"] == 1 << 20
    assert 0 < r["graph_bytes"] <= r["graph_bytes_peak"] <= r["graph_budget_bytes"]
    assert r["instantiations"] >= 1 and r["graphs_live"] >= 1 and r["over_budget"] == 0
    for key in ("evictions", "timed_runs", "decisions_measured", "decisions_loaded"):
        assert key in r


def test_budget_below_one_graph_runs_eager_with_a_message(model, tmp_path):
    js = tmp_path / "b.json"
    p = ok(run_graft("bench", model, "--device", "sim", "--mode", "graph", "--dim", "S=8", "--iters", "2", "--warmup", "2",
                     "--graph-memory-mb", "0.000001", "--json", js))
    assert "more than the whole graph memory budget" in p.stderr
    r = json.loads(js.read_text())
    assert r["graph_bytes"] == 0 and r["graphs_live"] == 0 and r["over_budget"] >= 1 and r["kernels_in_graphs"] == 0


def test_explain_shows_policy_and_graph_memory(model):
    p = ok(run_graft("explain", model, "--device", "sim", "--mode", "graph", "--dim", "S=5", "--graph-memory-mb", "2"))
    assert "shape policy: auto (the default of graph mode for a model with symbolic dims" in p.stdout
    assert "graph memory:" in p.stdout and "budget 2097152 bytes" in p.stdout
    p = ok(run_graft("explain", model, "--device", "sim", "--mode", "graph", "--shapes", "exact", "--dim", "S=5"))
    assert "shape policy: exact (one graph per binding of the symbolic dims)" in p.stdout and "the default" not in p.stdout
    p = ok(run_graft("explain", model, "--device", "sim", "--mode", "eager", "--dim", "S=5"))
    assert "shape policy" not in p.stdout


# ==== persisted decisions ==================================================================
def decisions_files(cache):
    d = os.path.join(cache, "decisions")
    return [os.path.join(d, f) for f in os.listdir(d)] if os.path.isdir(d) else []


def test_decisions_persist_across_processes(model, tmp_path):
    cache = str(tmp_path / "cache")
    js = tmp_path / "first.json"
    ok(run_graft("bench", model, "--device", "sim", "--mode", "auto", "--dim", "S=6", "--iters", "8", "--warmup", "0",
                 "--cache-dir", cache, "--json", js))
    first = json.loads(js.read_text())
    assert first["decisions_measured"] >= 1 and first["timed_runs"] > 0 and first["decisions_loaded"] == 0
    files = decisions_files(cache)
    assert len(files) == 1
    # the next process loads them: no timed runs
    js2 = tmp_path / "second.json"
    ok(run_graft("bench", model, "--device", "sim", "--mode", "auto", "--dim", "S=6", "--iters", "4", "--warmup", "0",
                 "--cache-dir", cache, "--json", js2))
    second = json.loads(js2.read_text())
    assert second["timed_runs"] == 0 and second["decisions_measured"] == 0
    assert second["decisions_loaded"] == first["decisions_measured"]
    p = ok(run_graft("explain", model, "--device", "sim", "--mode", "auto", "--dim", "S=6", "--cache-dir", cache))
    assert "decision loaded from the decisions file" in p.stdout
    assert "decisions file: " + files[0] in p.stdout
    # another binding is measured, not loaded
    p = ok(run_graft("explain", model, "--device", "sim", "--mode", "auto", "--dim", "S=7", "--cache-dir", cache))
    assert "decision loaded" not in p.stdout and "0 loaded from the file" in p.stdout


def test_corrupt_decisions_file_warns_and_is_rewritten(model, tmp_path):
    cache = str(tmp_path / "cache")
    ok(run_graft("bench", model, "--device", "sim", "--mode", "auto", "--dim", "S=6", "--iters", "8", "--warmup", "0",
                 "--cache-dir", cache))
    (path,) = decisions_files(cache)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))
    js = tmp_path / "b.json"
    p = ok(run_graft("bench", model, "--device", "sim", "--mode", "auto", "--dim", "S=6", "--iters", "8", "--warmup", "0",
                     "--cache-dir", cache, "--verbose", "--json", js))
    assert "graft: warning: ignoring the decisions file" in p.stderr and "checksum" in p.stderr
    r = json.loads(js.read_text())
    assert r["decisions_loaded"] == 0 and r["timed_runs"] > 0
    # without --verbose: quiet on stderr, but explain records it
    open(path, "wb").write(b"graftCF\n garbage")
    p = ok(run_graft("explain", model, "--device", "sim", "--mode", "auto", "--dim", "S=6", "--cache-dir", cache))
    assert "ignoring the decisions file" not in p.stderr
    assert "warning: ignoring the decisions file" in p.stdout
    # rewritten once decisions are made again
    ok(run_graft("bench", model, "--device", "sim", "--mode", "auto", "--dim", "S=6", "--iters", "8", "--warmup", "0",
                 "--cache-dir", cache))
    p = ok(run_graft("explain", model, "--device", "sim", "--mode", "auto", "--dim", "S=6", "--cache-dir", cache))
    assert "decision loaded from the decisions file" in p.stdout
