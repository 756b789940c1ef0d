"""GPT-2, BERT and Llama exported with symbolic batch and sequence axes, run
through graft at every length the fixtures hold.

The fixtures (tests/data/onnx/dyn/, written by make_dynamic_fixtures.py) are
tiny configs exported by PyTorch's dynamo and TorchScript exporters with
dynamic axes {0: batch, 1: seq} on every input, plus inputs and PyTorch's
outputs at several bindings (seq 1 to the largest the export allows, batch 1
to 8). Each binding runs in its own `graft run --device sim` and is compared
with PyTorch's output by ||out - ref|| / ||ref|| <= 1e-4. One model must serve
every length: the same model.onnx file is used for all bindings.

Also here:
* the fixtures themselves are checked (every exporter and model tried, a
  reason for every export that failed, symbolic inputs, the bindings present);
* the static control: the same model with its input dims fixed to one
  binding's values. It separates "graft cannot do symbolic shapes" from
  "graft cannot do an op these exporters emit" when a binding test fails;
* bad bindings: inputs that share a symbol but disagree on its value must be
  refused with an error naming both inputs and the symbol.

Needs numpy and the graft CLI (the static control also needs onnx); no torch.
"""
import json
import os
import re
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# GRAFT_DYN_FIXTURES: another fixture tree (e.g. one just regenerated with another torch)
DYN = os.environ.get("GRAFT_DYN_FIXTURES") or os.path.join(ROOT, "tests", "data", "onnx", "dyn")
REL_TOL = 1e-4
MODELS = ("gpt2", "bert", "llama")
EXPORTERS = ("dynamo", "torchscript")


def _graft_bin():
    env = os.environ.get("GRAFT_BIN")
    if env:
        return env
    for d in ("build", "build-onnx", "build-hf"):
        p = os.path.join(ROOT, d, "bin", "graft")
        if os.path.exists(p):
            return p
    return os.path.join(ROOT, "build", "bin", "graft")


GRAFT = _graft_bin()
needs_graft = pytest.mark.skipif(not os.path.exists(GRAFT),
                                 reason=f"graft CLI not built ({GRAFT} missing): build the graft_cli target first")


def rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    n = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / (n if n else 1.0))


