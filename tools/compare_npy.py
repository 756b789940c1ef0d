#!/usr/bin/env python3
"""Compares the .npy outputs in two folders: relative error ||a-b||/||b|| per
output and whether the bits are identical. Exit 1 if any error exceeds --tol
or --bitwise is given and bits differ."""
import argparse
import glob
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b", help="reference")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--bitwise", action="store_true")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    bad = 0
    files = sorted(glob.glob(os.path.join(args.b, "*.npy")))
    if not files:
        print(f"{args.label}: no outputs in {args.b}")
        return 1
    for fb in files:
        name = os.path.basename(fb)
        fa = os.path.join(args.a, name)
        if not os.path.exists(fa):
            print(f"{args.label} {name}: missing in {args.a}")
            bad += 1
            continue
        a, b = np.load(fa), np.load(fb)
        if a.shape != b.shape:
            print(f"{args.label} {name}: shape {a.shape} vs {b.shape}")
            bad += 1
            continue
        same = a.tobytes() == b.tobytes()
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        # NaNs must sit at the same places; the error is measured over the rest
        nan = bool((np.isnan(a64) != np.isnan(b64)).any())
        keep = ~(np.isnan(a64) | np.isnan(b64))
        a64, b64 = a64[keep], b64[keep]
        nb = np.linalg.norm(b64)
        err = float(np.linalg.norm(a64 - b64) / (nb if nb > 0 else 1.0))
        ok = (not nan) and err <= args.tol and (same or not args.bitwise)
        print(f"{args.label} {name}: rel_err={err:.3e} bitwise={'yes' if same else 'no'} {'PASS' if ok else 'FAIL'}")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
