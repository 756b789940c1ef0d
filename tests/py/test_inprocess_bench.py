"""bench/inprocess.py (the in-process scoreboard) on graft's simulator: one tiny workload,
eager / backend="graft" / graft.load, one process per workload; the JSONL rows and the
markdown table it writes. Needs torch and the ONNX exporter (skipped without them)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("onnxscript", reason="the dynamo ONNX exporter (onnxscript) is not installed")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "inprocess.py")


def test_inprocess_sim_tiny(tmp_path):
    out = tmp_path / "res"
    p = subprocess.run([sys.executable, BENCH, "--device", "sim", "--only", "tiny_mlp", "--out", str(out),
                        "--iters", "2", "--repeats", "1", "--warmup", "1"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = [json.loads(line) for line in open(out / "inprocess.jsonl")]
    env = rows[0]
    assert env["env"] and env["device"] == "sim" and env["torch"]
    runs = {r["variant"]: r for r in rows[1:]}
    assert set(runs) == {"eager", "graft", "graft.load"}, rows
    for v, r in runs.items():
        assert "error" not in r, r
        assert r["ok"] and r["err_vs_eager"] < 1e-4 and r["err_vs_eager_2"] < 1e-4, r
        assert r["ms_per_call"] > 0 and len(r["ms_samples"]) == 1
    assert runs["graft"]["graft_subgraphs"] >= 1
    assert runs["graft.load"]["graph_launches"] >= 1  # graph mode on the simulator
    md = (out / "inprocess.md").read_text()
    assert "| tiny_mlp | graft.load |" in md and "geomean vs reduce-overhead" in md


def test_inprocess_rejects_unknown_workload(tmp_path):
    p = subprocess.run([sys.executable, BENCH, "--device", "sim", "--only", "nope", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "unknown workload 'nope'" in p.stderr
