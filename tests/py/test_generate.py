"""`graft generate` and graft.generate over the decode fixtures (tests/data/onnx/decode).

Always (numpy + pytest): the CLI's tokens.npy equals Hugging Face's greedy / beam-4 ids and the
Python API's ids; streaming lines; sampling through the CLI equals the API; every CLI error.
With onnxruntime (skipped without it): a host loop over the same step model in onnxruntime with
host-side state is the reference for eos stopping and for sampling (temperature, top-k, top-p and
graft's counter-based RNG re-implemented here). With torch + transformers (skipped without them):
the fixture's models rebuilt from their seeds, and Hugging Face's beam search with an eos token
against graft's.
"""
import os
import sys

import numpy as np
import pytest

from gir_builder import ROOT, run_graft

sys.path.insert(0, os.path.join(ROOT, "python"))
import graft  # noqa: E402

DECODE = os.path.join(ROOT, "tests", "data", "onnx", "decode")
MODELS = ["gpt2", "llama"]


def fixture(model, name):
    return os.path.join(DECODE, model, name)


def load(model, mode="eager"):
    return graft.load(fixture(model, "model.onnx"), device="sim", mode=mode)


def expect_fail(proc, code, *fragments):
    assert proc.returncode == code, "exit %d, expected %d; stderr: %s" % (proc.returncode, code, proc.stderr)
    assert "graft: " in proc.stderr
    for frag in fragments:
        assert frag in proc.stderr, "%r not in stderr: %r" % (frag, proc.stderr)


