"""Real sizes on the GPU machine (issue 15, item 4): GPT-2 small, BERT-base and a Llama-style
model of ~100M parameters at batch 1 and 8, sequence 128 and 512, fp32 and bf16 — graft (the
ONNX export with dynamic batch and seq axes, graph mode, through the Python package with
zero-copy CUDA inputs) against PyTorch eager (SDPA attention), torch.compile and
torch.compile(mode="reduce-overhead"), all in one process on the same weights and inputs.

Inputs: a pool of 4 distinct id tensors per configuration, rotated every call (a caller
refreshing its inputs). End-to-end time: CUDA-synchronised wall clock over --iters calls after
--warmup calls. GPU kernel time: torch.profiler (CUPTI) over 10 calls, the sum of every CUDA
kernel and memcpy/memset the process ran, graft's included (kernels replayed from graphs are
recorded one by one). Memory: the device's used bytes (cudaMemGetInfo, so the driver's graph
memory counts) before the variant was built and after it ran, in MiB.

bf16: PyTorch runs model.to(bfloat16); graft loads the same f32 export with precision="bf16"
(weights cast once at load; softmax/normalisations in f32, docs/precision.md).

The export uses eager attention (what the exporters see); the PyTorch variants run SDPA
(attn_implementation="sdpa") on the same weights.

Writes one JSON line per (model, dtype, batch, seq, variant) to --out and a table to stdout.
"""
import argparse
import faulthandler
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import graft  # noqa: E402

MAX_BATCH, MAX_SEQ = 64, 1024


def build(name, attn):
    import transformers as T
    torch.manual_seed(0)
    common = {"attn_implementation": attn, "use_cache": False}
    if name == "gpt2":
        cfg = T.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=MAX_SEQ, **common)
        m = T.GPT2Model(cfg)
    elif name == "bert":
        cfg = T.BertConfig(max_position_embeddings=MAX_SEQ, **common)
        m = T.BertModel(cfg, add_pooling_layer=False)
    elif name == "llama":
        # ~100M parameters: 8 layers, hidden 768, 12 query heads sharing 4 key/value heads
        cfg = T.LlamaConfig(num_hidden_layers=8, hidden_size=768, num_attention_heads=12, num_key_value_heads=4,
                            intermediate_size=2048, vocab_size=32000, max_position_embeddings=MAX_SEQ, **common)
        m = T.LlamaModel(cfg)
    else:
        raise ValueError(name)
    vocab = cfg.vocab_size

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids).last_hidden_state

    return Wrap(m).eval(), vocab


def export(model, path):
    from torch.export import Dim
    batch, seq = Dim("batch", max=MAX_BATCH), Dim("seq", max=MAX_SEQ)
    ids = torch.randint(0, 100, (2, 16))
    torch.onnx.export(model, (ids,), path, input_names=["input_ids"], output_names=["last_hidden_state"],
                      opset_version=18, dynamo=True, external_data=False,
                      dynamic_shapes={"input_ids": {0: batch, 1: seq}})


def used_mib():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**20


def rel_err(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(b.norm().item(), 1e-30))


def time_calls(fn, pool, iters, warmup):
    out = None
    for i in range(warmup):
        out = fn(pool[i % len(pool)])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(iters):
        out = fn(pool[i % len(pool)])
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters * 1e3, out


