"""The torch-free half of scripts/real-models-check.sh: tests/py/check_real_models.py
(graft run per case, binding, device and mode; compared with PyTorch's outputs;
graph vs eager bits; time budget) on the committed dynamic-axis exports in
tests/data/onnx/dyn and on doctored copies of them, the shell script itself with
REAL_MODELS_DIR (no export), and make_real_models.py's argument checks. The export
half needs torch and runs on the GPU machine only."""
import json
import os
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from gir_builder import graft_bin  # noqa: E402

GRAFT = graft_bin()
DYN = os.path.join(ROOT, "tests", "data", "onnx", "dyn")
CHECK = os.path.join(HERE, "check_real_models.py")
MAKE = os.path.join(HERE, "make_real_models.py")
needs_graft = pytest.mark.skipif(not os.path.exists(GRAFT), reason=f"graft CLI not built ({GRAFT} missing)")
needs_fixtures = pytest.mark.skipif(not os.path.exists(os.path.join(DYN, "bert_dynamo", "manifest.json")),
                                    reason="tests/data/onnx/dyn fixtures missing")


def check(*args, timeout=300):
    return subprocess.run([sys.executable, CHECK, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def copy_case(dst_root, case="bert_dynamo", binding="b3_s7"):
    """A one-binding copy of a fixture case (model, manifest, that binding's files)."""
    src, dst = os.path.join(DYN, case), os.path.join(str(dst_root), case)
    os.makedirs(os.path.join(dst, binding))
    shutil.copy(os.path.join(src, "model.onnx"), dst)
    with open(os.path.join(src, "manifest.json")) as f:
        m = json.load(f)
    m["bindings"] = [b for b in m["bindings"] if b["name"] == binding]
    b = m["bindings"][0]
    for f in list(b["inputs"].values()) + list(b["outputs"].values()):
        shutil.copy(os.path.join(src, f), os.path.join(dst, f))
    with open(os.path.join(dst, "manifest.json"), "w") as f:
        json.dump(m, f)
    return dst, m


@needs_graft
@needs_fixtures
def test_fixtures_pass_eager_and_graph(tmp_path):
    r = check(DYN, "--graft", GRAFT, "--devices", "sim", "--bindings", "first", "--logs", tmp_path / "logs",
              "--summary", tmp_path / "summary.txt", "--json", tmp_path / "r.json")
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.load(open(tmp_path / "r.json"))
    cases = sorted(d for d in os.listdir(DYN) if os.path.exists(os.path.join(DYN, d, "manifest.json")))
    assert sorted(row["case"] for row in res["results"]) == cases
    for row in res["results"]:
        assert row["bits"] == "same", row
        for mode in ("eager", "graph"):
            run = row["runs"][mode]
            assert run["status"] == "ok", run
            for o in run["outputs"].values():
                assert o["rel_err"] <= 1e-3 and o["max_abs"] < 1e-3, o
    summary = open(tmp_path / "summary.txt").read()
    assert f"passed {len(cases)} of {len(cases)}" in summary, summary
    # the index's cases that were not exported are in the table, with the reason
    index = json.load(open(os.path.join(DYN, "index.json")))
    for c in index["cases"]:
        if c["status"] != "exported":
            assert "not_exported: " + c["reason"][:30] in summary, (c, summary)
    # one log per run, holding the command and graft's output
    logs = sorted(os.listdir(tmp_path / "logs"))
    assert len(logs) == 2 * len(cases), logs
    text = open(tmp_path / "logs" / f"{cases[0]}.b1_s1.sim-graph.log").read()
    assert "--mode graph" in text and "exit status: 0" in text and "---- stdout" in text


@needs_graft
@needs_fixtures
def test_wrong_reference_is_a_mismatch(tmp_path):
    dst, m = copy_case(tmp_path / "cases")
    out = m["bindings"][0]["outputs"]["last_hidden_state"]
    ref = np.load(os.path.join(dst, out))
    # a 1% perturbation: far above the tolerance
    np.save(os.path.join(dst, out), ref + 0.01 * np.linalg.norm(ref) / np.sqrt(ref.size))
    r = check(tmp_path / "cases", "--graft", GRAFT, "--devices", "sim", "--json", tmp_path / "r.json")
    assert r.returncode == 1, r.stdout + r.stderr
    (row,) = json.load(open(tmp_path / "r.json"))["results"]
    for mode in ("eager", "graph"):
        run = row["runs"][mode]
        assert run["status"] == "mismatch", run
        err = run["outputs"]["last_hidden_state"]["rel_err"]
        assert 0.005 < err < 0.02, err
        assert "rel err" in run["message"]
    assert row["bits"] == "same"  # graft agrees with itself; the reference is what is off
    assert "FAIL" in r.stdout and "passed 0 of 1" in r.stdout
    # a looser tolerance accepts it
    r = check(tmp_path / "cases", "--graft", GRAFT, "--devices", "sim", "--tol", "0.05")
    assert r.returncode == 0, r.stdout + r.stderr


@needs_graft
@needs_fixtures
def test_wrong_shape_is_a_mismatch(tmp_path):
    dst, m = copy_case(tmp_path / "cases")
    out = m["bindings"][0]["outputs"]["last_hidden_state"]
    np.save(os.path.join(dst, out), np.load(os.path.join(dst, out))[:, :-1])
    r = check(tmp_path / "cases", "--graft", GRAFT, "--devices", "sim", "--modes", "eager", "--json", tmp_path / "r.json")
    assert r.returncode == 1
    run = json.load(open(tmp_path / "r.json"))["results"][0]["runs"]["eager"]
    assert run["status"] == "mismatch" and "shape" in run["message"], run


@needs_graft
@needs_fixtures
def test_graft_error_is_reported_with_its_message(tmp_path):
    dst, _ = copy_case(tmp_path / "cases")
    with open(os.path.join(dst, "model.onnx"), "wb") as f:
        f.write(b"not an onnx file")
    r = check(tmp_path / "cases", "--graft", GRAFT, "--devices", "sim", "--logs", tmp_path / "logs",
              "--summary", tmp_path / "s.txt", "--json", tmp_path / "r.json")
    assert r.returncode == 1
    (row,) = json.load(open(tmp_path / "r.json"))["results"]
    run = row["runs"]["eager"]
    assert run["status"] == "error" and run["rc"] != 0 and run["message"], run
    assert "model.onnx: " not in run["message"]  # the row names the model; the message says what is wrong
    assert "bits" not in row
    log = open(tmp_path / "logs" / "bert_dynamo.b3_s7.sim-eager.log").read()
    assert "---- stderr" in log and run["message"] in log  # graft's full message is in the log
    assert run["message"][:40] in open(tmp_path / "s.txt").read()


@needs_graft
@needs_fixtures
def test_time_budget_skips_runs(tmp_path):
    copy_case(tmp_path / "cases")
    r = check(tmp_path / "cases", "--graft", GRAFT, "--devices", "sim", "--budget", "0", "--json", tmp_path / "r.json")
    assert r.returncode == 1
    (row,) = json.load(open(tmp_path / "r.json"))["results"]
    assert {run["status"] for run in row["runs"].values()} == {"skipped"}
    assert "1 with runs skipped" in r.stdout


def test_bad_arguments(tmp_path):
    r = check(tmp_path / "nowhere", "--graft", GRAFT)
    assert r.returncode == 2 and "not a directory" in r.stderr
    r = check(tmp_path, "--graft", tmp_path / "no-graft")
    assert r.returncode == 2 and "no graft binary" in r.stderr
    if os.path.exists(GRAFT):
        r = check(tmp_path, "--graft", GRAFT)
        assert r.returncode == 2 and "no case" in r.stderr
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "manifest.json").write_text("{not json")
        r = check(tmp_path, "--graft", GRAFT)
        assert r.returncode == 2 and "check_real_models:" in r.stderr


@needs_graft
@needs_fixtures
def test_script_on_committed_exports(tmp_path):
    """scripts/real-models-check.sh with REAL_MODELS_DIR: no export, the simulator only;
    what comes back is summary.txt, results.json and the log archive."""
    dst, _ = copy_case(tmp_path / "cases")
    shutil.copytree(os.path.join(DYN, "gpt2_dynamo"), tmp_path / "cases" / "gpt2_dynamo")
    env = dict(os.environ, OUT=str(tmp_path / "out"), GRAFT_BUILD=os.path.dirname(os.path.dirname(GRAFT)),
               REAL_MODELS_DIR=str(tmp_path / "cases"), REAL_DEVICES="sim", TMPDIR=str(tmp_path))
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "real-models-check.sh")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "real-models-check: PASS" in r.stdout
    assert sorted(os.listdir(tmp_path / "out")) == ["real-models-logs.tgz", "results.json", "summary.txt"]
    summary = open(tmp_path / "out" / "summary.txt").read()
    assert "passed 7 of 7" in summary and "real-models-check: PASS" in summary, summary
    with tarfile.open(tmp_path / "out" / "real-models-logs.tgz") as t:
        names = t.getnames()
    assert "logs/device.txt" in names and "logs/check.log" in names
    assert "logs/runs/bert_dynamo.b3_s7.sim-graph.log" in names
    assert "logs/manifests/gpt2_dynamo.json" in names
    assert not [d for d in os.listdir(tmp_path) if d.startswith("real-models.")]  # its temp dir is gone
    # a failing case makes the script fail
    with open(os.path.join(dst, "model.onnx"), "wb") as f:
        f.write(b"junk")
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "real-models-check.sh")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "real-models-check: FAIL" in r.stdout, r.stdout + r.stderr


