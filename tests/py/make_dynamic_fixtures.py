"""Writes the dynamic-shape fixtures in tests/data/onnx/dyn/: tiny GPT-2, BERT
and Llama models exported by PyTorch's two ONNX exporters with symbolic batch
and sequence axes, plus inputs and PyTorch's outputs at several bindings of
those axes. tests/py/test_dynamic_models.py runs them through graft (it needs
no torch).

    python3 tests/py/make_dynamic_fixtures.py --out tests/data/onnx/dyn [--models gpt2,bert,llama]

Needs torch, transformers, onnx and numpy, and nothing from the network (the
configs are built here, the weights are random with a fixed seed). When
onnxruntime is importable each export is also run with it at every binding and
its error against PyTorch goes into the manifest; a binding where even
onnxruntime disagrees with PyTorch is kept but marked (the export, not graft,
is wrong there), so the graft test skips it saying why.

Layout, per case <model>_<exporter> (exporter: dynamo or torchscript):
    <case>/model.onnx           weights inline; per-node debug metadata dropped
    <case>/<binding>/<name>.npy the inputs and PyTorch's outputs of one binding
    <case>/manifest.json        symbols, export ranges, bindings, names, versions
and index.json beside the cases: every case tried, exported or not and why.
"""
import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import traceback
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the configs are local; never reach for the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

MODELS = ("gpt2", "bert", "llama")
EXPORTERS = ("dynamo", "torchscript")
SIZE = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 1000, "max_seq": 64}
MAX_BATCH = 8
# (batch, seq): the smallest, the largest sequence, odd lengths between, several
# rows, and the largest batch the export allows
BINDINGS = [(1, 1), (1, 5), (1, 17), (1, SIZE["max_seq"]), (3, 7), (MAX_BATCH, 3)]
EXAMPLE = (2, 8)  # the traced example: both axes >= 2, so neither is specialised to 0 or 1
REL_TOL = 1e-4
# where a known export failure comes from, appended to the recorded reason
KNOWN_CAUSES = {
    "aten::diff": "transformers' causal-mask code (masking_utils.find_packed_sequence_indices) calls torch.diff "
                  "on the position ids to detect packed sequences; the TorchScript exporter has no ONNX "
                  "symbolic for aten::diff",
}
OUTPUT = "last_hidden_state"


def rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return float("inf")
    n = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / (n if n else 1.0))


# ==== models =================================================================================

