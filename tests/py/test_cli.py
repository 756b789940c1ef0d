"""The graft command line: every error class gives a non-zero exit and a
message naming the right place; run / bench / dump / explain on the examples;
graph mode bit-identical to eager mode."""
import json
import os
import re
import shutil

import numpy as np
import pytest

from gir_builder import ROOT, Graph, assert_close, assert_exact, run_graft

EXAMPLES = os.path.join(ROOT, "examples")
NPY_FIXTURES = os.path.join(ROOT, "tests", "data", "npy")
USAGE, RUNTIME = 2, 1


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def expect_fail(proc, code, *fragments):
    """Exit status `code` (or any non-zero when None), one 'graft: ' message on
    stderr containing every fragment (regexes when they start with 're:')."""
    assert proc.returncode != 0, "expected failure, got exit 0; stdout:\n" + proc.stdout
    if code is not None:
        assert proc.returncode == code, "exit %d, expected %d; stderr: %s" % (proc.returncode, code, proc.stderr)
    assert "graft: " in proc.stderr, "no 'graft: ' message on stderr: %r" % proc.stderr
    assert "AddressSanitizer" not in proc.stderr and "LeakSanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr
    for frag in fragments:
        if frag.startswith("re:"):
            assert re.search(frag[3:], proc.stderr), "no match for %r in %r" % (frag[3:], proc.stderr)
        else:
            assert frag in proc.stderr, "%r not in stderr: %r" % (frag, proc.stderr)


def expect_ok(proc):
    assert proc.returncode == 0, "exit %d\nstdout: %s\nstderr: %s" % (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture
def small_model(tmp_path):
    """y = x * 2 + b  with x f32[2,3], b i64-free; one output."""
    return write(tmp_path / "small.gir", "graft 1\ninput x: f32[2, 3]\nconst two: f32[] = [2.0]\n"
                                         "y = mul(x, two)\noutput y\n")


# ==== arguments =========================================================================
def test_no_arguments_prints_usage():
    p = run_graft()
    assert p.returncode == USAGE and "usage: graft" in p.stderr


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["help"]])
def test_help(args):
    p = expect_ok(run_graft(*args))
    for cmd in ("run", "bench", "dump", "explain"):
        assert cmd in p.stdout


@pytest.mark.parametrize("cmd,words", [("run", ["--input", "--output-dir", "out/", "--dim", "--seed", "--mode"]),
                                       ("bench", ["--iters", "--warmup", "simulated clock"]),
                                       ("dump", ["pass"]), ("explain", ["--device"])])
def test_command_help(cmd, words):
    for p in (run_graft(cmd, "--help"), run_graft("help", cmd)):
        expect_ok(p)
        assert p.stdout.startswith("usage: graft " + cmd)
        for w in words:
            assert w in p.stdout


def test_version():
    p = expect_ok(run_graft("--version"))
    assert re.match(r"graft \d+\.\d+", p.stdout)


