"""graft.load and Session: a compiled model with NumPy / DLPack inputs and outputs."""
import collections
import ctypes
import os
import sys

import numpy as np

from . import _capi as C
from . import _dlpack as D
from ._capi import lib

TensorInfo = collections.namedtuple("TensorInfo", "name dtype shape")
TensorInfo.__doc__ = "An input or output: graft dtype name ('f32', ...) and shape (ints; a str where symbolic)."
DimInfo = collections.namedtuple("DimInfo", "name lo hi declared")
DimInfo.__doc__ = "A symbolic dim and its range (hi None when unbounded)."

# ---- dtypes -------------------------------------------------------------------------------
DTYPES = ["f32", "f16", "bf16", "f64", "i64", "i32", "i8", "u8", "bool"]  # gr_dtype order
_NP = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i64": np.int64, "i32": np.int32, "i8": np.int8,
       "u8": np.uint8, "bool": np.bool_}
try:  # bf16 on the host needs ml_dtypes (what JAX and PyTorch's numpy bridge use)
    import ml_dtypes as _ml_dtypes
    _NP["bf16"] = _ml_dtypes.bfloat16
except ImportError:  # pragma: no cover - depends on the machine
    pass
_FROM_NP = {np.dtype(v): k for k, v in _NP.items()}


def numpy_dtype(name):
    if name not in _NP:
        raise C.UnsupportedError("dtype %s has no NumPy equivalent here (bf16 needs the ml_dtypes package)" % name,
                                 "GR_ERR_UNSUPPORTED", -6)
    return np.dtype(_NP[name])


def _shape_of(info):
    return tuple(info.sym_names[d].decode() if info.dims[d] < 0 else int(info.dims[d]) for d in range(max(info.ndim, 0)))


_DEVICES = {"auto": C.DEVICE_AUTO, "sim": C.DEVICE_SIM, "cuda": C.DEVICE_CUDA}
_MODES = {"eager": C.MODE_EAGER, "graph": C.MODE_GRAPH, "auto": C.MODE_AUTO}
_ARENAS = {"per_shape": C.ARENA_PER_SHAPE, "max": C.ARENA_MAX_SHAPE}
_PRECISIONS = {None: C.PRECISION_MODEL, "bf16": C.PRECISION_BF16, "f16": C.PRECISION_F16}
_CU_STREAM_LEGACY = 1  # CUDA's handle of the legacy default stream

# torch.Tensor inputs skip DLPack where it changes nothing (Session._set_torch); torch is
# looked up only when the process already imported it (graft never imports it itself)
_TORCH_TENSOR = None
_TORCH_DTYPES = {}
_TORCH_STRIDED = None


def _torch_stream(index):
    import torch
    s = torch.cuda.current_stream(index).cuda_stream
    return s or _CU_STREAM_LEGACY  # PyTorch reports the legacy default stream as 0


def _torch_setup():
    global _TORCH_TENSOR, _TORCH_DTYPES, _TORCH_STRIDED, _torch_stream
    torch = sys.modules.get("torch")
    if torch is None or _TORCH_TENSOR is not None:
        return
    _TORCH_DTYPES = {getattr(torch, k): DTYPES.index(v) for k, v in (
        ("float32", "f32"), ("float16", "f16"), ("bfloat16", "bf16"), ("float64", "f64"), ("int64", "i64"),
        ("int32", "i32"), ("int8", "i8"), ("uint8", "u8"), ("bool", "bool"))}
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:  # the current stream's handle without a Stream object per call
        def _torch_stream(index, raw=raw):
            return raw(index) or _CU_STREAM_LEGACY
    _TORCH_STRIDED = torch.strided
    _TORCH_TENSOR = (torch.Tensor, torch.nn.Parameter)


