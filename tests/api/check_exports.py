#!/usr/bin/env python3
"""libgraft.so exports exactly the functions include/graft.h declares.

Lists the shared library's defined dynamic symbols (nm -D --defined-only) and
compares them with the GR_API declarations of the public header: a symbol
exported but not declared is an internal one leaking out; one declared but not
exported is a public function someone forgot to mark GR_API.
Usage: check_exports.py LIBGRAFT_SO GRAFT_H
Prints `N passed, N failed` (one check per symbol).
"""
import re
import subprocess
import sys


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] in "TDBRVWi":
            syms.add(parts[2].split("@")[0])
    # symbols every shared object defines (loader bookkeeping), not ours
    return {s for s in syms if s not in ("_init", "_fini", "_edata", "_end", "__bss_start")}


def declared(header):
    text = open(header, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    names = set()
    for m in re.finditer(r"\bGR_API\b([^;{]*?)\b(gr_\w+)\s*\(", text):
        names.add(m.group(2))
    return names


def main():
    lib, header = sys.argv[1], sys.argv[2]
    exp, dec = exported(lib), declared(header)
    passed = failed = 0
    for s in sorted(exp | dec):
        if s in exp and s in dec:
            passed += 1
        elif s in exp:
            print(f"FAIL: {s} is exported by {lib} but not declared GR_API in {header}")
            failed += 1
        else:
            print(f"FAIL: {s} is declared GR_API in {header} but not exported by {lib}")
            failed += 1
    if not dec:
        print("FAIL: no GR_API declarations found (the check would be vacuous)")
        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