@pytest.mark.parametrize("args,fragments", [
    (["frobnicate"], ["unknown command 'frobnicate'"]),
    (["--frob"], ["unknown option '--frob'"]),
    (["help", "frob"], ["unknown command 'frob'"]),
    (["run"], ["missing MODEL"]),
    (["run", "{m}", "--frob"], ["unknown option '--frob'"]),
    (["run", "{m}", "--output-dir"], ["'--output-dir' needs a value"]),
    (["run", "{m}", "--input"], ["'--input' needs a value"]),
    (["run", "{m}", "--input", "x"], ["NAME=FILE.npy", "no '='"]),
    (["run", "{m}", "--input", "=a.npy"], ["empty name"]),
    (["run", "{m}", "--input", "x="], ["empty value"]),
    (["run", "{m}", "--dim", "N"], ["no '='"]),
    (["run", "{m}", "--dim", "N=abc"], ["--dim"]),
    (["run", "{m}", "--dim", "N=-3"], ["--dim"]),
    (["run", "{m}", "--device", "gpu"], ["unknown device 'gpu'"]),
    (["run", "{m}", "--mode", "fast"], ["unknown mode 'fast'"]),
    (["run", "{m}", "--seed", "-1"], ["--seed"]),
    (["run", "{m}", "--seed", "x1"], ["--seed"]),
    (["run", "{m}", "{m}"], ["unexpected argument"]),
    (["run", "{m}", "--iters", "3"], ["does not apply"]),
    (["bench", "{m}", "--iters", "abc"], ["--iters", "'abc'"]),
    (["bench", "{m}", "--iters", "0"], ["--iters"]),
    (["bench", "{m}", "--iters", "-5"], ["--iters"]),
    (["bench", "{m}", "--iters=2.5"], ["--iters"]),
    (["bench", "{m}", "--warmup", "-1"], ["--warmup"]),
    (["bench", "{m}", "--output-dir", "x"], ["does not apply"]),
    (["dump", "{m}", "--device", "sim"], ["does not apply"]),
    (["dump"], ["missing MODEL"]),
    (["explain", "{m}", "--verbose=1"], ["takes no value"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) and v and isinstance(v[0], str) else None)
def test_bad_arguments(small_model, args, fragments):
    p = run_graft(*[a.replace("{m}", small_model) for a in args])
    expect_fail(p, USAGE, *fragments)


# ==== model files ===========================================================================
def test_missing_model_file(tmp_path):
    path = str(tmp_path / "nope.gir")
    for cmd in ("run", "bench", "dump", "explain"):
        expect_fail(run_graft(cmd, path), RUNTIME, path)


def test_model_is_a_directory(tmp_path):
    expect_fail(run_graft("run", str(tmp_path)), RUNTIME, str(tmp_path))


@pytest.mark.parametrize("text,where,frag", [
    ("graft 1\ninput x: f32[2]\ny = relu(x))\noutput y\n", r"bad\.gir:3:12", None),
    ("graft 1\ninput x: f32[2]\ny = matmull(x, x)\noutput y\n", r"bad\.gir:3:\d+", "matmull"),
    ("graft 1\ninput x: f33[2]\noutput x\n", r"bad\.gir:2:\d+", "f33"),
    ("graft 1\ninput x: f32[2]\n\n\ny = add(x, zz)\noutput y\n", r"bad\.gir:5:\d+", "zz"),
    ("graft 1\nconst c: f32[3] = [1, 2]\noutput c\n", r"bad\.gir:2:\d+", None),
    ("graft 1\ninput x: f32[2]\ny = relu(x, bogus=)\noutput y\n", r"bad\.gir:3:\d+", None),
    ("graft 7\ninput x: f32[2]\noutput x\n", r"bad\.gir:1:\d+", None),
    ("input x: f32[2]\noutput x\n", r"bad\.gir:1:\d+", None),
    ("graft 1\ninput x: f32[2]\ny = relu(x)\noutput q\n", r"bad\.gir:4:\d+", "q"),
    ("graft 1\ninput x: f32[2]\ninput x: f32[3]\noutput x\n", r"bad\.gir:3:\d+", "x"),
    ("", r"bad\.gir", None),
], ids=["extra-paren", "unknown-op", "unknown-dtype", "undefined-value", "const-count", "bad-attr",
        "bad-version", "no-header", "undefined-output", "duplicate-input", "empty-file"])
def test_malformed_gir(tmp_path, text, where, frag):
    path = write(tmp_path / "bad.gir", text)
    for cmd in ("run", "dump"):
        p = run_graft(cmd, path)
        expect_fail(p, RUNTIME, "re:" + where, *([frag] if frag else []))


def test_shape_mismatch_names_the_node(tmp_path):
    path = write(tmp_path / "shape.gir", "graft 1\ninput a: f32[3]\ninput b: f32[4]\n\n"
                                         "[bad_add] y = add(a, b)\noutput y\n")
    p = run_graft("run", path)
    expect_fail(p, RUNTIME, "re:shape\\.gir:5", "bad_add")


def test_matmul_shape_mismatch(tmp_path):
    path = write(tmp_path / "mm.gir", "graft 1\ninput a: f32[3, 4]\ninput b: f32[5, 6]\ny = matmul(a, b)\noutput y\n")
    expect_fail(run_graft("run", path), RUNTIME, "re:mm\\.gir:4")


def test_onnx_garbage(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x00\x01garbage that is not a protobuf")
    expect_fail(run_graft("run", str(path)), RUNTIME, "model.onnx")


def test_unknown_extension(tmp_path):
    path = write(tmp_path / "model.txt", "graft 1\n")
    expect_fail(run_graft("run", path), RUNTIME, "model.txt")


def test_runtime_error_gather_out_of_range(tmp_path):
    g = Graph()
    x = g.input(np.zeros((4, 2), np.float32))
    i = g.input(np.array([7], np.int64))
    g.output(g.node("gather", x, i))
    gir, args = g.write(tmp_path)
    expect_fail(run_graft("run", gir, "--output-dir", str(tmp_path / "o"), *args), RUNTIME)


# ==== inputs ===================================================================================
def npy(tmp_path, name, arr):
    p = str(tmp_path / name)
    np.save(p, arr)
    return p


def test_unknown_input_name(tmp_path, small_model):
    a = npy(tmp_path, "a.npy", np.zeros((2, 3), np.float32))
    expect_fail(run_graft("run", small_model, "--input", "xx=" + a), USAGE, "'xx'", "'x'")


def test_input_given_twice(tmp_path, small_model):
    a = npy(tmp_path, "a.npy", np.zeros((2, 3), np.float32))
    expect_fail(run_graft("run", small_model, "--input", "x=" + a, "--input", "x=" + a), USAGE, "twice")


def test_too_many_inputs(tmp_path, small_model):
    a = npy(tmp_path, "a.npy", np.zeros((2, 3), np.float32))
    expect_fail(run_graft("run", small_model, "--input", "x=" + a, "--input", "y=" + a), USAGE, "no input named 'y'")


def test_wrong_input_dtype(tmp_path, small_model):
    a = npy(tmp_path, "a.npy", np.zeros((2, 3), np.float64))
    expect_fail(run_graft("run", small_model, "--input", "x=" + a), RUNTIME, "'x'", a, "f64", "f32")


@pytest.mark.parametrize("shape", [(3, 2), (2, 3, 1), (6,), ()], ids=str)
def test_wrong_input_shape(tmp_path, small_model, shape):
    a = npy(tmp_path, "a.npy", np.zeros(shape, np.float32))
    expect_fail(run_graft("run", small_model, "--input", "x=" + a), RUNTIME, "'x'", a, "f32[2,3]")


def test_missing_input_file(tmp_path, small_model):
    a = str(tmp_path / "missing.npy")
    expect_fail(run_graft("run", small_model, "--input", "x=" + a), RUNTIME, "'x'", a)


NPY_CASES = [
    ("bad_magic.npy", "bad magic"), ("text_file.npy", "bad magic"), ("empty.npy", "bad magic"),
    ("truncated_prefix.npy", "truncated header"), ("truncated_header.npy", "truncated header"),
    ("bad_version.npy", "version 4.0"), ("header_not_dict.npy", "not a dict"),
    ("header_garbage.npy", "malformed header"), ("missing_shape.npy", "missing key 'shape'"),
    ("shape_not_ints.npy", "tuple of integers"), ("negative_dim.npy", "negative dimension"),
    ("unknown_descr.npy", "unsupported dtype descr '<c8'"), ("unicode_descr.npy", "unsupported dtype descr '<U3'"),
    ("structured_descr.npy", "structured dtypes"), ("big_endian.npy", "big-endian"),
    ("fortran_order.npy", "fortran_order"), ("data_short.npy", "data truncated"), ("huge_shape.npy", "overflow"),
    ("huge_dim.npy", "too large"), ("too_many_dims.npy", "more than 8 dimensions"),
]


@pytest.mark.parametrize("name,frag", NPY_CASES, ids=[c[0] for c in NPY_CASES])
def test_malformed_npy(small_model, name, frag):
    path = os.path.join(NPY_FIXTURES, name)
    assert os.path.exists(path), "fixture missing; run tests/data/npy/make_fixtures.py"
    expect_fail(run_graft("run", small_model, "--input", "x=" + path), RUNTIME, path, frag)


def test_all_fixtures_are_covered():
    bad = {n for n in os.listdir(NPY_FIXTURES) if n.endswith(".npy") and not n.startswith("good_")}
    assert bad == {c[0] for c in NPY_CASES}


@pytest.mark.parametrize("name", ["good_v2.npy", "good_v3.npy", "good_reordered.npy"])
def test_npy_versions_accepted(tmp_path, name):
    path = write(tmp_path / "m.gir", "graft 1\ninput x: f32[4]\ny = neg(x)\noutput y\n")
    out = tmp_path / "o"
    expect_ok(run_graft("run", path, "--input", "x=" + os.path.join(NPY_FIXTURES, name), "--output-dir", str(out)))
    assert_exact(np.load(out / "y.npy"), -np.arange(1, 5, dtype=np.float32), name)


def test_fortran_array_from_numpy_rejected(tmp_path):
    path = write(tmp_path / "m.gir", "graft 1\ninput x: f32[3, 4]\ny = neg(x)\noutput y\n")
    a = npy(tmp_path, "f.npy", np.asfortranarray(np.ones((3, 4), np.float32)))
    expect_fail(run_graft("run", path, "--input", "x=" + a), RUNTIME, "fortran_order")


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8,
                                   np.bool_], ids=lambda d: np.dtype(d).name)
def test_every_npy_dtype_round_trips(tmp_path, dtype):
    from gir_builder import NP_TO_GIR
    t = NP_TO_GIR[np.dtype(dtype)]
    path = write(tmp_path / "m.gir", "graft 1\ninput x: %s[2, 3]\ny = identity(x)\noutput y\n" % t)
    x = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
    out = tmp_path / "o"
    expect_ok(run_graft("run", path, "--input", "x=" + npy(tmp_path, "x.npy", x), "--output-dir", str(out)))
    assert_exact(np.load(out / "y.npy"), x, t)


def test_bf16_input_from_f32_and_output_as_f32(tmp_path):
    path = write(tmp_path / "m.gir", "graft 1\ninput x: bf16[3]\ny = neg(x)\noutput y\n")
    x = np.array([1.0, 1.00390625, 3.140625], np.float32)
    out = tmp_path / "o"
    p = expect_ok(run_graft("run", path, "--input", "x=" + npy(tmp_path, "x.npy", x), "--output-dir", str(out)))
    assert "bf16 written as f32" in p.stdout
    assert_exact(np.load(out / "y.npy"), np.array([-1.0, -1.0, -3.140625], np.float32), "bf16")


def test_generated_inputs_note_and_seed(tmp_path):
    path = write(tmp_path / "m.gir", "graft 1\ninput a: f32[64]\ninput idx: i64[8]\ninput m: bool[4]\n"
                                     "y = gather(a, idx)\nz = not(m)\noutput y, z\n")
    runs = []
    for i, seed in enumerate(["5", "5", "6"]):
        out = tmp_path / ("o%d" % i)
        p = expect_ok(run_graft("run", path, "--seed", seed, "--output-dir", str(out)))
        for name in ("'a'", "'idx'", "'m'"):
            assert name in p.stderr and "note" in p.stderr
        runs.append(np.load(out / "y.npy"))
    assert_exact(runs[0], runs[1], "same seed")
    assert not np.array_equal(runs[0], runs[2])
    assert runs[0].min() >= -1 and runs[0].max() < 1


def test_partial_inputs_generate_the_rest(tmp_path):
    path = write(tmp_path / "m.gir", "graft 1\ninput a: f32[4]\ninput b: f32[4]\ny = add(a, b)\noutput y\n")
    a = npy(tmp_path, "a.npy", np.zeros(4, np.float32))
    p = expect_ok(run_graft("run", path, "--input", "a=" + a, "--output-dir", str(tmp_path / "o")))
    assert "'b'" in p.stderr and "'a'" not in p.stderr


# ==== symbolic dims ===============================================================================
@pytest.fixture
def sym_model(tmp_path):
    return write(tmp_path / "sym.gir", "graft 1\ninput x: f32[N, 4]\ninput y: f32[N, 4]\nz = add(x, y)\noutput z\n")


def test_unbound_symbolic_dim(sym_model):
    expect_fail(run_graft("run", sym_model), USAGE, "'N'", "--dim N=")


def test_dim_option_binds(tmp_path, sym_model):
    out = tmp_path / "o"
    expect_ok(run_graft("run", sym_model, "--dim", "N=3", "--output-dir", str(out)))
    assert np.load(out / "z.npy").shape == (3, 4)


def test_input_binds_dim_for_the_others(tmp_path, sym_model):
    x = npy(tmp_path, "x.npy", np.ones((5, 4), np.float32))
    out = tmp_path / "o"
    expect_ok(run_graft("run", sym_model, "--input", "x=" + x, "--output-dir", str(out)))
    assert np.load(out / "z.npy").shape == (5, 4)


def test_dim_conflicts(tmp_path, sym_model):
    x = npy(tmp_path, "x.npy", np.ones((5, 4), np.float32))
    y = npy(tmp_path, "y.npy", np.ones((6, 4), np.float32))
    expect_fail(run_graft("run", sym_model, "--input", "x=" + x, "--input", "y=" + y), RUNTIME, "'N'", "5")
    expect_fail(run_graft("run", sym_model, "--dim", "N=2", "--input", "x=" + x), RUNTIME, "'N'", "--dim")
    expect_fail(run_graft("run", sym_model, "--dim", "M=2"), USAGE, "'M'")


def test_symbolic_bench_and_zero_size(tmp_path, sym_model):
    expect_ok(run_graft("bench", sym_model, "--dim", "N=7", "--iters", "2", "--warmup", "0"))
    out = tmp_path / "o"
    # 0 is outside a symbolic dim's default range (>= 1): refused, then allowed by a declared range
    r = run_graft("run", sym_model, "--dim", "N=0", "--output-dir", str(out))
    assert r.returncode == 1 and "symbolic dim 'N' is 0" in r.stderr and "outside its default range" in r.stderr, r.stderr
    p = expect_ok(run_graft("run", sym_model, "--dim", "N=0", "--dim-range", "N=0:16", "--output-dir", str(out)))
    assert np.load(out / "z.npy").shape == (0, 4) and "empty" in p.stdout
    r = run_graft("run", sym_model, "--dim", "N=17", "--dim-range", "N=0:16", "--output-dir", str(out))
    assert r.returncode == 1 and "outside its declared range (in 0..16)" in r.stderr, r.stderr
    r = run_graft("run", sym_model, "--dim-range", "Q=1:4", "--dim", "N=2")
    assert r.returncode == 2 and "no symbolic dim named 'Q'" in r.stderr and "'N'" in r.stderr, r.stderr
    r = run_graft("run", sym_model, "--dim-range", "N=5:4", "--dim", "N=2")
    assert r.returncode == 2 and "--dim-range" in r.stderr, r.stderr


def test_bench_kernel_counters(tmp_path, sym_model, small_model):
    """bench reports kernel preparation: a symbolic model's kernels are shape-generic
    (one per structure, whatever the length), a static model's literal"""
    for dim in ("N=7", "N=300"):
        js = tmp_path / "g.json"
        p = expect_ok(run_graft("bench", sym_model, "--device", "sim", "--dim", dim, "--iters", "1", "--warmup", "0",
                                "--json", str(js)))
        m = re.search(r"^shape-generic\s+(\d+) kernels, (\d+) structures", p.stdout, re.M)
        assert m and int(m.group(1)) >= 1 and int(m.group(2)) >= 1, p.stdout
        assert re.search(r"^kernels prepared\s+\d+ \(0 compiled by NVRTC", p.stdout, re.M), p.stdout
        rec = json.loads(js.read_text())
        assert rec["generic_structures"] == int(m.group(2)) and rec["kernels_compiled"] == 0
    p = expect_ok(run_graft("bench", small_model, "--device", "sim", "--iters", "1", "--warmup", "0"))
    assert "kernels prepared" in p.stdout and "shape-generic" not in p.stdout


def test_bench_labels_timings_by_device_kind(tmp_path, small_model):
    """the simulator's timings are labelled simulated, from the session's device kind"""
    js = tmp_path / "b.json"
    p = expect_ok(run_graft("bench", small_model, "--device", "sim", "--iters", "2", "--warmup", "0", "--json", str(js)))
    assert "simulated clock" in p.stdout and "host wall/iter" in p.stdout
    rec = json.loads(js.read_text())
    assert rec["sim"] is True and rec["device"] == "sim"


# ==== outputs ===================================================================================
def test_output_names_sanitized_and_summary(tmp_path):
    path = write(tmp_path / "m.gir", 'graft 1\ninput x: f32[2, 2]\n"a/b:c" = neg(x)\nr = relu(x)\n'
                                     'output "a/b:c", r\n')
    x = npy(tmp_path, "x.npy", np.array([[1, -2], [3, -4]], np.float32))
    p = expect_ok(run_graft("run", path, "--input", "x=" + x, "--output-dir", str(tmp_path / "o")))
    assert_exact(np.load(tmp_path / "o" / "a_b_c.npy"), -np.load(x), "sanitized name")
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 2
    assert re.match(r"a/b:c\s+f32\[2,2\]\s+min=-3 max=4 mean=0.5\s+checksum=[0-9a-f]{16}", lines[0]), lines[0]
    assert re.match(r"r\s+f32\[2,2\]\s+min=0 max=3 mean=1", lines[1]), lines[1]


def test_default_output_dir_is_out(tmp_path, small_model):
    expect_ok(run_graft("run", small_model, cwd=str(tmp_path)))
    assert np.load(tmp_path / "out" / "y.npy").shape == (2, 3)


def test_nested_output_dir_created(tmp_path, small_model):
    out = tmp_path / "a" / "b" / "c"
    expect_ok(run_graft("run", small_model, "--output-dir", str(out)))
    assert (out / "y.npy").exists()


def test_output_dir_is_a_file(tmp_path, small_model):
    f = write(tmp_path / "file", "x")
    expect_fail(run_graft("run", small_model, "--output-dir", f), RUNTIME, f)


def test_nan_reported(tmp_path):
    path = write(tmp_path / "m.gir", "graft 1\ninput x: f32[3]\ny = log(x)\noutput y\n")
    x = npy(tmp_path, "x.npy", np.array([-1, 1, np.e], np.float32))
    p = expect_ok(run_graft("run", path, "--input", "x=" + x, "--output-dir", str(tmp_path / "o")))
    assert "nan=1" in p.stdout


# ==== examples ==================================================================================
EXAMPLE_NAMES = ["mlp", "eos", "transformer"]


def example(name):
    return os.path.join(EXAMPLES, name + ".gir")


def example_inputs(tmp_path, name):
    """Deterministic inputs as in torch_anchors.py (EOS fields in [1, 2), temperature sqrt(64))."""
    rng = np.random.default_rng(1234)
    if name == "mlp":
        arrs = {"x": rng.standard_normal((256, 512)).astype(np.float32)}
    elif name == "eos":
        arrs = {k: (rng.random(1 << 20) + 1.0).astype(np.float32) for k in ("s", "t", "p")}
    else:
        arrs = {"x": rng.standard_normal((1, 32, 512)).astype(np.float32), "temperature": np.array(8.0, np.float32)}
    args = []
    for k, v in arrs.items():
        args += ["--input", "%s=%s" % (k, npy(tmp_path, "%s_%s.npy" % (name, k), v))]
    return arrs, args


def run_example(tmp_path, name, mode):
    _, args = example_inputs(tmp_path, name)
    out = tmp_path / ("%s_%s" % (name, mode))
    p = run_graft("run", example(name), "--device", "sim", "--mode", mode, "--output-dir", str(out), *args)
    return p, out


def test_examples_are_up_to_date(tmp_path):
    """examples/*.gir are what gen_examples.py writes."""
    shutil.copy(os.path.join(EXAMPLES, "gen_examples.py"), tmp_path)
    import subprocess
    import sys
    subprocess.run([sys.executable, str(tmp_path / "gen_examples.py")], check=True, capture_output=True)
    for name in EXAMPLE_NAMES:
        with open(example(name)) as a, open(tmp_path / (name + ".gir")) as b:
            assert a.read() == b.read(), "examples/%s.gir is stale: run examples/gen_examples.py" % name


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_run_eager(tmp_path, name):
    p, out = run_example(tmp_path, name, "eager")
    expect_ok(p)
    files = os.listdir(out)
    assert len(files) == 1 and len(p.stdout.strip().splitlines()) == 1
    y = np.load(out / files[0])
    assert np.isfinite(y).all()
    if name == "transformer":  # layer_norm output: mean 0, variance 1 per row
        assert y.shape == (1, 32, 512)
        assert np.abs(y.mean(axis=-1)).max() < 1e-4 and np.abs(y.var(axis=-1) - 1).max() < 1e-2
    if name == "mlp":
        assert y.shape == (256, 512)


def eos_reference(s, t, p):
    """torch_anchors.py EOS.forward in float32 numpy (python-float scalars rounded to f32)."""
    f = np.float32
    x = np.sqrt(s * f(0.0248826675584615))
    y = t * f(0.025)
    z = p * f(1e-4)
    acc = np.zeros_like(s)
    for k in range(24):
        c = 1.0 / (k + 1)
        acc = acc + f(c) * x * y - f(c * 0.5) * z * x + np.tanh(y * f(c)) * z
        x = x * f(0.999) + f(0.001)
    return acc


def test_eos_matches_numpy(tmp_path):
    arrs, _ = example_inputs(tmp_path, "eos")
    p, out = run_example(tmp_path, "eos", "eager")
    expect_ok(p)
    (name,) = os.listdir(out)
    ref = eos_reference(arrs["s"].astype(np.float64), arrs["t"].astype(np.float64), arrs["p"].astype(np.float64))
    assert_close(np.load(out / name), ref, 1e-5, "eos vs numpy")


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_graph_mode_bit_identical(tmp_path, name):
    p_e, out_e = run_example(tmp_path, name, "eager")
    expect_ok(p_e)
    p_g, out_g = run_example(tmp_path, name, "graph")
    if p_g.returncode != 0 and ("unsupported" in p_g.stderr.lower() or "not supported" in p_g.stderr.lower()):
        pytest.skip("graph mode reports unsupported: " + p_g.stderr.strip()[:200])
    expect_ok(p_g)
    for f in os.listdir(out_e):
        with open(out_e / f, "rb") as a, open(out_g / f, "rb") as b:
            assert a.read() == b.read(), "%s: graph-mode output differs from eager" % f
    # the summary lines (checksums included) agree too
    assert p_e.stdout == p_g.stdout


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_example_bench(tmp_path, name, mode):
    _, args = example_inputs(tmp_path, name)
    p = run_graft("bench", example(name), "--device", "sim", "--mode", mode, "--iters", "3", "--warmup", "1", *args)
    if mode == "graph" and p.returncode != 0 and "unsupported" in p.stderr.lower():
        pytest.skip("graph mode reports unsupported: " + p.stderr.strip()[:200])
    expect_ok(p)
    for key in ("time/iter", "simulated clock", "kernels/iter", "kernels in graphs", "copies/iter",
                "bytes copied/iter", "arena bytes", "weight bytes", "segments"):
        assert key in p.stdout, key
    t = float(re.search(r"time/iter\s+([0-9.]+) us", p.stdout).group(1))
    assert t > 0
    kernels = int(re.search(r"kernels/iter\s+(\d+)", p.stdout).group(1))
    assert kernels > 0


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_dump_and_explain(name):
    p = expect_ok(run_graft("dump", example(name)))
    assert len(p.stdout) > 100
    p = expect_ok(run_graft("explain", example(name), "--device", "sim"))
    assert p.stdout.strip()


def test_transformer_temperature_is_used(tmp_path):
    """Changing the host scalar changes the result (it is read at run time, not baked)."""
    arrs, _ = example_inputs(tmp_path, "transformer")
    x = npy(tmp_path, "x.npy", arrs["x"])
    outs = []
    for temp in (8.0, 0.5):
        t = npy(tmp_path, "t%g.npy" % temp, np.array(temp, np.float32))
        out = tmp_path / ("o%g" % temp)
        expect_ok(run_graft("run", example("transformer"), "--device", "sim", "--input", "x=" + x,
                            "--input", "temperature=" + t, "--output-dir", str(out)))
        outs.append(np.load(out / os.listdir(out)[0]))
    assert not np.array_equal(outs[0], outs[1])


def test_generated_float_ranges(tmp_path):
    """Generated floats stay in [-1, 1) after rounding to every float dtype; ints in [0, 10)."""
    path = write(tmp_path / "m.gir", "graft 1\ninput a: f16[50000]\ninput b: bf16[50000]\ninput c: f32[50000]\n"
                                     "input d: f64[50000]\ninput e: i32[1000]\ninput f: u8[1000]\n"
                                     "output a, b, c, d, e, f\n")
    out = tmp_path / "o"
    p = expect_ok(run_graft("run", path, "--output-dir", str(out)))
    for name in "abcd":
        v = np.load(out / (name + ".npy"))
        assert v.min() >= -1 and v.max() < 1 and abs(v.mean()) < 0.05, name
    for name in "ef":
        v = np.load(out / (name + ".npy"))
        assert v.min() >= 0 and v.max() <= 9 and len(np.unique(v)) == 10, name
    assert np.load(out / "b.npy").dtype == np.float32 and "bf16 written as f32" in p.stdout


def test_explain_symbolic_plan_and_binding(tmp_path, sym_model):
    """without a binding explain prints the symbolic plan; with --dim it compiles that binding"""
    p = expect_ok(run_graft("explain", sym_model))
    assert "symbolic plan" in p.stdout and re.search(r"^\s+N\s+range 1\.\. \(default\)", p.stdout, re.M), p.stdout
    assert "f32[N, 4]" in p.stdout
    p = expect_ok(run_graft("explain", sym_model, "--dim-range", "N=2:64"))
    assert re.search(r"N\s+range 2\.\.64 \(declared\)", p.stdout), p.stdout
    p = expect_ok(run_graft("explain", sym_model, "--dim", "N=3", "--device", "sim"))
    assert "shape key: N=3" in p.stdout, p.stdout


def test_bench_reports_load_and_compile_phases(tmp_path):
    """bench prints load and compile times and writes them to --json; --verbose
    prints the time of each compile phase (bench/compile_time.py reads both)."""
    js = tmp_path / "r.json"
    p = expect_ok(run_graft("bench", example("mlp"), "--device", "sim", "--iters", "1", "--warmup", "0",
                            "--verbose", "--json", str(js)))
    load = float(re.search(r"^load\s+([0-9.]+) ms", p.stdout, re.M).group(1))
    compile_ms = float(re.search(r"^compile\s+([0-9.]+) ms", p.stdout, re.M).group(1))
    assert load >= 0 and compile_ms > 0
    import json
    j = json.load(open(js))
    assert j["load_ms"] >= 0 and j["compile_ms"] > 0 and j["session_create_ms"] >= j["compile_ms"]
    session = re.search(r"graft: session phases \(ms\):((?: \w+ [0-9.]+)+)$", p.stderr, re.M)
    plan = re.search(r"graft: compile phases \(ms\):((?: \w+ [0-9.]+)+)$", p.stderr, re.M)
    assert session and plan, p.stderr
    names = plan.group(1).split()[::2]
    assert names == ["clone", "specialize", "predicate_if", "fold_constants", "lower", "fuse", "plan_memory", "partition",
                     "prepare"]
    assert session.group(1).split()[::2] == ["verify", "clone", "shapes"]
    # the phases are parts of the compile time
    assert sum(float(x) for x in plan.group(1).split()[1::2]) <= compile_ms * 1.05 + 0.5


# ==== hostile input: files that are not what they claim (issue 17) =============================
@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "directory", "symlink_to_dev_zero"])
def test_input_file_not_regular(tmp_path, small_model, kind):
    """An --input that is a device, FIFO or directory is refused at once: no endless read, no wait."""
    path = str(tmp_path / "in.npy")
    if kind == "dev_zero":
        path = "/dev/zero"
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    else:
        os.symlink("/dev/zero", path)
    want = {"dev_zero": "character device", "fifo": "FIFO", "directory": "directory",
            "symlink_to_dev_zero": "character device"}[kind]
    p = run_graft("run", small_model, "--input", "x=" + path, "--output-dir", str(tmp_path / "o"), timeout=60)
    expect_fail(p, RUNTIME, "'x'", path, want)