def load(path, device="auto", mode="auto", *, dims=None, verbose=False, max_rerecords=8, cache_dir=None,
         arena="per_shape", no_partition=False, fuse_attention=True, fuse_attention_f32=False, precision=None,
         shapes=None, graph_memory_mb=0, tp=1, fuse_epilogue=True):
    """Loads a .onnx or .gir model and compiles it for a device.

    device: "auto" (CUDA when a driver and GPU are present, else the simulator), "sim", "cuda".
    mode: "eager", "graph" (CUDA graphs), "auto" (per segment, whichever measures faster).
    dims: {"seq": (lo, hi)} declares symbolic dims' ranges (hi None: unbounded).
    arena: "per_shape" or "max" (one arena for the largest binding; needs every dim's hi).
    max_rerecords, cache_dir, verbose, no_partition: as gr_session_options in graft.h.
    shapes: graph mode over many shapes, "exact" (one graph per binding), "update" (one exec
        per segment, cudaGraphExecUpdate), "pad", "auto" (per segment measured, re-chosen as the
        calls per binding grow) or "generic" (one graph per power-of-two bucket, kernels reading
        their dims from a device table); None (the default): auto in graph mode for a model with
        symbolic dims, exact otherwise (Session.shape_policy says which); graph_memory_mb: the
        graphs' memory budget (0: none).
    fuse_attention: run recognised attention as one fused op (False: the unfused reference path);
    fuse_attention_f32: fuse f32 attention of every head dim (by default f16/bf16 and f32 of head dims
        64 and 128 are fused: see gr_session_options).
    fuse_epilogue: run a tanh-GELU or ReLU after a matmul as the matmul's epilogue (False: the
        unfused reference path).
    precision: None (run as exported), "bf16" or "f16": convert an f32 model at load, as
        autocast does (matmuls and attention in half with f32 accumulation, softmax, norms,
        reductions, exp/log/pow/erf in f32); inputs and outputs keep their dtypes.
        docs/precision.md has the rules and the tolerances.
    tp: tensor parallelism: the model split over tp devices (GPUs 0..tp-1 through NCCL, or tp
        simulated devices); outputs are whole. docs/design.md, "Tensor parallelism".
    """
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError("graft.load: tp=%r: expected a number of devices >= 1" % (tp,))
    for what, value, table in (("device", device, _DEVICES), ("mode", mode, _MODES), ("arena", arena, _ARENAS),
                               ("precision", precision, _PRECISIONS)):
        if value not in table:
            raise ValueError("graft.load: %s=%r: expected one of %s" % (what, value, ", ".join(map(repr, table))))
    graph = ctypes.c_void_p()
    C.check(lib.gr_graph_load(os.fsencode(os.fspath(path)), ctypes.byref(graph)))
    try:
        for name, rng in (dims or {}).items():
            lo, hi = rng
            C.check(lib.gr_graph_set_dim_range(graph, name.encode(), int(lo), 2**63 - 1 if hi is None else int(hi)))
        opts = C.SessionOptions()
        lib.gr_session_options_init(ctypes.byref(opts))
        opts.device, opts.mode, opts.verbose = _DEVICES[device], _MODES[mode], int(bool(verbose))
        opts.max_rerecords, opts.no_partition, opts.arena_policy = int(max_rerecords), int(bool(no_partition)), _ARENAS[arena]
        opts.no_fuse_attention, opts.fuse_attention_f32 = int(not fuse_attention), int(bool(fuse_attention_f32))
        opts.precision = _PRECISIONS[precision]
        opts.no_fuse_epilogue = int(not fuse_epilogue)
        if shapes is not None:
            policy = ctypes.c_int()
            C.check(lib.gr_shape_policy_parse(str(shapes).encode(), ctypes.byref(policy)))
            opts.shape_policy = policy.value
        opts.graph_memory_mb = float(graph_memory_mb)
        opts.tp = tp
        cache = os.fsencode(cache_dir) if cache_dir else None
        opts.cache_dir = cache
        handle = ctypes.c_void_p()
        C.check(lib.gr_session_create(graph, ctypes.byref(opts), ctypes.byref(handle)))
    except BaseException:
        lib.gr_graph_destroy(graph)
        raise
    sess = Session(graph, handle, os.fspath(path))
    sess._fast_run = tp == 1  # gr_session_run_device drives one device
    return sess


