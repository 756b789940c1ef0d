"""Autoregressive decoding (issue 12): graft against Hugging Face `generate` on the same weights.

Models (random weights, seeded): GPT-2 small (124M, transformers.GPT2Config()) and a Llama-style
model of similar size (12 layers, hidden 768, 12 heads, 4 kv heads, intermediate 2048, vocab
32000). Precisions fp32 and bf16 (PyTorch: the model in bf16; graft: the fp32 export run with
precision="bf16", autocast-like). Prompt 32 tokens, 128 new tokens, batch 1 and 8, greedy and beam 4
(do_sample=False, min_new_tokens = max_new_tokens, no eos: every variant runs every step).

Variants, EACH IN ITS OWN PROCESS (a failure, a crash or a poisoned CUDA state of one variant cannot
touch the others; a variant past --timeout is killed and recorded as such):
  hf-eager           model.generate(...) with the default dynamic cache
  hf-static-compile  cache_implementation="static" with Hugging Face's own compilation of the
                     decode step: generation_config.compile_config = CompileConfig(fullgraph=True,
                     mode="reduce-overhead"), which generate() applies to every step after the
                     prompt (transformers' documented static-cache + torch.compile path; it copies
                     the logits out of the CUDA graph's output itself). An earlier version compiled
                     model.forward by hand as well: generate then compiled the already-compiled
                     forward a second time, and the nested reduce-overhead crashed (exit -11).
  graft              the step exported to ONNX as tests/data/onnx/decode/make_decode_fixtures.py does
                     (one step, KV cache in and out, dynamic batch/seq/past; exported once per model
                     in a process of its own), then graft.generate through the Python package
                     (engine auto: greedy runs the decode loop on the device, --steps-per-launch)
  graft-reference    the same with engine="reference" (a plan per position; not in the default list)

Sampling (--sample, beams 1): Hugging Face generate(do_sample=True, top_k=--top-k, top_p=--top-p,
temperature 1) after torch.manual_seed(--seed) against graft.generate(sample=True, the same top_k,
top_p, seed), which samples on the device inside the decode loop (the sample op). The two RNGs
differ, so sampled ids are not compared across frameworks (the table says "sampled").

Timing: wall clock around whole generate calls (synchronised), best of --repeats after --warmup
calls; tokens/s = batch * new tokens / time, ms/token = time / new tokens. graft also reports its
own prompt time, decode ms per token and device-loop launches (gr_generate_stats). Memory, every
variant: the device's free-memory drop (torch.cuda.mem_get_info) from before the model is loaded
to after the runs (`memory_mib`, the same measure for every variant); PyTorch variants also
torch.cuda.max_memory_allocated (`torch_peak_mib`), graft its session's device_bytes. Ids: every
variant's ids against hf-eager's; a mismatch is reported (count and first position), never hidden;
fp32 greedy must match on the GPU.

    python3 bench/decode.py --out bench/decode/RESULTS          # GPU machine, graft built in build-gpu
    python3 bench/decode.py --device cpu --smoke                 # CPU: tiny models, PyTorch on the CPU,
                                                                 # graft on the simulator (needs torch)
    python3 bench/decode.py --dry-run --out /tmp/d               # no torch: the harness itself (processes,
                                                                 # ids comparison, table) on the test
                                                                 # fixtures, graft on the simulator,
                                                                 # HF's ids replayed from the fixtures

Writes OUT.json and OUT.md (a markdown table) and prints the table.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "data", "onnx", "decode")
sys.path.insert(0, os.path.join(ROOT, "python"))


# ==== models (torch; imported in the worker processes only) =============================================
def make_model(name, smoke):
    """(model, n_layer, kv_heads, head_dim, vocab); weights seeded."""
    import torch
    import transformers
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


def vocab_of(name, smoke):
    return 211 if smoke else (50257 if name == "gpt2" else 32000)


def export_step(model, n_layer, kv_heads, head_dim, vocab, path):
    """One decode step with the cache in and out (optimum's names), dynamic batch/seq/past."""
    import torch
    sys.path.insert(0, FIXTURES)
    from make_decode_fixtures import Step  # the export pattern of the fixtures
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


def make_prompt(case):
    """The prompt of a case: seeded ids (torch runs), the fixture's rows (dry run)."""
    if case["dry_run"]:
        p = np.load(os.path.join(FIXTURES, case["model"], "prompt.npy"))
        return np.ascontiguousarray(np.resize(p, (case["batch"], p.shape[1])))
    rng = np.random.default_rng(7)
    return rng.integers(3, vocab_of(case["model"], case["smoke"]), size=(case["batch"], case["prompt"]), dtype=np.int64)


# ==== one variant, in a worker process ===================================================================
def timed(fn, sync, warmup, repeats):
    out = None
    for _ in range(warmup):
        out = fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best, out


def hf_generate(model, prompt, new, beams, static, sample=None):
    import torch
    kw = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new, do_sample=False, num_beams=beams,
              eos_token_id=None, pad_token_id=model.config.pad_token_id, early_stopping=True, length_penalty=1.0)
    if sample:
        kw.update(do_sample=True, top_k=sample["top_k"], top_p=sample["top_p"], temperature=1.0)
        torch.manual_seed(sample["seed"])
    if static:
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        return model.generate(prompt, **kw)