@pytest.mark.parametrize("kind", ["fifo", "symlink_to_dev_zero"])
def test_model_file_not_regular(tmp_path, kind):
    path = str(tmp_path / "m.gir")
    if kind == "fifo":
        os.mkfifo(path)
    else:
        os.symlink("/dev/zero", path)
    for cmd in ("run", "dump"):
        expect_fail(run_graft(cmd, path, timeout=60), RUNTIME, path, "FIFO" if kind == "fifo" else "character device")


def npy_bytes(header, data=b"", version=1):
    """A .npy image with the given header dict text, padded as NumPy pads it."""
    h = header.encode()
    pre = 10 if version == 1 else 12
    h += b" " * ((-(pre + len(h) + 1)) % 64) + b"\n"
    size = len(h).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + size + h + data


@pytest.mark.parametrize("name,image,frag", [
    ("trailing", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", bytes(24) + b"more"),
     "28 bytes of data, its header's shape describes 24"),
    ("short", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", bytes(20)),
     "data truncated: the shape needs 24 bytes, the file has 20"),
    ("count_overflow_with_zero", npy_bytes("{'descr': '<f4', 'fortran_order': False, "
                                           "'shape': (0, 4294967296, 4294967296, 4294967296), }"),
     "element count overflows"),
    ("over_size_limit", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627777,), }"),
     "limit of 1099511627776 elements"),
    ("huge_header", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + " " * 70000, bytes(24),
                              version=2), "header of 70"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None)
