"""Generation over a decoder exported as one step with a KV cache (graft.h "generation").

    import graft, numpy as np
    ids = graft.generate("model.onnx", np.array([[5, 6, 7]]), max_new_tokens=16)       # greedy
    ids = graft.generate(session, prompt, max_new_tokens=16, beams=4)                  # beam search
    ids = graft.generate(session, prompt, max_new_tokens=16, sample=True, top_p=0.9, seed=1)

The state (present_* outputs feeding past_* inputs) stays on the device between steps; the usual
names pair themselves (Session.bind_state_auto), others are given with state={"present": "past"}.
"""
import ctypes
import os

import numpy as np

from . import _capi as C
from ._capi import lib

_ENGINES = {"auto": 0, "reference": 1, "rewritten": 2}
_PROMPT_MODES = {"auto": 0, "whole": 1, "tokens": 2}


class GenerateStats(dict):
    """prompt_us, decode_us, prompt_steps, decode_steps, new_tokens, ms_per_token, tokens_per_s, plans."""


def bind_state(session, output, input):
    """Declares that `output` feeds `input` on the next step (gr_session_bind_state)."""
    C.check(lib.gr_session_bind_state(session._h(), output.encode(), input.encode()))


def bind_state_auto(session):
    """Pairs present*/past* outputs and inputs by name; returns how many pairs were bound."""
    n = ctypes.c_int()
    C.check(lib.gr_session_bind_state_auto(session._h(), ctypes.byref(n)))
    return n.value


def states(session):
    """The state bindings as [(output, input)]."""
    out = []
    for k in range(lib.gr_session_num_states(session._h())):
        o, i = ctypes.c_char_p(), ctypes.c_char_p()
        C.check(lib.gr_session_state_info(session._h(), k, ctypes.byref(o), ctypes.byref(i)))
        out.append((o.value.decode(), i.value.decode()))
    return out


def generate(session_or_path, prompt, max_new_tokens, *, beams=1, eos_id=None, pad_id=None, sample=False, top_k=0, top_p=1.0,
             temperature=1.0, seed=0, length_penalty=1.0, prompt_mode="auto", on_token=None, state=None, engine="auto",
             max_length=0, steps_per_launch=0, input_ids=None,
             attention_mask=None, position_ids=None, logits=None, return_stats=False, **load_options):
    """Generates max_new_tokens positions after `prompt` (int [batch, prompt_len]); returns int64
    [batch, prompt_len + max_new_tokens], the prompt first (and the stats with return_stats=True).

    session_or_path: a graft.Session, or a model path loaded with **load_options (graft.load's).
    beams: beam search width (Hugging Face's do_sample=False beam search, early stopping);
    eos_id: a row that emits it emits pad_id (default eos_id) from then on;
    sample, top_k, top_p, temperature, seed: sampling (temperature, then top-k, then top-p; graft's
        counter-based RNG, so a seed reproduces the ids);
    prompt_mode: "auto", "whole" (one step) or "tokens" (one step per token);
    on_token(step, tokens): called per generated position with one id per batch row;
    state: {output: input} pairs to bind; None binds the usual names when nothing is bound yet;
    engine: "auto" (the rewritten KV cache where the model allows it, checked against the per-length
    step once per session; else the reference), "reference" or "rewritten" (an error where it cannot run);
    max_length: cache positions of the rewritten engine (0: prompt_len + max_new_tokens);
    steps_per_launch: rewritten engine, greedy: positions decoded on the device per launch (0: 16);
    input_ids, attention_mask, position_ids, logits: the model's names when they differ.
    """
    from .session import Session, load
    owned = None
    if isinstance(session_or_path, Session):
        s = session_or_path
        if load_options:
            raise TypeError("graft.generate: load options %s apply to a model path only" % sorted(load_options))
    else:
        s = owned = load(os.fspath(session_or_path), **load_options)
    try:
        return _generate(s, prompt, max_new_tokens, beams, eos_id, pad_id, sample, top_k, top_p, temperature, seed,
                         length_penalty, prompt_mode, on_token, state, (input_ids, attention_mask, position_ids, logits),
                         return_stats, engine, max_length, steps_per_launch)
    finally:
        if owned is not None:
            owned.close()


def _generate(s, prompt, max_new_tokens, beams, eos_id, pad_id, sample, top_k, top_p, temperature, seed, length_penalty,
              prompt_mode, on_token, state, names, return_stats, engine="auto", max_length=0, steps_per_launch=0):
    p = np.asarray(prompt)
    if p.ndim != 2 or not np.issubdtype(p.dtype, np.integer):
        raise C.InvalidError("graft.generate: the prompt must be an integer array [batch, prompt_len], got %s %s" % (p.dtype, p.shape),
                             "GR_ERR_INVALID", -1)
    if prompt_mode not in _PROMPT_MODES:
        raise ValueError("graft.generate: prompt_mode=%r: expected one of %s" % (prompt_mode, ", ".join(map(repr, _PROMPT_MODES))))
    if state:
        for out_name, in_name in state.items():
            bind_state(s, out_name, in_name)
    elif lib.gr_session_num_states(s._h()) == 0 and bind_state_auto(s) == 0:
        raise C.InvalidError("graft.generate: no KV-cache state found in %s: pass state={'present...': 'past...'}" % s.path,
                             "GR_ERR_INVALID", -1)
    p = np.ascontiguousarray(p, dtype=np.int64)
    batch, plen = p.shape
    n = int(max_new_tokens)
    out = np.zeros((batch, plen + max(n, 0)), dtype=np.int64)
    o = C.GenerateOptions()
    lib.gr_generate_options_init(ctypes.byref(o))
    o.max_new_tokens, o.beams, o.sample = n, int(beams), int(bool(sample))
    o.eos_id = -1 if eos_id is None else int(eos_id)
    o.pad_id = -1 if pad_id is None else int(pad_id)
    o.top_k, o.top_p, o.temperature, o.seed = int(top_k), float(top_p), float(temperature), int(seed)
    o.length_penalty, o.prompt_mode = float(length_penalty), _PROMPT_MODES[prompt_mode]
    if engine not in _ENGINES:
        raise ValueError("graft.generate: engine=%r: expected one of %s" % (engine, ", ".join(map(repr, _ENGINES))))
    o.engine, o.max_length = _ENGINES[engine], int(max_length)
    if int(steps_per_launch) < 0:
        raise ValueError("graft.generate: steps_per_launch=%r must be >= 0 (0: the default)" % (steps_per_launch,))
    o.steps_per_launch = int(steps_per_launch)
    keep = [name.encode() if name else None for name in names]
    o.input_ids, o.attention_mask, o.position_ids, o.logits = keep
    errors = []
    if on_token is not None:
        def trampoline(_user, step, tokens, count):
            try:
                on_token(int(step), np.ctypeslib.as_array(tokens, shape=(count,)).copy())
            except BaseException as e:  # an exception cannot cross C: raised after the call
                errors.append(e)
        cb = C.TOKEN_FN(trampoline)
        o.on_token = cb
    st = C.GenerateStats()
    i64p = C.c_int64_p
    s._runs += 1  # the session runs: DeviceTensors of earlier runs are stale
    C.check(lib.gr_session_generate(s._h(), ctypes.byref(o), p.ctypes.data_as(i64p), batch, plen, out.ctypes.data_as(i64p),
                                    ctypes.byref(st)))
    if errors:
        raise errors[0]
    if return_stats:
        return out, GenerateStats({name: getattr(st, name) for name, _ in C.GenerateStats._fields_})
    return out
