"""Runs exported models through `graft run` and compares with PyTorch's outputs:
the checking half of scripts/real-models-check.sh. Needs numpy and a graft
binary, no torch.

    python3 tests/py/check_real_models.py ROOT --graft build/bin/graft [--devices cuda,sim]
        [--modes eager,graph] [--timeout 60] [--budget 300] [--logs DIR] [--summary FILE] [--json FILE]

ROOT holds one directory per case with model.onnx and manifest.json (the
layout of tests/py/make_real_models.py and of tests/data/onnx/dyn/): the
manifest's "bindings" name each binding's input and output files, relative to
the case. ROOT/index.json, when present, adds the cases that were not
exported (with the reason) to the table.

Each case, binding, device and mode is one `graft run --input NAME=FILE ...
--device D --mode M --output-dir DIR` under --timeout; each output is compared
with PyTorch's by relative L2 error (pass: <= --tol, default 1e-3, for float
outputs; integer outputs must be equal) and max abs error, and graph mode's
output bytes with eager mode's. Every run's command, status, wall time, stdout
and stderr go to LOGS/<case>.<binding>.<device>-<mode>.log (graft's full error
message for a model that fails). Devices run in the order given, all cases on
the first before the next, and once --budget seconds are spent the remaining
runs are reported as skipped. Exit status: 0 when every run passed, 1 when any
failed or was skipped, 2 on bad arguments or an unreadable ROOT.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np


def out_file(name):
    """The file `graft run` writes an output to when no other output maps there (see `graft run --help`)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".npy"


def parse_outputs(stdout):
    """{output name: file name} from graft run's lines 'NAME  DTYPE[SHAPE] ... -> FILE'."""
    files = {}
    for line in stdout.splitlines():
        if " -> " in line and line.strip():
            files[line.split()[0]] = line.rsplit(" -> ", 1)[1].strip()
    return files


def compare(got, ref):
    """(relative L2 error, max abs error); inf when shapes differ."""
    if got.shape != ref.shape:
        return float("inf"), float("inf")
    g, r = got.astype(np.float64), ref.astype(np.float64)
    n = np.linalg.norm(r)
    d = g - r
    if d.size == 0:
        return 0.0, 0.0
    with np.errstate(invalid="ignore"):
        rel = float(np.linalg.norm(d) / (n if n else 1.0))
        mx = float(np.max(np.abs(d)))
    return (rel if np.isfinite(rel) else float("inf")), (mx if np.isfinite(mx) else float("inf"))


def graft_message(stderr, stdout):
    """The first line of graft's error message ('graft: ' stripped), notes skipped."""
    for line in (stderr + "\n" + stdout).splitlines():
        s = line.strip()
        if not s or s.startswith("graft: note:"):
            continue
        return s[len("graft: "):] if s.startswith("graft: ") else s
    return ""


def load_cases(root):
    cases, missing = [], []
    for d in sorted(os.listdir(root)):
        mp = os.path.join(root, d, "manifest.json")
        if os.path.isfile(mp):
            with open(mp) as f:
                m = json.load(f)
            m["_dir"] = os.path.join(root, d)
            m.setdefault("case", d)
            cases.append(m)
    ip = os.path.join(root, "index.json")
    if os.path.isfile(ip):
        with open(ip) as f:
            index = json.load(f)
        have = {c["case"] for c in cases}
        missing = [c for c in index.get("cases", []) if c.get("status") != "exported" and c.get("case") not in have]
    return cases, missing