def test_npy_size_must_match_header(tmp_path, small_model, name, image, frag):
    path = tmp_path / (name + ".npy")
    path.write_bytes(image)
    expect_fail(run_graft("run", small_model, "--input", "x=%s" % path, "--output-dir", str(tmp_path / "o")),
                RUNTIME, str(path), frag)


# ==== output and saved-input files: one file per name, inside the directory ========================
def collide_model(tmp_path):
    """Outputs y_2, y, y (the same value twice), a/b and a_b, Y (y ignoring case), ../../esc, .."""
    return write(tmp_path / "c.gir",
                 'graft 1\ninput "a/b": f32[2]\ninput a_b: f32[2]\n'
                 'y_2 = neg("a/b")\ny = relu("a/b")\n"o/p" = neg(a_b)\no_p = relu(a_b)\nY = add("a/b", a_b)\n'
                 '"../../esc" = sub("a/b", a_b)\n".." = mul("a/b", a_b)\n'
                 'output y_2, y, y, "o/p", o_p, Y, "../../esc", ".."\n')


def test_output_names_never_share_a_file(tmp_path):
    gir = collide_model(tmp_path)
    a = npy(tmp_path, "a.npy", np.array([1, -2], np.float32))
    b = npy(tmp_path, "b.npy", np.array([3, 4], np.float32))
    out = tmp_path / "deep" / "o"
    args = ("run", gir, "--input", "a/b=" + a, "--input", "a_b=" + b, "--output-dir", str(out))
    p = expect_ok(run_graft(*args))
    lines = p.stdout.strip().splitlines()
    files = [re.search(r"-> (\S+)$", ln).group(1) for ln in lines]
    assert files == ["y_2.npy", "y.npy", "y_3.npy", "o_p.npy", "o_p_2.npy", "Y_4.npy", ".._.._esc.npy", "...npy"], files
    assert sorted(os.listdir(out)) == sorted(files)       # one file each, nothing lost
    assert not os.path.exists(tmp_path / "esc.npy") and not os.path.exists(tmp_path / "deep" / "esc.npy")
    x, w = np.load(a), np.load(b)
    want = [-x, np.maximum(x, 0), np.maximum(x, 0), -w, np.maximum(w, 0), x + w, x - w, x * w]
    for f, v, ln in zip(files, want, lines):
        assert_exact(np.load(out / f), v, ln)
    # every renamed file has a note naming both outputs; the same run names the same files
    for frag in ("output 2 'y' is written to y_3.npy: y.npy already holds output 1 'y'",
                 "output 4 'o_p' is written to o_p_2.npy: o_p.npy already holds output 3 'o/p'",
                 "output 5 'Y' is written to Y_4.npy"):
        assert frag in p.stderr, p.stderr
    assert expect_ok(run_graft(*args)).stdout == p.stdout