def test_make_rejects_unknown_models(tmp_path):
    r = subprocess.run([sys.executable, MAKE, "--out", str(tmp_path / "o"), "--models", "resnet50,nosuch"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "nosuch" in r.stderr and "resnet50" in r.stderr
    assert not (tmp_path / "o").exists()


def test_make_without_torch_says_so(tmp_path):
    import importlib.util
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here")
    r = subprocess.run([sys.executable, MAKE, "--out", str(tmp_path / "o"), "--models", "vit"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "needs torch" in r.stderr, r.stderr


# ==== make_real_models.py's bookkeeping, with a stand-in torch ====================================
# The builders need torch and transformers (GPU machine); the export loop, the exporter
# fallback, the per-model time limit, the name mapping, the layout and index.json are
# exercised here with a minimal fake torch whose "exporter" writes a real ONNX graph
# (Add and Mul of the input), so check_real_models.py runs the result through graft.

FAKE_TORCH = '''
import contextlib
import numpy as np
__version__ = "fake"
class Tensor:
    def __init__(self, a):
        self.a = np.asarray(a)
    def detach(self):
        return self
    def numpy(self):
        return self.a
def from_numpy(a):
    return Tensor(a)
def manual_seed(s):
    pass
def set_num_threads(n):
    pass
no_grad = contextlib.nullcontext
'''
FAKE_NN = '''
class Module:
    def eval(self):
        return self
    def __call__(self, *args):
        return self.forward(*args)
'''
FAKE_ONNX_EXPORT = '''
import onnx
from onnx import helper, TensorProto
def export(model, args, path, dynamo=True, input_names=None, output_names=None, opset_version=None, **kw):
    model.calls.append("dynamo" if dynamo else "torchscript")
    if model.fail_with(dynamo):
        raise RuntimeError("fake %s exporter failure" % ("dynamo" if dynamo else "torchscript"),)
    x = input_names[0]
    outs = list(output_names) if not (dynamo and model.rename) else ["add_out", "mul_out"]
    shape = list(args[0].a.shape)
    g = helper.make_graph(
        [helper.make_node("Add", [x, x], [outs[0]]), helper.make_node("Mul", [x, x], [outs[1]])], "fake",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shape) for o in outs])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset_version)]), path)
'''
FAKE_ORT = '''
import os
__version__ = "fake"
class SessionOptions:
    pass
class GraphOptimizationLevel:
    ORT_DISABLE_ALL = 0
class InferenceSession:
    def __init__(self, path, so, providers):
        from onnx.reference import ReferenceEvaluator
        self.ref = ReferenceEvaluator(path)
    def run(self, names, feeds):
        outs = self.ref.run(names, feeds)
        return [o + 1 for o in outs] if os.environ.get("FAKE_ORT_WRONG") else outs
'''
DRIVER = '''
import sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import make_real_models as M
import torch

class Fake(torch.nn.Module):
    def __init__(self, fail=(), rename=False, sleep=0):
        self.fail, self.rename, self.sleep, self.calls = fail, rename, sleep, []
    def fail_with(self, dynamo):
        try:
            time.sleep(self.sleep)
        except Exception as e:  # as an exporter wraps what goes wrong inside it in its own error
            raise RuntimeError("exporter internal error") from e
        return ("dynamo" if dynamo else "torchscript") in self.fail
    def forward(self, x):
        return (torch.Tensor(x.a + x.a), torch.Tensor(x.a * x.a))

def builder(**kw):
    def build(rng):
        return {"module": Fake(**kw), "inputs": {"pixel_values": rng.standard_normal((2, 3, 4)).astype(np.float32)},
                "outputs": ["sum", "square"], "source": "fake", "config": {"kw": repr(kw)}}
    return build

def not_built(rng):
    raise RuntimeError("not built: no such library here")

M.BUILDERS.clear()
M.BUILDERS.update({"ok": builder(), "fallback": builder(fail=("dynamo",)), "renamed": builder(rename=True),
                   "nothing": builder(fail=("dynamo", "torchscript")), "slow": builder(sleep=30),
                   "missing": not_built})
sys.exit(M.main(sys.argv[2:]))
'''


@pytest.fixture
def fake_torch(tmp_path):
    pkg = tmp_path / "fake" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_TORCH + "\nfrom . import nn, onnx\n")
    (pkg / "nn.py").write_text(FAKE_NN)
    (pkg / "onnx.py").write_text(FAKE_ONNX_EXPORT)
    (tmp_path / "fake" / "transformers.py").write_text('__version__ = "fake"\n')
    (tmp_path / "fake" / "onnxruntime.py").write_text(FAKE_ORT)
    (tmp_path / "driver.py").write_text(DRIVER)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "fake"))
    return lambda *args, **extra: subprocess.run([sys.executable, str(tmp_path / "driver.py"), HERE, *args],
                                                 env=dict(env, **extra), capture_output=True, text=True, timeout=120)


def test_make_bookkeeping_with_fake_torch(tmp_path, fake_torch):
    out = tmp_path / "models"
    r = fake_torch("--out", str(out), "--models", "ok,fallback,renamed,nothing,slow,missing", "--model-timeout", "2")
    log = r.stdout + r.stderr
    assert r.returncode == 1, log  # some model has no exported case
    assert "none of: nothing, slow, missing" in r.stdout, log
    index = {c["case"]: c for c in json.load(open(out / "index.json"))["cases"]}
    assert index["ok_dynamo"]["status"] == "exported"
    assert index["fallback_dynamo"]["status"] == "not_exported"
    assert "fake dynamo exporter failure" in index["fallback_dynamo"]["reason"]
    assert index["fallback_torchscript"]["status"] == "exported"
    assert "fallback_torchscript" not in index or index["fallback_torchscript"]["exporter"] == "torchscript"
    assert index["nothing_dynamo"]["status"] == index["nothing_torchscript"]["status"] == "not_exported"
    assert index["slow"]["status"] == "timeout", index["slow"]
    assert index["missing"]["status"] == "not_built" and "no such library" in index["missing"]["reason"]
    assert sorted(d for d in os.listdir(out) if d != "index.json") == ["fallback_torchscript", "ok_dynamo",
                                                                      "renamed_dynamo"]
    m = json.load(open(out / "fallback_torchscript" / "manifest.json"))
    assert m["exporter"] == "torchscript" and "opset_version=17" in m["exporter_call"]
    assert m["exporters_tried"] and "fake dynamo exporter failure" in m["exporters_tried"][0]
    assert m["ops"] == ["Add", "Mul"] and m["opset"] == {"ai.onnx": 17}
    # outputs renamed by the exporter are mapped by position onto the graph's names
    m = json.load(open(out / "renamed_dynamo" / "manifest.json"))
    assert m["output_names"] == ["add_out", "mul_out"], m
    (b,) = m["bindings"]
    # the export is run with "onnxruntime" too (here onnx.reference behind its API): it agrees
    assert b["check"]["runtime"] == "onnxruntime fake" and b["check"]["rel_err"] < 1e-6, b
    assert "export_mismatch" not in b
    x = np.load(out / "renamed_dynamo" / b["inputs"]["pixel_values"])
    np.testing.assert_array_equal(np.load(out / "renamed_dynamo" / b["outputs"]["add_out"]), x + x)
    np.testing.assert_array_equal(np.load(out / "renamed_dynamo" / b["outputs"]["mul_out"]), x * x)
    # and graft runs what was written
    if os.path.exists(GRAFT):
        r = check(out, "--graft", GRAFT, "--devices", "sim", "--json", tmp_path / "r.json")
        assert r.returncode == 0, r.stdout + r.stderr
        res = json.load(open(tmp_path / "r.json"))
        assert len(res["results"]) == 3 and all(row["bits"] == "same" for row in res["results"])
        assert {c["case"] for c in res["not_exported"]} == {"fallback_dynamo", "nothing_dynamo",
                                                            "nothing_torchscript", "slow", "missing"}
        assert "timeout: " in r.stdout and "not_built: " in r.stdout
        assert "other exporter ok; not_exported: RuntimeError: fake dynamo" in r.stdout  # exported by the other


def test_make_records_an_export_onnxruntime_disagrees_with(tmp_path, fake_torch):
    out = tmp_path / "models"
    r = fake_torch("--out", str(out), "--models", "ok", FAKE_ORT_WRONG="1")
    assert r.returncode == 0 and "MISMATCH" in r.stdout, r.stdout + r.stderr
    (b,) = json.load(open(out / "ok_dynamo" / "manifest.json"))["bindings"]
    assert "onnxruntime fake differs from PyTorch" in b["export_mismatch"], b
    assert json.load(open(out / "index.json"))["cases"][0]["export_mismatch"] == ["static"]
    if os.path.exists(GRAFT):
        r = check(out, "--graft", GRAFT, "--devices", "sim")
        assert r.returncode == 0, r.stdout + r.stderr  # graft matches PyTorch; only the export check is off
        assert "graft is not to blame there" in r.stdout and "ok_dynamo static" in r.stdout


def test_make_both_exporters_with_fake_torch(tmp_path, fake_torch):
    out = tmp_path / "models"
    r = fake_torch("--out", str(out), "--models", "ok", "--both-exporters")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(d for d in os.listdir(out) if d != "index.json") == ["ok_dynamo", "ok_torchscript"]