def static_compile(model):
    """Hugging Face's static cache with its own torch.compile(mode="reduce-overhead") of the decode
    step (generate compiles model.__call__ once and replays its CUDA graphs). model.forward must
    stay uncompiled: a forward compiled by hand gets compiled again inside generate's compiled
    call, and that nested reduce-overhead crashes."""
    from transformers import CompileConfig
    model.generation_config.cache_implementation = "static"
    model.generation_config.compile_config = CompileConfig(fullgraph=True, mode="reduce-overhead")


def run_hf(case, prompt):
    import torch
    dev = case["device"]
    cuda = dev == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    row = {}
    free0 = torch.cuda.mem_get_info()[0] if cuda else None
    model, _, _, _, _ = make_model(case["model"], case["smoke"])
    model = model.eval().to(torch.float32 if case["dtype"] == "fp32" else torch.bfloat16).to(dev)
    static = case["variant"] == "hf-static-compile"
    if static:
        static_compile(model)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    p = torch.from_numpy(prompt).to(dev)
    smp = case.get("sample")
    secs, out = timed(lambda: hf_generate(model, p, case["new"], case["beams"], static, smp), sync, case["warmup"], case["repeats"])
    if cuda:
        row["torch_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        row["memory_mib"] = (free0 - torch.cuda.mem_get_info()[0]) / 2**20
    return secs, out.cpu().numpy(), row


def run_graft(case, prompt):
    import graft
    cuda = case["graft_device"] == "cuda"
    torch = None
    if cuda:
        import torch
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    free0 = torch.cuda.mem_get_info()[0] if cuda else None
    s = graft.load(case["onnx"], device=case["graft_device"], mode=case["graft_mode"], max_rerecords=case["graft_max_rerecords"],
                   precision=None if case["dtype"] == "fp32" else "bf16")
    stats = {}
    engine = "reference" if case["variant"] == "graft-reference" else "auto"

    smp = case.get("sample")
    extra = dict(sample=True, top_k=smp["top_k"], top_p=smp["top_p"], seed=smp["seed"]) if smp else {}

    def fn():
        ids, st = s.generate(prompt, case["new"], beams=case["beams"], engine=engine, steps_per_launch=case["steps_per_launch"],
                             return_stats=True, **extra)
        stats.update(st)
        return ids
    secs, ids = timed(fn, sync, case["warmup"], case["repeats"])
    rs = s.stats()
    row = dict(graft_prompt_ms=stats["prompt_us"] / 1e3, graft_decode_ms_per_token=stats["ms_per_token"], graft_plans=stats["plans"],
               graft_engine={1: "reference", 2: "rewritten"}.get(stats["engine"], stats["engine"]),
               graft_launches=stats["launches"], graft_device_mib=rs["device_bytes"] / 2**20, graft_device=s.device_name)
    if cuda:
        row["memory_mib"] = (free0 - torch.cuda.mem_get_info()[0]) / 2**20
    s.close()
    return secs, ids, row


def replay_hf(case, prompt):
    """Dry run: HF's ids recorded with the fixtures (rows are independent: a batch repeats them)."""
    ref = np.load(os.path.join(FIXTURES, case["model"], "greedy.npy" if case["beams"] == 1 else "beam4.npy"))
    if case["beams"] not in (1, 4):
        raise ValueError("dry run: the fixtures hold HF's ids for greedy and beam 4 only")
    return None, np.ascontiguousarray(np.resize(ref, (case["batch"], ref.shape[1]))), {"replayed": True}


def worker(case_path):
    with open(case_path) as f:
        case = json.load(f)
    if case.get("fail"):  # --dry-run-fail: proves that one variant's crash leaves the others alone
        os._exit(3)
    if case["variant"] == "export":
        import torch  # noqa: F401
        model, n_layer, kvh, hd, vocab = make_model(case["model"], case["smoke"])
        export_step(model.eval(), n_layer, kvh, hd, vocab, case["onnx"])
        return 0
    prompt = make_prompt(case)
    if case["variant"].startswith("hf-"):
        secs, ids, row = replay_hf(case, prompt) if case["dry_run"] else run_hf(case, prompt)
    elif case["variant"] in ("graft", "graft-reference"):
        secs, ids, row = run_graft(case, prompt)
    else:
        raise ValueError("unknown variant %r" % case["variant"])
    np.save(case["ids_path"], ids)
    if secs is not None:
        row.update(seconds=secs, tokens_per_s=case["batch"] * case["new"] / secs, ms_per_token=secs * 1e3 / case["new"])
    print("ROW " + json.dumps(row), flush=True)
    return 0


# ==== the driver ==============================================================================================
def spawn(case, work, timeout, verbose):
    """Runs one case in a fresh process; returns (row fields, error or None)."""
    path = os.path.join(work, "case-%d.json" % spawn.n)
    spawn.n += 1
    with open(path, "w") as f:
        json.dump(case, f)
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", path], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {}, "timeout after %ds" % timeout
    if verbose and proc.stderr:
        sys.stderr.write(proc.stderr)
    rows = [line[4:] for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    if proc.returncode != 0 or (case["variant"] != "export" and not rows):
        tail = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        return {}, "exit %d%s" % (proc.returncode, (": " + tail[-1][:300]) if tail else "")
    return (json.loads(rows[-1]) if rows else {}), None


spawn.n = 0


def compare(ids, ref):
    if ref is None:
        return None
    if ids.shape != ref.shape:
        return {"match": False, "why": "shape %s vs %s" % (ids.shape, ref.shape)}
    diff = np.argwhere(ids != ref)
    return {"match": len(diff) == 0, "mismatches": int(len(diff)),
            "first": None if len(diff) == 0 else [int(diff[0][0]), int(diff[0][1])]}


def run_case(a, name, dtype, onnx_path, batch, beams, work):
    rows = []
    ref = None
    sample = dict(top_k=a.top_k, top_p=a.top_p, seed=a.seed) if a.sample else None
    decode = ("sample k%d p%g" % (a.top_k, a.top_p)) if a.sample else "greedy" if beams == 1 else "beam%d" % beams
    for v in a.variants.split(","):
        row = {"model": name, "dtype": dtype, "batch": batch, "decode": decode, "variant": v, "prompt": a.prompt, "new_tokens": a.new}
        ids_path = os.path.join(work, "ids-%d.npy" % spawn.n)
        case = dict(model=name, dtype=dtype, batch=batch, beams=beams, variant=v, prompt=a.prompt, new=a.new, warmup=a.warmup,
                    repeats=a.repeats, device=a.device, smoke=a.smoke, dry_run=a.dry_run, onnx=onnx_path, ids_path=ids_path,
                    graft_device=a.graft_device, graft_mode=a.graft_mode, graft_max_rerecords=a.graft_max_rerecords,
                    steps_per_launch=a.steps_per_launch, fail=v in a.dry_run_fail.split(","), sample=sample)
        if onnx_path is None and v.startswith("graft"):
            fields, err = {}, "no ONNX export of %s (its export failed)" % name
        else:
            fields, err = spawn(case, work, a.timeout, a.verbose)
        row.update(fields)
        if err:
            row["error"] = err
        else:
            ids = np.load(ids_path)
            if v == "hf-eager":
                ref = ids
            row["ids_vs_hf_eager"] = ({"match": None, "sampled": True} if sample else
                                      compare(ids, ref) if v != "hf-eager" else {"match": True, "reference": True})
        rows.append(row)
        print(json.dumps(row), flush=True)
    # the speedup of graft over PyTorch's best tokens/s of this case
    torch_best = max([r.get("tokens_per_s", 0) for r in rows if r["variant"].startswith("hf-")] or [0])
    for r in rows:
        if r["variant"].startswith("graft") and torch_best and "tokens_per_s" in r:
            r["vs_best_pytorch"] = r["tokens_per_s"] / torch_best
    return rows


def table(rows):
    head = ("| model | dtype | batch | decode | variant | tokens/s | ms/token | graft prompt ms | graft decode ms/token | "
            "graft launches | memory MiB | ids vs HF eager | graft vs best PyTorch |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        ids = r.get("ids_vs_hf_eager")
        ids_s = "error" if "error" in r else ("sampled" if ids and ids.get("sampled") else "reference" if ids and ids.get("reference") else
                                            ("match" if ids and ids["match"] else
                                             ("%s mismatches, first at %s" % (ids.get("mismatches"), ids.get("first")) if ids else "-")))

        def f(k, fmt="%.2f"):
            return fmt % r[k] if k in r and r[k] is not None else "-"
        variant = r["variant"] + (" (%s)" % r["error"] if "error" in r else "") + (" (replayed)" if r.get("replayed") else "")
        lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r["dtype"], r["batch"], r["decode"], variant, f("tokens_per_s", "%.1f"), f("ms_per_token", "%.3f"),
            f("graft_prompt_ms", "%.3f"), f("graft_decode_ms_per_token", "%.3f"), f("graft_launches", "%d"), f("memory_mib", "%.1f"),
            ids_s, f("vs_best_pytorch", "%.2fx")))
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny models: checks the harness runs (with --device cpu: no GPU)")
    ap.add_argument("--dry-run", action="store_true",
                    help="no torch: the test fixtures, graft on the simulator, HF's ids replayed from the fixtures")
    ap.add_argument("--dry-run-fail", default="", help="variants whose worker crashes on purpose (testing the harness)")
    ap.add_argument("--device", default=None, help="PyTorch's device: cuda (default when available) or cpu")
    ap.add_argument("--models", default="gpt2,llama")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--beams", default="1,4", help="1 = greedy, k = beam search of width k")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--variants", default="hf-eager,hf-static-compile,graft")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per variant process")
    ap.add_argument("--graft-device", default=None, help="cuda (default with a GPU) or sim")
    ap.add_argument("--graft-mode", default="graph")
    ap.add_argument("--graft-max-rerecords", type=int, default=100000)
    ap.add_argument("--steps-per-launch", type=int, default=0, help="graft's decode loop: steps per device launch (0: graft's default)")
    ap.add_argument("--sample", action="store_true", help="sampling (beams 1): do_sample=True with --top-k, --top-p, --seed")
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--top-p", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default="decode", help="writes OUT.json and OUT.md")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    if a.dry_run:
        a.smoke = True
        for k, v in (("prompt", 4), ("new", 12), ("batches", "2,1"), ("repeats", 1), ("warmup", 0), ("dtypes", "fp32"),
                     ("variants", "hf-eager,graft")):
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
        a.device = "cpu"
    if a.device is None:
        try:
            import torch
            a.device = "cuda" if torch.cuda.is_available() and not a.smoke else "cpu"
        except ImportError:
            sys.exit("bench/decode.py: torch is not installed (--dry-run checks the harness without it)")
    if a.smoke and not a.dry_run:
        for k, v in (("prompt", 4), ("new", 6), ("batches", "1,2"), ("repeats", 1), ("warmup", 0), ("dtypes", "fp32")):
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
    if a.graft_device is None:
        a.graft_device = "cuda" if a.device == "cuda" else "sim"
    work = a.workdir or tempfile.mkdtemp(prefix="graft-decode-")
    rows = []
    for name in a.models.split(","):
        onnx_path = os.path.join(FIXTURES, name, "model.onnx") if a.dry_run else os.path.join(work, name + ".onnx")
        if not a.dry_run and any(v.startswith("graft") for v in a.variants.split(",")):
            _, err = spawn(dict(model=name, variant="export", smoke=a.smoke, onnx=onnx_path), work, a.timeout, a.verbose)
            if err:
                print("export of %s failed: %s" % (name, err), flush=True)
                onnx_path = None
        for dtype in a.dtypes.split(","):
            for batch in [int(x) for x in a.batches.split(",")]:
                for beams in ([1] if a.sample else [int(x) for x in a.beams.split(",")]):
                    rows += run_case(a, name, dtype, onnx_path, batch, beams, work)
    meta = {"device": a.device, "graft_device": a.graft_device, "smoke": a.smoke, "dry_run": a.dry_run, "prompt": a.prompt,
            "new_tokens": a.new}
    if not a.dry_run:
        try:
            import torch
            import transformers
            meta.update(torch=torch.__version__, transformers=transformers.__version__,
                        gpu=torch.cuda.get_device_name() if a.device == "cuda" else None)
        except ImportError:
            pass
    with open(a.out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    md = "# Decode: graft vs Hugging Face generate (%s)\n\n%s\n\n%s" % (meta.get("gpu") or a.device, json.dumps(meta), table(rows))
    with open(a.out + ".md", "w") as f:
        f.write(md)
    print(md)
    bad = [r for r in rows if r["dtype"] == "fp32" and r["decode"] == "greedy" and r.get("ids_vs_hf_eager") and
           not r["ids_vs_hf_eager"]["match"]]
    if bad:
        print("fp32 greedy ids differ from HF eager in %d runs (see the table)" % len(bad))
    beam_bad = [r for r in rows if r["dtype"] == "fp32" and r["decode"].startswith("beam") and r["variant"].startswith("graft") and
                r.get("ids_vs_hf_eager") and not r["ids_vs_hf_eager"]["match"]]
    if beam_bad:
        print("fp32 beam-search ids differ from HF eager in %d graft runs (see the table)" % len(beam_bad))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