def test_saved_inputs_never_share_a_file(tmp_path):
    gir = collide_model(tmp_path)
    a = npy(tmp_path, "a.npy", np.array([1, -2], np.float32))
    b = npy(tmp_path, "b.npy", np.array([3, 4], np.float32))
    saved = tmp_path / "in"
    expect_ok(run_graft("run", gir, "--input", "a/b=" + a, "--input", "a_b=" + b, "--save-inputs", str(saved),
                        "--output-dir", str(tmp_path / "o")))
    assert sorted(os.listdir(saved)) == ["a_b.npy", "a_b_2.npy"]
    assert_exact(np.load(saved / "a_b.npy"), np.load(a), "input a/b")
    assert_exact(np.load(saved / "a_b_2.npy"), np.load(b), "input a_b")


def test_inputs_and_outputs_in_one_directory(tmp_path):
    """--save-inputs DIR --output-dir DIR: an output does not overwrite a saved input of the same name."""
    path = write(tmp_path / "m.gir", "graft 1\ninput x: f32[2]\ny = neg(x)\noutput y, x\n")
    x = npy(tmp_path, "x.npy", np.array([1, 2], np.float32))
    d = tmp_path / "same"
    for out in (str(d), str(d / ".")):  # the same directory, however it is spelled
        p = expect_ok(run_graft("run", path, "--input", "x=" + x, "--save-inputs", str(d), "--output-dir", out))
        assert sorted(os.listdir(d)) == ["x.npy", "x_2.npy", "y.npy"]
        assert "output 1 'x' is written to x_2.npy: x.npy already holds input 0 'x'" in p.stderr
        assert_exact(np.load(d / "x.npy"), np.load(x), "saved input")
        assert_exact(np.load(d / "x_2.npy"), np.load(x), "output x")
    # apart, each directory has its own names
    expect_ok(run_graft("run", path, "--input", "x=" + x, "--save-inputs", str(tmp_path / "i"),
                        "--output-dir", str(tmp_path / "o")))
    assert sorted(os.listdir(tmp_path / "o")) == ["x.npy", "y.npy"]