class Session:
    """A model compiled for one device (graft.load). Not thread-safe: one thread at a time.

    session(**inputs) / session.run(**inputs) (or run({"name": value})): inputs are NumPy
    arrays, Python scalars or any DLPack-capable tensor (__dlpack__). Host inputs are copied;
    CUDA tensors are bound in place (zero-copy) on a CUDA session. Returns {output name:
    value}: NumPy arrays (copies) on the simulator, DeviceTensor (DLPack, no copy) on CUDA.
    run_device() returns DeviceTensor on both.
    """

    def __init__(self, graph, handle, path):
        self._graph, self._handle, self.path = graph, handle, path
        self._held = {}  # input name -> DLPack capsule bound (kept while graft may read it)
        self.device_kind = "cuda" if lib.gr_session_device_kind(handle) == C.DEVICE_CUDA else "sim"
        # the shape policy it runs under (the default resolved: "auto" or "exact")
        self.shape_policy = lib.gr_shape_policy_name(lib.gr_session_shape_policy(handle, None)).decode()
        self.device_name = lib.gr_session_device_name(handle).decode("utf-8", "replace")
        self.stream = None  # CUDA: the stream runs are ordered on (int handle or torch.cuda.Stream); None: legacy default
        info = C.ValueInfo()
        self.inputs, self.outputs = [], []
        for i in range(lib.gr_graph_num_inputs(graph)):
            C.check(lib.gr_graph_input_info(graph, i, ctypes.byref(info)))
            self.inputs.append(TensorInfo(info.name.decode(), DTYPES[info.dtype], _shape_of(info)))
        for i in range(lib.gr_graph_num_outputs(graph)):
            C.check(lib.gr_graph_output_info(graph, i, ctypes.byref(info)))
            self.outputs.append(TensorInfo(info.name.decode(), DTYPES[info.dtype], _shape_of(info)))
        self._input_dtype = {t.name: t.dtype for t in self.inputs}
        self._in_keys = {t.name: t.name.encode() for t in self.inputs}  # names as the C calls take them
        self._dims_cache = {}  # input name -> (shape, ctypes dims array): rebuilt only when the shape changes
        self._runs = 0  # runs started (graft's generation counts them too): DeviceTensors check it for staleness
        self._fast_run = True  # CUDA: gr_session_run_device when every input allows it (not with tp)
        self._staged = (C.DeviceInput * max(1, len(self.inputs)))()
        self._out_ptrs = None  # the last run's output addresses when gr_session_run_device gave them
        self.dims = {}
        dim = C.DimInfo()
        for k in range(lib.gr_graph_num_dims(graph)):
            C.check(lib.gr_graph_dim_info(graph, k, ctypes.byref(dim)))
            name = dim.name.decode()
            self.dims[name] = DimInfo(name, dim.lo, None if dim.hi == 2**63 - 1 else dim.hi, bool(dim.declared))
        # a model without symbolic dims has fixed output names, dtypes and shapes: read once (first run)
        self._out_meta = None if not self.dims else False

    # ---- lifetime ----
    def close(self):
        """Frees the session; DeviceTensors of it become unusable (StaleError)."""
        if self._handle:
            lib.gr_session_destroy(self._handle)
            lib.gr_graph_destroy(self._graph)
            self._handle = self._graph = None
            self._held.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _h(self):
        if not self._handle:
            raise C.InvalidError("the session is closed", "GR_ERR_INVALID", -1)
        return self._handle

    def __repr__(self):
        return "<graft.Session %s on %s: inputs %s, outputs %s>" % (
            self.path, self.device_name, [tuple(t) for t in self.inputs], [tuple(t) for t in self.outputs])

    # ---- shapes ----
    def input_shapes(self, **dims):
        """Concrete shape of every input for symbolic dims given by name (gr_graph_input_dims)."""
        names = (ctypes.c_char_p * max(1, len(dims)))(*[k.encode() for k in dims])
        values = (ctypes.c_int64 * max(1, len(dims)))(*[int(v) for v in dims.values()])
        out = {}
        buf = (ctypes.c_int64 * C.MAX_DIMS)()
        for i, t in enumerate(self.inputs):
            C.check(lib.gr_graph_input_dims(self._graph, i, len(dims), names, values, buf))
            out[t.name] = tuple(buf[d] for d in range(len(t.shape)))
        return out

    # ---- inputs ----
    def _stream_handle(self):
        s = self.stream
        if s is None:
            return _CU_STREAM_LEGACY
        s = getattr(s, "cuda_stream", s)  # a torch.cuda.Stream
        return int(s) or _CU_STREAM_LEGACY  # PyTorch reports the legacy default stream as 0

    def _dims(self, name, shape):
        hit = self._dims_cache.get(name)
        if hit is not None and hit[0] == shape:
            return hit[1]
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        self._dims_cache[name] = (shape, dims)
        return dims

    def _key(self, name):
        key = self._in_keys.get(name)
        return key if key is not None else name.encode()

    def _set_torch(self, name, t):
        """A torch.Tensor without the DLPack round trip, where that changes nothing: contiguous,
        a graft dtype, host memory (copied) or CUDA memory of device 0 on a CUDA session when
        PyTorch's current stream is the session's (so DLPack's stream hand-over is a no-op).
        Returns False where the DLPack path must decide."""
        gd = _TORCH_DTYPES.get(t.dtype)
        if gd is None or t.layout is not _TORCH_STRIDED or not t.is_contiguous():
            return False
        dev = t.device
        shape = tuple(t.shape)
        nbytes = t.numel() * t.element_size()
        if dev.type == "cpu":
            C.check(lib.gr_session_set_input(self._h(), self._key(name), gd, len(shape), self._dims(name, shape),
                                             t.data_ptr() or None, nbytes))
            self._held.pop(name, None)
            return True
        if dev.type != "cuda" or self.device_kind != "cuda" or dev.index != 0 or _torch_stream(dev.index) != self._stream_handle():
            return False
        C.check(lib.gr_session_bind_input_device(self._h(), self._key(name), gd, len(shape), self._dims(name, shape),
                                                 t.data_ptr() or None, nbytes))
        self._held[name] = t  # the buffer must outlive the runs that read it
        return True

    def _set_host(self, name, arr):
        gd = _FROM_NP.get(arr.dtype)
        if gd is None:
            raise C.ShapeError("input '%s': NumPy dtype %s has no graft dtype (graph expects %s)" % (
                name, arr.dtype, self._input_dtype.get(name, "?")), "GR_ERR_SHAPE", -5)
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
        dims = (ctypes.c_int64 * max(1, arr.ndim))(*arr.shape)
        C.check(lib.gr_session_set_input(self._h(), name.encode(), DTYPES.index(gd), arr.ndim, dims,
                                         arr.ctypes.data, arr.nbytes))
        self._held.pop(name, None)

    def _set_dlpack(self, name, obj):
        cuda = self.device_kind == "cuda"
        dev = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else D.CPU
        stream = self._stream_handle() if cuda and dev in (D.CUDA, D.CUDA_MANAGED) else None
        b = D.borrow(obj, stream)
        if b.dtype not in DTYPES:
            raise C.ShapeError("input '%s': DLPack dtype %s has no graft dtype (graph expects %s)" % (
                name, b.dtype, self._input_dtype.get(name, "?")), "GR_ERR_SHAPE", -5)
        if b.device_type in (D.CPU, D.CUDA_HOST):
            if not b.contiguous:
                return self._set_host(name, np.from_dlpack(obj).copy(order="C"))
            dims = (ctypes.c_int64 * max(1, len(b.shape)))(*b.shape)
            C.check(lib.gr_session_set_input(self._h(), name.encode(), DTYPES.index(b.dtype), len(b.shape), dims,
                                             b.data or None, b.nbytes))
            self._held.pop(name, None)  # copied: nothing to keep
            return
        if b.device_type not in (D.CUDA, D.CUDA_MANAGED):
            raise C.UnsupportedError("input '%s': DLPack device type %d is neither host memory nor CUDA" % (
                name, b.device_type), "GR_ERR_UNSUPPORTED", -6)
        if not cuda:
            raise C.UnsupportedError("input '%s': a CUDA tensor given to a session on %s; pass host memory (e.g. .cpu())" % (
                name, self.device_name), "GR_ERR_UNSUPPORTED", -6)
        if b.device_id != 0:
            raise C.UnsupportedError("input '%s': on cuda:%d, graft runs on cuda:0" % (name, b.device_id),
                                     "GR_ERR_UNSUPPORTED", -6)
        if not b.contiguous:
            raise C.ShapeError("input '%s': a non-contiguous CUDA tensor (call .contiguous())" % name, "GR_ERR_SHAPE", -5)
        dims = (ctypes.c_int64 * max(1, len(b.shape)))(*b.shape)
        C.check(lib.gr_session_bind_input_device(self._h(), name.encode(), DTYPES.index(b.dtype), len(b.shape), dims,
                                                 b.data or None, b.nbytes))
        self._held[name] = b.capsule  # the buffer must outlive the runs that read it

    def set_input(self, name, value):
        """Binds one input (what run(**inputs) does for each)."""
        if isinstance(value, np.ndarray):
            return self._set_host(name, value)
        if _TORCH_TENSOR is None:
            _torch_setup()  # (torch may have been imported after this session was made)
        if _TORCH_TENSOR is not None and type(value) in _TORCH_TENSOR and self._set_torch(name, value):
            return None
        if hasattr(value, "__dlpack__"):
            return self._set_dlpack(name, value)
        want = self._input_dtype.get(name)
        return self._set_host(name, np.asarray(value, dtype=_NP.get(want) if want else None))

    # ---- run ----
    def _enqueue(self, args, inputs):
        if args:
            if len(args) != 1 or not isinstance(args[0], dict):
                raise TypeError("run() takes inputs as keywords or one dict {name: value}")
            inputs = dict(args[0], **inputs) if inputs else args[0]
        self._out_ptrs = None
        if self.device_kind == "cuda" and self._fast_run and self._run_staged(inputs):
            return
        set_input = self.set_input
        for name, value in inputs.items():
            set_input(name, value)
        self._runs += 1
        if self.device_kind == "cuda":
            C.check(lib.gr_session_run_on_stream(self._h(), self._stream_handle()))
        else:
            C.check(lib.gr_session_run(self._h()))

    def _run_staged(self, inputs):
        """CUDA, every input a contiguous CUDA torch tensor on PyTorch's current stream (the
        session's): binds them, runs and takes the outputs' addresses in one C call that waits
        for nothing (gr_session_run_device: the run queues behind the last one on the device).
        Returns False, having done nothing, where some input needs the general path."""
        if _TORCH_TENSOR is None:
            _torch_setup()
            if _TORCH_TENSOR is None:
                return False
        staged, n = self._staged, 0
        stream = self._stream_handle()
        keys, dtypes = self._in_keys, _TORCH_DTYPES
        for name, t in inputs.items():
            if type(t) not in _TORCH_TENSOR or n >= len(self.inputs):
                return False
            gd, key = dtypes.get(t.dtype), keys.get(name)
            if gd is None or key is None or t.layout is not _TORCH_STRIDED or not t.is_cuda or not t.is_contiguous():
                return False
            dev = t.device.index
            if dev != 0 or _torch_stream(dev) != stream:
                return False
            shape = tuple(t.shape)
            e = staged[n]
            e.name, e.dtype, e.ndim, e.dims = key, gd, len(shape), self._dims(name, shape)
            e.data, e.nbytes = t.data_ptr() or None, t.numel() * t.element_size()
            n += 1
        n_out = len(self.outputs)
        outs = (C.Output * max(1, n_out))()
        ptrs = (ctypes.c_void_p * max(1, n_out))()
        for name, t in inputs.items():
            self._held[name] = t  # each buffer must outlive the runs that read it (held first: a failed call may bind some)
        self._runs += 1
        C.check(lib.gr_session_run_device(self._h(), stream, n, staged, n_out, outs, ptrs))
        self._out_ptrs = (outs, ptrs)
        return True

    def _device_outputs(self):
        h = self._h()
        out = {}
        meta = self._out_meta
        staged = self._out_ptrs
        if meta and staged:  # handles and addresses from gr_session_run_device: no C call, no wait
            outs, ptrs = staged
            for i, (name, dtype, shape) in enumerate(meta):
                out[name] = DeviceTensor._make(self, outs[i], name, dtype, shape, ptrs[i] or 0)
            return out
        if staged:  # symbolic dims: each output's dims from its run's plan (known at enqueue: no wait)
            outs, ptrs = staged
            info = C.ValueInfo()
            for i in range(len(self.outputs)):
                C.check(lib.gr_session_output_info(h, outs[i], ctypes.byref(info)))
                name = info.name.decode()
                out[name] = DeviceTensor._make(self, outs[i], name, DTYPES[info.dtype],
                                               tuple(info.dims[d] for d in range(info.ndim)), ptrs[i] or 0)
            return out
        if meta:  # static model: one C call per output (its handle), metadata known
            for i, (name, dtype, shape) in enumerate(meta):
                o = C.Output()
                C.check(lib.gr_session_output(h, i, ctypes.byref(o)))
                out[name] = DeviceTensor._make(self, o, name, dtype, shape)
            return out
        for i, t in enumerate(self.outputs):
            o = C.Output()
            C.check(lib.gr_session_output(h, i, ctypes.byref(o)))
            out[t.name] = DeviceTensor(self, o)
        if meta is None:
            self._out_meta = [(v.name, v.dtype, v.shape) for v in out.values()]
        return out

    def run(self, *args, **inputs):
        """Runs once. Simulator: {name: numpy.ndarray} (copies, yours to keep).
        CUDA: {name: DeviceTensor} (device memory, valid until the next run)."""
        self._enqueue(args, inputs)
        outs = self._device_outputs()
        if self.device_kind == "cuda":
            return outs
        return {k: v.numpy() for k, v in outs.items()}

    __call__ = run

    def run_device(self, *args, **inputs):
        """Runs once and returns {name: DeviceTensor}: the outputs where the device keeps
        them, no copy (the simulator's device memory is host memory: a CPU DLPack view)."""
        self._enqueue(args, inputs)
        return self._device_outputs()

    # ---- reports ----
    def explain(self):
        """The compiled plan (graft explain); for a symbolic model not yet run, the symbolic plan."""
        text = ctypes.c_void_p()
        st = lib.gr_session_explain(self._h(), ctypes.byref(text))
        if st != 0 and self.dims:
            C.check(lib.gr_graph_explain(self._graph, ctypes.byref(text)))
        elif st != 0:
            raise C.error(st)
        return C.take_string(text.value)

    def stats(self):
        """The last run: kernels (launched or replayed), kernels_in_graphs, graph_launches
        (graph replays), copies and bytes_copied, nodes_updated (graph nodes repointed or
        patched), inputs_in_place (device inputs read without a copy), times (µs), memory;
        plus the device's kernel preparation counters under 'kernel_prep'."""
        rs = C.RunStats()
        C.check(lib.gr_session_stats(self._h(), ctypes.byref(rs)))
        out = {name: getattr(rs, name) for name, _ in C.RunStats._fields_}
        ks = C.KernelStats()
        C.check(lib.gr_session_kernel_stats(self._h(), ctypes.byref(ks)))
        out["kernel_prep"] = {name: getattr(ks, name) for name, _ in C.KernelStats._fields_}
        return out

    def capture_range(self, dim, lo, hi, progress=False):
        """Captures every binding of symbolic dim `dim` in lo..hi ahead of time, largest first
        (gr_session_capture_range); returns what it did and took (bindings, total_ms,
        compile_ms, capture_ms, captures, instantiations, exec_updates)."""
        r = C.CaptureReport()
        self._runs += 1  # (it may run the plans: outputs handed out before are stale)
        C.check(lib.gr_session_capture_range(self._h(), dim.encode(), int(lo), int(hi), int(bool(progress)), ctypes.byref(r)))
        return {name: getattr(r, name) for name, _ in C.CaptureReport._fields_}

    # ---- generation (graft.generate) ----
    def bind_state(self, output, input):
        """Output `output` feeds input `input` on the next step (a KV cache: present -> past)."""
        from .generate import bind_state
        bind_state(self, output, input)

    def bind_state_auto(self):
        """Pairs present*/past* names (include/graft.h lists them); returns the pairs bound."""
        from .generate import bind_state_auto
        return bind_state_auto(self)

    @property
    def states(self):
        """The state bindings, [(output, input)]."""
        from .generate import states
        return states(self)

    def generate(self, prompt, max_new_tokens, **options):
        """graft.generate(self, prompt, max_new_tokens, **options)."""
        from .generate import generate
        return generate(self, prompt, max_new_tokens, **options)


