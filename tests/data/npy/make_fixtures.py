#!/usr/bin/env python3
"""Writes the malformed (and a few unusual but valid) .npy fixtures of this
folder. Each bad file carries one defect; test_cli.py expects the message
fragment listed in FIXTURES. Run from anywhere; needs only the standard library."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = b"\x93NUMPY"


def npy(header, data=b"", version=(1, 0), pad=True):
    h = header.encode("latin1")
    if pad:
        pre = 10 if version[0] == 1 else 12
        total = pre + len(h) + 1
        h = h + b" " * ((-total) % 64) + b"\n"
    if version[0] == 1:
        prefix = MAGIC + bytes(version) + struct.pack("<H", len(h))
    else:
        prefix = MAGIC + bytes(version) + struct.pack("<I", len(h))
    return prefix + h + data


def f4(*vals):
    return struct.pack("<%df" % len(vals), *vals)


GOOD = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"

# name -> (bytes, expected message fragment; None for valid files)
FIXTURES = {
    "bad_magic.npy": (b"\x93NUMPZ\x01\x00" + npy(GOOD, f4(1, 2, 3, 4))[8:], "bad magic"),
    "text_file.npy": (b"this is not a numpy file\n", "bad magic"),
    "empty.npy": (b"", "bad magic"),
    "truncated_prefix.npy": (MAGIC + b"\x01\x00\x76", "truncated header"),
    "truncated_header.npy": (npy(GOOD, f4(1, 2, 3, 4))[:40], "truncated header"),
    "bad_version.npy": (npy(GOOD, f4(1, 2, 3, 4), version=(4, 0)), "version 4.0"),
    "header_not_dict.npy": (npy("['<f4', False, (4,)]", f4(1, 2, 3, 4)), "not a dict"),
    "header_garbage.npy": (npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), ", f4(1, 2, 3, 4)),
                           "malformed header"),
    "missing_shape.npy": (npy("{'descr': '<f4', 'fortran_order': False, }", f4(1, 2, 3, 4)), "missing key 'shape'"),
    "shape_not_ints.npy": (npy("{'descr': '<f4', 'fortran_order': False, 'shape': ('a',), }", f4(1)),
                           "tuple of integers"),
    "negative_dim.npy": (npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", f4(1, 2, 3, 4)),
                         "negative dimension"),
    "unknown_descr.npy": (npy("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", f4(1, 2, 3, 4)),
                          "unsupported dtype descr '<c8'"),
    "unicode_descr.npy": (npy("{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }", b"a\0\0\0b\0\0\0c\0\0\0"),
                          "unsupported dtype descr '<U3'"),
    "structured_descr.npy": (npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", f4(1)),
                             "structured dtypes"),
    "big_endian.npy": (npy("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }",
                           struct.pack(">4f", 1, 2, 3, 4)), "big-endian"),
    "fortran_order.npy": (npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f4(1, 2, 3, 4)),
                          "fortran_order"),
    "data_short.npy": (npy("{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }", f4(1, 2)),
                       "data truncated"),
    "huge_shape.npy": (npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, "
                           "4294967296), }", f4(1)), "overflow"),
    "huge_dim.npy": (npy("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999999,), }",
                         f4(1)), "too large"),
    "too_many_dims.npy": (npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", f4(1)),
                          "more than 8 dimensions"),
    # valid files in the other format versions and unusual spellings
    "good_v2.npy": (npy(GOOD, f4(1, 2, 3, 4), version=(2, 0)), None),
    "good_v3.npy": (npy(GOOD, f4(1, 2, 3, 4), version=(3, 0)), None),
    "good_reordered.npy": (npy('{"shape": (4,), "fortran_order": False, "descr": "<f4"}', f4(1, 2, 3, 4), pad=False),
                           None),
}


def main():
    for name, (data, _) in FIXTURES.items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
    print("wrote %d fixtures to %s" % (len(FIXTURES), HERE))


if __name__ == "__main__":
    main()