# ==== names from the model cannot drive the terminal =====================================================
ESC_MODEL = ('graft 1\ninput "x\\x1b[31m\\"q\\"": f32[N]\n'
             '["node\\x1b]0;pwned\\x07"] "y\\x1b[2J\\xc2\\x9b" = neg("x\\x1b[31m\\"q\\"")\n'
             'output "y\\x1b[2J\\xc2\\x9b"\n')


def no_raw_controls(text):
    bad = [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0]
    assert not bad, "raw control characters %r in %r" % (bad, text)


def test_model_names_are_escaped_everywhere(tmp_path):
    gir = write(tmp_path / "esc.gir", ESC_MODEL)
    out = tmp_path / "o"
    runs = [run_graft("run", gir, "--dim", "N=3", "--output-dir", str(out)),
            run_graft("explain", gir, "--dim", "N=3", "--device", "sim"),
            run_graft("dump", gir, "--dim", "N=3"),
            run_graft("bench", gir, "--dim", "N=3", "--iters", "1", "--warmup", "0")]
    for p in runs:
        expect_ok(p)
        no_raw_controls(p.stdout + p.stderr)
    run = runs[0]
    assert run.stdout.startswith("y\\x1b[2J\\xc2\\x9b  f32[3]"), run.stdout
    assert "-> y__2J__.npy" in run.stdout
    assert "input 'x\\x1b[31m\"q\"' not given" in run.stderr
    assert "node\\x1b]0;pwned\\x07" in runs[1].stdout + runs[2].stdout
    # a symbolic dim's name in the runtime's verbose notes, and the profile's text
    gir2 = write(tmp_path / "esc2.gir", 'graft 1\ninput x: f32["N\\x1b[1m", 2]\n["k\\x1b[7m"] y = neg(x)\noutput y\n')
    p = expect_ok(run_graft("bench", gir2, "--dim", "N\x1b[1m=3", "--verbose", "--profile", "--iters", "1"))
    no_raw_controls(p.stdout + p.stderr)
    assert "new shape key (N\\x1b[1m=3)" in p.stderr, p.stderr
    # errors that name the input, and the library's own errors
    bad = npy(tmp_path, "bad.npy", np.zeros(3, np.float64))
    for p in (run_graft("run", gir, "--input", "x\x1b[31m\"q\"=" + bad),
              run_graft("run", gir),
              run_graft("run", write(tmp_path / "bad.gir", 'graft 1\ninput "a\\x1b[5m": f32[2]\ny = neg("b\\x1b[5m")\n'
                                                          'output y\n'))):
        assert p.returncode != 0
        no_raw_controls(p.stderr)
        assert "\\x1b[" in p.stderr, p.stderr


