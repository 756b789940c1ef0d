"""GPT-2, BERT and the T5 encoder (Hugging Face transformers) through graft.

Two parts:

* test_fixture_*: the models saved in tests/data/onnx/hf/<case>/ (tiny
  configs exported by PyTorch's real exporters, with the input ids and
  PyTorch's output as .npy) run through `graft run --device sim` and are
  compared with PyTorch's output. Needs only numpy and the graft CLI, so CI
  (which has no torch) still checks what the real exporters write.
* test_torch_*: exports small configs (2 layers, hidden 64, vocab 1000) of
  the three models the way bench/workloads.py builds them (random weights,
  eager attention, forward(ids) -> last_hidden_state) with
  torch.onnx.export(dynamo=True, opset 18), the same without the exporter's
  ONNX optimizer (optimize=False: mask arithmetic left unfolded) and with the
  TorchScript exporter,
  runs them in graft and compares with PyTorch. Skipped, saying so, when
  torch or transformers are not importable.

Tolerance: relative error ||out - ref|| / ||ref|| <= 1e-4.

Regenerate the fixtures (needs torch + transformers + onnx):
    python3 tests/py/test_hf_models.py --write-fixtures
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "data", "onnx", "hf")
REL_TOL = 1e-4


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
pytestmark = pytest.mark.skipif(not os.path.exists(GRAFT),
                                reason=f"graft CLI not built ({GRAFT} missing): build the graft_cli target first")


def rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    n = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / (n if n else 1.0))


def graft_run(model_path, ids, out_dir):
    """Runs the model on the simulator; returns graft's `out`."""
    ids_path = os.path.join(out_dir, "ids_in.npy")
    np.save(ids_path, ids)
    r = subprocess.run([GRAFT, "run", model_path, "--input", f"ids={ids_path}", "--device", "sim",
                        "--output-dir", os.path.join(out_dir, "graft_out")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"graft run failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return np.load(os.path.join(out_dir, "graft_out", "out.npy"))


# ==== fixtures: no torch needed ==============================================================

def _fixture_cases():
    if not os.path.isdir(FIXTURES):
        return []
    return sorted(d for d in os.listdir(FIXTURES) if os.path.exists(os.path.join(FIXTURES, d, "model.onnx")))


def test_fixtures_present():
    # the set CI relies on: one case per model and exporter that works
    want = {f"{m}_{e}" for m in ("gpt2", "bert", "t5") for e in ("dynamo", "dynamo_noopt")}
    want |= {"bert_torchscript", "t5_torchscript"}
    missing = want - set(_fixture_cases())
    assert not missing, f"fixtures missing from {FIXTURES}: {sorted(missing)}"


@pytest.mark.parametrize("case", _fixture_cases())
def test_fixture(case, tmp_path):
    d = os.path.join(FIXTURES, case)
    ids = np.load(os.path.join(d, "ids.npy"))
    ref = np.load(os.path.join(d, "out.npy"))
    # copy so the model's external data file sits beside it, and nothing is written into the source tree
    for f in os.listdir(d):
        if f.startswith("model.onnx"):
            shutil.copy(os.path.join(d, f), tmp_path / f)
    got = graft_run(str(tmp_path / "model.onnx"), ids, str(tmp_path))
    assert got.shape == ref.shape, f"shape {got.shape} != PyTorch's {ref.shape}"
    err = rel_err(got, ref)
    assert err <= REL_TOL, f"{case}: relative error {err:.3e} > {REL_TOL}"


# ==== live export: needs torch + transformers ====================================================

def _torch_or_skip():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"torch/transformers not importable ({type(e).__name__}: {e}); CI runs the saved fixtures instead")
    import torch
    return torch


SMALL = {"layers": 2, "hidden": 64, "heads": 4, "ffn": 128, "vocab": 1000, "seq": 16}
TINY = {"layers": 2, "hidden": 32, "heads": 4, "ffn": 64, "vocab": 128, "seq": 8}


def build_model(name, size):
    """A model as bench/workloads.py's hf() builds it, at a small size: random
    weights (seed 0), eager attention, no cache, forward(ids) returning
    last_hidden_state; ids from generator seed 1."""
    import torch
    import torch.nn as nn
    import transformers as T

    s = size
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = T.GPT2Config(n_layer=s["layers"], n_embd=s["hidden"], n_head=s["heads"], vocab_size=s["vocab"],
                           n_positions=max(32, s["seq"]))
        m = T.GPT2Model(cfg)
    elif name == "bert":
        cfg = T.BertConfig(num_hidden_layers=s["layers"], hidden_size=s["hidden"], num_attention_heads=s["heads"],
                           intermediate_size=s["ffn"], vocab_size=s["vocab"], max_position_embeddings=max(32, s["seq"]))
        m = T.BertModel(cfg)
    else:
        cfg = T.T5Config(num_layers=s["layers"], num_decoder_layers=s["layers"], d_model=s["hidden"],
                         d_kv=s["hidden"] // s["heads"], num_heads=s["heads"], d_ff=s["ffn"], vocab_size=s["vocab"])
        m = T.T5EncoderModel(cfg)
    m.config.use_cache = False
    try:
        m.config.attn_implementation = "eager"
        m.config._attn_implementation = "eager"
    except Exception:  # noqa: BLE001
        pass

    class Wrap(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids).last_hidden_state

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (1, s["seq"]), generator=g)
    return Wrap(m).eval(), ids


def export(model, ids, path, exporter):
    import torch
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter in ("dynamo", "dynamo_noopt"):
            # dynamo_noopt: without the exporter's ONNX optimizer, so the mask and
            # position arithmetic (Range, CumSum, GatherND, Where, CastLike, ...)
            # and SplitToSequence reach graft unfolded, as older exporters wrote them
            torch.onnx.export(model, (ids,), path, input_names=["ids"], output_names=["out"], opset_version=18,
                              dynamo=True, external_data=True, verbose=False, optimize=exporter == "dynamo")
        else:
            torch.onnx.export(model, (ids,), path, input_names=["ids"], output_names=["out"], opset_version=18,
                              dynamo=False)


@pytest.mark.parametrize("exporter", ["dynamo", "dynamo_noopt", "torchscript"])
@pytest.mark.parametrize("name", ["gpt2", "bert", "t5"])
def test_torch_export(name, exporter, tmp_path):
    torch = _torch_or_skip()
    model, ids = build_model(name, SMALL)
    with torch.no_grad():
        ref = model(ids).numpy()
    path = str(tmp_path / "model.onnx")
    try:
        export(model, ids, path, exporter)
    except Exception as e:  # noqa: BLE001
        if exporter == "torchscript":
            # e.g. GPT-2's mask code uses aten::diff, which the TorchScript exporter lacks
            pytest.skip(f"the TorchScript exporter cannot export {name}: {str(e).splitlines()[0][:200]}")
        raise
    got = graft_run(path, ids.numpy(), str(tmp_path))
    assert got.shape == ref.shape
    err = rel_err(got, ref)
    assert err <= REL_TOL, f"{name}/{exporter}: relative error {err:.3e} > {REL_TOL}"


# ==== writing the fixtures ========================================================================

def write_fixtures():
    import onnx
    import tempfile
    import torch
    os.makedirs(FIXTURES, exist_ok=True)
    for name in ("gpt2", "bert", "t5"):
        for exporter in ("dynamo", "dynamo_noopt", "torchscript"):
            case = f"{name}_{exporter}"
            model, ids = build_model(name, TINY)
            with torch.no_grad():
                ref = model(ids).numpy()
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "model.onnx")
                try:
                    export(model, ids, path, exporter)
                except Exception as e:  # noqa: BLE001
                    print(f"{case}: not exported ({str(e).splitlines()[0][:160]})")
                    continue
                m = onnx.load(path)
                # keep the graph as exported; drop only the per-node debugging
                # metadata (stack traces), which is most of the file's size
                for n in m.graph.node:
                    del n.metadata_props[:]
                    n.doc_string = ""
                out_dir = os.path.join(FIXTURES, case)
                shutil.rmtree(out_dir, ignore_errors=True)
                os.makedirs(out_dir)
                if exporter.startswith("dynamo"):
                    # weights in an external file, as the dynamo exporter writes them
                    onnx.save(m, os.path.join(out_dir, "model.onnx"), save_as_external_data=True,
                              all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
                else:
                    onnx.save(m, os.path.join(out_dir, "model.onnx"))
            np.save(os.path.join(out_dir, "ids.npy"), ids.numpy())
            np.save(os.path.join(out_dir, "out.npy"), ref)
            size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
            print(f"{case}: {size / 1024:.0f} KB, ops {sorted({n.op_type for n in m.graph.node})}")


if __name__ == "__main__":
    if "--write-fixtures" in sys.argv:
        write_fixtures()
    else:
        sys.exit(pytest.main([__file__, "-q"] + sys.argv[1:]))