class Runner:
    def __init__(self, a):
        self.a = a
        self.t0 = time.time()

    def left(self):
        return self.a.budget - (time.time() - self.t0)

    def run(self, case, binding, device, mode, out_dir):
        """One graft run. Returns a result dict; outputs are read from out_dir."""
        a = self.a
        model = os.path.join(case["_dir"], "model.onnx")
        cmd = [a.graft, "run", model, "--device", device, "--mode", mode, "--output-dir", out_dir]
        if a.cache_dir:
            cmd += ["--cache-dir", a.cache_dir]
        for name, f in binding["inputs"].items():
            cmd += ["--input", f"{name}={os.path.join(case['_dir'], f)}"]
        res = {"case": case["case"], "binding": binding["name"], "device": device, "mode": mode}
        left = self.left()
        if left < 1:
            res.update(status="skipped", message="time budget spent")
            return res, None
        timeout = min(a.timeout, left)
        t = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            rc, so, se = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc = None
            so = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            se = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        except OSError as e:
            rc, so, se = -1, "", f"cannot start graft: {e}"
        res["wall_s"] = round(time.time() - t, 3)
        outs = {}
        if rc is None:
            res.update(status="timeout", message=f"no result within {timeout:.0f}s")
        elif rc != 0:
            msg = graft_message(se, so) or f"exit status {rc}"
            res.update(status="error", rc=rc, message=msg.replace(model + ": ", "", 1))  # the row names the model
        else:
            res.update(status="ok", outputs={})
            files = parse_outputs(so)
            for name, ref_file in binding["outputs"].items():
                path = os.path.join(out_dir, files.get(name, out_file(name)))
                o = {}
                try:
                    got = np.load(path)
                    outs[name] = got
                    ref = np.load(os.path.join(case["_dir"], ref_file))
                    rel, mx = compare(got, ref)
                    o.update(rel_err=rel, max_abs=mx, shape=list(got.shape))
                    if got.shape != ref.shape:
                        o["fail"] = f"shape {list(got.shape)}, PyTorch's {list(ref.shape)}"
                    elif np.issubdtype(ref.dtype, np.floating):
                        if not rel <= a.tol:
                            o["fail"] = f"rel err {rel:.3e} > {a.tol:g}"
                    elif not np.array_equal(got, ref):
                        o["fail"] = "integer output differs"
                except (OSError, ValueError) as e:
                    o["fail"] = f"no output file: {e}"
                res["outputs"][name] = o
            fails = [f"{n}: {o['fail']}" for n, o in res["outputs"].items() if "fail" in o]
            if fails:
                res.update(status="mismatch", message="; ".join(fails))
        if a.logs:
            with open(os.path.join(a.logs, f"{case['case']}.{binding['name']}.{device}-{mode}.log"), "w") as f:
                f.write("$ " + " ".join(cmd) + "\n")
                f.write(f"exit status: {rc if rc is not None else 'timeout'}  wall: {res['wall_s']}s\n")
                f.write(json.dumps({k: v for k, v in res.items() if k != "case"}, indent=1) + "\n")
                f.write("---- stdout\n" + so + "\n---- stderr\n" + se + "\n")
        return res, outs


def fmt_err(r):
    if r is None:
        return "-"
    if r["status"] in ("ok", "mismatch"):
        worst = max((o.get("rel_err", float("inf")) for o in r["outputs"].values()), default=0.0)
        mx = max((o.get("max_abs", float("inf")) for o in r["outputs"].values()), default=0.0)
        return f"{worst:.1e}/{mx:.1e}" + ("" if r["status"] == "ok" else " FAIL")
    return r["status"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="directory of cases (each with model.onnx and manifest.json)")
    ap.add_argument("--graft", default=os.environ.get("GRAFT", "build/bin/graft"))
    ap.add_argument("--devices", default="cuda", help="comma-separated, run in this order (cuda, sim)")
    ap.add_argument("--modes", default="eager,graph")
    ap.add_argument("--cases", default="", help="comma-separated subset of the cases (default all)")
    ap.add_argument("--bindings", default="all", help="'all', 'first', or a comma-separated list of names")
    ap.add_argument("--tol", type=float, default=1e-3, help="relative L2 error allowed for float outputs")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per graft run")
    ap.add_argument("--budget", type=float, default=300, help="seconds for all runs; the rest are skipped")
    ap.add_argument("--cache-dir", default="", help="graft's --cache-dir (default graft's own)")
    ap.add_argument("--logs", default="", help="directory for one log per run (created)")
    ap.add_argument("--summary", default="", help="also write the table here")
    ap.add_argument("--json", default="", help="write every result here")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.root):
        print(f"check_real_models: {a.root}: not a directory", file=sys.stderr)
        return 2
    if not (os.path.isfile(a.graft) and os.access(a.graft, os.X_OK)):
        print(f"check_real_models: {a.graft}: no graft binary there (--graft)", file=sys.stderr)
        return 2
    try:
        cases, missing = load_cases(a.root)
    except (OSError, ValueError) as e:
        print(f"check_real_models: {a.root}: {e}", file=sys.stderr)
        return 2
    if a.cases:
        want = set(a.cases.split(","))
        cases = [c for c in cases if c["case"] in want]
        missing = [c for c in missing if c["case"] in want]
    if not cases and not missing:
        print(f"check_real_models: {a.root}: no case (no */manifest.json)", file=sys.stderr)
        return 2
    if a.logs:
        os.makedirs(a.logs, exist_ok=True)
    devices = [d for d in a.devices.split(",") if d]
    modes = [m for m in a.modes.split(",") if m]

    def bindings_of(c):
        bs = c.get("bindings", [])
        if a.bindings == "first":
            return bs[:1]
        if a.bindings != "all":
            names = set(a.bindings.split(","))
            return [b for b in bs if b["name"] in names]
        return bs

    runner = Runner(a)
    results = []  # one per case, binding and device: {"runs": {mode: result}, "bits": ...}
    work = tempfile.mkdtemp(prefix="graft-real-")
    try:
        for device in devices:
            for c in cases:
                for b in bindings_of(c):
                    row = {"case": c["case"], "model": c.get("model", c["case"]),
                           "exporter": c.get("exporter", "?"), "binding": b["name"],
                           "device": device, "runs": {}, "export_mismatch": b.get("export_mismatch")}
                    outs = {}
                    for mode in modes:
                        od = os.path.join(work, f"{c['case']}.{b['name']}.{device}-{mode}")
                        r, o = runner.run(c, b, device, mode, od)
                        row["runs"][mode] = r
                        outs[mode] = o
                        shutil.rmtree(od, ignore_errors=True)
                        print(f"{c['case']:<28} {b['name']:<8} {device:<4} {mode:<5} {r['status']:<8} "
                              f"{fmt_err(r) if r['status'] in ('ok', 'mismatch') else r.get('message', '')[:100]}"
                              f"  ({r.get('wall_s', 0):.1f}s)", flush=True)
                    if outs.get("eager") and outs.get("graph"):
                        e, g = outs["eager"], outs["graph"]
                        row["bits"] = "same" if all(
                            n in g and e[n].dtype == g[n].dtype and e[n].shape == g[n].shape
                            and e[n].tobytes() == g[n].tobytes() for n in e) else "DIFFER"
                    results.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    lines = table(results, missing, modes, a) + about(cases)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tol": a.tol, "results": results, "not_exported": missing}, f, indent=1)
            f.write("\n")
    bad = any(r["status"] != "ok" for row in results for r in row["runs"].values())
    bad = bad or any(row.get("bits") == "DIFFER" for row in results)
    return 1 if bad else 0


