"""Helpers for the Python tests: write a small .gir graph from numpy arrays,
run it with `graft run`, read the outputs back.

    g = Graph()
    a = g.input(np.ones((2, 3), np.float32))
    y = g.node("add", a, g.input(np.ones(3, np.float32)))
    g.output(y)
    (out,) = g.run(tmp_path)

Inputs become `input` statements and .npy files passed with --input; every
value gets a fresh name v<N> so output files (out/<name>.npy) never collide.
The graft binary comes from $GRAFT_BIN (set by tests/cli.cmake), else from
the usual build directories.
"""
import os
import shutil
import subprocess

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# numpy dtype <-> .gir dtype name (bf16 has no numpy type: it is reached with cast)
NP_TO_GIR = {
    np.dtype(np.float32): "f32",
    np.dtype(np.float16): "f16",
    np.dtype(np.float64): "f64",
    np.dtype(np.int64): "i64",
    np.dtype(np.int32): "i32",
    np.dtype(np.int8): "i8",
    np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "bool",
}
GIR_TO_NP = {v: k for k, v in NP_TO_GIR.items()}
GIR_TO_NP["bf16"] = np.dtype(np.float32)  # graft run writes bf16 outputs as f32


def graft_bin():
    env = os.environ.get("GRAFT_BIN")
    if env:
        return os.path.abspath(env)
    for d in ("build-cli", "build", "build-asan", "build-sim"):
        p = os.path.join(ROOT, d, "bin", "graft")
        if os.path.exists(p):
            return p
    return shutil.which("graft") or os.path.join(ROOT, "build", "bin", "graft")