def build_model(name):
    """Returns (module, input names). forward(*inputs) -> last_hidden_state [batch, seq, hidden].
    Random weights from seed 0, eager attention, no KV cache, fp32."""
    import torch
    import torch.nn as nn
    import transformers as T

    s = SIZE
    torch.manual_seed(0)
    common = {"attn_implementation": "eager", "use_cache": False}
    if name == "gpt2":
        cfg = T.GPT2Config(n_layer=s["layers"], n_embd=s["hidden"], n_head=s["heads"], n_inner=s["ffn"],
                           vocab_size=s["vocab"], n_positions=s["max_seq"], bos_token_id=0, eos_token_id=0,
                           **common)
        inner, inputs = T.GPT2Model(cfg), ["input_ids"]
    elif name == "bert":
        cfg = T.BertConfig(num_hidden_layers=s["layers"], hidden_size=s["hidden"], num_attention_heads=s["heads"],
                           intermediate_size=s["ffn"], vocab_size=s["vocab"], max_position_embeddings=s["max_seq"],
                           **common)
        inner, inputs = T.BertModel(cfg, add_pooling_layer=False), ["input_ids", "attention_mask"]
    elif name == "llama":
        # RoPE, RMSNorm, SiLU-gated MLP, grouped-query attention (4 query heads
        # share 2 key/value heads), causal mask built inside the model
        cfg = T.LlamaConfig(num_hidden_layers=s["layers"], hidden_size=s["hidden"], num_attention_heads=s["heads"],
                            num_key_value_heads=s["kv_heads"], intermediate_size=s["ffn"], vocab_size=s["vocab"],
                            max_position_embeddings=s["max_seq"], bos_token_id=0, eos_token_id=0, pad_token_id=0,
                            **common)
        inner, inputs = T.LlamaModel(cfg), ["input_ids"]
    else:
        raise ValueError(f"unknown model {name!r} (known: {', '.join(MODELS)})")
    # older transformers read the attention implementation from this attribute only
    try:
        inner.config._attn_implementation = "eager"
    except Exception:  # noqa: BLE001
        pass

    # explicit positional signatures: both exporters name the ONNX inputs after them
    if inputs == ["input_ids"]:
        class Wrap(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids):
                return self.m(input_ids=input_ids, use_cache=False).last_hidden_state
    else:
        class Wrap(nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return Wrap(inner).eval(), inputs


def make_inputs(names, batch, seq, seed):
    """input_ids uniform over the vocabulary; attention_mask 1 with right
    padding that grows with the row (row 0 of a short sequence is unpadded),
    so a mask the export baked in as all-ones shows up."""
    rng = np.random.RandomState(seed)
    out = {}
    for n in names:
        if n == "input_ids":
            out[n] = rng.randint(0, SIZE["vocab"], size=(batch, seq)).astype(np.int64)
        elif n == "attention_mask":
            m = np.ones((batch, seq), np.int64)
            for r in range(batch):
                pad = ((r + 1) * seq) // (2 * (batch + 1))
                if pad:
                    m[r, seq - pad:] = 0
            out[n] = m
        else:
            raise ValueError(n)
    return out


# ==== export ==================================================================================

def export(model, names, example, path, exporter):
    """Exports with symbolic axis 0 'batch' and axis 1 'seq' on every input.
    Returns {symbol: [min, max]} from torch.export's range constraints (dynamo)
    or None (TorchScript states none)."""
    import torch
    args = tuple(torch.from_numpy(example[n]) for n in names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            from torch.export import Dim
            batch, seq = Dim("batch", max=MAX_BATCH), Dim("seq", max=SIZE["max_seq"])
            prog = torch.onnx.export(model, args, path, input_names=names, output_names=[OUTPUT],
                                     opset_version=18, dynamo=True, external_data=False,
                                     dynamic_shapes={n: {0: batch, 1: seq} for n in names})
            return export_ranges(prog, names)
        torch.onnx.export(model, args, path, input_names=names, output_names=[OUTPUT], opset_version=18,
                          dynamo=False, dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
        return None


def export_ranges(prog, names):
    """The value range torch.export proved for each named axis (None where it cannot be read)."""
    try:
        ep = prog.exported_program
        placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
        user = [p for p in placeholders if p.name in names] or placeholders[-len(names):]
        ranges = {}
        for p in user:
            shape = p.meta["val"].shape
            for axis, sym in ((0, "batch"), (1, "seq")):
                expr = shape[axis].node.expr
                vr = ep.range_constraints.get(expr)
                if vr is not None:
                    hi = vr.upper
                    ranges[sym] = [int(vr.lower), None if not hi.is_finite else int(hi)]
        return ranges or None
    except Exception:  # noqa: BLE001 -- informational only; older torch keeps these elsewhere
        return None


def tidy(model_proto):
    """Drops the per-node debugging metadata (stack traces), which is most of
    a dynamo export's size; the graph itself is kept exactly as exported."""
    for n in model_proto.graph.node:
        del n.metadata_props[:]
        n.doc_string = ""
    return model_proto


def dim_params(value_infos):
    out = {}
    for v in value_infos:
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = [d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else None)
                           for d in t.shape.dim]
    return out


# ==== checking the export with onnxruntime (optional) ============================================

def ort_session(path):
    try:
        import onnxruntime as ort
    except Exception:  # noqa: BLE001
        return None, None
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # run the graph as written
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]), f"onnxruntime {ort.__version__}"


# ==== one case =================================================================================