def gpu_time(fn, pool, calls=10, kernels=None):
    """GPU ms and ops per call; with kernels (a dict), also ms per call by kernel name."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            fn(pool[i % len(pool)])
        torch.cuda.synchronize()
    total, n = 0.0, 0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            t = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
            total += t
            n += 1
            if kernels is not None:
                k = kernels.setdefault(e.name[:120], [0.0, 0])
                k[0] += t / calls / 1e3
                k[1] += 1
    return total / calls / 1e3, n / calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2,bert,llama")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--configs", default="1x128,1x512,8x128,8x512", help="BATCHxSEQ,...")
    ap.add_argument("--variants", default="eager,compile,reduce-overhead,graft")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", default="realsize.jsonl")
    ap.add_argument("--workdir", default="/tmp/realsize")
    ap.add_argument("--kernels", default="", help="also write the GPU time by kernel name to this JSONL file")
    ap.add_argument("--one", action="store_true", help="(internal) run exactly one model and dtype in this process")
    a = ap.parse_args()
    faulthandler.enable()
    os.makedirs(a.workdir, exist_ok=True)
    if not a.one and (len(a.models.split(",")) > 1 or len(a.dtypes.split(",")) > 1):
        # one process per (model, dtype): a crash or a stuck compile loses that pair only
        for name in a.models.split(","):
            for dt in a.dtypes.split(","):
                cmd = [sys.executable, __file__, "--one", "--models", name, "--dtypes", dt, "--configs", a.configs,
                       "--variants", a.variants, "--iters", str(a.iters), "--warmup", str(a.warmup), "--out", a.out,
                       "--workdir", a.workdir, "--kernels", a.kernels]
                rc = subprocess.call(cmd)
                if rc != 0:
                    print("realsize: %s %s exited with %d" % (name, dt, rc), flush=True)
                    with open(a.out, "a") as f:
                        f.write(json.dumps({"model": name, "dtype": dt, "error": "process exit %d" % rc}) + "\n")
        return
    configs = [tuple(int(v) for v in c.split("x")) for c in a.configs.split(",")]
    rows = []
    out = open(a.out, "a")
    for name in a.models.split(","):
        path = os.path.join(a.workdir, name + ".onnx")
        if not os.path.exists(path):
            t0 = time.perf_counter()
            export(build(name, "eager")[0], path)
            print("exported %s in %.1f s" % (name, time.perf_counter() - t0), flush=True)
        base, vocab = build(name, "sdpa")
        for dt in a.dtypes.split(","):
            tdt = torch.float32 if dt == "f32" else torch.bfloat16
            model = base.to(device="cuda", dtype=tdt)
            sess = None
            for (b, s) in configs:
                g = torch.Generator(device="cuda").manual_seed(b * 1000 + s)
                pool = [torch.randint(0, vocab, (b, s), device="cuda", generator=g) for _ in range(4)]
                with torch.no_grad():
                    ref = model(pool[0]).float()
                for v in a.variants.split(","):
                    row = {"model": name, "dtype": dt, "batch": b, "seq": s, "variant": v}
                    try:
                        torch._dynamo.reset()
                        torch.cuda.empty_cache()
                        before = used_mib()
                        t0 = time.perf_counter()
                        if v == "eager":
                            fn = model
                        elif v in ("compile", "reduce-overhead"):
                            fn = torch.compile(model, mode=None if v == "compile" else "reduce-overhead", dynamic=False)
                        else:
                            if sess is None:
                                sess = graft.load(path, device="cuda", mode="graph",
                                                  precision=None if dt == "f32" else "bf16")

                            def fn(x, s=sess):
                                return torch.from_dlpack(s.run_device(input_ids=x)["last_hidden_state"])
                        with torch.no_grad():
                            y = fn(pool[0])
                            torch.cuda.synchronize()
                            row["first_call_s"] = round(time.perf_counter() - t0, 2)
                            row["err_vs_eager"] = rel_err(y.float(), ref)
                            ms, _ = time_calls(fn, pool, a.iters, a.warmup)
                            row["ms_per_call"] = round(ms, 4)
                            ks = {} if a.kernels else None
                            row["gpu_ms"], row["gpu_ops_per_call"] = gpu_time(fn, pool, kernels=ks)
                            if ks:
                                top = sorted(ks.items(), key=lambda kv: -kv[1][0])[:40]
                                with open(a.kernels, "a") as kf:
                                    kf.write(json.dumps({k: row[k] for k in ("model", "dtype", "batch", "seq", "variant")}
                                                        | {"kernels": [[n, round(t, 4), c] for n, (t, c) in top]}) + "\n")
                        if v == "graft":  # what the session did by the end of this configuration
                            st = sess.stats()
                            row["graft_stats"] = {k: st[k] for k in ("captures", "instantiations", "exec_updates", "generic_replays",
                                                                     "plans_compiled", "plans_instantiated", "waits_on_host",
                                                                     "shape_decisions_measured", "kernels", "graph_launches")}
                            row["graft_policy"] = [ln.strip() for ln in sess.explain().splitlines() if "shape policy auto:" in ln][:4]
                        row["mem_mib_delta"] = round(used_mib() - before, 1)
                        if v == "graft":
                            st = sess.stats()
                            for k in ("device_bytes", "weight_bytes", "bytes_copied", "nodes_updated", "kernels_in_graphs",
                                      "graphs", "captures"):
                                if k in st:
                                    row[k] = st[k]
                    except Exception as e:  # one variant failing never stops the rest
                        row["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
                    rows.append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    print(json.dumps(row), flush=True)
            if sess is not None:
                sess.close()
            del model
            torch.cuda.empty_cache()
    print("\n%-6s %-5s %5s %5s %-16s %9s %9s %8s %9s %s" % ("model", "dtype", "batch", "seq", "variant", "ms/call", "gpu ms",
                                                         "vs r-o", "gpu vs co", "err"))
    for r in rows:
        def find(var):
            return next((x for x in rows if all(x[k] == r[k] for k in ("model", "dtype", "batch", "seq"))
                         and x["variant"] == var and "ms_per_call" in x), None)
        ro, co = find("reduce-overhead"), find("compile")
        ratio = "%.2fx" % (ro["ms_per_call"] / r["ms_per_call"]) if ro and "ms_per_call" in r else "-"
        gratio = "%.2fx" % (co["gpu_ms"] / r["gpu_ms"]) if co and r.get("gpu_ms") else "-"
        print("%-6s %-5s %5d %5d %-16s %9s %9s %8s %9s %s" % (
            r["model"], r["dtype"], r["batch"], r["seq"], r["variant"], r.get("ms_per_call", "-"),
            "%.3f" % r["gpu_ms"] if "gpu_ms" in r else "-", ratio, gratio,
            r.get("error", "%.1e" % r.get("err_vs_eager", -1))))


if __name__ == "__main__":
    main()
