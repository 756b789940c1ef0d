"""Autoregressive decoding (issue 12): graft against Hugging Face `generate` on the same weights,
in one process.

Models (random weights, seeded): GPT-2 small (124M, transformers.GPT2Config()) and a Llama-style
model of similar size (12 layers, hidden 768, 12 heads, 4 kv heads, intermediate 2048, vocab
32000). Precisions fp32 and bf16 (PyTorch: the model in bf16; graft: the fp32 export run with
precision="bf16", autocast-like). Prompt 32 tokens, 128 new tokens, batch 1 and 8, greedy and beam 4
(do_sample=False, min_new_tokens = max_new_tokens, no eos: every variant runs every step).

Variants:
  hf-eager           model.generate(...) with the default dynamic cache
  hf-static-compile  cache_implementation="static" and model.forward compiled with
                     torch.compile(mode="reduce-overhead", fullgraph=True) (what the Hugging Face
                     docs give for static-cache compilation)
  graft              the step exported to ONNX as tests/data/onnx/decode/make_decode_fixtures.py does
                     (one step, KV cache in and out, dynamic batch/seq/past), then graft.generate
                     through the Python package (state bound automatically, kept on the device)

Timing: wall clock around whole generate calls (synchronised), best of --repeats after --warmup
calls; tokens/s = batch * new tokens / time, ms/token = time / new tokens. graft also reports
its own prompt time and decode ms per token (gr_generate_stats). Memory: PyTorch variants
torch.cuda.max_memory_allocated (reset per variant); graft the device's free-memory drop from
before loading to after the runs (cuMemGetInfo via torch.cuda.mem_get_info) and its own
device_bytes / graph_bytes_peak. Ids: every variant's ids against hf-eager's; a mismatch is
reported (count and first position), never hidden; fp32 greedy must match on the GPU.

    python3 bench/decode.py --out bench/decode/RESULTS          # GPU machine, graft built in build-gpu
    python3 bench/decode.py --smoke                              # CPU, tiny models, the simulator

Writes RESULTS.json and RESULTS.md (a markdown table) and prints the table.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import traceback

import numpy as np
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "data", "onnx", "decode"))
import graft  # noqa: E402
from make_decode_fixtures import Step  # noqa: E402  (the export pattern of the fixtures)


# ==== models ============================================================================================
def make_model(name, smoke):
    """(model, n_layer, kv_heads, head_dim, vocab); weights seeded."""
    torch.manual_seed(0 if name == "gpt2" else 1)
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=211, n_positions=256) if smoke \
            else transformers.GPT2Config()
        cfg.pad_token_id = cfg.eos_token_id
        return transformers.GPT2LMHeadModel(cfg), cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head, cfg.vocab_size
    if smoke:
        cfg = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                                       intermediate_size=128, vocab_size=211, max_position_embeddings=256)
    else:
        cfg = transformers.LlamaConfig(num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=4, hidden_size=768,
                                       intermediate_size=2048, vocab_size=32000, max_position_embeddings=2048)
    cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id = 0, 1, 2
    hd = cfg.hidden_size // cfg.num_attention_heads
    return transformers.LlamaForCausalLM(cfg), cfg.num_hidden_layers, cfg.num_key_value_heads, hd, cfg.vocab_size


def export_step(model, n_layer, kv_heads, head_dim, vocab, path):
    """One decode step with the cache in and out (optimum's names), dynamic batch/seq/past."""
    step = Step(model, n_layer).eval()
    b, s, p = 2, 3, 5
    ids = torch.randint(0, vocab, (b, s))
    mask = torch.ones(b, p + s, dtype=torch.int64)
    pos = torch.arange(p, p + s).unsqueeze(0).expand(b, s)
    past = [torch.randn(b, kv_heads, p, head_dim) for _ in range(2 * n_layer)]
    past_names = [f"past_key_values.{i}.{kv}" for i in range(n_layer) for kv in ("key", "value")]
    present_names = [f"present.{i}.{kv}" for i in range(n_layer) for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for n in past_names:
        axes[n] = {0: "batch", 2: "past"}
    for n in present_names:
        axes[n] = {0: "batch", 2: "total"}
    with torch.no_grad():
        torch.onnx.export(step, (ids, mask, pos, *past), path, input_names=["input_ids", "attention_mask", "position_ids"] + past_names,
                          output_names=["logits"] + present_names, dynamic_axes=axes, opset_version=17, dynamo=False)


# ==== variants ==========================================================================================
def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def timed(fn, dev, warmup, repeats):
    out = None
    for _ in range(warmup):
        out = fn()
    sync(dev)
    best = float("inf")
    for _ in range(repeats):
        sync(dev)
        t0 = time.perf_counter()
        out = fn()
        sync(dev)
        best = min(best, time.perf_counter() - t0)
    return best, out


def hf_generate(model, prompt, new, beams, static):
    kw = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new, do_sample=False, num_beams=beams,
              eos_token_id=None, pad_token_id=model.config.pad_token_id, early_stopping=True, length_penalty=1.0)
    if static:
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        return model.generate(prompt, **kw)


def compare(ids, ref):
    if ref is None:
        return None
    if ids.shape != ref.shape:
        return {"match": False, "why": "shape %s vs %s" % (ids.shape, ref.shape)}
    diff = np.argwhere(ids != ref)
    return {"match": len(diff) == 0, "mismatches": int(len(diff)),
            "first": None if len(diff) == 0 else [int(diff[0][0]), int(diff[0][1])]}


def run_case(a, name, dtype, model32, onnx_path, vocab, batch, beams, dev):
    rows = []
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(3, vocab, (batch, a.prompt), generator=g)
    ref = None
    for v in a.variants.split(","):
        row = {"model": name, "dtype": dtype, "batch": batch, "decode": "greedy" if beams == 1 else "beam%d" % beams, "variant": v,
               "prompt": a.prompt, "new_tokens": a.new}
        try:
            if v.startswith("hf-"):
                model = model32 if dtype == "fp32" else model32.to(torch.bfloat16)
                model = model.to(dev)
                if v == "hf-static-compile":
                    torch._dynamo.reset()
                    model.generation_config.cache_implementation = "static"
                    orig = model.forward
                    model.forward = torch.compile(orig, mode="reduce-overhead", fullgraph=True)
                if dev == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                p = prompt.to(dev)
                secs, out = timed(lambda: hf_generate(model, p, a.new, beams, v == "hf-static-compile"), dev, a.warmup, a.repeats)
                if v == "hf-static-compile":
                    model.forward = orig
                    model.generation_config.cache_implementation = None
                ids = out.cpu().numpy()
                if dev == "cuda":
                    row["memory_mib"] = torch.cuda.max_memory_allocated() / 2**20
                model32.to("cpu").float()
            elif v == "graft":
                free0 = torch.cuda.mem_get_info()[0] if dev == "cuda" else None
                s = graft.load(onnx_path, device=a.graft_device, mode=a.graft_mode, max_rerecords=a.graft_max_rerecords,
                               precision=None if dtype == "fp32" else "bf16")
                pn = prompt.numpy()
                stats = {}

                def fn():
                    ids, st = s.generate(pn, a.new, beams=beams, return_stats=True)
                    stats.update(st)
                    return ids
                secs, ids = timed(fn, dev, a.warmup, a.repeats)
                rs = s.stats()
                row.update(graft_prompt_ms=stats["prompt_us"] / 1e3, graft_decode_ms_per_token=stats["ms_per_token"],
                           graft_plans=stats["plans"], graft_device_mib=rs["device_bytes"] / 2**20,
                           graft_graph_mib_peak=rs["graph_bytes_peak"] / 2**20, graft_captures=rs["captures"],
                           graft_device=s.device_name)
                if free0 is not None:
                    row["memory_mib"] = (free0 - torch.cuda.mem_get_info()[0]) / 2**20
                s.close()
            else:
                raise ValueError("unknown variant %r" % v)
            row["seconds"] = secs
            row["tokens_per_s"] = batch * a.new / secs
            row["ms_per_token"] = secs * 1e3 / a.new
            if v == "hf-eager":
                ref = ids
            row["ids_vs_hf_eager"] = compare(ids, ref) if v != "hf-eager" else {"match": True, "reference": True}
        except Exception as e:  # recorded, the run goes on
            row["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            if a.verbose:
                traceback.print_exc()
        rows.append(row)
        print(json.dumps(row), flush=True)
    # the speedup of graft over PyTorch's best tokens/s of this case
    torch_best = max([r.get("tokens_per_s", 0) for r in rows if r["variant"].startswith("hf-")] or [0])
    for r in rows:
        if r["variant"] == "graft" and torch_best and "tokens_per_s" in r:
            r["vs_best_pytorch"] = r["tokens_per_s"] / torch_best
    return rows


def table(rows):
    head = "| model | dtype | batch | decode | variant | tokens/s | ms/token | graft prompt ms | graft decode ms/token | memory MiB | ids vs HF eager | graft vs best PyTorch |"
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        ids = r.get("ids_vs_hf_eager")
        ids_s = "error" if "error" in r else ("reference" if ids and ids.get("reference") else
                                            ("match" if ids and ids["match"] else
                                             ("%s mismatches, first at %s" % (ids.get("mismatches"), ids.get("first")) if ids else "-")))

        def f(k, fmt="%.2f"):
            return fmt % r[k] if k in r and r[k] is not None else "-"
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r["dtype"], r["batch"], r["decode"], r["variant"] + (" (%s)" % r["error"] if "error" in r else ""),
            f("tokens_per_s", "%.1f"), f("ms_per_token", "%.3f"), f("graft_prompt_ms", "%.3f"),
            f("graft_decode_ms_per_token", "%.3f"), f("memory_mib", "%.1f"), ids_s, f("vs_best_pytorch", "%.2fx")))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny models, the simulator: checks the harness runs")
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--beams", default="1,4", help="1 = greedy, k = beam search of width k")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--variants", default="hf-eager,hf-static-compile,graft")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--graft-device", default="cuda")
    ap.add_argument("--graft-mode", default="graph")
    ap.add_argument("--graft-max-rerecords", type=int, default=100000)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default="decode", help="writes OUT.json and OUT.md")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    if a.smoke:
        for k, v in (("prompt", 4), ("new", 6), ("batches", "1,2"), ("repeats", 1), ("warmup", 0), ("graft_device", "sim"),
                     ("dtypes", "fp32")):
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
        if a.variants == ap.get_default("variants"):
            a.variants = "hf-eager,graft"
    dev = "cuda" if torch.cuda.is_available() and not a.smoke else "cpu"
    work = a.workdir or tempfile.mkdtemp(prefix="graft-decode-")
    rows = []
    for name in a.models.split(","):
        model, n_layer, kvh, hd, vocab = make_model(name, a.smoke)
        model.eval()
        onnx_path = os.path.join(work, name + ".onnx")
        if "graft" in a.variants:
            export_step(model, n_layer, kvh, hd, vocab, onnx_path)
        for dtype in a.dtypes.split(","):
            for batch in [int(x) for x in a.batches.split(",")]:
                for beams in [int(x) for x in a.beams.split(",")]:
                    rows += run_case(a, name, dtype, model, onnx_path, vocab, batch, beams, dev)
    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
            "smoke": a.smoke, "prompt": a.prompt, "new_tokens": a.new}
    with open(a.out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    md = "# Decode: graft vs Hugging Face generate (%s)\n\n%s\n\n%s" % (meta["device"], json.dumps(meta), table(rows))
    with open(a.out + ".md", "w") as f:
        f.write(md)
    print(md)
    bad = [r for r in rows if r["dtype"] == "fp32" and r["decode"] == "greedy" and r.get("ids_vs_hf_eager") and
           not r["ids_vs_hf_eager"]["match"]]
    if bad:
        print("fp32 greedy ids differ from HF eager in %d runs (see the table)" % len(bad))
    return 0


if __name__ == "__main__":
    sys.exit(main())
