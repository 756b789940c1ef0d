#!/usr/bin/env python3
"""ONNX backend node tests through the graft CLI.

Runs the node test cases that ship with the `onnx` pip package for every op
graft imports: each case's model and data sets go through
`graft run model.onnx --input name=x.npy ... --output-dir d --device sim`, and
every output is compared with the expected one.

The cases come from onnx/backend/test/data/node/*/ (model.onnx with
test_data_set_*/input_*.pb, output_*.pb) when the installed wheel has them;
wheels without that folder still carry the generators, and the cases are
built from onnx.backend.test.case.node.collect_testcases instead.

A case whose ops are all supported is either passed or failed; a case graft
rejects as unsupported (an attribute combination, a dtype) is listed as
skipped with graft's reason. Graph inputs that graft takes as attributes
(axes, shapes, k, ...: graft needs them at import time) are baked into the
model as initializers from the case's data, and the case is run again. Cases of
ops graft only folds at import time (FOLD_ONLY; none today: CumSum and GatherND
run on run-time tensors) run with all inputs baked. Cases written at an opset newer than graft's newest (21) run at 21 when
only dtypes were added since (see at_graft_opset); If / Loop / Scan cases written at opsets 9..12
are converted to 13 (control_at_graft_opset). Prints the passes, the failures with the reason,
the skips, and a final line "N passed, N failed, N skipped"; exits 1 on any
failure.

usage: onnx_conformance.py [--graft build/bin/graft] [--filter REGEX] [--device sim] [-v]
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# ONNX ops the frontend maps (src/frontend/onnx/onnx-ops.c, plus folded-only ones)
SUPPORTED = {
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Tanh", "Erf", "Sigmoid",
    "Relu", "Selu", "Gelu", "Sin", "Cos", "Min", "Max", "Where", "Equal", "Less", "LessOrEqual", "Greater",
    "GreaterOrEqual", "Not", "And", "Or", "IsNaN", "Cast", "MatMul", "Gemm", "Softmax", "LayerNormalization",
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Concat",
    "Slice", "Split", "Gather", "GatherElements", "Expand", "Shape", "Size", "ConstantOfShape", "Range", "Constant",
    "Identity", "Trilu", "Einsum", "Dropout", "CastLike", "CumSum", "GatherND", "SplitToSequence", "SequenceAt",
}
# ...and every op of the frontend's table, so a newly mapped op is tested at once
with open(os.path.join(ROOT, "src", "frontend", "onnx", "onnx-ops.c"), encoding="utf-8") as _f:
    SUPPORTED |= set(re.findall(r'^\s*\{"([A-Za-z]+)", GR_OP_', _f.read(), re.M))
# ops graft evaluates only at import time (no IR op): their cases run with every
# graph input baked into the model as an initializer, so the import-time folder
# computes the whole graph
FOLD_ONLY = set()
GRAFT_DTYPES = {np.dtype(t) for t in (np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_)}
# op-specific tolerances on top of the defaults (transcendental approximations, accumulation order)
TOL = {"float32": (1e-4, 1e-5), "float64": (1e-7, 1e-9), "float16": (2e-3, 2e-3)}


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def as_array(x):
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    try:
        return np.asarray(x)
    except ValueError:  # sequences, maps: not tensors (skipped as dtype object)
        return np.empty(0, dtype=object)


def load_cases():
    """Yields (name, model, [(inputs, outputs)], rtol, atol)."""
    node_dir = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    if os.path.isdir(node_dir):
        for d in sorted(glob.glob(os.path.join(node_dir, "*"))):
            path = os.path.join(d, "model.onnx")
            if not os.path.exists(path):
                continue
            model = onnx.load(path)
            sets = []
            for ds in sorted(glob.glob(os.path.join(d, "test_data_set_*"))):
                def read(kind):
                    out = []
                    for f in sorted(glob.glob(os.path.join(ds, f"{kind}_*.pb")),
                                    key=lambda p: int(re.findall(r"(\d+)\.pb$", p)[0])):
                        t = onnx.TensorProto()
                        with open(f, "rb") as fh:
                            t.ParseFromString(fh.read())
                        out.append(numpy_helper.to_array(t))
                    return out
                sets.append((read("input"), read("output")))
            yield os.path.basename(d), model, sets, None, None
        return
    import warnings
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    for c in sorted(cases, key=lambda c: c.name):
        if c.model is None or c.data_sets is None:
            continue
        sets = [([as_array(x) for x in i], [as_array(x) for x in o]) for i, o in c.data_sets]
        yield c.name, c.model, sets, getattr(c, "rtol", None), getattr(c, "atol", None)


def ops_of(model):
    ops = set()
    for n in model.graph.node:
        ops.add((n.domain or "", n.op_type))
    return ops


def compare(got, want, rtol, atol):
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    if want.dtype.kind in "fc":
        r, a = TOL.get(str(want.dtype), (1e-4, 1e-5))
        r, a = max(r, rtol or 0), max(a, atol or 0)
        g, w = got.astype(np.float64), want.astype(np.float64)
        if not np.array_equal(np.isnan(g), np.isnan(w)):
            return "NaN positions differ"
        ok = np.isnan(w) | np.isclose(g, w, rtol=r, atol=a, equal_nan=True)
        if not ok.all():
            i = np.argwhere(~ok)[0]
            return f"mismatch at {tuple(i)}: got {g[tuple(i)]!r}, expected {w[tuple(i)]!r} (rtol {r}, atol {a})"
        return None
    if want.dtype == np.bool_:
        got = got.astype(np.bool_)
    if not np.array_equal(got, want):
        return "values differ"
    return None


CONST_RE = re.compile(r"value '([^']+)'\) must be a constant at import time")


def bake(model, name, arr):
    """The model with graph input `name` turned into an initializer holding arr."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name != name]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
    return m


