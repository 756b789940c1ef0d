"""Decoder step exports with a KV cache, and Hugging Face's generated ids for them.

Each model is exported as ONE decode step: input_ids [batch, seq], attention_mask
[batch, past + seq], position_ids [batch, seq] and the cache of every layer as inputs;
logits [batch, seq, vocab] and the grown cache as outputs, the cache growing by
concatenation along its sequence axis. This is the form optimum and hand-written
`torch.onnx.export` scripts produce. Naming differs on purpose between the models so
that graft's automatic state pairing is exercised:
  gpt2:  past_key_values.N.key / .value  ->  present.N.key / .value     (optimum's names)
  llama: past_k{N} / past_v{N}           ->  present_k{N} / present_v{N}

Weights are random (seeded); the models are tiny so the files are small enough to keep
in the repository. For each model, greedy and beam-4 ids from Hugging Face `generate`
on the same weights are written to ref_<name>.npz next to the model.

    python make_decode_fixtures.py [OUTDIR]   (torch, transformers and onnx; CPU is fine)
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import DynamicCache

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
VOCAB = 211
NEW_TOKENS = 12


def make_gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=VOCAB, n_positions=256, initializer_range=0.2,
                                  bos_token_id=0, eos_token_id=1, pad_token_id=1)
    return transformers.GPT2LMHeadModel(cfg), cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head


def make_llama():
    cfg = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   hidden_size=64, intermediate_size=128, vocab_size=VOCAB,
                                   max_position_embeddings=256, bos_token_id=0, eos_token_id=1,
                                   pad_token_id=1, tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(cfg), cfg.num_hidden_layers, cfg.num_key_value_heads, 64 // 4


class Step(torch.nn.Module):
    def __init__(self, model, n_layer):
        super().__init__()
        self.model, self.n_layer = model, n_layer

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = DynamicCache()
        for i in range(self.n_layer):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
        pk = out.past_key_values
        flat = []
        for i in range(self.n_layer):
            layer = pk.layers[i]
            flat += [layer.keys, layer.values]
        return (out.logits, *flat)


def export(name, model, n_layer, kv_heads, head_dim, past_names, present_names):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    step = Step(model, n_layer).eval()
    b, s, p = 2, 3, 5
    ids = torch.randint(2, VOCAB, (b, s))
    mask = torch.ones(b, p + s, dtype=torch.int64)
    pos = torch.arange(p, p + s).unsqueeze(0).expand(b, s)
    past = [torch.randn(b, kv_heads, p, head_dim) for _ in range(2 * n_layer)]
    in_names = ["input_ids", "attention_mask", "position_ids"] + past_names
    out_names = ["logits"] + present_names
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for n in past_names:
        axes[n] = {0: "batch", 2: "past"}
    for n in present_names:
        axes[n] = {0: "batch", 2: "total"}
    path = os.path.join(d, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(step, (ids, mask, pos, *past), path, input_names=in_names, output_names=out_names,
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    return d


def references(d, model):
    """Greedy and beam-4 ids from HF generate, batch 2, prompt 4 tokens, no padding."""
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(2, VOCAB, (2, 4), generator=g)
    common = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                  do_sample=False, pad_token_id=1, eos_token_id=None)
    with torch.no_grad():
        greedy = model.generate(prompt, num_beams=1, **common)
        beam = model.generate(prompt, num_beams=4, early_stopping=True, length_penalty=1.0, **common)
    np.save(os.path.join(d, "prompt.npy"), prompt.numpy().astype(np.int64))
    np.save(os.path.join(d, "greedy.npy"), greedy.numpy().astype(np.int64))
    np.save(os.path.join(d, "beam4.npy"), beam.numpy().astype(np.int64))


def main():
    torch.manual_seed(0)
    meta = {"torch": torch.__version__, "transformers": transformers.__version__, "new_tokens": NEW_TOKENS,
            "models": {}}
    m, n_layer, kvh, hd = make_gpt2()
    m.eval()
    past = [f"past_key_values.{i}.{kv}" for i in range(n_layer) for kv in ("key", "value")]
    pres = [f"present.{i}.{kv}" for i in range(n_layer) for kv in ("key", "value")]
    d = export("gpt2", m, n_layer, kvh, hd, past, pres)
    references(d, m)
    meta["models"]["gpt2"] = {"layers": n_layer, "kv_heads": kvh, "head_dim": hd}
    torch.manual_seed(1)
    m, n_layer, kvh, hd = make_llama()
    m.eval()
    past = [f"past_{kv}{i}" for i in range(n_layer) for kv in ("k", "v")]
    pres = [f"present_{kv}{i}" for i in range(n_layer) for kv in ("k", "v")]
    d = export("llama", m, n_layer, kvh, hd, past, pres)
    references(d, m)
    meta["models"]["llama"] = {"layers": n_layer, "kv_heads": kvh, "head_dim": hd}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(meta, f, indent=1)


if __name__ == "__main__":
    main()