def test_bench_json_escapes_strings(tmp_path, small_model):
    import json
    name = 'we"ird\\na\x1bme\n.gir'
    model = tmp_path / name
    shutil.copy(small_model, model)
    jf = tmp_path / "b.json"
    expect_ok(run_graft("bench", str(model), "--iters", "1", "--warmup", "0", "--json", str(jf)))
    doc = json.loads(jf.read_text())
    assert doc["model"] == str(model) and doc["device"] and doc["mode"]
    assert "\x1b" not in jf.read_text()


# ==== dump binds symbolic dims =====================================================================
def test_dump_binds_symbolic_dims(sym_model):
    p = run_graft("dump", sym_model)
    expect_fail(p, USAGE, "input 'x' has symbolic dim 'N'", "--dim N=VALUE")
    p = expect_ok(run_graft("dump", sym_model, "--dim", "N=4"))
    assert "input x: f32[N, 4]" in p.stdout                      # the input as written
    spec = p.stdout.split("== after specialize ==", 1)[1]
    assert "input x: f32[4, 4]" in spec and "f32[N" not in spec   # bound from specialize on
    expect_fail(run_graft("dump", sym_model, "--dim", "M=4"), USAGE, "no symbolic dim named 'M'")
    expect_fail(run_graft("dump", sym_model, "--dim", "N=4", "--dim", "M=4"), USAGE, "no symbolic dim named 'M'")
    expect_fail(run_graft("dump", sym_model, "--dim", "N=4", "--dim", "N=5"), USAGE, "'N'", "twice")
    expect_ok(run_graft("dump", sym_model, "--dim", "N=4", "--dim", "N=4"))


