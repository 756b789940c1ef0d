"""torch.compile(model, backend="graft"): Dynamo graphs lowered from ATen to graft IR.

    import torch, graft.torch_backend            # an installed wheel needs no import: the
    graft.torch_backend.register()               # torch_dynamo_backends entry point names it
    with torch.no_grad():
        y = torch.compile(model, backend="graft")(x)
    print(graft.explain())                       # what went to graft, what stayed in PyTorch

Options (torch.compile(..., options={...})): device "auto" (the inputs' device: CUDA
tensors -> graft's CUDA device, CPU tensors -> the simulator), "sim" or "cuda"; mode
"auto" | "graph" | "eager" (graft's session modes).

How a graph is lowered
- ATen, through aot_autograd with functionalization: Dynamo's graph is torch-level
  (nn.functional calls, in-place ops, views); aot_autograd traces it into functional
  ATen ops (no mutation, no aliasing: graft IR is values only), lifts parameters to
  inputs, and decomposes composite ops (linear -> t + addmm, layer_norm ->
  native_layer_norm, sdpa -> the device's sdpa kernel op). torch.export re-traces
  the whole module ahead of time, which is not what a Dynamo backend is handed;
  make_fx alone keeps in-place ops.
- Each ATen node graft can run (LOWER below: a per-op rule checks dtypes and arguments)
  is marked supported; CapabilityBasedPartitioner groups supported nodes into
  subgraphs, each built with graft's C builder API (graft.builder) and compiled into a
  session; the rest runs in PyTorch, and graft.explain() lists it with the reason.
- Parameters and buffers are graph inputs (aot_autograd lifts them), bound again only when
  they change (version counter, address): on CUDA as device buffers
  (gr_session_bind_input_device: PyTorch's own memory, read in place, also by the captured
  cuBLASLt calls, which graft pins to the weight's address: no second copy of the weights);
  on the simulator they are copied in. Exceptions, baked in as graft constants (so what they
  feed folds at compile time, as in the ONNX import: rotary tables, position biases, masks):
  the graph's literals, parameters and buffers of at most FREEZE_SMALL_BYTES, and every
  parameter with options={"weights": "freeze"} (graft's own copy of the weights, as graft.load
  holds them: the ONNX import's plan, pre-transposed weights included). Each call checks a
  frozen tensor is unchanged (same tensor, version, address); one that changed is bound as an
  input from then on (one recompile). Report.const_bytes counts tensor data baked in.
- Options fuse_attention_f32, no_fuse_attention, no_fuse_epilogue pass to graft's session.
- Dynamic shapes (dynamic=True, mark_dynamic): Dynamo's size symbols (s0, ...) become
  graft symbols, so one session (graft's shape-generic kernels, a plan per binding)
  serves every size, when each input dim is a plain symbol and each reshape/expand has
  at most one symbolic dim (its shape attribute is ints: -1 stands for that one). Other
  symbolic graphs are re-traced (make_fx) and compiled once per concrete input shape.
  Sizes are read through their expressions, never int()'d: no guard is added.
- A training graph (grad enabled and an input that requires grad), inputs on several
  devices, or a failure while lowering fall back to PyTorch with a warning.
- Outputs are copied out of graft's memory (clone on the device): graft's outputs live
  only until the next run, and a module's outputs must outlive it. (Not dropped: a torch
  tensor handed to user code cannot be made to fail when read after the next run, and graft
  has no call that writes outputs into caller-allocated memory.) The copy reads a view of
  graft's output kept per address, not a DLPack import per call.
"""
import math
import operator
import warnings
import weakref

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from .builder import GraphBuilder

aten = torch.ops.aten

DTYPE = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
         torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}


class NotLowerable(Exception):
    """A node (or graph) graft does not take; the message says why."""


# ---- reports ---------------------------------------------------------------------------------

_REPORTS = []


class Report:
    """What one torch.compile graph became: graft subgraphs, ATen ops lowered, ops left to
    PyTorch (with the reason), fallbacks."""

    def __init__(self, index):
        self.index = index
        self.subgraphs = 0
        self.sessions = 0      # graft sessions compiled (one per subgraph, or per shape when dynamic)
        self.lowered = {}      # ATen op name -> count
        self.left = {}         # ATen op name -> reason
        self.fallback = None   # why the whole graph runs in PyTorch, if it does
        self.const_bytes = 0   # bytes of tensor data baked into graft graphs as constants (parameters
                               # and buffers are inputs, bound each run: only literals belong here)
        self.notes = []
        self._sessions = []    # weak references to the graft sessions compiled for this graph

    def session_stats(self):
        """Each live graft session's last-run stats (Session.stats()): device_bytes shows what
        graft holds (arena, placeholders, weights), bytes_copied what the last run copied."""
        return [s.stats() for s in (r() for r in self._sessions) if s is not None and s._handle]

    def text(self):
        lines = ["graph %d: " % self.index + ("runs in PyTorch: %s" % self.fallback if self.fallback else
                                             "%d graft subgraph(s), %d session(s), %d bytes of constants" %
                                             (self.subgraphs, self.sessions, self.const_bytes))]
        if self.lowered:
            lines.append("  lowered to graft: " + ", ".join("%s x%d" % kv for kv in sorted(self.lowered.items())))
        if self.left:
            lines.append("  left to PyTorch:")
            lines.extend("    %s: %s" % kv for kv in sorted(self.left.items()))
        lines.extend("  note: " + n for n in self.notes)
        return "\n".join(lines)


def reports():
    return list(_REPORTS)


def explain():
    if not _REPORTS:
        return "graft: no torch.compile(backend=\"graft\") graph compiled in this process"
    return "\n".join(r.text() for r in _REPORTS)


def reset():
    """Forgets the reports (tests)."""
    _REPORTS.clear()


def _warn(msg):
    warnings.warn("graft backend: " + msg, RuntimeWarning, stacklevel=3)


# ---- the lowering table ----------------------------------------------------------------------
# LOWER[op] = (lower(ctx, node, a) -> value | [values], check(node, a) -> reason | None);
# `a` is the node's arguments by schema name, defaults filled in.

LOWER = {}


def lowers(*ops, check=None):
    def deco(fn):
        for op in ops:
            LOWER[op] = (fn, check)
        return fn
    return deco


def op_name(target):
    return getattr(target, "__name__", None) if not isinstance(target, torch._ops.OpOverload) else str(target)