def run_set(graft, device, model, inputs, outputs, rtol, atol, case_dir, k):
    """One data set; returns (status, reason, baked input names)."""
    baked = []
    given = dict(zip([i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}],
                     inputs))
    while True:
        model_path = os.path.join(case_dir, f"model{k}.onnx")
        onnx.save(model, model_path)
        args = [graft, "run", model_path, "--output-dir", os.path.join(case_dir, f"out{k}"), "--device", device]
        for name_in, arr in given.items():
            arr = np.asarray(arr)
            if arr.dtype not in GRAFT_DTYPES:
                return "skip", f"input dtype {arr.dtype} is not a graft dtype", baked
            f = os.path.join(case_dir, f"in{k}_{sanitize(name_in)}.npy")
            np.save(f, arr)
            args += ["--input", f"{name_in}={f}"]
        try:
            r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "fail", "timed out", baked
        if r.returncode != 0:
            msg = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
            m = CONST_RE.search(msg)
            if m and m.group(1) in given and len(baked) < 8:
                # graft takes this input as an attribute: the test's data makes it a constant
                name = m.group(1)
                model = bake(model, name, given.pop(name))
                baked.append(name)
                continue
            if "not supported" in msg or "unsupported" in msg.lower():
                return "skip", msg, baked
            return "fail", f"graft exited {r.returncode}: {msg}", baked
        break
    for out, want in zip(model.graph.output, outputs):
        want = np.asarray(want)
        if want.dtype not in GRAFT_DTYPES:
            return "skip", f"output dtype {want.dtype} is not a graft dtype", baked
        path = os.path.join(case_dir, f"out{k}", sanitize(out.name) + ".npy")
        if not os.path.exists(path):
            return "fail", f"output '{out.name}' was not written", baked
        err = compare(np.load(path), want, rtol, atol)
        if err:
            return "fail", f"output '{out.name}': {err}", baked
    return "pass", None, baked


GRAFT_OPSET_MAX = 21  # src/frontend/onnx/onnx-impl.h OX_OPSET_MAX


def at_graft_opset(model):
    """Cases written at an opset newer than graft imports, rewritten to graft's
    newest when that changes nothing: opsets 22..25 only added dtypes (bfloat16,
    float8/float4, int4/int2) to the ops graft maps, none of which graft has, so
    for graft's dtypes the op is the same. Returns (model, note)."""
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > GRAFT_OPSET_MAX:
            m = onnx.ModelProto()
            m.CopyFrom(model)
            for oo in m.opset_import:
                if oo.domain in ("", "ai.onnx"):
                    oo.version = GRAFT_OPSET_MAX
            return m, f"opset {o.version} run as {GRAFT_OPSET_MAX}"
    return model, None