def test_bench_reports_new_binding_cost(tmp_path, sym_model):
    """bench on a symbolic model bound by --dim prepares twenty more bindings and reports the
    median, mean and max of their plan times (a timing: printed, never asserted); a range that
    leaves no room stops it with a note, a dim of 1 stays 1, and files given with --input make
    it skip"""
    js = tmp_path / "b.json"
    p = expect_ok(run_graft("bench", sym_model, "--dim", "N=9", "--iters", "1", "--warmup", "0", "--json", str(js)))
    assert re.search(r"^new binding\s+[0-9.]+ ms host time .* \(median of 20; mean [0-9.]+, max [0-9.]+; each --dim value "
                     r"but a 1 moved by 1\.\.20; 0 kernels compiled", p.stdout, re.M), p.stdout
    rec = json.loads(js.read_text())
    assert rec["new_bindings"] == 20 and rec["new_binding_ms"] > 0
    assert rec["new_binding_max_ms"] >= rec["new_binding_ms"] and rec["new_binding_mean_ms"] > 0
    # how many of the twenty were instantiated from a plan template (N 8..1 then 10..21: most share a class)
    m = re.search(r"^new binding plans\s+(\d+) instantiated from a plan template \(median [0-9.]+ ms\), (\d+) compiled by "
                  r"the pass pipeline \(median [0-9.]+ ms\)", p.stdout, re.M)
    assert m and int(m.group(1)) + int(m.group(2)) == 20 and int(m.group(1)) > 0, p.stdout
    assert rec["new_binding_plans_instantiated"] == int(m.group(1)) and rec["new_binding_plans_compiled"] == int(m.group(2))
    p = expect_ok(run_graft("bench", sym_model, "--dim", "N=9", "--iters", "1", "--warmup", "0", "--no-plan-templates"))
    assert re.search(r"^new binding plans\s+0 instantiated .*, 20 compiled", p.stdout, re.M), p.stdout
    p = expect_ok(run_graft("bench", sym_model, "--dim", "N=2", "--dim-range", "N=2:3", "--iters", "1", "--warmup", "0"))
    assert "new binding +2 not measured" in p.stderr and "outside its declared range" in p.stderr, p.stderr
    assert "median of 1;" in p.stdout
    x = tmp_path / "x.npy"
    np.save(x, np.ones((3, 4), np.float32))
    p = expect_ok(run_graft("bench", sym_model, "--input", f"x={x}", "--input", f"y={x}", "--iters", "1", "--warmup", "0"))
    assert "new binding" not in p.stdout


# ==== cache_write: the KV-cache append (issue 12) ==================================================
CACHE_WRITE_GIR = """graft 1
input cache: f32[2, 5, 3]
input new: f32[2, 1, 3]
input kv: i64[1]
[append] y = cache_write(cache, new, kv, axis=1, delta=-1)
output y
"""


def test_cache_write_dump_and_run(tmp_path):
    """graft dump prints the op and its scatter kernel over new's [2, 1, 3] points (the position
    wrap(kv - 1, 5) along the axis); graft run writes new at kv - 1 (a negative position counts
    from the end) and names the node when the position is past the cache"""
    model = tmp_path / "cw.gir"
    model.write_text(CACHE_WRITE_GIR)
    p = expect_ok(run_graft("dump", str(model)))
    assert "[append] y = cache_write(cache, new, kv, axis=1, delta=-1)  # f32[2, 5, 3]" in p.stdout, p.stdout
    fused = p.stdout.split("== after fuse", 1)[1]
    assert "outer(2, 1, 3)" in fused and "stage0: store $3[0 + 15*o0 + 1*o2 + wrap(%3, 5)*3] = %0" in fused, fused
    rng = np.random.default_rng(12)
    cache = rng.standard_normal((2, 5, 3)).astype(np.float32)
    new = rng.standard_normal((2, 1, 3)).astype(np.float32)
    np.save(tmp_path / "cache.npy", cache)
    np.save(tmp_path / "new.npy", new)
    for kv, pos in ((3, 2), (0, 4), (5, 4), (9, None)):
        np.save(tmp_path / "kv.npy", np.array([kv], np.int64))
        args = ["run", str(model), "--output-dir", str(tmp_path / "o"), "--device", "sim"]
        for n in ("cache", "new", "kv"):
            args += ["--input", "%s=%s" % (n, tmp_path / (n + ".npy"))]
        proc = run_graft(*args)
        if pos is None:
            expect_fail(proc, RUNTIME, "append", "scatter index 8 out of range [-5, 5)")
            continue
        expect_ok(proc)
        want = cache.copy()
        want[:, pos, :] = new[:, 0, :]
        assert_exact(np.load(tmp_path / "o" / "y.npy"), want)


@pytest.mark.parametrize("new_t,kv_t,words", [("f32[2, 1, 4]", "i64[1]", ["append", "do not fit the cache", "dim 2"]),
                                               ("f32[2, 6, 3]", "i64[1]", ["append", "do not fit the cache", "dim 1"]),
                                               ("f16[2, 1, 3]", "i64[1]", ["append", "do not match the cache"]),
                                               ("f32[2, 1, 3]", "i32[1]", ["append", "kv_len is", "not i64 [1]"])])
def test_cache_write_shape_rules(tmp_path, new_t, kv_t, words):
    model = tmp_path / "bad.gir"
    model.write_text(CACHE_WRITE_GIR.replace("f32[2, 1, 3]", new_t).replace("i64[1]", kv_t))
    expect_fail(run_graft("dump", str(model)), RUNTIME, *words)