def write_case(out_root, name, exporter, log):
    import onnx
    import torch
    import transformers

    case = f"{name}_{exporter}"
    model, names = build_model(name)
    example = make_inputs(names, *EXAMPLE, seed=12345)
    case_dir = os.path.join(out_root, case)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        try:
            ranges = export(model, names, example, path, exporter)
            proto = tidy(onnx.load(path))  # loads external data too, if the exporter wrote any
        except Exception as e:  # noqa: BLE001
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            reason = f"{type(e).__name__}: {lines[0][:300] if lines else ''}"
            # the innermost cause is usually the informative line
            cause = e.__cause__ or e.__context__
            if cause is not None:
                cl = [ln for ln in str(cause).strip().splitlines() if ln.strip()]
                reason += f" (caused by {type(cause).__name__}: {cl[0][:300] if cl else ''})"
            for needle, why in KNOWN_CAUSES.items():
                if needle in reason:
                    reason += f" [{why}]"
            log(f"{case}: NOT exported: {reason}")
            if os.environ.get("DYN_FIXTURES_TRACEBACK"):
                traceback.print_exc()
            shutil.rmtree(case_dir, ignore_errors=True)
            return {"case": case, "model": name, "exporter": exporter, "status": "not_exported", "reason": reason}

    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    model_path = os.path.join(case_dir, "model.onnx")
    onnx.save(proto, model_path)
    onnx.checker.check_model(model_path)

    in_dims = dim_params(proto.graph.input)
    out_dims = dim_params(proto.graph.output)
    symbols = sorted({d for dims in in_dims.values() for d in dims if isinstance(d, str)})
    sess, checker = ort_session(model_path)
    bindings = []
    for batch, seq in BINDINGS:
        bname = f"b{batch}_s{seq}"
        feeds = make_inputs(names, batch, seq, seed=1000 * batch + seq)
        with torch.no_grad():
            ref = model(*(torch.from_numpy(feeds[n]) for n in names)).numpy()
        os.makedirs(os.path.join(case_dir, bname))
        for n, a in feeds.items():
            np.save(os.path.join(case_dir, bname, f"{n}.npy"), a)
        np.save(os.path.join(case_dir, bname, f"{OUTPUT}.npy"), ref)
        entry = {"name": bname, "dims": {"batch": batch, "seq": seq},
                 "inputs": {n: f"{bname}/{n}.npy" for n in names},
                 "outputs": {OUTPUT: f"{bname}/{OUTPUT}.npy"}}
        if sess is not None:
            try:
                (got,) = sess.run([OUTPUT], feeds)
                err = rel_err(got, ref)
                entry["check"] = {"runtime": checker, "rel_err": err}
                if not err <= REL_TOL:
                    entry["export_mismatch"] = (f"{checker} differs from PyTorch by {err:.3e} at this binding: "
                                                f"the export does not hold at batch={batch} seq={seq}")
            except Exception as e:  # noqa: BLE001
                entry["check"] = {"runtime": checker, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
                entry["export_mismatch"] = f"{checker} cannot run the export at batch={batch} seq={seq}: " \
                                           f"{str(e).splitlines()[0][:200]}"
        bindings.append(entry)

    manifest = {
        "case": case,
        "model": name,
        "exporter": exporter,
        "exporter_call": ("torch.onnx.export(dynamo=True, dynamic_shapes={input: {0: Dim('batch', max=%d), "
                          "1: Dim('seq', max=%d)}}, opset_version=18)" % (MAX_BATCH, SIZE["max_seq"]))
        if exporter == "dynamo" else
        "torch.onnx.export(dynamo=False, dynamic_axes={input: {0: 'batch', 1: 'seq'}}, opset_version=18)",
        "config": dict(SIZE, attention="eager", dtype="float32", seed=0),
        "example_dims": {"batch": EXAMPLE[0], "seq": EXAMPLE[1]},
        "symbols": symbols,
        "export_ranges": ranges,
        "input_names": names,
        "output_names": [o.name for o in proto.graph.output],
        "input_dims": in_dims,
        "output_dims": out_dims,
        "opset": {o.domain or "ai.onnx": o.version for o in proto.opset_import},
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "bindings": bindings,
        "rel_tol": REL_TOL,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "date": datetime.date.today().isoformat(),
    }
    with open(os.path.join(case_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=False)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(case_dir) for fn in fns)
    bad = [b["name"] for b in bindings if "export_mismatch" in b]
    errs = [b["check"].get("rel_err") for b in bindings if "check" in b]
    log(f"{case}: exported, {size / 1024:.0f} KB, symbols {symbols}, ranges {ranges}, "
        f"{checker or 'no onnxruntime'} max rel err {max(errs) if errs else 'n/a'}"
        + (f", MISMATCH at {bad}" if bad else ""))
    return {"case": case, "model": name, "exporter": exporter, "status": "exported",
            "export_mismatch": bad}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  "data", "onnx", "dyn"))
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--exporters", default=",".join(EXPORTERS), help="comma-separated subset of " + ",".join(EXPORTERS))
    a = ap.parse_args(argv)
    import torch
    import transformers
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    os.makedirs(a.out, exist_ok=True)
    index_path = os.path.join(a.out, "index.json")
    index = {"cases": []}
    if os.path.exists(index_path):  # a partial regeneration keeps the other cases' entries
        with open(index_path) as f:
            index = json.load(f)
    cases = {c["case"]: c for c in index.get("cases", [])}
    for name in a.models.split(","):
        for exporter in a.exporters.split(","):
            cases[f"{name}_{exporter}"] = write_case(a.out, name, exporter, lambda s: print(s, flush=True))
    index = {"generator": "tests/py/make_dynamic_fixtures.py", "torch": torch.__version__,
             "transformers": transformers.__version__, "date": datetime.date.today().isoformat(),
             "cases": [cases[k] for k in sorted(cases)]}
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