class DeviceTensor:
    """One output of one run, where the device keeps it: valid until the session's next run.

    Afterwards every use raises graft.StaleError (graft's generation check), never stale
    data. A consumer that already took the memory (torch.from_dlpack, np.from_dlpack) holds
    a view: it sees the next run's values, so copy what must outlive the run (.numpy(),
    tensor.clone()).
    """

    __slots__ = ("_session", "_out", "name", "dtype", "shape", "_run", "_ptr", "__weakref__")

    def __init__(self, session, out):
        self._session, self._out = session, out
        self._run, self._ptr = session._runs, None
        info = C.ValueInfo()
        C.check(lib.gr_session_output_info(session._h(), out, ctypes.byref(info)))
        self.name = info.name.decode()
        self.dtype = DTYPES[info.dtype]
        self.shape = tuple(int(info.dims[d]) for d in range(info.ndim))

    @classmethod
    def _make(cls, session, out, name, dtype, shape, ptr=None):
        self = cls.__new__(cls)
        self._session, self._out, self.name, self.dtype, self.shape = session, out, name, dtype, shape
        self._run, self._ptr = session._runs, ptr
        return self

    def __repr__(self):
        return "<graft.DeviceTensor %s %s%s on %s>" % (self.name, self.dtype, list(self.shape), self._session.device_kind)

    @property
    def data_ptr(self):
        """The device address (checked: StaleError after the next run)."""
        s = self._session
        if self._ptr is not None and s._handle:
            # given by gr_session_run_device, which waits for nothing: the same generation rule,
            # checked here (graft's generation moves with every run this session starts)
            if s._runs != self._run:
                raise C.StaleError("output '%s' is from run %d but the session has run again (now run %d): its memory "
                                   "was reused; copy outputs out before the next run" % (self.name, self._run, s._runs),
                                   "GR_ERR_STALE", -8)
            return self._ptr
        p = ctypes.c_void_p()
        C.check(lib.gr_session_output_device_ptr(s._h(), self._out, ctypes.byref(p)))
        return p.value or 0

    @property
    def nbytes(self):
        n = 1
        for d in self.shape:
            n *= d
        return n * lib.gr_dtype_size(DTYPES.index(self.dtype))

    def numpy(self):
        """A host copy (StaleError after the next run)."""
        arr = np.empty(self.shape, dtype=numpy_dtype(self.dtype))
        C.check(lib.gr_session_output_read(self._session._h(), self._out, arr.ctypes.data, arr.nbytes))
        return arr

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __dlpack_device__(self):
        # the simulator's device memory is host memory of this process
        return (D.CUDA, 0) if self._session.device_kind == "cuda" else (D.CPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("graft.DeviceTensor exports its memory without a copy (copy=True not supported)")
        ptr = self.data_ptr
        if self._session.device_kind == "cuda" and stream not in (None, -1):
            # the consumer's stream waits for the run that wrote this output
            C.check(lib.gr_session_order_stream(self._session._h(), ctypes.c_void_p(int(stream))))
        dev_type, dev_id = self.__dlpack_device__()
        return D.export(ptr or None, self.shape, self.dtype, dev_type, dev_id, self._session)
