"""GraphBuilder: a graft graph made in Python through the C builder API (graft.h
"graphs: build with the API"), compiled into a graft.Session.

    b = GraphBuilder()
    x = b.input("x", "f32", [4, 8])                 # a str dim is a symbol ("N")
    w = b.constant("w", "f32", [8, 2], numpy_array)   # data is copied into the graph
    y = b.node("matmul", [x, w], name="mm")           # attrs as keywords: trans_b=1, perm=[1, 0]
    b.output(y, "y")
    s = b.compile(device="sim", mode="eager")         # a graft.Session (b is used up)

Attribute values: int/bool -> int, float -> float, str -> string (dtype attributes take
the dtype's name, "f16"), list of ints -> ints, list of floats -> floats.
Op names and attributes are the IR's (src/ir/ops.def, semantics in src/ir/ops.c).
"""
import ctypes

import numpy as np

from . import _capi as C
from ._capi import lib
from .session import DTYPES, Session, _DEVICES, _MODES


class GraphBuilder:
    def __init__(self):
        self._graph = ctypes.c_void_p()
        C.check(lib.gr_graph_create(ctypes.byref(self._graph)))
        self._count = 0

    def __del__(self):
        if getattr(self, "_graph", None):
            lib.gr_graph_destroy(self._graph)
            self._graph = None

    def _g(self):
        if not self._graph:
            raise C.InvalidError("GraphBuilder: the graph was already compiled", "GR_ERR_INVALID", -1)
        return self._graph

    def fresh_name(self, stem):
        self._count += 1
        return "%s_%d" % (stem, self._count)

    def input(self, name, dtype, shape):
        n = len(shape)
        dims = (ctypes.c_int64 * max(1, n))(*[d if isinstance(d, int) else -1 for d in shape])
        syms = (ctypes.c_char_p * max(1, n))(*[None if isinstance(d, int) else str(d).encode() for d in shape])
        out = ctypes.c_int32()
        C.check(lib.gr_graph_add_input(self._g(), name.encode(), DTYPES.index(dtype), n, dims, syms, ctypes.byref(out)))
        return out.value

    def constant(self, name, dtype, shape, data):
        """data: a C-contiguous NumPy array (or anything with .ctypes.data / nbytes) of
        exactly prod(shape) elements of dtype, or an int address of such memory."""
        n = len(shape)
        dims = (ctypes.c_int64 * max(1, n))(*shape)
        ptr = data if isinstance(data, int) else np.ascontiguousarray(data).ctypes.data
        out = ctypes.c_int32()
        C.check(lib.gr_graph_add_constant(self._g(), name.encode(), DTYPES.index(dtype), n, dims,
                                          ctypes.c_void_p(ptr), ctypes.byref(out)))
        return out.value

    def node(self, op, inputs, name=None, n_out=1, **attrs):
        """Adds one node; returns its output value (a list when n_out > 1)."""
        name = name or self.fresh_name(op)
        keep = []  # the arrays the attrs point into, alive until the call returns
        arr = (C.Attr * max(1, len(attrs)))()
        for k, (key, value) in enumerate(attrs.items()):
            a = arr[k]
            a.name = key.encode()
            if isinstance(value, (bool, int, np.integer)):
                a.kind, a.i = C.GR_ATTR_INT, int(value)
            elif isinstance(value, (float, np.floating)):
                a.kind, a.f = C.GR_ATTR_FLOAT, float(value)
            elif isinstance(value, str):
                s = value.encode()
                keep.append(s)
                a.kind, a.s = C.GR_ATTR_STRING, s
            elif all(isinstance(v, (bool, int, np.integer)) for v in value):
                ints = (ctypes.c_int64 * max(1, len(value)))(*[int(v) for v in value])
                keep.append(ints)
                a.kind, a.ints, a.n = C.GR_ATTR_INTS, ints, len(value)
            else:
                floats = (ctypes.c_double * max(1, len(value)))(*[float(v) for v in value])
                keep.append(floats)
                a.kind, a.floats, a.n = C.GR_ATTR_FLOATS, floats, len(value)
        ins = (ctypes.c_int32 * max(1, len(inputs)))(*inputs)
        outs = (ctypes.c_int32 * n_out)()
        C.check(lib.gr_graph_add_node(self._g(), op.encode(), name.encode(), len(inputs), ins, len(attrs), arr, n_out,
                                      outs))
        return outs[0] if n_out == 1 else list(outs)

    def output(self, value, name):
        C.check(lib.gr_graph_set_output(self._g(), value, name.encode()))

    def text(self):
        """The graph as .gir text (gr_graph_print)."""
        p = ctypes.c_void_p()
        C.check(lib.gr_graph_print(self._g(), ctypes.byref(p)))
        return C.take_string(p.value)

    def compile(self, device="auto", mode="auto", origin="<graft.GraphBuilder>", **options):
        """Verifies the graph and compiles it into a Session (which then owns the graph).
        options: verbose, max_rerecords, no_fuse_attention, fuse_attention_f32 (graft.h)."""
        graph = self._g()
        C.check(lib.gr_graph_verify(graph))
        opts = C.SessionOptions()
        lib.gr_session_options_init(ctypes.byref(opts))
        opts.device, opts.mode = _DEVICES[device], _MODES[mode]
        for key, value in options.items():
            setattr(opts, key, value)
        handle = ctypes.c_void_p()
        C.check(lib.gr_session_create(graph, ctypes.byref(opts), ctypes.byref(handle)))
        self._graph = None  # the session owns it now
        return Session(graph, handle, origin)