def out_file(name):
    """The file `graft run` writes an output to (see `graft run --help`)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".npy"


# ==== the fixtures ==============================================================================

def _index():
    p = os.path.join(DYN, "index.json")
    if not os.path.exists(p):
        return {"cases": []}
    with open(p) as f:
        return json.load(f)


def _manifest(case):
    with open(os.path.join(DYN, case, "manifest.json")) as f:
        return json.load(f)


def _exported():
    return [c["case"] for c in _index()["cases"] if c["status"] == "exported"]


def _bindings():
    out = []
    for case in _exported():
        for b in _manifest(case)["bindings"]:
            out.append(pytest.param(case, b["name"], id=f"{case}-{b['name']}"))
    return out


def _binding(case, name):
    m = _manifest(case)
    (b,) = [b for b in m["bindings"] if b["name"] == name]
    return m, b


def test_index_covers_every_model_and_exporter():
    cases = {c["case"]: c for c in _index()["cases"]}
    want = {f"{m}_{e}" for m in MODELS for e in EXPORTERS}
    assert want <= set(cases), f"index.json lacks {sorted(want - set(cases))}: rerun make_dynamic_fixtures.py"
    for name, c in cases.items():
        if c["status"] == "exported":
            assert os.path.exists(os.path.join(DYN, name, "manifest.json")), name
        else:
            assert c["status"] == "not_exported" and c.get("reason"), f"{name}: no reason recorded for the failed export"
            assert not os.path.exists(os.path.join(DYN, name)), f"{name}: a failed export left a directory behind"
    # the dynamo exporter handles all three; it is the one users have
    for m in MODELS:
        assert cases[f"{m}_dynamo"]["status"] == "exported", f"{m}_dynamo: {cases[f'{m}_dynamo'].get('reason')}"


@pytest.mark.parametrize("case", _exported())
def test_fixture_is_symbolic(case):
    """Every input of every case is [batch, seq] with both dims symbolic; the
    bindings reach seq 1, the largest seq the export allows and batch > 1;
    every file a binding names holds the shape its dims say."""
    m = _manifest(case)
    assert os.path.exists(os.path.join(DYN, case, "model.onnx"))
    for name in m["input_names"]:
        assert m["input_dims"][name] == ["batch", "seq"], f"{case}: input {name} has dims {m['input_dims'][name]}"
    seqs = {b["dims"]["seq"] for b in m["bindings"]}
    batches = {b["dims"]["batch"] for b in m["bindings"]}
    assert 1 in seqs and m["config"]["max_seq"] in seqs and max(batches) > 1, (seqs, batches)
    for b in m["bindings"]:
        bs, sq = b["dims"]["batch"], b["dims"]["seq"]
        for name, f in b["inputs"].items():
            a = np.load(os.path.join(DYN, case, f))
            assert a.shape == (bs, sq) and a.dtype == np.int64, (case, b["name"], name, a.shape, a.dtype)
        for name, f in b["outputs"].items():
            assert np.load(os.path.join(DYN, case, f)).shape == (bs, sq, m["config"]["hidden"]), (case, b["name"], name)


# ==== graft at every binding =====================================================================

def graft_run(case, binding, out_dir, model=None, extra=()):
    m, b = _binding(case, binding)
    args = [GRAFT, "run", model or os.path.join(DYN, case, "model.onnx"), "--device", "sim",
            "--output-dir", str(out_dir), *extra]
    for name, f in b["inputs"].items():
        args += ["--input", f"{name}={os.path.join(DYN, case, f)}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def check_outputs(case, binding, out_dir, r):
    m, b = _binding(case, binding)
    assert r.returncode == 0, f"{case} at {b['dims']}: graft run failed ({r.returncode}):\n{r.stderr}{r.stdout}"
    for name, f in b["outputs"].items():
        ref = np.load(os.path.join(DYN, case, f))
        got = np.load(os.path.join(str(out_dir), out_file(name)))
        assert got.shape == ref.shape, f"{case} at {b['dims']}: output {name} shape {got.shape} != PyTorch's {ref.shape}"
        err = rel_err(got, ref)
        assert err <= REL_TOL, f"{case} at {b['dims']}: output {name} relative error {err:.3e} > {REL_TOL}"


def skip_if_export_wrong(b):
    if "export_mismatch" in b:
        pytest.skip(f"the export itself is wrong at this binding: {b['export_mismatch']}")


@needs_graft
@pytest.mark.parametrize("case,binding", _bindings())
def test_binding(case, binding, tmp_path):
    _, b = _binding(case, binding)
    skip_if_export_wrong(b)
    check_outputs(case, binding, tmp_path / "out", graft_run(case, binding, tmp_path / "out"))


@needs_graft
@pytest.mark.parametrize("case,binding", _bindings())
def test_static_control(case, binding, tmp_path):
    """The same model with its inputs' dims fixed to this binding: what graft
    did before symbolic shapes. Where this passes and test_binding fails, the
    gap is symbolic shapes; where both fail, an op the export uses."""
    onnx = pytest.importorskip("onnx")
    _, b = _binding(case, binding)
    skip_if_export_wrong(b)
    model = onnx.load(os.path.join(DYN, case, "model.onnx"))
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                value = b["dims"][d.dim_param]
                d.Clear()
                d.dim_value = value
    path = str(tmp_path / "static.onnx")
    onnx.save(model, path)
    check_outputs(case, binding, tmp_path / "out", graft_run(case, binding, tmp_path / "out", model=path))


# ==== bad bindings ===============================================================================

def _two_input_cases():
    return [c for c in _exported() if len(_manifest(c)["input_names"]) >= 2]


@needs_graft
@pytest.mark.parametrize("case", _two_input_cases())
@pytest.mark.parametrize("axis", ["batch", "seq"])
def test_inputs_disagree_on_a_symbol(case, axis, tmp_path):
    """input_ids and attention_mask share batch and seq; files that disagree
    on one of them are refused, naming both inputs and the symbol."""
    m = _manifest(case)
    first, second = m["input_names"][:2]
    shapes = {first: (2, 5), second: (3, 5) if axis == "batch" else (2, 6)}
    args = [GRAFT, "run", os.path.join(DYN, case, "model.onnx"), "--device", "sim", "--output-dir", str(tmp_path / "out")]
    for name, shape in shapes.items():
        f = tmp_path / f"{name}.npy"
        np.save(f, np.ones(shape, np.int64))
        args += ["--input", f"{name}={f}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode > 0, f"rc {r.returncode} (0 = accepted, < 0 = killed by a signal):\n{r.stderr}"
    for word in (first, second, axis):
        assert re.search(rf"\b{word}\b", r.stderr), f"the error does not name {word!r}:\n{r.stderr}"
    assert not os.path.exists(tmp_path / "out" / out_file(m["output_names"][0])), "an output was written anyway"


@needs_graft
@pytest.mark.parametrize("case", _exported())
def test_dim_flag_disagrees_with_file(case, tmp_path):
    """--dim seq=N against an input file of another length is refused, naming the symbol and the input."""
    m = _manifest(case)
    b = m["bindings"][1]
    seq = b["dims"]["seq"]
    args = [GRAFT, "run", os.path.join(DYN, case, "model.onnx"), "--device", "sim", "--output-dir", str(tmp_path / "out"),
            "--dim", f"seq={seq + 1}"]
    for name, f in b["inputs"].items():
        args += ["--input", f"{name}={os.path.join(DYN, case, f)}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode > 0, f"rc {r.returncode} (0 = accepted, < 0 = killed by a signal):\n{r.stderr}"
    for word in ("seq", "--dim", m["input_names"][0]):
        assert re.search(rf"(?<![\w-]){re.escape(word)}\b", r.stderr), f"the error does not name {word!r}:\n{r.stderr}"