def about(cases):
    """One line per case from its manifest: what built it, its size, how the export went."""
    out = []
    for c in cases:
        bits = [str(c[k]) for k in ("source", "exporter_call") if c.get(k)]
        if c.get("nodes") is not None:
            bits.append(f"{c['nodes']} nodes, {len(c.get('ops', []))} op types")
        if c.get("export_s") is not None:
            bits.append(f"exported in {c['export_s']}s")
        checks = [b["check"] for b in c.get("bindings", []) if "check" in b]
        errs = [k["rel_err"] for k in checks if k.get("rel_err") is not None]
        if errs:
            bits.append(f"{checks[0]['runtime']} max rel err {max(errs):.1e}")
        if c.get("notes"):
            bits.append("; ".join(c["notes"]))
        if bits:
            out.append(f"  {c['case']}: " + "; ".join(bits))
    return ["cases:", *out] if out else []


def table(results, missing, modes, a):
    """The summary: one row per case, binding and device; errors are relative L2 / max abs
    over the worst output; bits: graph mode's outputs bit-identical to eager's."""
    hdr = ["model", "exporter", "binding", "dev", "graft", *[f"{m} err" for m in modes], "graph==eager",
           *[f"{m} s" for m in modes]]
    rows = []
    for row in results:
        runs = row["runs"]
        status = "ok"
        for r in runs.values():
            if r["status"] in ("error", "timeout"):
                status = r.get("message", r["status"])
                break
        rows.append([row["model"], str(row["exporter"]), row["binding"], row["device"], status[:80],
                     *[fmt_err(runs.get(m)) for m in modes], row.get("bits", "-"),
                     *[(f"{runs[m]['wall_s']:.2f}" if m in runs and "wall_s" in runs[m] else "-") for m in modes]])
    exported = {row["model"] for row in results}
    for c in missing:
        model = c.get("model") or c["case"]
        # a model exported with the other exporter: this row says why the first was not used
        prefix = "other exporter ok; " if model in exported else ""
        rows.append([model, str(c.get("exporter") or "-"), "-", "-",
                     f"{prefix}{c.get('status', 'not exported')}: {c.get('reason', '')}"[:80],
                     *["-" for _ in modes], "-", *["-" for _ in modes]])
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    out = [f"errors: relative L2 / max abs vs PyTorch, worst output; pass: rel <= {a.tol:g} (float), equal (integer)",
           "  ".join(h.ljust(w) for h, w in zip(hdr, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
    n = len(results)
    ok = sum(all(r["status"] == "ok" for r in row["runs"].values()) and row.get("bits") != "DIFFER"
             for row in results)
    skipped = sum(any(r["status"] == "skipped" for r in row["runs"].values()) for row in results)
    out.append(f"passed {ok} of {n} case/binding/device rows ({skipped} with runs skipped: time budget); "
               f"{len(missing)} not exported")
    warn = [f"  {row['case']} {row['binding']}: the export itself disagrees with PyTorch: {row['export_mismatch']}"
            for row in results if row.get("export_mismatch")]
    if warn:
        out += ["exports that onnxruntime does not match to PyTorch either (graft is not to blame there):", *warn]
    return out


if __name__ == "__main__":
    sys.exit(main())