# control-flow cases ONNX wrote at an opset older than graft's oldest (13): converted to 13 with
# onnx.version_converter (which rewrites what changed, e.g. Unsqueeze's axes becoming an input);
# If / Loop / Scan keep their tensor semantics across those opsets from 9 on (Scan-8 had a batch
# axis: its cases stay skipped)
CONTROL_OPS = {"If", "Loop", "Scan"}
GRAFT_OPSET_MIN = 13


def control_at_graft_opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and 9 <= o.version < GRAFT_OPSET_MIN and any(op in CONTROL_OPS for _, op in ops_of(model)):
            from onnx import version_converter
            try:
                return version_converter.convert_version(model, GRAFT_OPSET_MIN), f"opset {o.version} converted to {GRAFT_OPSET_MIN}"
            except Exception:  # noqa: BLE001 - the converter cannot: left as it is (graft refuses it, a skip)
                return model, None
    return model, None


def run_case(graft, device, name, model, sets, rtol, atol, workdir):
    """Returns ("pass" | "fail" | "skip", reason)."""
    model, opset_note = at_graft_opset(model)
    if opset_note is None:
        model, opset_note = control_at_graft_opset(model)
    unsupported = [f"{d}::{o}" if d else o for d, o in ops_of(model) if d not in ("", "ai.onnx") or o not in SUPPORTED]
    if unsupported:
        return "skip", "ops not in graft: " + ", ".join(sorted(unsupported))
    case_dir = os.path.join(workdir, name)
    os.makedirs(case_dir, exist_ok=True)
    note = None
    fold_only = any(o in FOLD_ONLY for d, o in ops_of(model) if d in ("", "ai.onnx"))
    for k, (inputs, outputs) in enumerate(sets):
        if fold_only:
            inits = {t.name for t in model.graph.initializer}
            names = [i.name for i in model.graph.input if i.name not in inits]
            for name_in, arr in zip(names, inputs):
                if np.asarray(arr).dtype not in GRAFT_DTYPES:
                    return "skip", f"input dtype {np.asarray(arr).dtype} is not a graft dtype"
                model = bake(model, name_in, arr)
            inputs = []
            note = "all inputs baked as constants (op folded at import time)"
        status, why, baked = run_set(graft, device, model, inputs, outputs, rtol, atol, case_dir, k)
        if status != "pass":
            return status, why
        if baked and not fold_only:
            note = "inputs baked as constants: " + ", ".join(baked)
    if opset_note:
        note = opset_note + (f"; {note}" if note else "")
    return "pass", note


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--graft", default=os.environ.get("GRAFT_BIN", os.path.join(ROOT, "build", "bin", "graft")))
    ap.add_argument("--filter", default=None, help="only cases whose name matches this regex")
    ap.add_argument("--device", default="sim")
    ap.add_argument("-v", "--verbose", action="store_true", help="also list cases skipped for ops graft lacks")
    args = ap.parse_args()
    if not os.path.exists(args.graft):
        print(f"onnx_conformance: graft CLI not found at {args.graft} (build the graft_cli target or pass --graft)")
        print("0 passed, 0 failed, 0 skipped")
        return 0
    passed, failed, skipped, no_op = [], [], [], 0
    with tempfile.TemporaryDirectory(prefix="graft-onnx-conf-") as work:
        for name, model, sets, rtol, atol in load_cases():
            if args.filter and not re.search(args.filter, name):
                continue
            status, why = run_case(args.graft, args.device, name, model, sets, rtol, atol, work)
            if status == "pass":
                passed.append(name)
                print(f"PASS {name}" + (f" ({why})" if why else ""))
            elif status == "fail":
                failed.append((name, why))
                print(f"FAIL {name}: {why}")
            elif why.startswith("ops not in graft"):
                no_op += 1
                if args.verbose:
                    print(f"SKIP {name}: {why}")
            else:
                skipped.append((name, why))
                print(f"SKIP {name}: {why}")
            sys.stdout.flush()
    print(f"\n{len(skipped)} supported-op cases skipped (unsupported attribute combination or dtype); "
          f"{no_op} cases of ops graft does not import were not run")
    if failed:
        print("failures:")
        for name, why in failed:
            print(f"  {name}: {why}")
    print(f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
