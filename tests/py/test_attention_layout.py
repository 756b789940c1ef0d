"""The fused attention reads Q, K, V and writes O in place (issue 15): compiled at bf16,
the tiny dynamic exports have no transpose or split copy kernel between the projections
and the attention, nor after it (passes/attention.c layouts, lower-gen.c operand views).
Counts kernels of the plan after fusion, as `graft dump` prints it."""
import os
import re
import subprocess

import pytest

from gir_builder import graft_bin

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fused_steps(model, batch, seq):
    path = os.path.join(ROOT, "tests/data/onnx/dyn", model, "model.onnx")
    r = subprocess.run([graft_bin(), "dump", path, "--dim", "batch=%d" % batch, "--dim", "seq=%d" % seq,
                        "--precision", "bf16"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    text = r.stdout + r.stderr
    section = text.split("== after fuse:")[1].split("\n== ")[0]
    return [line for line in section.splitlines() if line.startswith("step ")]


def kernel_args(line):
    m = re.search(r"args\(([^)]*)\)", line)
    return [a.strip()[1:] for a in m.group(1).split(",")] if m else []


@pytest.mark.parametrize("model", ["gpt2_dynamo", "bert_dynamo", "bert_torchscript", "llama_dynamo"])
@pytest.mark.parametrize("batch,seq", [(2, 16), (3, 37)])
def test_no_copies_around_attention(model, batch, seq):
    steps = fused_steps(model, batch, seq)
    attn = [s for s in steps if "libcall attention" in s]
    assert len(attn) == 2, "\n".join(steps)
    copies = [s for s in steps if re.search(r"kernel k\d+_(transpose|split)", s)]
    if model == "llama_dynamo":
        # Q and K go through the rotary embedding (elementwise kernels) in [B,H,S,D]: the
        # transposes feeding it stay (two per layer); V's and O's are gone
        assert len(copies) <= 4, "\n".join(copies)
        for c in copies:
            out = kernel_args(c)[-1]
            readers = [s for s in steps if "%" + out in s and s is not c]
            assert all("libcall attention" not in r for r in readers), c
    else:
        assert copies == [], "\n".join(copies)
    for a in attn:
        # O is written [B,S,H,D]: the transpose back is a view
        i = steps.index(a)
        assert "alias" in steps[i + 1], steps[i + 1]


def test_gpt2_reads_the_fused_projection():
    """q, k and v are column slices of c_attn's [B*S, 3*H*D] output: row stride 3*64."""
    steps = fused_steps("gpt2_dynamo", 2, 16)
    for a in [s for s in steps if "libcall attention" in s]:
        assert "q=3072/16/192 k=3072/16/192 v=3072/16/192 o=1024/16/64" in a, a
