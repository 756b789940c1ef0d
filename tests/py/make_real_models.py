"""Exports real model architectures to ONNX the way users do, with PyTorch's
inputs and outputs beside each, for scripts/real-models-check.sh (which runs
them through graft on the GPU machine and compares with PyTorch; the checking
half is tests/py/check_real_models.py and needs no torch).

    python3 tests/py/make_real_models.py --out DIR [--models resnet50,vit,...] [--both-exporters]

Needs torch, transformers, onnx and numpy; torchvision and onnxruntime where
present. Nothing is downloaded: every model is built from a config here with
random weights (seed 0). Where a full configuration is not needed to exercise
the architecture's ops, a small one is used (2 transformer layers, narrow
widths); the op pattern (convolutions, depthwise convolutions, squeeze-excite,
layer scale, relative attention, run-time position ids, ...) is kept.
A model torchvision would build is built from transformers instead when
torchvision is missing (and the manifest says so), or reported as not built.

Each model is exported first with torch.onnx.export(dynamo=True, opset 18);
where that raises, with the TorchScript exporter (dynamo=False, opset 17).
--both-exporters exports with each (two cases per model). When onnxruntime is
importable the export is also run with it (graph optimisations off) and its
error against PyTorch recorded, so a wrong export is not blamed on graft.

Layout (the same as tests/data/onnx/dyn/, so the checker reads both):
    DIR/<case>/model.onnx              weights inline, per-node debug metadata dropped
    DIR/<case>/static/<name>.npy       the inputs and PyTorch's outputs
    DIR/<case>/manifest.json           names, files, exporter, config, versions
    DIR/index.json                     every model tried: exported or not, and why
A case is <model>_<exporter>. Every model runs in its own try block under a
time limit (--model-timeout), so one failure never stops the rest; index.json
is rewritten after each model, so a run killed part way keeps what it made.
Exit status 1 when some model has no exported case (the index says why).
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every config is built here; never reach for the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

REL_TOL = 1e-3  # f32 relative L2 error graft (and onnxruntime) must reach against PyTorch
BINDING = "static"  # the one binding of a static-shape case (a directory name in the case)
EXPORTERS = ("dynamo", "torchscript")
OPSET = {"dynamo": 18, "torchscript": 17}
# small transformer: enough to exercise every op of the architecture
TINY = {"hidden": 64, "heads": 4, "ffn": 128, "layers": 2, "vocab": 1000}


def rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if got.shape != ref.shape:
        return float("inf")
    n = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / (n if n else 1.0))


def first_line(e, limit=300):
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0][:limit] if lines else ''}"


# ==== models ===================================================================================
# Each builder returns a dict: module (forward(*inputs) -> tuple of tensors), inputs
# ({name: ndarray} in forward's order), outputs (names, in the order returned),
# source (what built it) and config (what the manifest records).

def _tv():
    """torchvision.models, or None when torchvision is not installed."""
    try:
        import torchvision.models as tvm
        return tvm
    except Exception:  # noqa: BLE001
        return None


def _wrap(inner, in_names, out_fn):
    """A module with an explicit positional signature of len(in_names) tensors (both
    exporters trace it; the ONNX inputs are named by input_names) returning a tuple
    of tensors picked by out_fn from the model's output."""
    import torch.nn as nn

    class Base(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def call(self, *args):
            return tuple(out_fn(self.m(**dict(zip(in_names, args)))))

    class Wrap1(Base):
        def forward(self, x0):
            return self.call(x0)

    class Wrap2(Base):
        def forward(self, x0, x1):
            return self.call(x0, x1)

    class Wrap3(Base):
        def forward(self, x0, x1, x2):
            return self.call(x0, x1, x2)

    return {1: Wrap1, 2: Wrap2, 3: Wrap3}[len(in_names)](inner)


def _image(rng, batch=1, size=224, channels=3):
    return {"pixel_values": rng.standard_normal((batch, channels, size, size)).astype(np.float32)}


def _tokens(rng, batch, seq, vocab, pad_id=None, low=3):
    """input_ids over [low, vocab) and an attention mask with right padding in the
    later rows (row 0 unpadded), the padded positions holding pad_id when given."""
    ids = rng.randint(low, vocab, size=(batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    for r in range(1, batch):
        pad = (r * seq) // (2 * batch)
        if pad:
            mask[r, seq - pad:] = 0
            if pad_id is not None:
                ids[r, seq - pad:] = pad_id
    return ids, mask


def build_resnet50(rng):
    tvm = _tv()
    x = _image(rng)
    if tvm is not None:
        m = tvm.resnet50(weights=None)
        return {"module": _plain(m), "inputs": {"input": x["pixel_values"]}, "outputs": ["logits"],
                "source": "torchvision.models.resnet50(weights=None)", "config": {"image": 224, "depth": 50}}
    import transformers as T
    cfg = T.ResNetConfig()  # the defaults are ResNet-50: bottleneck blocks, depths 3,4,6,3
    return {"module": _wrap(T.ResNetModel(cfg), ["pixel_values"], lambda o: (o.pooler_output,)),
            "inputs": x, "outputs": ["pooler_output"],
            "source": "transformers.ResNetModel(ResNetConfig()) (torchvision missing)",
            "config": {"image": 224, "depths": list(cfg.depths)}}


def build_mobilenet_v3(rng):
    tvm = _tv()
    x = _image(rng)
    if tvm is not None:
        # hardswish, hardsigmoid squeeze-excite, depthwise convolutions
        m = tvm.mobilenet_v3_small(weights=None)
        return {"module": _plain(m), "inputs": {"input": x["pixel_values"]}, "outputs": ["logits"],
                "source": "torchvision.models.mobilenet_v3_small(weights=None)", "config": {"image": 224}}
    import transformers as T
    if not hasattr(T, "MobileNetV2Model"):
        raise RuntimeError("not built: neither torchvision nor transformers.MobileNetV2Model is available")
    cfg = T.MobileNetV2Config(image_size=224)
    return {"module": _wrap(T.MobileNetV2Model(cfg), ["pixel_values"], lambda o: (o.pooler_output,)),
            "inputs": x, "outputs": ["pooler_output"],
            "source": "transformers.MobileNetV2Model(MobileNetV2Config()) (torchvision missing: V2, not V3)",
            "config": {"image": 224}}


def _plain(m):
    import torch.nn as nn

    class Plain(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.m = inner

        def forward(self, input):  # noqa: A002 -- the ONNX input's name
            return (self.m(input),)

    return Plain(m)


def build_convnext(rng):
    import transformers as T
    # 7x7 depthwise convolutions, channels-last LayerNorm, GELU, layer scale; narrow and shallow
    cfg = T.ConvNextConfig(num_channels=3, hidden_sizes=[32, 64, 128, 256], depths=[2, 2, 2, 2], image_size=224)
    return {"module": _wrap(T.ConvNextModel(cfg), ["pixel_values"],
                            lambda o: (o.last_hidden_state, o.pooler_output)),
            "inputs": _image(rng), "outputs": ["last_hidden_state", "pooler_output"],
            "source": "transformers.ConvNextModel", "config": cfg.to_diff_dict()}


def build_vit(rng):
    import transformers as T
    cfg = T.ViTConfig(hidden_size=192, num_hidden_layers=2, num_attention_heads=3, intermediate_size=768,
                      image_size=224, patch_size=16)
    return {"module": _wrap(T.ViTModel(cfg), ["pixel_values"], lambda o: (o.last_hidden_state, o.pooler_output)),
            "inputs": _image(rng), "outputs": ["last_hidden_state", "pooler_output"],
            "source": "transformers.ViTModel", "config": cfg.to_diff_dict()}


def build_whisper_encoder(rng):
    import transformers as T
    # a stride-1 and a stride-2 Conv1d with GELU, sinusoidal positions, pre-norm encoder layers;
    # the encoder wants exactly 2 * max_source_positions mel frames
    frames = 200
    cfg = T.WhisperConfig(d_model=TINY["hidden"], encoder_layers=TINY["layers"], decoder_layers=1,
                          encoder_attention_heads=TINY["heads"], decoder_attention_heads=TINY["heads"],
                          encoder_ffn_dim=TINY["ffn"], decoder_ffn_dim=TINY["ffn"], num_mel_bins=80,
                          max_source_positions=frames // 2, vocab_size=TINY["vocab"], max_target_positions=64,
                          # the defaults are GPT-2's token ids (50256, ...), past a tiny vocabulary
                          pad_token_id=1, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    enc = T.WhisperModel(cfg).get_encoder()
    x = {"input_features": rng.standard_normal((1, 80, frames)).astype(np.float32)}
    return {"module": _wrap(enc, ["input_features"], lambda o: (o.last_hidden_state,)),
            "inputs": x, "outputs": ["last_hidden_state"],
            "source": "transformers.WhisperModel(...).get_encoder()", "config": cfg.to_diff_dict()}


def build_clip_text(rng):
    import transformers as T
    # quick_gelu, causal mask, pooled at the end-of-text token (ArgMax over ids with eos_token_id 2)
    cfg = T.CLIPTextConfig(hidden_size=TINY["hidden"], intermediate_size=TINY["ffn"],
                           num_hidden_layers=TINY["layers"], num_attention_heads=TINY["heads"],
                           vocab_size=TINY["vocab"], max_position_embeddings=77, pad_token_id=1,
                           bos_token_id=TINY["vocab"] - 2, eos_token_id=TINY["vocab"] - 1)
    ids, mask = _tokens(rng, 2, 16, TINY["vocab"] - 2)
    ids[:, -1] = TINY["vocab"] - 1  # end of text ends each row; the pooler finds it (Equal, ArgMax)
    return {"module": _wrap(T.CLIPTextModel(cfg), ["input_ids", "attention_mask"],
                            lambda o: (o.last_hidden_state, o.pooler_output)),
            "inputs": {"input_ids": ids, "attention_mask": mask}, "outputs": ["last_hidden_state", "pooler_output"],
            "source": "transformers.CLIPTextModel", "config": cfg.to_diff_dict()}


def build_clip_vision(rng):
    import transformers as T
    cfg = T.CLIPVisionConfig(hidden_size=TINY["hidden"], intermediate_size=TINY["ffn"],
                             num_hidden_layers=TINY["layers"], num_attention_heads=TINY["heads"],
                             image_size=224, patch_size=32)
    return {"module": _wrap(T.CLIPVisionModel(cfg), ["pixel_values"],
                            lambda o: (o.last_hidden_state, o.pooler_output)),
            "inputs": _image(rng), "outputs": ["last_hidden_state", "pooler_output"],
            "source": "transformers.CLIPVisionModel", "config": cfg.to_diff_dict()}


def build_roberta(rng):
    import transformers as T
    # position ids computed at run time from the padding (a CumSum over the mask of ids != pad)
    cfg = T.RobertaConfig(hidden_size=TINY["hidden"], num_hidden_layers=TINY["layers"],
                          num_attention_heads=TINY["heads"], intermediate_size=TINY["ffn"],
                          vocab_size=TINY["vocab"], max_position_embeddings=66, pad_token_id=1)
    ids, mask = _tokens(rng, 2, 16, TINY["vocab"], pad_id=1)
    return {"module": _wrap(T.RobertaModel(cfg), ["input_ids", "attention_mask"],
                            lambda o: (o.last_hidden_state, o.pooler_output)),
            "inputs": {"input_ids": ids, "attention_mask": mask}, "outputs": ["last_hidden_state", "pooler_output"],
            "source": "transformers.RobertaModel", "config": cfg.to_diff_dict()}


def build_xlnet(rng):
    import transformers as T
    # two-stream relative attention written with einsum, relative positions from arange
    cfg = T.XLNetConfig(d_model=TINY["hidden"], n_layer=TINY["layers"], n_head=TINY["heads"],
                        d_inner=TINY["ffn"], vocab_size=TINY["vocab"], use_mems_eval=False)
    ids, mask = _tokens(rng, 2, 16, TINY["vocab"])
    return {"module": _wrap(T.XLNetModel(cfg), ["input_ids", "attention_mask"],
                            lambda o: (o.last_hidden_state,)),
            "inputs": {"input_ids": ids, "attention_mask": mask}, "outputs": ["last_hidden_state"],
            "source": "transformers.XLNetModel", "config": cfg.to_diff_dict()}


def build_deberta_v2(rng):
    import transformers as T
    # DeBERTa-v3 style: disentangled attention (c2p and p2c) over log-bucketed relative positions
    cfg = T.DebertaV2Config(hidden_size=TINY["hidden"], num_hidden_layers=TINY["layers"],
                            num_attention_heads=TINY["heads"], intermediate_size=TINY["ffn"],
                            vocab_size=TINY["vocab"], max_position_embeddings=128, relative_attention=True,
                            position_buckets=32, max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
                            norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
                            type_vocab_size=0)
    ids, mask = _tokens(rng, 2, 16, TINY["vocab"])
    return {"module": _wrap(T.DebertaV2Model(cfg), ["input_ids", "attention_mask"],
                            lambda o: (o.last_hidden_state,)),
            "inputs": {"input_ids": ids, "attention_mask": mask}, "outputs": ["last_hidden_state"],
            "source": "transformers.DebertaV2Model (v3-style config)", "config": cfg.to_diff_dict()}


def build_t5(rng):
    import transformers as T
    # encoder-decoder: relative position buckets, RMS norm, cross attention, causal decoder
    cfg = T.T5Config(d_model=TINY["hidden"], d_kv=TINY["hidden"] // TINY["heads"], d_ff=TINY["ffn"],
                     num_layers=TINY["layers"], num_decoder_layers=TINY["layers"], num_heads=TINY["heads"],
                     vocab_size=TINY["vocab"], relative_attention_num_buckets=32, use_cache=False,
                     decoder_start_token_id=0, pad_token_id=0)
    ids, mask = _tokens(rng, 2, 12, TINY["vocab"], pad_id=0)
    dec, _ = _tokens(rng, 2, 6, TINY["vocab"])
    dec[:, 0] = 0  # the decoder starts at the start token
    return {"module": _wrap(T.T5Model(cfg), ["input_ids", "attention_mask", "decoder_input_ids"],
                            lambda o: (o.last_hidden_state, o.encoder_last_hidden_state)),
            "inputs": {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec},
            "outputs": ["last_hidden_state", "encoder_last_hidden_state"],
            "source": "transformers.T5Model", "config": cfg.to_diff_dict()}


BUILDERS = {
    "resnet50": build_resnet50,
    "mobilenet_v3": build_mobilenet_v3,
    "convnext": build_convnext,
    "vit": build_vit,
    "whisper_encoder": build_whisper_encoder,
    "clip_text": build_clip_text,
    "clip_vision": build_clip_vision,
    "roberta": build_roberta,
    "xlnet": build_xlnet,
    "deberta_v2": build_deberta_v2,
    "t5": build_t5,
}


# ==== export ===================================================================================

def export(model, inputs, out_names, path, exporter):
    import torch
    args = tuple(torch.from_numpy(a) for a in inputs.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw = {"input_names": list(inputs), "output_names": out_names, "opset_version": OPSET[exporter]}
        if exporter == "dynamo":
            torch.onnx.export(model, args, path, dynamo=True, external_data=False, **kw)
        else:
            torch.onnx.export(model, args, path, dynamo=False, **kw)
    return (f"torch.onnx.export(dynamo={exporter == 'dynamo'}, opset_version={OPSET[exporter]})")


def tidy(proto):
    """Drops the per-node debugging metadata (stack traces); the graph is kept as exported."""
    for n in proto.graph.node:
        del n.metadata_props[:]
        n.doc_string = ""
    return proto


def graph_inputs(proto):
    inits = {i.name for i in proto.graph.initializer}
    return [i.name for i in proto.graph.input if i.name not in inits]


def ort_check(path, feeds, refs):
    """(runtime, {output: rel err} or error string), or (None, None) without onnxruntime."""
    try:
        import onnxruntime as ort
    except Exception:  # noqa: BLE001
        return None, None
    name = f"onnxruntime {ort.__version__}"
    try:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # run the graph as written
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        outs = sess.run(list(refs), feeds)
        return name, {k: rel_err(g, refs[k]) for k, g in zip(refs, outs)}
    except Exception as e:  # noqa: BLE001
        return name, first_line(e)


class ModelTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise ModelTimeout("the model's time limit ran out")


# ==== one case =================================================================================

def write_case(out_root, name, exporters, log, timeout):
    """Builds model `name`, exports it (exporters in order; the first that works, or each
    when len(exporters) > 1 and all are wanted) and writes its case(s). Returns index entries."""
    import onnx
    import torch

    entries = []
    t0 = time.time()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(max(1, int(timeout)))
    try:
        torch.manual_seed(0)
        b = BUILDERS[name](np.random.RandomState(1234))
        model = b["module"].eval()
        inputs = b["inputs"]
        with torch.no_grad():
            outs = model(*(torch.from_numpy(a) for a in inputs.values()))
        if len(outs) != len(b["outputs"]):
            raise RuntimeError(f"the module returns {len(outs)} outputs for {len(b['outputs'])} names")
        refs = {n: t.detach().numpy() for n, t in zip(b["outputs"], outs)}
        tried = []
        for exporter in exporters["order"]:
            case = f"{name}_{exporter}"
            case_dir = os.path.join(out_root, case)
            shutil.rmtree(case_dir, ignore_errors=True)
            te = time.time()
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "model.onnx")
                try:
                    call = export(model, inputs, list(refs), path, exporter)
                    proto = tidy(onnx.load(path))  # loads external data too, if any was written
                except ModelTimeout:
                    raise
                except Exception as e:  # noqa: BLE001
                    if time.time() - t0 >= timeout:  # an exporter that wrapped our ModelTimeout in its own error
                        raise ModelTimeout("the model's time limit ran out") from e
                    reason = first_line(e)
                    cause = e.__cause__ or e.__context__
                    if cause is not None:
                        reason += f" (caused by {first_line(cause)})"
                    log(f"{case}: NOT exported ({time.time() - te:.1f}s): {reason}")
                    if os.environ.get("REAL_MODELS_TRACEBACK"):
                        traceback.print_exc()
                    tried.append({"case": case, "model": name, "exporter": exporter, "status": "not_exported",
                                  "reason": reason, "source": b["source"]})
                    continue
            export_s = time.time() - te
            os.makedirs(os.path.join(case_dir, BINDING))
            model_path = os.path.join(case_dir, "model.onnx")
            onnx.save(proto, model_path)
            # map the reference arrays onto the graph's own names: by name where the exporter
            # kept them, else by position (an exporter may drop an input the graph does not use)
            g_in, g_out = graph_inputs(proto), [o.name for o in proto.graph.output]
            in_map = {n: n for n in inputs if n in g_in}
            if not in_map and len(g_in) == len(inputs):
                in_map = dict(zip(inputs, g_in))
            notes = [f"input {n} is not an input of the exported graph (dropped by the exporter)"
                     for n in inputs if n not in in_map]
            out_map = {n: n for n in refs if n in g_out}
            if len(out_map) < len(refs) and len(g_out) == len(refs):
                out_map = dict(zip(refs, g_out))
            notes += [f"output {n} has no graph output of that name" for n in refs if n not in out_map]
            files_in, files_out = {}, {}
            for n, a in inputs.items():
                if n in in_map:
                    f = f"{BINDING}/{in_map[n]}.npy"
                    np.save(os.path.join(case_dir, f), a)
                    files_in[in_map[n]] = f
            for n, a in refs.items():
                if n in out_map:
                    f = f"{BINDING}/{out_map[n]}.npy"
                    np.save(os.path.join(case_dir, f), a)
                    files_out[out_map[n]] = f
            feeds = {in_map[n]: a for n, a in inputs.items() if n in in_map}
            runtime, ort = ort_check(model_path, feeds, {out_map[n]: refs[n] for n in refs if n in out_map})
            binding = {"name": BINDING, "dims": {}, "inputs": files_in, "outputs": files_out}
            if runtime is not None:
                binding["check"] = {"runtime": runtime}
                if isinstance(ort, dict):
                    binding["check"]["rel_err"] = max(ort.values()) if ort else None
                    bad = {k: v for k, v in ort.items() if not v <= REL_TOL}
                    if bad:
                        binding["export_mismatch"] = f"{runtime} differs from PyTorch: " + ", ".join(
                            f"{k} {v:.3e}" for k, v in bad.items())
                else:
                    binding["check"]["error"] = ort
                    binding["export_mismatch"] = f"{runtime} cannot run the export: {ort}"
            manifest = {
                "case": case, "model": name, "exporter": exporter, "exporter_call": call,
                "exporters_tried": [t["exporter"] + ": " + t["reason"] for t in tried],
                "source": b["source"], "config": b["config"],
                "input_names": list(files_in), "output_names": list(files_out),
                "input_shapes": {k: list(inputs[n].shape) for n, k in in_map.items()},
                "output_shapes": {k: list(refs[n].shape) for n, k in out_map.items()},
                "opset": {o.domain or "ai.onnx": o.version for o in proto.opset_import},
                "ops": sorted({n.op_type for n in proto.graph.node}),
                "nodes": len(proto.graph.node),
                "bindings": [binding], "rel_tol": REL_TOL, "notes": notes,
                "export_s": round(export_s, 2),
                "versions": _versions(), "date": datetime.date.today().isoformat(),
            }
            with open(os.path.join(case_dir, "manifest.json"), "w") as f:
                json.dump(manifest, f, indent=1, default=str)
                f.write("\n")
            size = os.path.getsize(model_path)
            log(f"{case}: exported ({export_s:.1f}s, {size / 1e6:.1f} MB, {len(proto.graph.node)} nodes, "
                f"{len(manifest['ops'])} op types); "
                + (f"{runtime}: " + (f"max rel err {binding['check'].get('rel_err')}" if isinstance(ort, dict)
                                     else f"error {ort}") if runtime else "no onnxruntime")
                + (f"; MISMATCH: {binding['export_mismatch']}" if "export_mismatch" in binding else "")
                + (f"; notes: {notes}" if notes else ""))
            entries.extend(tried)
            tried = []
            entries.append({"case": case, "model": name, "exporter": exporter, "status": "exported",
                            "source": b["source"], "export_mismatch": [BINDING] if "export_mismatch" in binding
                            else []})
            if not exporters["all"]:
                break
        entries.extend(tried)
    except Exception as e:  # noqa: BLE001 -- one model's failure never stops the rest
        reason = first_line(e)
        status = "timeout" if isinstance(e, ModelTimeout) else ("not_built" if "not built" in reason
                                                                else "failed")
        log(f"{name}: {status} ({time.time() - t0:.1f}s): {reason}")
        if os.environ.get("REAL_MODELS_TRACEBACK"):
            traceback.print_exc()
        entries.append({"case": name, "model": name, "exporter": None, "status": status, "reason": reason})
    finally:
        signal.alarm(0)
    return entries


def _versions():
    v = {}
    for mod in ("torch", "transformers", "torchvision", "onnx", "onnxscript", "onnxruntime"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            v[mod] = None
    return v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the cases (created)")
    ap.add_argument("--models", default=",".join(BUILDERS), help="comma-separated subset of " + ",".join(BUILDERS))
    ap.add_argument("--both-exporters", action="store_true",
                    help="export with each exporter (two cases per model), not only the first that works")
    ap.add_argument("--model-timeout", type=float, default=90, help="seconds per model (build, export, check)")
    a = ap.parse_args(argv)
    names = [m for m in a.models.split(",") if m]
    unknown = [m for m in names if m not in BUILDERS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)} (known: {', '.join(BUILDERS)})")
    try:
        import torch
        import transformers  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as e:
        print(f"make_real_models: needs torch, transformers and onnx ({e})", file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    os.makedirs(a.out, exist_ok=True)
    exporters = {"order": list(EXPORTERS), "all": a.both_exporters}
    log = lambda s: print(s, flush=True)  # noqa: E731
    v = _versions()
    log("versions: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    cases = []
    for name in names:
        cases.extend(write_case(a.out, name, exporters, log, a.model_timeout))
        index = {"generator": "tests/py/make_real_models.py", "versions": v,
                 "date": datetime.date.today().isoformat(), "cases": cases}
        with open(os.path.join(a.out, "index.json"), "w") as f:
            json.dump(index, f, indent=1)
            f.write("\n")
    done = sum(c["status"] == "exported" for c in cases)
    lost = [n for n in names if not any(c["model"] == n and c["status"] == "exported" for c in cases)]
    log(f"exported {done} case(s) of {len(names)} model(s)" + (f"; none of: {', '.join(lost)}" if lost else ""))
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