def schema_args(node):
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return {}
    out = {}
    for i, arg in enumerate(target._schema.arguments):
        if not arg.kwarg_only and i < len(node.args):
            out[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


def meta(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


# Sizes are ints or SymInts (dynamic shapes). A SymInt is read through its expression,
# never int()/compared: that would add a guard (specialize) after Dynamo traced the graph.

def static_int(d):
    if isinstance(d, int):
        return d
    expr = d.node.expr
    if expr.is_Integer:
        return int(expr)
    raise NotLowerable("symbolic size %s" % expr)


def static_shape(t):
    return [static_int(d) for d in t.shape]


def same_size(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return str(getattr(a, "node", None) and a.node.expr if not isinstance(a, int) else a) == \
        str(getattr(b, "node", None) and b.node.expr if not isinstance(b, int) else b)


def input_dim(d):
    """A graph input's dim for graft: an int, or the name of a plain symbol ("s0")."""
    if isinstance(d, int) or d.node.expr.is_Integer:
        return static_int(d)
    if d.node.expr.is_Symbol:
        return str(d.node.expr)
    raise NotLowerable("input dim %s (an expression, not a symbol)" % d.node.expr)


def reshape_shape(t):
    """A reshape's shape attribute: static dims, -1 for the one symbolic dim (graft infers it)."""
    out = []
    for d in t.shape:
        try:
            out.append(static_int(d))
        except NotLowerable:
            out.append(-1)
    if out.count(-1) > 1:
        raise NotLowerable("reshape to %d symbolic dims (%s)" % (out.count(-1), list(t.shape)))
    return out


def expand_shape(src, t):
    """expand's shape: a symbolic dim must be the input's own (1 keeps it: graft's
    expand broadcasts both ways)."""
    out, lead = [], t.dim() - src.dim()
    for i, d in enumerate(t.shape):
        try:
            out.append(static_int(d))
        except NotLowerable:
            if i < lead or not same_size(src.shape[i - lead], d):
                raise
            out.append(1)
    return out


def norm_axis(d, ndim):
    return d + ndim if d < 0 else d


class Lowering:
    """Builds one graft graph from one FX graph of supported ATen nodes (static shapes)."""

    def __init__(self, gm, report, frozen=None):
        self.gm, self.report = gm, report
        self.frozen = frozen or {}  # placeholder index -> tensor baked in as a constant (_freeze_policy)
        self.b = GraphBuilder()
        self.env = {}
        self.leaves = set()  # graft values that are inputs or constants
        self.lowered = {}  # ATen op -> count, added to the report once the session exists
        self.const_bytes = 0

    # values
    def dtype_of(self, node):
        return meta(node).dtype

    def const(self, value, dtype):
        import numpy as np
        from .session import numpy_dtype
        gd = DTYPE[dtype]
        if gd == "bf16":  # NumPy has no bf16 without ml_dtypes: make it through torch
            t = torch.tensor(value, dtype=dtype)
            v = self.b.constant(self.b.fresh_name("c"), gd, [], t.view(torch.int16).numpy())
        else:
            v = self.b.constant(self.b.fresh_name("c"), gd, [], np.array(value, dtype=numpy_dtype(gd)))
        self.leaves.add(v)
        return v

    def cast(self, v, have, want):
        return v if have == want else self.b.node("cast", [v], to=DTYPE[want])

    def val(self, arg, dtype=None):
        """The graft value of an FX argument, cast to dtype; a Python number becomes a constant."""
        if isinstance(arg, torch.fx.Node):
            v = self.env[arg]
            return self.cast(v, self.dtype_of(arg), dtype) if dtype is not None else v
        if isinstance(arg, (bool, int, float)):
            return self.const(arg, dtype)
        raise NotLowerable("argument %r" % (arg,))

    def is_leaf(self, v):
        """v is a graft input or constant (an output that is one needs a node of its own)."""
        return v in self.leaves

    def tensor_constant(self, name, t):
        t = t.detach().contiguous().cpu()
        raw = t.view(torch.int16) if t.dtype == torch.bfloat16 else t
        self.const_bytes += t.numel() * t.element_size()
        v = self.b.constant(name, DTYPE[t.dtype], list(t.shape), raw.numpy())
        self.leaves.add(v)
        return v

    def run(self):
        outputs = []
        index = -1
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                index += 1
                m = meta(node)
                if not isinstance(m, torch.Tensor):  # a SymInt size: graft reads sizes from the tensors
                    continue
                if index in self.frozen:
                    self.env[node] = self.tensor_constant(node.name, self.frozen[index])
                    continue
                self.env[node] = self.b.input(node.name, DTYPE[m.dtype], [input_dim(d) for d in m.shape])
                self.leaves.add(self.env[node])
            elif node.op == "get_attr":
                self.env[node] = self.tensor_constant(node.name, getattr(self.gm, node.target))
            elif node.op == "call_function":
                if node.target is operator.getitem:
                    self.env[node] = self.env[node.args[0]][node.args[1]]
                    continue
                reason = node_support(node)
                if reason is not None:  # a re-traced graph (dynamic shapes) may hold ops the partition did not
                    raise NotLowerable("%s: %s" % (op_name(node.target), reason))
                fn, _ = LOWER[node.target]
                self.env[node] = fn(self, node, schema_args(node))
                name = op_name(node.target)
                self.lowered[name] = self.lowered.get(name, 0) + 1
            elif node.op == "output":
                outputs = list(node.args[0]) if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            else:
                raise NotLowerable("FX node %s (%s)" % (node.name, node.op))
        return outputs


def _tensor_dtypes_ok(node):
    vals = [meta(node)]
    if isinstance(vals[0], (list, tuple)):
        vals = list(vals[0])
    for a in node.all_input_nodes:
        vals.append(meta(a))
    for v in vals:
        if isinstance(v, torch.Tensor) and v.dtype not in DTYPE:
            return "dtype %s" % v.dtype
        if v is None:
            return "no tensor metadata"
    return None


def _getitem_only(node, allowed):
    for u in node.users:
        if u.target is not operator.getitem or (allowed is not None and u.args[1] not in allowed):
            return "output %s used" % (u.args[1] if u.target is operator.getitem else "tuple")
    return None


def node_support(node):
    """None if graft lowers this call_function node, else the reason."""
    if node.target is operator.getitem:
        src = node.args[0]
        return None if isinstance(src, torch.fx.Node) and src.op == "call_function" and node_support(src) is None \
            else "getitem of an op left to PyTorch"
    entry = LOWER.get(node.target)
    if entry is None:
        return "no graft lowering"
    reason = _tensor_dtypes_ok(node)
    if reason is None and entry[1] is not None:
        reason = entry[1](node, schema_args(node))
    return reason


# ---- elementwise ---------------------------------------------------------------------------------

_BINARY = {aten.add.Tensor: "add", aten.add.Scalar: "add", aten.sub.Tensor: "sub", aten.sub.Scalar: "sub",
           aten.mul.Tensor: "mul", aten.mul.Scalar: "mul", aten.div.Tensor: "div", aten.div.Scalar: "div",
           aten.pow.Tensor_Scalar: "pow", aten.pow.Tensor_Tensor: "pow", aten.maximum.default: "max",
           aten.minimum.default: "min"}


def _binary_check(node, a):
    if not isinstance(meta(node), torch.Tensor):
        return "scalar result"
    return None


@lowers(*_BINARY, check=_binary_check)
def _binary(ctx, node, a):
    out = meta(node).dtype
    x = ctx.val(a["self"], out)
    y = ctx.val(a["other"] if "other" in a else a["exponent"], out)
    alpha = a.get("alpha", 1)
    if alpha is not None and alpha != 1:
        y = ctx.b.node("mul", [y, ctx.const(alpha, out)])
    return ctx.b.node(_BINARY[node.target], [x, y])


@lowers(aten.rsub.Scalar, aten.rsub.Tensor, check=_binary_check)
def _rsub(ctx, node, a):
    out = meta(node).dtype
    x = ctx.val(a["self"], out)
    if a.get("alpha", 1) != 1:
        x = ctx.b.node("mul", [x, ctx.const(a["alpha"], out)])
    return ctx.b.node("sub", [ctx.val(a["other"], out), x])


_COMPARE = {aten.eq.Tensor: "equal", aten.eq.Scalar: "equal", aten.lt.Tensor: "less", aten.lt.Scalar: "less",
            aten.le.Tensor: "less_equal", aten.le.Scalar: "less_equal", aten.gt.Tensor: "greater",
            aten.gt.Scalar: "greater", aten.ge.Tensor: "greater_equal", aten.ge.Scalar: "greater_equal",
            aten.ne.Tensor: "ne", aten.ne.Scalar: "ne"}


@lowers(*_COMPARE)
def _compare(ctx, node, a):
    x, y = a["self"], a["other"]
    common = torch.result_type(meta(x), meta(y) if isinstance(y, torch.fx.Node) else y)
    xv, yv = ctx.val(x, common), ctx.val(y, common)
    op = _COMPARE[node.target]
    if op == "ne":
        return ctx.b.node("not", [ctx.b.node("equal", [xv, yv])])
    return ctx.b.node(op, [xv, yv])


# and / or: graft's are logical (bool in, bool out), which is what bitwise_and/or compute on
# bool tensors (the masks Hugging Face builds); on integers they are bitwise, which graft's IR
# cannot express.
_LOGIC = {aten.bitwise_and.Tensor: "and", aten.bitwise_and.Scalar: "and", aten.bitwise_or.Tensor: "or",
          aten.bitwise_or.Scalar: "or", aten.logical_and.default: "and", aten.logical_or.default: "or"}
_BITWISE = (aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)


def _logic_check(node, a):
    if node.target not in _BITWISE:  # logical_and/or: any dtype, nonzero is true
        return None
    for k in ("self", "other"):
        v = a[k]
        dt = meta(v).dtype if isinstance(v, torch.fx.Node) else (torch.bool if isinstance(v, bool) else None)
        if dt != torch.bool:
            return "%s on %s (graft's and/or are logical: bool only)" % (
                op_name(node.target).split(".")[1], dt if dt is not None else type(v).__name__)
    return None


@lowers(*_LOGIC, check=_logic_check)
def _logic(ctx, node, a):
    # (logical_and/or take any dtype: nonzero is true)
    x = ctx.val(a["self"], torch.bool)
    y = ctx.val(a["other"], torch.bool)
    out = ctx.b.node(_LOGIC[node.target], [x, y])
    return ctx.cast(out, torch.bool, meta(node).dtype)


_UNARY = {aten.relu.default: "relu", aten.tanh.default: "tanh", aten.sigmoid.default: "sigmoid",
          aten.silu.default: "silu", aten.neg.default: "neg", aten.exp.default: "exp", aten.log.default: "log",
          aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt", aten.abs.default: "abs", aten.sin.default: "sin",
          aten.cos.default: "cos", aten.erf.default: "erf", aten.reciprocal.default: "reciprocal",
          aten.logical_not.default: "not", aten.bitwise_not.default: "not"}


def _unary_check(node, a):
    if node.target in (aten.logical_not.default, aten.bitwise_not.default) and meta(a["self"]).dtype != torch.bool:
        return "not on %s" % meta(a["self"]).dtype
    if node.target is aten.reciprocal.default and not meta(node).dtype.is_floating_point:
        return "integer reciprocal"
    return None


@lowers(*_UNARY, check=_unary_check)
def _unary(ctx, node, a):
    return ctx.b.node(_UNARY[node.target], [ctx.val(a["self"], meta(node).dtype)])


@lowers(aten.gelu.default)
def _gelu(ctx, node, a):
    return ctx.b.node("gelu", [ctx.val(a["self"])], approximate=a["approximate"] or "none")


def _elu_check(node, a):
    if not meta(node).dtype.is_floating_point:
        return "elu on %s" % meta(node).dtype
    if float(a.get("input_scale", 1)) != 1.0:
        return "elu with input_scale %r" % a.get("input_scale")
    return None


@lowers(aten.elu.default, check=_elu_check)
def _elu(ctx, node, a):
    # scale * (x > 0 ? x : alpha * (exp(x) - 1)): graft's selu with gamma = scale (selu and
    # celu reach here as elu, decomposed by aot_autograd)
    return ctx.b.node("selu", [ctx.val(a["self"])], alpha=float(a.get("alpha", 1)), gamma=float(a.get("scale", 1)))


@lowers(aten.where.self)
def _where(ctx, node, a):
    out = meta(node).dtype
    return ctx.b.node("where", [ctx.val(a["condition"], torch.bool), ctx.val(a["self"], out), ctx.val(a["other"], out)])


@lowers(aten._to_copy.default, aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default, aten.detach.default)
def _copy(ctx, node, a):
    src = a["self"]
    v = ctx.val(src)
    if meta(src).dtype != meta(node).dtype:
        return ctx.cast(v, meta(src).dtype, meta(node).dtype)
    # graft's values are immutable: a copy is the value itself (an identity node between a
    # softmax and its matmul, or an expand and its reshape, would hide the pattern from
    # graft's attention recognition). An output that is an input gets its identity node at
    # the end (_Compiled).
    return v


# ---- matmul, attention --------------------------------------------------------------------------

@lowers(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _mm(ctx, node, a):
    return ctx.b.node("matmul", [ctx.val(a["self"]), ctx.val(a["other"] if "other" in a else a["mat2"])])


@lowers(aten.addmm.default)
def _addmm(ctx, node, a):
    out = meta(node).dtype
    bias = ctx.val(a["self"], out)
    if a["beta"] != 1:
        bias = ctx.b.node("mul", [bias, ctx.const(a["beta"], out)])
    return ctx.b.node("matmul", [ctx.val(a["mat1"]), ctx.val(a["mat2"]), bias], alpha=float(a["alpha"]))


_SDPA = (aten._scaled_dot_product_flash_attention_for_cpu.default, aten._scaled_dot_product_efficient_attention.default,
         aten._scaled_dot_product_flash_attention.default, aten.scaled_dot_product_attention.default)
if hasattr(aten, "_scaled_dot_product_cudnn_attention"):
    _SDPA = _SDPA + (aten._scaled_dot_product_cudnn_attention.default,)


def _sdpa_check(node, a):
    q, k = meta(a["query"]), meta(a["key"])
    if q.dim() != 4 or k.dim() != 4:
        return "attention on rank %d (graft takes [B, H, S, D])" % q.dim()
    if a.get("dropout_p", 0.0):
        return "dropout_p=%s" % a["dropout_p"]
    if a.get("is_causal") and not same_size(q.shape[-2], k.shape[-2]):
        return "is_causal with Sq != Sk (PyTorch aligns the mask top-left, graft bottom-right)"
    if a.get("enable_gqa"):
        return "enable_gqa"
    mask = a.get("attn_mask", a.get("attn_bias"))
    if mask is not None and not meta(mask).dtype.is_floating_point and meta(mask).dtype != torch.bool:
        return "attention mask of %s" % meta(mask).dtype
    if node.target is not aten.scaled_dot_product_attention.default:
        return _getitem_only(node, {0})
    return None


@lowers(*_SDPA, check=_sdpa_check)
def _sdpa(ctx, node, a):
    q, k, v = a["query"], a["key"], a["value"]
    dt = meta(q).dtype
    scale = a.get("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(static_int(meta(q).shape[-1]))
    ins = [ctx.val(q), ctx.val(k), ctx.val(v)]
    mask = a.get("attn_mask", a.get("attn_bias"))
    if mask is not None:
        if meta(mask).dtype == torch.bool:  # keep where true: 0, else -inf
            m = ctx.b.node("where", [ctx.val(mask), ctx.const(0.0, dt), ctx.const(float("-inf"), dt)])
        else:
            m = ctx.val(mask, dt)
        ins.append(m)
    out = ctx.b.node("attention", ins, scale=float(scale), causal=int(bool(a.get("is_causal"))))
    return out if node.target is aten.scaled_dot_product_attention.default else [out]


# ---- normalization, softmax, reductions -----------------------------------------------------------

@lowers(aten._softmax.default, aten.softmax.int)
def _softmax(ctx, node, a):
    x = ctx.val(a["self"], meta(node).dtype)
    return ctx.b.node("softmax", [x], axis=int(a["dim"]))


@lowers(aten.native_layer_norm.default, check=lambda node, a: _getitem_only(node, {0}))
def _layer_norm(ctx, node, a):
    x = meta(a["input"])
    n = len(a["normalized_shape"])
    shape = [int(d) for d in a["normalized_shape"]]
    if a["weight"] is not None:
        w = ctx.val(a["weight"])
    else:  # graft's layer_norm takes a scale: ones
        w = ctx.b.node("fill", [], shape=shape, value=1.0, dtype=DTYPE[x.dtype])
    ins = [ctx.val(a["input"]), w] + ([ctx.val(a["bias"])] if a["bias"] is not None else [])
    return [ctx.b.node("layer_norm", ins, axis=x.dim() - n, epsilon=float(a["eps"])), None, None]


_REDUCE = {aten.mean.dim: "reduce_mean", aten.mean.default: "reduce_mean", aten.sum.dim_IntList: "reduce_sum",
           aten.sum.default: "reduce_sum", aten.amax.default: "reduce_max", aten.amin.default: "reduce_min"}


@lowers(*_REDUCE)
def _reduce(ctx, node, a):
    x = ctx.val(a["self"], meta(node).dtype)
    dims = a.get("dim")
    dims = [] if dims is None else ([dims] if isinstance(dims, int) else list(dims))
    if not dims and meta(a["self"]).dim() == 0:
        return ctx.b.node("identity", [x])
    return ctx.b.node(_REDUCE[node.target], [x], axes=dims, keepdims=int(bool(a.get("keepdim", False))))


# cumsum: graft has no scan op. The ONNX importer's form (frontend/onnx/onnx-ops.c cv_cumsum): a
# masked sum, out[.., i] = sum_j (j <= i ? x[.., j] : 0), with the mask from a range over the
# axis. O(n) work per output: meant for the scans Hugging Face runs over sequence positions
# of a mask (position ids); a long axis is left to PyTorch.
CUMSUM_MAX_ELEMENTS = 1 << 24  # elements of the masked [.., n, n] product


def _cumsum_check(node, a):
    xm = meta(a["self"])
    if xm.dim() == 0:
        return None
    try:
        shape = static_shape(xm)
    except NotLowerable as e:
        return "cumsum over a %s" % e
    n = shape[norm_axis(a["dim"], xm.dim())]
    work = math.prod(shape) * n
    if work > CUMSUM_MAX_ELEMENTS:
        return "cumsum over an axis of %d (%d x %d elements masked; graft has no scan op, the limit is %d)" % (
            n, math.prod(shape), n, CUMSUM_MAX_ELEMENTS)
    return None


@lowers(aten.cumsum.default, check=_cumsum_check)
def _cumsum(ctx, node, a):
    out = meta(node).dtype  # dtype=, else the input's (bool and integers: int64)
    xm = meta(a["self"])
    x = ctx.val(a["self"], out)
    nd = xm.dim()
    if nd == 0:
        return ctx.b.node("identity", [x])
    dim = norm_axis(a["dim"], nd)
    n = static_int(xm.shape[dim])
    r = ctx.b.node("range", [], start=0.0, limit=float(n), delta=1.0, dtype="i64")
    i = ctx.b.node("reshape", [r], shape=[n, 1])
    j = ctx.b.node("reshape", [r], shape=[1, n])
    mask = ctx.b.node("less_equal", [j, i])  # [n, n]: row i keeps j <= i
    perm = [d for d in range(nd) if d != dim] + [dim]
    if dim != nd - 1:
        x = ctx.b.node("transpose", [x], perm=perm)
    x = ctx.b.node("unsqueeze", [x], axes=[nd - 1])  # [.., 1, n]
    masked = ctx.b.node("where", [mask, x, ctx.const(0, out)])  # [.., n, n]
    total = ctx.b.node("reduce_sum", [masked], axes=[-1], keepdims=0)
    if dim != nd - 1:
        inv = [0] * nd
        for k, p in enumerate(perm):
            inv[p] = k
        total = ctx.b.node("transpose", [total], perm=inv)
    return total


# ---- data movement ---------------------------------------------------------------------------

_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.squeeze.default,
          aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default, aten.flatten.using_ints)


@lowers(*_VIEWS)
def _view(ctx, node, a):
    # every view-like op is a reshape to the output's (static) shape
    return ctx.b.node("reshape", [ctx.val(a["self"])], shape=reshape_shape(meta(node)))


@lowers(aten.unsqueeze.default)
def _unsqueeze(ctx, node, a):
    # graft's unsqueeze, not a reshape: the grouped-query pattern graft's attention pass knows
    # (reshape(expand(unsqueeze(kv)))) is what Llama's repeat_kv traces to
    return ctx.b.node("unsqueeze", [ctx.val(a["self"])], axes=[norm_axis(a["dim"], meta(node).dim())])


@lowers(aten.expand.default)
def _expand(ctx, node, a):
    src, out = meta(a["self"]), meta(node)
    if src.dim() == out.dim() and all(same_size(x, y) for x, y in zip(src.shape, out.shape)):
        return ctx.val(a["self"])  # to its own shape (what matmul's decomposition writes): nothing to do
    return ctx.b.node("expand", [ctx.val(a["self"])], shape=expand_shape(src, out))


@lowers(aten.permute.default)
def _permute(ctx, node, a):
    nd = meta(a["self"]).dim()
    return ctx.b.node("transpose", [ctx.val(a["self"])], perm=[norm_axis(d, nd) for d in a["dims"]])


@lowers(aten.t.default, aten.transpose.int)
def _transpose(ctx, node, a):
    nd = meta(a["self"]).dim()
    if nd < 2:
        return ctx.b.node("identity", [ctx.val(a["self"])])
    d0, d1 = (0, 1) if node.target is aten.t.default else (norm_axis(a["dim0"], nd), norm_axis(a["dim1"], nd))
    perm = list(range(nd))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return ctx.b.node("transpose", [ctx.val(a["self"])], perm=perm)


@lowers(aten.cat.default)
def _cat(ctx, node, a):
    out = meta(node).dtype
    nd = meta(node).dim()
    ins = [ctx.val(t, out) for t in a["tensors"] if meta(t).dim() == nd]  # (a legacy empty 1-D tensor is skipped)
    return ctx.b.node("concat", ins, axis=norm_axis(a["dim"], nd))


def _slice(ctx, x, dim, start, end, step=1):
    return ctx.b.node("slice", [x], starts=[start], ends=[end], axes=[dim], steps=[step])


@lowers(aten.slice.Tensor)
def _slice_tensor(ctx, node, a):
    nd = meta(a["self"]).dim()
    start = 0 if a["start"] is None else a["start"]
    end = 2**63 - 1 if a["end"] is None else a["end"]
    if not isinstance(start, int) or not isinstance(end, int):
        raise NotLowerable("slice bounds given by symbolic sizes")
    return _slice(ctx, ctx.val(a["self"]), norm_axis(a["dim"], nd), start, end, int(a["step"]))


@lowers(aten.select.int)
def _select(ctx, node, a):
    nd = meta(a["self"]).dim()
    dim = norm_axis(a["dim"], nd)
    i = int(a["index"])
    s = _slice(ctx, ctx.val(a["self"]), dim, i, i + 1 if i != -1 else 2**63 - 1)
    return ctx.b.node("reshape", [s], shape=reshape_shape(meta(node)))


@lowers(aten.unbind.int, check=lambda node, a: _getitem_only(node, None))
def _unbind(ctx, node, a):
    m = meta(a["self"])
    dim = norm_axis(a["dim"], m.dim())
    x = ctx.val(a["self"])
    return [ctx.b.node("reshape", [_slice(ctx, x, dim, i, i + 1)], shape=reshape_shape(o))
            for i, o in enumerate(meta(node))]


@lowers(aten.split.Tensor, aten.split_with_sizes.default, check=lambda node, a: _getitem_only(node, None))
def _split(ctx, node, a):
    m = meta(a["self"])
    dim = norm_axis(a["dim"], m.dim())
    x = ctx.val(a["self"])
    outs, start = [], 0
    for o in meta(node):
        n = static_int(o.shape[dim])
        outs.append(_slice(ctx, x, dim, start, start + n))
        start += n
    return outs


def _index_check(node, a):
    idx = [i for i in a["indices"] if i is not None]
    if not idx:
        return "indexing with no index tensor"
    for i in idx:
        if meta(i).dtype not in (torch.int64, torch.int32):
            return "index of %s (a mask: the result's shape depends on the data)" % meta(i).dtype
    if len(idx) > 1:
        try:
            static_shape(meta(a["self"]))
            static_shape(meta(node))
        except NotLowerable as e:
            return "advanced indexing with %d index tensors over %s" % (len(idx), e)
    return None


@lowers(aten.index.Tensor, check=_index_check)
def _index(ctx, node, a):
    """x[i0, :, i2, ...]: the index tensors broadcast together to a shape B. One index tensor
    is a gather on its axis. Several: x's indexed axes moved to the front and flattened into
    one, the indices combined into a linear index (each wrapped to its axis first: negative
    indices count from the end), one gather; the result is [B, the other axes], which is
    PyTorch's order when the indexed axes are not adjacent, else B goes where they were."""
    xm = meta(a["self"])
    nd = xm.dim()
    indices = list(a["indices"]) + [None] * (nd - len(a["indices"]))
    axes = [i for i, t in enumerate(indices) if t is not None]
    x = ctx.val(a["self"])
    if len(axes) == 1:  # (graft's gather wraps negative indices itself)
        return ctx.b.node("gather", [x, ctx.val(indices[axes[0]], torch.int64)], axis=axes[0])
    dims = static_shape(xm)
    rest = [d for d in range(nd) if d not in axes]
    perm = axes + rest
    if perm != list(range(nd)):
        x = ctx.b.node("transpose", [x], perm=perm)
    x = ctx.b.node("reshape", [x], shape=[math.prod(dims[d] for d in axes)] + [dims[d] for d in rest])
    lin, stride = None, 1
    for ax in reversed(axes):
        i = ctx.val(indices[ax], torch.int64)
        i = ctx.b.node("where", [ctx.b.node("less", [i, ctx.const(0, torch.int64)]),
                                 ctx.b.node("add", [i, ctx.const(dims[ax], torch.int64)]), i])
        if stride != 1:
            i = ctx.b.node("mul", [i, ctx.const(stride, torch.int64)])
        lin = i if lin is None else ctx.b.node("add", [i, lin])
        stride *= dims[ax]
    out = ctx.b.node("gather", [x, lin], axis=0)  # [B..., rest...]
    nb = meta(node).dim() - len(rest)
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    if adjacent and axes[0] > 0:  # B goes where the indexed axes were
        before = axes[0]
        out = ctx.b.node("transpose", [out], perm=[nb + i for i in range(before)] + list(range(nb)) +
                         [nb + i for i in range(before, len(rest))])
    return out


def _gather_narrowed(x, index, dim):
    """The axes (other than dim) on which torch.gather's index is shorter than x: {axis: length}."""
    out = {}
    for d in range(x.dim()):
        if d != dim and not same_size(x.shape[d], index.shape[d]):
            out[d] = static_int(index.shape[d])
            static_int(x.shape[d])
    return out


def _gather_check(node, a):
    x, index = meta(a["self"]), meta(a["index"])
    if x.dim() == 0:
        return "gather of a 0-d tensor"
    if x.dim() != index.dim():
        return "gather of a rank-%d tensor with a rank-%d index" % (x.dim(), index.dim())
    try:
        _gather_narrowed(x, index, norm_axis(a["dim"], x.dim()))
    except NotLowerable as e:
        return "gather with an index shorter than the input over a %s" % e
    return None


@lowers(aten.gather.default, check=_gather_check)
def _gather(ctx, node, a):
    # torch.gather is ONNX's GatherElements: out[i][j] = x[index[i][j]][j] (dim 0). PyTorch lets
    # the index be shorter than x on the other axes; graft's gather_elements reads x over the
    # output's shape there, so x is sliced to the index's extent first.
    xm = meta(a["self"])
    dim = norm_axis(a["dim"], xm.dim())
    x = ctx.val(a["self"])
    for d, n in sorted(_gather_narrowed(xm, meta(a["index"]), dim).items()):
        x = _slice(ctx, x, d, 0, n)
    return ctx.b.node("gather_elements", [x, ctx.val(a["index"], torch.int64)], axis=dim)


@lowers(aten.embedding.default)
def _embedding(ctx, node, a):
    return ctx.b.node("gather", [ctx.val(a["weight"]), ctx.val(a["indices"], torch.int64)], axis=0)


@lowers(aten.tril.default, aten.triu.default)
def _trilu(ctx, node, a):
    return ctx.b.node("trilu", [ctx.val(a["self"])], upper=int(node.target is aten.triu.default),
                      k=int(a["diagonal"]))


@lowers(aten.constant_pad_nd.default)
def _pad(ctx, node, a):
    nd = meta(a["self"]).dim()
    pad = [int(p) for p in a["pad"]]  # (last begin, last end, previous begin, ...): torch's order
    begins, ends = [0] * nd, [0] * nd
    for i in range(len(pad) // 2):
        begins[nd - 1 - i], ends[nd - 1 - i] = pad[2 * i], pad[2 * i + 1]
    return ctx.b.node("pad", [ctx.val(a["self"])], pads=begins + ends, mode="constant", value=float(a["value"]))


# ---- generators ----------------------------------------------------------------------------------

def _numbers(*keys):
    def check(node, a):
        bad = [k for k in keys if a.get(k) is not None and not isinstance(a[k], (int, float, bool))]
        return "%s given by symbolic sizes" % ", ".join(bad) if bad else None
    return check


def _full_check(node, a):
    if any(not isinstance(d, int) for d in a["size"]):
        return "size given by symbolic sizes"
    return _numbers("fill_value")(node, a)


@lowers(aten.full.default, check=_full_check)
def _full(ctx, node, a):
    m = meta(node)
    return ctx.b.node("fill", [], shape=static_shape(m), value=float(a["fill_value"]), dtype=DTYPE[m.dtype])


def _sized_check(node, a):
    if any(not isinstance(d, int) for d in a["size"]):
        return "size given by symbolic sizes"
    return None


@lowers(aten.ones.default, aten.zeros.default, check=_sized_check)
def _ones_zeros(ctx, node, a):
    m = meta(node)
    return ctx.b.node("fill", [], shape=static_shape(m), value=1.0 if node.target is aten.ones.default else 0.0,
                      dtype=DTYPE[m.dtype])


_NEW = {aten.new_ones.default: 1.0, aten.new_zeros.default: 0.0, aten.new_empty.default: 0.0,
        aten.new_full.default: None}


def _new_check(node, a):
    if any(not isinstance(d, int) for d in a["size"]):
        return "size given by symbolic sizes"
    return _numbers("fill_value")(node, a)


@lowers(*_NEW, check=_new_check)
def _new_filled(ctx, node, a):
    # x.new_ones(size, dtype=...): x gives only the defaults (dtype, device), not values; the
    # dtype comes from the result. (new_empty's contents are unspecified: zeros are a choice.)
    m = meta(node)
    value = _NEW[node.target]
    return ctx.b.node("fill", [], shape=static_shape(m), value=float(a["fill_value"] if value is None else value),
                      dtype=DTYPE[m.dtype])


_LIKE = {aten.ones_like.default: 1.0, aten.zeros_like.default: 0.0, aten.empty_like.default: 0.0,
         aten.full_like.default: None}


def _like_check(node, a):
    try:
        static_shape(meta(node))
    except NotLowerable as e:
        return "%s of a tensor with a %s" % (op_name(node.target).split(".")[1], e)
    return _numbers("fill_value")(node, a)


@lowers(*_LIKE, check=_like_check)
def _like(ctx, node, a):
    # the input gives only the shape and defaults (dtype): a fill of the result's shape and dtype
    m = meta(node)
    value = _LIKE[node.target]
    return ctx.b.node("fill", [], shape=static_shape(m), value=float(a["fill_value"] if value is None else value),
                      dtype=DTYPE[m.dtype])


@lowers(aten.scalar_tensor.default, check=_numbers("s"))
def _scalar_tensor(ctx, node, a):
    m = meta(node)
    return ctx.b.node("fill", [], shape=[], value=float(a["s"]), dtype=DTYPE[m.dtype])


@lowers(aten.arange.start_step, aten.arange.default, check=_numbers("start", "end", "step"))
def _arange(ctx, node, a):
    m = meta(node)
    start = a.get("start", 0) or 0
    return ctx.b.node("range", [], start=float(start), limit=float(a["end"]), delta=float(a.get("step", 1) or 1),
                      dtype=DTYPE[m.dtype])


# ---- compiled subgraphs ----------------------------------------------------------------------------

def _device_of(tensors):
    # a 0-d CPU tensor mixes with CUDA tensors in PyTorch (a scalar); it is copied in with the inputs
    ts = [t for t in tensors if isinstance(t, torch.Tensor)]
    devs = {t.device.type for t in ts if not (t.device.type == "cpu" and t.dim() == 0)} or {t.device.type for t in ts}
    if len(devs) > 1:
        raise NotLowerable("inputs on several devices (%s)" % ", ".join(sorted(devs)))
    return devs.pop() if devs else "cpu"


_RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _batched_matmuls(gm):
    """aot_autograd decomposes a batched torch.matmul into bmm over flattened batches:
    view(bmm(view(A, [B, m, k]), view(C, [B, k, n])), [b0, .., m, n]) with A, C [b0, .., m, k]
    and [b0, .., k, n]. Rewritten (in place, same semantics) to matmul(A, C): graft's matmul
    takes the batch dims as they are, and its attention pass recognises attention only on the
    [B, H, S, D] form the ONNX exporters write. Returns how many were rewritten."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.target is not aten.bmm.default or len(node.users) != 1:
            continue
        out = next(iter(node.users))
        if out.target not in _RESHAPES:
            continue
        srcs = []
        for operand in node.args[:2]:
            if not isinstance(operand, torch.fx.Node) or operand.target not in _RESHAPES or \
                    not isinstance(operand.args[0], torch.fx.Node):
                break
            srcs.append(operand.args[0])
        if len(srcs) != 2:
            continue
        try:
            sa, sb, so = static_shape(meta(srcs[0])), static_shape(meta(srcs[1])), static_shape(meta(out))
            ma, mb = static_shape(meta(node.args[0])), static_shape(meta(node.args[1]))
        except (NotLowerable, AttributeError):
            continue
        batch = sa[:-2]
        if len(sa) < 3 or sb[:-2] != batch or so[:-2] != batch or sa[-2:] != ma[1:] or sb[-2:] != mb[1:] or \
                meta(srcs[0]).dtype != meta(out).dtype or meta(srcs[1]).dtype != meta(out).dtype:
            continue
        with gm.graph.inserting_before(out):
            mm = gm.graph.call_function(aten.matmul.default, (srcs[0], srcs[1]))
        mm.meta["val"] = meta(out)
        out.replace_all_uses_with(mm)
        count += 1
    if count:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return count


class _FrozenChanged(Exception):
    """A tensor baked into a session as a constant changed (placeholder index): recompile."""

    def __init__(self, index):
        super().__init__(index)
        self.index = index


def _version(t):
    try:
        return t._version
    except RuntimeError:  # an inference tensor keeps no version
        return None


class _Compiled:
    """One graft session for one static graph: inputs by placeholder, outputs in order.
    frozen: {placeholder index: tensor} baked in as constants (checked every call)."""

    def __init__(self, gm, report, device, mode, frozen=None, session_options=None):
        frozen = frozen or {}
        _batched_matmuls(gm)
        low = Lowering(gm, report, frozen)
        outs = low.run()
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # each output: ("graft", index) | ("input", placeholder index) | ("const", python value)
        self.plan, names = [], {}
        for o in outs:
            if isinstance(o, torch.fx.Node) and o.op == "placeholder":
                self.plan.append(("input", self.placeholders.index(o), None))
            elif isinstance(o, torch.fx.Node):
                v = low.env[o]
                if low.is_leaf(v):  # (an output aliasing an input or a literal: a copy of it)
                    v = low.env[o] = low.b.node("identity", [v])
                if v not in names:
                    names[v] = "out%d" % len(names)
                    low.b.output(v, names[v])
                self.plan.append(("graft", names[v], meta(o).device))
            else:
                self.plan.append(("const", o, None))
        self.single = not isinstance(gm.graph.output_node().args[0], (list, tuple))
        if not names:
            raise NotLowerable("no graft output")
        self.session = low.b.compile(device=device, mode=mode, origin="<torch.compile graph %d>" % report.index,
                                     **(session_options or {}))
        self.cuda = self.session.device_kind == "cuda"
        report.sessions += 1
        report._sessions.append(weakref.ref(self.session))
        report.const_bytes += low.const_bytes
        for name, n in low.lowered.items():
            report.lowered[name] = report.lowered.get(name, 0) + n
        self.symbols = sorted(self.session.dims)
        graft_inputs = {t.name for t in self.session.inputs}
        # placeholder -> graft input name (None: a placeholder the lowering did not use, or a frozen one)
        self.names = [ph.name if ph.name in graft_inputs else None for ph in self.placeholders]
        # (index, graft input name) of the tensor placeholders graft reads: what a call looks at
        self.active = [(i, n) for i, (ph, n) in enumerate(zip(self.placeholders, self.names))
                       if n is not None and isinstance(meta(ph), torch.Tensor)]
        self.bound = [None] * len(self.placeholders)  # (tensor, version, address) bound last, per placeholder
        # (index, tensor, version, address) of each frozen placeholder: a call checks they are unchanged
        self.frozen = [(i, t, _version(t), t.data_ptr()) for i, t in sorted(frozen.items())]
        self.views = {}  # graft output name -> (address, shape, torch view of graft's memory): see _outputs

    def __call__(self, *args):
        s = self.session
        if self.cuda:
            s.stream = _current_stream()
        for i, t, version, ptr in self.frozen:
            a = args[i]
            if a is not t or a._version != version or a.data_ptr() != ptr:
                raise _FrozenChanged(i)
        # Bind only what changed since the last call: parameters and buffers (most of a
        # model's inputs) come back as the same tensors, unmodified (same version counter and
        # address), and graft's binding of them still holds, so a call costs one binding per
        # fresh activation instead of one per weight.
        # (a loop over the placeholders graft reads, precomputed: a model passes ~150 parameters
        # per call, and this loop is most of the call's Python time)
        bound = self.bound
        changed = {}
        for i, name in self.active:
            a = args[i]
            try:
                version = a._version
            except RuntimeError:  # an inference tensor keeps no version: bind it every time
                version = None
            ptr = a.data_ptr()
            prev = bound[i]
            if prev is not None and prev[0] is a and prev[1] == version and prev[2] == ptr and version is not None:
                continue
            changed[name] = a if a.is_contiguous() else a.contiguous()
            bound[i] = (a, version, ptr)
        try:
            # CUDA: the changed inputs bound, the run enqueued and the outputs' addresses taken in
            # one C call with no host wait (Session._run_staged); otherwise one binding each
            s._enqueue((changed,), {})
            got = self._outputs(s._device_outputs())
        except BaseException:
            self.bound = [None] * len(bound)  # a failed bind or run: bind everything afresh next time
            raise
        res = []
        for kind, x, device in self.plan:
            if kind == "graft":
                res.append(got[x] if got[x].device == device else got[x].to(device))
            else:
                res.append(args[x] if kind == "input" else x)
        return res[0] if self.single else tuple(res)

    def _outputs(self, outs):
        """graft's outputs live until the next run; a module's outputs must outlive it: one copy
        each (the allocation eager PyTorch makes too), on the device PyTorch expects. The copy is
        made from a torch view of graft's output memory kept here (never handed out): graft's
        arena gives an output the same address every run of a plan, so the DLPack import (a
        capsule and a torch tensor made per output, most of the output path's time) happens
        once per address and shape, not per call."""
        views, got = self.views, {}
        for name, v in outs.items():
            ptr, shape = v.data_ptr, v.shape
            hit = views.get(name)
            if hit is None or hit[0] != ptr or hit[1] != shape:
                hit = views[name] = (ptr, shape, torch.from_dlpack(v))
            got[name] = hit[2].clone()
        return got


def _current_stream():
    """PyTorch's current CUDA stream handle (an int) without a Stream object per call."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(torch.cuda.current_device()) or 1  # 0: the legacy default stream
    return torch.cuda.current_stream()


# Parameters and buffers at most this large are baked into the session as constants (checked
# every call, recompiled when one changes): what they feed is folded at compile time as the ONNX
# import folds it (rotary tables from inv_freq, T5's position bias, attention masks) instead of
# being recomputed each run. Larger ones are bound in place unless options={"weights": "freeze"}.
FREEZE_SMALL_BYTES = 64 << 10
_PENDING = object()


class GraftSubgraph(torch.nn.Module):
    """A partition run by graft: compiled once, with Dynamo's symbolic sizes (s0, ...) as
    graft symbols where the lowering can express them; otherwise once per concrete input
    shape (re-traced with make_fx). A compile failure runs it in PyTorch, with a warning.
    A static graph is compiled at its first call, when the parameters' values are at hand
    (the small ones, and all with weights="freeze", become graft constants)."""

    def __init__(self, gm, report, device, mode, weights="bind", const_args=(), session_options=None):
        super().__init__()
        self.gm, self.report, self.device, self.mode = gm, report, device, mode
        self.weights, self.const_args, self.session_options = weights, frozenset(const_args), session_options or {}
        self.unfrozen = set()  # placeholder indices that changed after being frozen: bound from then on
        self.cache = {}
        phs = [meta(n) for n in gm.graph.nodes if n.op == "placeholder"]
        self.dynamic = any(not isinstance(m, torch.Tensor) or any(not isinstance(d, int) for d in m.shape)
                           for m in phs)
        if self.dynamic:
            try:
                device = self.device if self.device != "auto" else (
                    "cuda" if _device_of(phs) == "cuda" else "sim")
                compiled = _Compiled(gm, report, device, mode, session_options=self.session_options)
                self.cache[None] = compiled
                self.dynamic = False
                report.notes.append("symbolic shapes: one graft session, dims %s as graft symbols" %
                                    ", ".join(compiled.symbols))
            except Exception as e:  # anything: the per-shape path (or PyTorch) still answers right
                report.notes.append("symbolic shapes: compiled per concrete input shape (%s)" % e)
        else:
            self.cache[None] = _PENDING

    def _frozen(self, args):
        """{placeholder index: tensor} to bake in: literals of the graph (get_attr), and the
        parameters and buffers Dynamo marks static, when small or weights="freeze". A tensor
        without a version counter (made under inference_mode) is never frozen: a change to it
        could not be seen."""
        out = {}
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor) or i in self.unfrozen or _version(a) is None:
                continue
            static = i in self.const_args or isinstance(a, torch.nn.Parameter) or \
                getattr(a, "_dynamo_static_input_type", None) is not None
            if static and (self.weights == "freeze" or i in self.const_args or
                           a.numel() * a.element_size() <= FREEZE_SMALL_BYTES):
                out[i] = a
        return out

    def _compile(self, gm, args):
        device = self.device
        if device == "auto":
            device = "cuda" if _device_of(args) == "cuda" else "sim"
        try:
            return _Compiled(gm, self.report, device, self.mode, self._frozen(args), self.session_options)
        except Exception as e:  # NotLowerable, GraftError, or a bug: PyTorch runs it, never a wrong answer
            self.report.notes.append("a subgraph runs in PyTorch: %s" % e)
            _warn("a subgraph runs in PyTorch: %s" % e)
            return None

    def forward(self, *args):
        key = None
        if self.dynamic:
            key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)
            if key not in self.cache:
                from torch.fx.experimental.proxy_tensor import make_fx
                with torch.no_grad():
                    static = make_fx(self.gm)(*args)
                static.graph.eliminate_dead_code()  # make_fx keeps a getitem for every tuple output
                static.recompile()
                self.cache[key] = self._compile(static, list(args))
        compiled = self.cache[key]
        if compiled is _PENDING:
            compiled = self.cache[key] = self._compile(self.gm, list(args))
        if compiled is None:
            return self.gm(*args)
        try:
            return compiled(*args)
        except _FrozenChanged as e:
            # a frozen parameter was replaced or modified in place: bind it as an input from now on
            # (one recompile; a tensor that changes every call never recompiles twice)
            self.unfrozen.add(e.index)
            names = [n.name for n in self.gm.graph.nodes if n.op == "placeholder"]
            self.report.notes.append("%s changed after it was frozen: recompiled with it bound as an input" %
                                     (names[e.index] if e.index < len(names) else "placeholder %d" % e.index))
            gm = self.gm if key is None else compiled.placeholders[0].graph.owning_module
            self.cache[key] = self._compile(gm, list(args))
            return self.forward(*args)


class _Support(OperatorSupportBase):
    def __init__(self, report):
        self.report = report

    def is_node_supported(self, submodules, node):
        if node.op != "call_function":
            return False
        reason = node_support(node)
        if reason is not None and node.target is not operator.getitem and isinstance(meta(node), torch.Tensor):
            # (size arithmetic on SymInts is not reported: it has no tensor to lower)
            self.report.left[op_name(node.target)] = reason
        return reason is None


def lower_aten_graph(gm, example_inputs, report, device="auto", mode="auto", weights="bind", session_options=None):
    """The fw_compiler: partitions an ATen graph and puts each supported part on graft.
    Returns the partitioned graph's forward function (what aot_autograd calls)."""
    support = _Support(report)
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    # a partition of only views/getitems is not worth a graft session
    partitions = [p for p in partitions if any(n.target in LOWER and n.target not in _VIEWS for n in p.nodes)]
    if not partitions:
        report.fallback = "no op graft lowers"
        return gm
    fused = partitioner.fuse_partitions(partitions)
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target.startswith("fused_"):
            sub = getattr(fused, node.target)
            # literals of the graph (get_attr: a lifted torch.tensor(...)) reach the subgraph as
            # arguments: they are constants of the graft graph, as in the ONNX import
            const_args = [i for i, a in enumerate(node.args) if isinstance(a, torch.fx.Node) and a.op == "get_attr"]
            graft_sub = GraftSubgraph(sub, report, device, mode, weights, const_args, session_options)
            setattr(fused, node.target, graft_sub)
            # called as a function, not a module: nn.Module.__call__'s hook machinery is per-call
            # host time that buys nothing here
            node.op, node.target = "call_function", graft_sub.forward
            report.subgraphs += 1
    fused.recompile()
    # (a lazy GraphModule's forward is a stub that recompiles and goes through __call__: made real now)
    getattr(fused, "real_recompile", lambda: None)()
    # aot_autograd calls this with the flat arguments: the generated forward itself, without
    # GraphModule.__call__ (module hooks, fx's error-reporting wrapper) around it
    return fused.forward


WEIGHTS = ("bind", "freeze")


def graft_backend(gm, example_inputs, **kwargs):
    """The torch.compile backend (torch.compile(model, backend="graft", options={...}))."""
    options = dict(kwargs.get("options") or {})
    device, mode = options.pop("device", "auto"), options.pop("mode", "auto")
    weights = options.pop("weights", "bind")
    if weights not in WEIGHTS:
        raise ValueError("graft backend: weights=%r: expected one of %s" % (weights, ", ".join(map(repr, WEIGHTS))))
    session_options = {}
    for key in ("fuse_attention_f32", "no_fuse_attention", "no_fuse_epilogue"):
        if key in options:
            session_options[key] = int(bool(options.pop(key)))
    if options:
        raise ValueError("graft backend: unknown option(s) %s (known: device, mode, weights, fuse_attention_f32, "
                         "no_fuse_attention, no_fuse_epilogue)" % ", ".join(sorted(options)))
    report = Report(len(_REPORTS))
    _REPORTS.append(report)
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        report.fallback = "a training graph (grad enabled and inputs that require grad): use torch.no_grad()"
        _warn("graph %d: %s; it runs in PyTorch" % (report.index, report.fallback))
        return gm.forward
    try:
        _device_of(tensors)
    except NotLowerable as e:
        report.fallback = str(e)
        _warn("graph %d runs in PyTorch: %s" % (report.index, e))
        return gm.forward
    from torch._dynamo.backends.common import aot_autograd

    def fw_compiler(aten_gm, aten_inputs):
        try:
            return lower_aten_graph(aten_gm, aten_inputs, report, device, mode, weights, session_options)
        except Exception as e:  # anything unexpected: PyTorch runs it, never a wrong answer
            report.fallback = "lowering failed: %s: %s" % (type(e).__name__, e)
            _warn("graph %d runs in PyTorch: %s" % (report.index, report.fallback))
            return aten_gm

    return aot_autograd(fw_compiler=fw_compiler)(gm, example_inputs)


def register():
    """Registers backend="graft" with Dynamo unless the installed entry point already did."""
    import torch._dynamo
    if "graft" not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(graft_backend, name="graft")