def run_graft(*args, cwd=None, timeout=600):
    """Runs the graft binary; returns the CompletedProcess (text mode)."""
    if not os.path.exists(graft_bin()):
        raise FileNotFoundError("graft binary not found at %s (set GRAFT_BIN or build graft_cli)" % graft_bin())
    return subprocess.run([graft_bin()] + [str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def fmt_float(v):
    v = float(v)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    s = repr(v)
    return s if any(c in s for c in ".en") else s + ".0"


def fmt_attr(v):
    """Python value -> .gir attribute text. Floats keep a '.' so that a list
    with a float is a float list; np integer types count as ints."""
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return fmt_float(v)
    if isinstance(v, str):
        return '"%s"' % v
    if isinstance(v, (list, tuple)):
        if any(isinstance(x, (float, np.floating)) for x in v):
            return "[" + ", ".join(fmt_float(x) for x in v) + "]"
        return "[" + ", ".join(str(int(x)) for x in v) + "]"
    raise TypeError("attribute value %r" % (v,))


def type_str(dtype, shape):
    return "%s[%s]" % (NP_TO_GIR[np.dtype(dtype)], ", ".join(str(int(d)) for d in shape))


class GraftError(Exception):
    def __init__(self, proc, gir):
        self.proc = proc
        self.stderr = proc.stderr
        self.returncode = proc.returncode
        super().__init__("graft run failed (exit %d): %s\n--- graph ---\n%s" % (proc.returncode, proc.stderr.strip(),
                                                                               gir))

    @property
    def unsupported(self):
        s = self.stderr.lower()
        return "unsupported" in s or "not supported" in s or "not implemented" in s


class Graph:
    def __init__(self):
        self.lines = ["graft 1"]
        self.arrays = {}  # input name -> array
        self.outputs = []
        self.n = 0

    def _fresh(self):
        self.n += 1
        return "v%d" % self.n

    def input(self, arr, host=False, name=None):
        arr = np.asarray(arr)
        name = name or self._fresh()
        self.arrays[name] = arr
        self.lines.append("input %s: %s%s" % (name, type_str(arr.dtype, arr.shape), " @host" if host else ""))
        return name

    def const(self, arr, dtype=None):
        """An inline constant (small arrays only)."""
        arr = np.asarray(arr, dtype=dtype)
        name = self._fresh()
        flat = arr.reshape(-1)
        if arr.dtype == np.bool_:
            body = ", ".join("true" if x else "false" for x in flat)
        elif arr.dtype.kind == "f":
            body = ", ".join(fmt_float(x) for x in flat)
        else:
            body = ", ".join(str(int(x)) for x in flat)
        self.lines.append("const %s: %s = [%s]" % (name, type_str(arr.dtype, arr.shape), body))
        return name

    def node(self, op, *inputs, n_out=1, **attrs):
        """Adds `outs = op(inputs, attrs)`; None in inputs is written `_`.
        Returns a name, or a list of names when n_out > 1."""
        outs = [self._fresh() for _ in range(n_out)]
        parts = ["_" if i is None else i for i in inputs]
        parts += ["%s=%s" % (k, fmt_attr(v)) for k, v in attrs.items()]
        self.lines.append("%s = %s(%s)" % (", ".join(outs), op, ", ".join(parts)))
        return outs[0] if n_out == 1 else outs

    def output(self, *names):
        self.outputs.extend(names)

    def text(self):
        return "\n".join(self.lines + ["output " + ", ".join(self.outputs)]) + "\n"

    def write(self, tmp_path, stem="g"):
        """Writes the graph and its input files; returns (gir path, --input args)."""
        tmp_path = str(tmp_path)
        gir = os.path.join(tmp_path, stem + ".gir")
        with open(gir, "w") as f:
            f.write(self.text())
        args = []
        for name, arr in self.arrays.items():
            p = os.path.join(tmp_path, "%s_%s.npy" % (stem, name))
            np.save(p, np.array(arr, order="C", copy=True))  # (ascontiguousarray makes 0-d arrays 1-d)
            args += ["--input", "%s=%s" % (name, p)]
        return gir, args

    def run(self, tmp_path, mode=None, device="sim", extra=(), stem="g"):
        """Runs the graph; returns the outputs as numpy arrays, in order.
        Raises GraftError when graft fails."""
        gir, args = self.write(tmp_path, stem)
        out_dir = os.path.join(str(tmp_path), stem + "_out" + ("_" + mode if mode else ""))
        cmd = ["run", gir, "--output-dir", out_dir, "--device", device] + args + list(extra)
        if mode:
            cmd += ["--mode", mode]
        proc = run_graft(*cmd)
        if proc.returncode != 0:
            raise GraftError(proc, self.text())
        return [np.load(os.path.join(out_dir, name + ".npy")) for name in self.outputs]


def run_op(tmp_path, op, inputs, n_out=1, **attrs):
    """One op on numpy inputs; returns its output(s) (list when n_out > 1)."""
    g = Graph()
    names = [None if x is None else g.input(x) for x in inputs]
    outs = g.node(op, *names, n_out=n_out, **attrs)
    outs = outs if isinstance(outs, list) else [outs]
    g.output(*outs)
    res = g.run(tmp_path)
    return res if n_out > 1 else res[0]


# ---- comparisons -----------------------------------------------------------------------
def rel_err(out, ref):
    """||out - ref|| / ||ref|| in float64 (absolute when ref is all zeros);
    NaN and inf must sit at the same places with the same sign."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, "shape %s, expected %s" % (out.shape, ref.shape)
    nan_o, nan_r = np.isnan(out), np.isnan(ref)
    assert (nan_o == nan_r).all(), "NaN at different places: out %s ref %s" % (np.argwhere(nan_o)[:5].tolist(),
                                                                             np.argwhere(nan_r)[:5].tolist())
    inf_o, inf_r = np.isinf(out), np.isinf(ref)
    assert (inf_o == inf_r).all() and (out[inf_o] == ref[inf_r]).all(), "inf at different places"
    keep = ~(nan_r | inf_r)
    o, r = out[keep], ref[keep]
    if o.size == 0:
        return 0.0
    num = np.linalg.norm(o - r)
    den = np.linalg.norm(r)
    return float(num / den) if den > 0 else float(num)


def assert_close(out, ref, tol, what=""):
    err = rel_err(out, ref)
    assert err <= tol, "%s: relative error %.3g > tolerance %.1g" % (what, err, tol)


def assert_exact(out, ref, what=""):
    """Bit-exact: same dtype, shape and bytes (NaNs compare equal)."""
    out, ref = np.asarray(out), np.asarray(ref)
    assert out.dtype == ref.dtype, "%s: dtype %s, expected %s" % (what, out.dtype, ref.dtype)
    assert out.shape == ref.shape, "%s: shape %s, expected %s" % (what, out.shape, ref.shape)
    if out.dtype.kind == "f":
        # -0.0 and 0.0 compare equal, so the sign bit is compared too; NaNs match any NaN
        same = ((out == ref) & (np.signbit(out) == np.signbit(ref))) | (np.isnan(out) & np.isnan(ref))
    else:
        same = out == ref
    if not same.all():
        bad = np.argwhere(~same)[:5]
        raise AssertionError("%s: %d of %d elements differ, first at %s: got %s, expected %s" % (
            what, int((~same).sum()), same.size, bad.tolist(), [out[tuple(i)] for i in bad],
            [ref[tuple(i)] for i in bad]))
