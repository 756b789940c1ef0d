"""Plans of symbolic models at several bindings are exactly what they were.

A new binding runs the whole pass pipeline (docs/design.md §3a), and work that
makes that pipeline cheaper (allocation, cloning, fusion bookkeeping) must not
change any plan. `graft dump` prints the IR after every pass, every step and
every kernel's expressions, the memory plan and the segments; this test runs it
for the dynamic exports in tests/data/onnx/dyn at several bindings (dims of 1,
odd lengths, the largest, bf16) and compares the text with the dump the
pipeline printed before the 2026-11-24 new-binding cuts (tests/data/plan-golden,
gzip). A plan changed on purpose: regenerate with

    python3 tests/py/test_plan_golden.py --update   # GRAFT_BIN names the binary

and say in the commit why the plans changed.

Needs the graft CLI only.
"""
import difflib
import gzip
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gir_builder import graft_bin  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DYN = os.path.join(ROOT, "tests", "data", "onnx", "dyn")
GOLDEN = os.path.join(ROOT, "tests", "data", "plan-golden")

# (case, batch, seq, extra args)
CASES = [
    ("gpt2_dynamo", 1, 1, []),
    ("gpt2_dynamo", 1, 64, []),
    ("gpt2_dynamo", 2, 7, []),
    ("gpt2_dynamo", 8, 3, []),
    ("gpt2_dynamo", 1, 17, ["--precision", "bf16"]),
    ("bert_dynamo", 3, 5, []),
    ("llama_dynamo", 1, 9, []),
]


def _name(case, batch, seq, extra):
    tag = "_".join(a.lstrip("-") for a in extra)
    return "%s_b%d_s%d%s.txt.gz" % (case, batch, seq, "_" + tag if tag else "")


def _dump(case, batch, seq, extra):
    cmd = [graft_bin(), "dump", os.path.join(DYN, case, "model.onnx"), "--dim", "batch=%d" % batch,
           "--dim", "seq=%d" % seq] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "%s failed: %s" % (" ".join(cmd), r.stderr[-2000:])
    return r.stdout


@pytest.mark.parametrize("case,batch,seq,extra", CASES, ids=[_name(*c)[:-7] for c in CASES])
def test_plan_unchanged(case, batch, seq, extra):
    if not os.path.exists(graft_bin()):
        pytest.skip("graft CLI not built")
    with gzip.open(os.path.join(GOLDEN, _name(case, batch, seq, extra)), "rt") as f:
        want = f.read()
    got = _dump(case, batch, seq, extra)
    if got != want:
        diff = difflib.unified_diff(want.splitlines(), got.splitlines(), "golden", "now", lineterm="", n=2)
        pytest.fail("the plan of %s at batch %d seq %d %s changed:\n%s" % (case, batch, seq, " ".join(extra),
                                                                          "\n".join(list(diff)[:80])))


def test_golden_files_cover_the_cases():
    """Every golden file is one of the cases (a stale file would pin nothing)."""
    names = {_name(*c) for c in CASES}
    assert set(os.listdir(GOLDEN)) == names


if __name__ == "__main__" and "--update" in sys.argv:
    os.makedirs(GOLDEN, exist_ok=True)
    for c in CASES:
        text = _dump(*c)
        # mtime 0: the same dump gives the same bytes
        with open(os.path.join(GOLDEN, _name(*c)), "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
                f.write(text.encode())
        print("wrote", _name(*c), len(text), "chars")