# ==== CLI against the fixtures and the API ==========================================================
@pytest.mark.parametrize("model", MODELS)
def test_cli_greedy_equals_hf_and_api(model, tmp_path):
    proc = run_graft("generate", fixture(model, "model.onnx"), "--prompt", fixture(model, "prompt.npy"), "--max-new-tokens", 12,
                     "--device", "sim", "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    tokens = np.load(tmp_path / "tokens.npy")
    assert tokens.dtype == np.int64 and tokens.shape == (2, 16)
    np.testing.assert_array_equal(tokens, np.load(fixture(model, "greedy.npy")))
    api = graft.generate(fixture(model, "model.onnx"), np.load(fixture(model, "prompt.npy")), 12, device="sim")
    np.testing.assert_array_equal(tokens, api)
    # one line per position, ids of both rows, as they arrive
    lines = [line for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == 12
    assert lines[0] == "step 0: %d %d" % (tokens[0, 4], tokens[1, 4])
    for what in ("ms per token", "tokens/s", "plans (bindings)", "graph memory", "wrote"):
        assert what in proc.stdout, proc.stdout


@pytest.mark.parametrize("model", MODELS)
def test_cli_beam_and_modes(model, tmp_path):
    proc = run_graft("generate", fixture(model, "model.onnx"), "--prompt", fixture(model, "prompt.npy"), "--max-new-tokens", 12,
                     "--beams", 4, "--device", "sim", "--mode", "graph", "--prompt-mode", "tokens", "--quiet",
                     "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "step 0:" not in proc.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "tokens.npy"), np.load(fixture(model, "beam4.npy")))
    # beam search on the device: the rewritten engine, 5 steps per launch (11 decode steps: 3 launches)
    proc = run_graft("generate", fixture(model, "model.onnx"), "--prompt", fixture(model, "prompt.npy"), "--max-new-tokens", 12,
                     "--beams", 4, "--device", "sim", "--mode", "graph", "--engine", "rewritten", "--steps-per-launch", 5,
                     "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "tokens.npy"), np.load(fixture(model, "beam4.npy")))
    assert "device-loop launches   3" in proc.stdout, proc.stdout
    assert len([line for line in proc.stdout.splitlines() if line.startswith("step ")]) == 12


@pytest.mark.parametrize("model", MODELS)
def test_cli_device_loop(model, tmp_path):
    # greedy through the rewritten engine's decode loop on the device, 5 steps per launch, graph mode
    proc = run_graft("generate", fixture(model, "model.onnx"), "--prompt", fixture(model, "prompt.npy"), "--max-new-tokens", 12,
                     "--device", "sim", "--mode", "graph", "--engine", "rewritten", "--steps-per-launch", 5, "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "tokens.npy"), np.load(fixture(model, "greedy.npy")))
    assert "device-loop launches   3" in proc.stdout, proc.stdout
    assert len([line for line in proc.stdout.splitlines() if line.startswith("step ")]) == 12
    expect_fail(run_graft("generate", fixture(model, "model.onnx"), "--prompt", fixture(model, "prompt.npy"), "--max-new-tokens", 3,
                          "--steps-per-launch", 0), 2, "--steps-per-launch: bad value '0'", "an integer > 0")


@pytest.mark.parametrize("engine", ["rewritten", "reference"])
def test_cli_profile_of_a_decode_step(engine, tmp_path):
    # --profile times each kernel of one decode step after the generation; the ids are unchanged
    model = "gpt2"
    proc = run_graft("generate", fixture(model, "model.onnx"), "--prompt", fixture(model, "prompt.npy"), "--max-new-tokens", 12,
                     "--device", "sim", "--mode", "graph", "--engine", engine, "--profile", "--quiet", "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "tokens.npy"), np.load(fixture(model, "greedy.npy")))
    out = proc.stdout
    assert "profile of one decode step (%s engine):" % engine in out, out
    assert "device time per kernel class" in out and "matmul" in out, out
    rows = [line for line in out.splitlines() if "] " in line and " us " in line]
    assert len(rows) >= 10, out
    # a step of the rewritten engine reads one new token; the reference's last step is a per-length plan
    assert "kernels, sum" in out


def test_cli_sampling_equals_api(tmp_path):
    model = "llama"
    args = ["--sample", "--top-k", 50, "--top-p", 0.9, "--temperature", 0.8, "--seed", 7]
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        proc = run_graft("generate", fixture(model, "model.onnx"), "--prompt", fixture(model, "prompt.npy"), "--max-new-tokens", 9,
                         "--device", "sim", "--quiet", "--output-dir", d, *args)
        assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(a / "tokens.npy"), np.load(b / "tokens.npy"))
    api = graft.generate(fixture(model, "model.onnx"), np.load(fixture(model, "prompt.npy")), 9, device="sim", sample=True,
                         top_k=50, top_p=0.9, temperature=0.8, seed=7)
    np.testing.assert_array_equal(np.load(a / "tokens.npy"), api)


def test_cli_max_length_arena_max(tmp_path):
    model = "gpt2"
    proc = run_graft("generate", fixture(model, "model.onnx"), "--prompt", fixture(model, "prompt.npy"), "--max-new-tokens", 12,
                     "--device", "sim", "--arena", "max", "--max-length", 16, "--quiet", "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "tokens.npy"), np.load(fixture(model, "greedy.npy")))


def test_cli_errors(tmp_path):
    m, p = fixture("gpt2", "model.onnx"), fixture("gpt2", "prompt.npy")
    np.save(tmp_path / "f.npy", np.zeros((2, 3), np.float32))
    np.save(tmp_path / "v.npy", np.zeros(3, np.int64))
    expect_fail(run_graft("generate", m, "--prompt", tmp_path / "f.npy", "--max-new-tokens", 2, "--device", "sim"), 1,
                "must be int64 [batch, prompt_len]", "f32 [2, 3]")
    expect_fail(run_graft("generate", m, "--prompt", tmp_path / "v.npy", "--max-new-tokens", 2, "--device", "sim"), 1,
                "i64 [3]")
    expect_fail(run_graft("generate", m, "--prompt", p, "--max-new-tokens", 0), 2, "--max-new-tokens must be > 0")
    expect_fail(run_graft("generate", m, "--prompt", p), 2, "--max-new-tokens N is required")
    expect_fail(run_graft("generate", m, "--max-new-tokens", 3), 2, "--prompt IDS.npy is required")
    expect_fail(run_graft("generate", m, "--prompt", p, "--max-new-tokens", 3, "--beams", 2, "--sample"), 2, "--beams 2 with --sample")
    expect_fail(run_graft("generate", m, "--prompt", p, "--max-new-tokens", 3, "--top-p", 2, "--sample"), 2, "--top-p: bad value '2'")
    expect_fail(run_graft("generate", m, "--prompt", p, "--max-new-tokens", 3, "--seed", 2), 2, "apply to --sample only")
    expect_fail(run_graft("generate", m, "--prompt", p, "--max-new-tokens", 3, "--bogus"), 2, "unknown option '--bogus'")
    expect_fail(run_graft("generate", m, "--prompt", p, "--max-new-tokens", 13, "--max-length", 16), 2, "exceeds --max-length 16")
    expect_fail(run_graft("generate", os.path.join(ROOT, "examples", "mlp.gir"), "--prompt", p, "--max-new-tokens", 3, "--device", "sim"),
                1, "no KV-cache state found", "--state PRESENT=PAST")
    expect_fail(run_graft("generate", m, "--prompt", p, "--max-new-tokens", 3, "--device", "sim", "--state", "present.0.key=past.0"),
                1, "input 'past.0' (fed by output 'present.0.key') does not exist")
    expect_fail(run_graft("generate", m, "--prompt", p, "--max-new-tokens", 3, "--device", "sim", "--state", "logits=input_ids"),
                1, "dtypes differ")
    # only some of the cache bound: the unbound inputs are named
    expect_fail(run_graft("generate", m, "--prompt", p, "--max-new-tokens", 3, "--device", "sim", "--state",
                          "present.0.key=past_key_values.0.key"), 1, "past_key_values.0.value")
    np.save(tmp_path / "big.npy", np.full((1, 2), 500, np.int64))
    expect_fail(run_graft("generate", m, "--prompt", tmp_path / "big.npy", "--max-new-tokens", 3, "--device", "sim"), 1,
                "outside the vocabulary")


def test_bench_decode_dry_run(tmp_path):
    # bench/decode.py's harness without torch: each variant in its own process (a crashing one is
    # an error row, the others go on), ids compared with HF's (replayed from the fixtures)
    import subprocess
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "decode.py"), "--dry-run", "--models", "gpt2,llama",
                           "--batches", "1", "--beams", "1,4", "--variants", "hf-eager,graft,graft-reference",
                           "--dry-run-fail", "graft-reference", "--out", str(tmp_path / "d"), "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    import json
    rows = json.load(open(tmp_path / "d.json"))["rows"]
    assert len(rows) == 12
    for r in rows:
        if r["variant"] == "graft":
            assert r["ids_vs_hf_eager"]["match"], r
            # greedy and beam search both run the decode loop on the device (auto picks it)
            assert r["graft_launches"] == 1 and r["graft_engine"] == "rewritten", r
        elif r["variant"] == "graft-reference":
            assert r["error"] == "exit 3" and "ids_vs_hf_eager" not in r
        else:
            assert r.get("replayed") and r["ids_vs_hf_eager"]["reference"]
    assert "graft-reference (exit 3)" in open(tmp_path / "d.md").read()


def test_help_lists_generate():
    proc = run_graft("--help")
    assert "generate" in proc.stdout
    proc = run_graft("generate", "--help")
    assert proc.returncode == 0 and "--max-new-tokens" in proc.stdout and "--beams" in proc.stdout


# ==== Python API ======================================================================================
def test_python_api_states_stream_and_errors():
    s = load("gpt2")
    with pytest.raises(graft.InvalidError, match="does not exist"):
        s.bind_state("present.0.key", "nope")
    assert s.bind_state_auto() == 4
    assert s.states[0] == ("present.0.key", "past_key_values.0.key")
    prompt = np.load(fixture("gpt2", "prompt.npy"))
    seen = []
    out, stats = s.generate(prompt, 12, on_token=lambda step, ids: seen.append((step, ids.tolist())), return_stats=True)
    np.testing.assert_array_equal(out, np.load(fixture("gpt2", "greedy.npy")))
    assert [st for st, _ in seen] == list(range(12)) and seen[0][1] == out[:, 4].tolist()
    # auto: the rewritten engine (the prompt's first 3 tokens as one per-length step whose cache the
    # engine takes on the device, then the last token through the single-token step)
    assert stats["engine"] == 2 and stats["new_tokens"] == 12 and stats["prompt_steps"] == 2 and stats["decode_steps"] == 11
    # the decode loop on the device: 11 steps after the prompt, 16 per launch by default
    assert stats["launches"] == 1
    out, stats = s.generate(prompt, 12, steps_per_launch=3, on_token=lambda step, ids: seen.append((step, ids.tolist())),
                            return_stats=True)
    np.testing.assert_array_equal(out, np.load(fixture("gpt2", "greedy.npy")))
    assert stats["launches"] == 4 and seen[12:] == seen[:12]
    with pytest.raises(ValueError, match="steps_per_launch"):
        s.generate(prompt, 3, steps_per_launch=-1)
    out, stats = s.generate(prompt, 12, engine="reference", return_stats=True)
    np.testing.assert_array_equal(out, np.load(fixture("gpt2", "greedy.npy")))
    assert stats["engine"] == 1 and stats["prompt_steps"] == 1 and stats["decode_steps"] == 11 and stats["launches"] == 0
    with pytest.raises(ValueError, match="engine="):
        s.generate(prompt, 3, engine="fast")
    with pytest.raises(graft.InvalidError, match="max_new_tokens is 0"):
        s.generate(prompt, 0)
    with pytest.raises(graft.InvalidError, match="integer array"):
        s.generate(prompt.astype(np.float32), 3)

    def boom(step, ids):
        raise RuntimeError("stop here")
    with pytest.raises(RuntimeError, match="stop here"):
        s.generate(prompt, 3, on_token=boom)
    s.close()


# ==== onnxruntime host loop: the reference for eos and sampling ===========================================
def _bits(seed, counter):
    m = (1 << 64) - 1
    x = (seed * 0x9E3779B97F4A7C15 + counter) & m
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & m
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & m
    x ^= x >> 31
    return x


def _sample(logits, temperature, top_k, top_p, bits):
    """graft's sampling (codegen/kir.h, gr_sample_row) written the slow way: f32 z = logit / T, integer
    weights floor(expf(z - max) * 2^32), ties kept at the top-k and top-p thresholds, the draw in id order."""
    z = logits.astype(np.float32) / np.float32(temperature) + np.float32(0)
    z = np.where(np.isnan(z), np.float32(-np.inf), z).astype(np.float32)
    m = z.max()
    with np.errstate(invalid="ignore", over="ignore"):
        w = np.exp((z - m).astype(np.float32)).astype(np.float32)
    q = [1 << 32 if z[i] == m else int(w[i] * np.float32(2.0 ** 32)) for i in range(len(z))]
    lo = np.float32(-np.inf)
    if 0 < top_k < len(z):
        lo = np.sort(z)[::-1][top_k - 1]
    if np.float32(top_p) < 1:
        total = sum(q[i] for i in range(len(z)) if z[i] >= lo)
        target = float(np.float32(top_p)) * float(total)
        for c in sorted({v for v in z if v >= lo}, reverse=True):
            if float(sum(q[i] for i in range(len(z)) if z[i] >= c)) >= target:
                lo = c
                break
    kept = [q[i] if z[i] >= lo else 0 for i in range(len(z))]
    x, run = (bits * sum(kept)) >> 64, 0
    for i, k in enumerate(kept):
        run += k
        if x < run:
            return i
    raise AssertionError("no token drawn")


def _ort_loop(model, prompt, n, eos=None, sample=None):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(fixture(model, "model.onnx"), providers=["CPUExecutionProvider"])
    ins = [i.name for i in sess.get_inputs()]
    outs = [o.name for o in sess.get_outputs()]
    past_names = ins[3:]
    present_names = outs[1:]
    b, plen = prompt.shape
    kv_shape = sess.get_inputs()[3].shape
    past = {nm: np.zeros((b, kv_shape[1], 0, kv_shape[3]), np.float32) for nm in past_names}
    ids, done = prompt, np.zeros(b, bool)
    result = [prompt]
    pos = 0
    for j in range(n):
        seq = ids.shape[1]
        feed = {"input_ids": ids, "attention_mask": np.ones((b, pos + seq), np.int64),
                "position_ids": np.tile(np.arange(pos, pos + seq, dtype=np.int64), (b, 1)), **past}
        res = sess.run(None, feed)
        last = res[0][:, -1, :]
        tok = np.zeros(b, np.int64)
        for r in range(b):
            if done[r]:
                tok[r] = eos
            elif sample:
                tok[r] = _sample(last[r], sample["temperature"], sample["top_k"], sample["top_p"], _bits(sample["seed"], j * b + r))
            else:
                tok[r] = int(np.argmax(last[r]))
            if eos is not None and tok[r] == eos:
                done[r] = True
        result.append(tok[:, None])
        past = dict(zip(past_names, res[1:]))
        pos += seq
        ids = tok[:, None]
        if eos is not None and done.all():
            result.append(np.full((b, n - j - 1), eos, np.int64))
            break
    assert present_names  # the export has a cache
    return np.concatenate(result, axis=1)


@pytest.mark.parametrize("model", MODELS)
def test_eos_against_onnxruntime(model):
    prompt = np.load(fixture(model, "prompt.npy"))
    greedy = np.load(fixture(model, "greedy.npy"))
    np.testing.assert_array_equal(_ort_loop(model, prompt, 12), greedy)
    for eos in (int(greedy[0, 7]), int(greedy[1, 5])):
        ref = _ort_loop(model, prompt, 12, eos=eos)
        got = graft.generate(fixture(model, "model.onnx"), prompt, 12, eos_id=eos, device="sim")
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("cfg", [dict(temperature=1.0, top_k=0, top_p=1.0, seed=3), dict(temperature=0.7, top_k=20, top_p=0.9, seed=11),
                                 dict(temperature=1.3, top_k=5, top_p=1.0, seed=0), dict(temperature=1.0, top_k=0, top_p=0.5, seed=42)])
def test_sampling_against_onnxruntime(model, cfg):
    prompt = np.load(fixture(model, "prompt.npy"))
    ref = _ort_loop(model, prompt, 10, sample=cfg)
    got = graft.generate(fixture(model, "model.onnx"), prompt, 10, device="sim", sample=True, **cfg)
    np.testing.assert_array_equal(got, ref)


# ==== Hugging Face beam search with an eos token (the fixture's models rebuilt from their seeds) =========
def _hf_model(model):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    sys.path.insert(0, DECODE)
    import make_decode_fixtures as mk
    torch.manual_seed(0)
    m = mk.make_gpt2()[0]
    if model == "llama":
        torch.manual_seed(1)
        m = mk.make_llama()[0]
    return m.eval(), torch


@pytest.mark.parametrize("model", MODELS)
def test_beam_eos_against_hugging_face(model):
    m, torch = _hf_model(model)
    prompt = np.load(fixture(model, "prompt.npy"))
    pt = torch.from_numpy(prompt)
    with torch.no_grad():
        beam = m.generate(pt, attention_mask=torch.ones_like(pt), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                          pad_token_id=1, eos_token_id=None, num_beams=4, early_stopping=True, length_penalty=1.0).numpy()
    np.testing.assert_array_equal(beam, np.load(fixture(model, "beam4.npy")))  # the rebuilt weights are the fixture's
    s = load(model)
    for eos, lp in ((int(beam[0, 6]), 1.0), (int(beam[1, 8]), 1.0), (int(beam[0, 6]), 2.0), (int(beam[0, 5]), 0.5)):
        with torch.no_grad():
            ref = m.generate(pt, attention_mask=torch.ones_like(pt), max_new_tokens=12, do_sample=False, pad_token_id=eos,
                             eos_token_id=eos, num_beams=4, early_stopping=True, length_penalty=lp).numpy()
        got = s.generate(prompt, 12, beams=4, eos_id=eos, length_penalty=lp)
        np.testing.assert_array_equal(got[:, :ref.shape[1]], ref, err_msg="eos %d, length_penalty %g" % (eos, lp))
        assert (got[:, ref.shape[1]:] == eos).all()
    s.close()
