"""ctypes declarations of include/graft.h, the library loader and graft's errors.

Why ctypes (not cffi or nanobind): libgraft.so already exports exactly the C API of
include/graft.h, so ctypes binds it with no compiler at install time beyond the C
build itself and no extra dependency; the calls graft's Python API makes are few and
coarse (one per input, one per run), so ctypes' per-call overhead (about a microsecond)
is small against a run. Every struct below mirrors graft.h field for field; keep them
in step (tests/py/test_package.py checks the ones whose layout drift would show).
"""
import ctypes
import os

# ---- the library -----------------------------------------------------------------


def _find_library():
    """GRAFT_LIBRARY, else libgraft.so beside this package (the wheel), else the
    in-tree build (build/lib/libgraft.so of the checkout this package lives in)."""
    env = os.environ.get("GRAFT_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "libgraft.so")]
    repo = os.path.dirname(os.path.dirname(here))
    candidates.append(os.path.join(repo, "build", "lib", "libgraft.so"))
    for c in candidates:
        if os.path.exists(c):
            return c
    raise ImportError(
        "graft: libgraft.so not found (looked in %s); install the package with `pip install .` "
        "from the repository, build it (cmake --build build), or set GRAFT_LIBRARY" % ", ".join(candidates))


LIBRARY_PATH = _find_library()
lib = ctypes.CDLL(LIBRARY_PATH)

# ---- status and errors --------------------------------------------------------------

STATUS_NAMES = {
    0: "GR_OK", -1: "GR_ERR_INVALID", -2: "GR_ERR_NOMEM", -3: "GR_ERR_IO", -4: "GR_ERR_PARSE",
    -5: "GR_ERR_SHAPE", -6: "GR_ERR_UNSUPPORTED", -7: "GR_ERR_DEVICE", -8: "GR_ERR_STALE",
    -9: "GR_ERR_NOT_FOUND", -10: "GR_ERR_HAZARD", -11: "GR_ERR_INTERNAL",
}


class GraftError(Exception):
    """An error graft reported: `status` is its name ("GR_ERR_SHAPE"), `code` the
    gr_status value, `message` graft's message (gr_last_error)."""

    status = "GR_ERR"
    code = None

    def __init__(self, message, status=None, code=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code

    def __str__(self):
        return "%s: %s" % (self.status, self.message)


def _subclass(name, code, doc):
    return type(name, (GraftError,), {"status": STATUS_NAMES[code], "code": code, "__doc__": doc})


InvalidError = _subclass("InvalidError", -1, "Bad argument, malformed graph or model.")
OutOfMemoryError = _subclass("OutOfMemoryError", -2, "Host or device allocation failed.")
IOError_ = _subclass("IOError", -3, "File missing, unreadable, truncated.")
ParseError = _subclass("ParseError", -4, "Syntax error in a model file.")
ShapeError = _subclass("ShapeError", -5, "Shape or dtype mismatch.")
UnsupportedError = _subclass("UnsupportedError", -6, "Op, dtype or feature not supported here.")
DeviceError = _subclass("DeviceError", -7, "Device, driver or compiler failure.")
StaleError = _subclass("StaleError", -8, "An output read after the session ran again.")
NotFoundError = _subclass("NotFoundError", -9, "Unknown name.")
HazardError = _subclass("HazardError", -10, "A CUDA-graph or memory hazard graft refuses to ignore.")
InternalError = _subclass("InternalError", -11, "A bug in graft.")

ERRORS = {c.code: c for c in (InvalidError, OutOfMemoryError, IOError_, ParseError, ShapeError, UnsupportedError,
                              DeviceError, StaleError, NotFoundError, HazardError, InternalError)}


def error(code, message=None):
    """The exception for gr_status `code`, with gr_last_error() as its message unless given."""
    if message is None:
        message = lib.gr_last_error().decode("utf-8", "replace")
    cls = ERRORS.get(code, GraftError)
    return cls(message, STATUS_NAMES.get(code, "GR_ERR(%d)" % code), code)


def check(code):
    if code != 0:
        raise error(code)


# ---- structs (graft.h) ------------------------------------------------------------------

MAX_DIMS = 8
c_int64_p = ctypes.POINTER(ctypes.c_int64)


class ValueInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_DIMS), ("sym_names", ctypes.c_char_p * MAX_DIMS)]


class DimInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("lo", ctypes.c_int64), ("hi", ctypes.c_int64), ("declared", ctypes.c_int)]


class SessionOptions(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int), ("mode", ctypes.c_int), ("verbose", ctypes.c_int),
                ("max_rerecords", ctypes.c_int), ("cache_dir", ctypes.c_char_p), ("no_partition", ctypes.c_int),
                ("arena_policy", ctypes.c_int), ("no_fuse_attention", ctypes.c_int),
                ("fuse_attention_f32", ctypes.c_int), ("precision", ctypes.c_int), ("shape_policy", ctypes.c_int),
                ("graph_memory_mb", ctypes.c_double), ("no_persist_decisions", ctypes.c_int), ("tp", ctypes.c_int),
                ("no_plan_templates", ctypes.c_int), ("no_fuse_epilogue", ctypes.c_int)]


class Output(ctypes.Structure):
    _fields_ = [("generation", ctypes.c_uint64), ("index", ctypes.c_int)]


class CaptureReport(ctypes.Structure):
    _fields_ = [("bindings", ctypes.c_int), ("total_ms", ctypes.c_double), ("compile_ms", ctypes.c_double),
                ("capture_ms", ctypes.c_double), ("captures", ctypes.c_long), ("instantiations", ctypes.c_long),
                ("exec_updates", ctypes.c_long), ("instantiate_ms", ctypes.c_double)]


class RunStats(ctypes.Structure):
    _fields_ = [("time_us", ctypes.c_double), ("gpu_time_us", ctypes.c_double), ("kernels", ctypes.c_long),
                ("kernels_in_graphs", ctypes.c_long), ("graph_launches", ctypes.c_long), ("copies", ctypes.c_long),
                ("bytes_copied", ctypes.c_size_t), ("arena_bytes", ctypes.c_size_t), ("weight_bytes", ctypes.c_size_t),
                ("segments", ctypes.c_int), ("segments_in_graphs", ctypes.c_int), ("captures", ctypes.c_long),
                ("device_bytes", ctypes.c_size_t), ("compile_us", ctypes.c_double), ("capture_us", ctypes.c_double),
                ("nodes_updated", ctypes.c_long), ("inputs_in_place", ctypes.c_long),
                ("graph_bytes", ctypes.c_size_t), ("graph_bytes_peak", ctypes.c_size_t),
                ("graph_budget_bytes", ctypes.c_size_t), ("instantiations", ctypes.c_long), ("evictions", ctypes.c_long),
                ("graphs_live", ctypes.c_long), ("over_budget", ctypes.c_long), ("plans_evicted", ctypes.c_long), ("timed_runs", ctypes.c_long),
                ("decisions_measured", ctypes.c_long), ("decisions_loaded", ctypes.c_long),
                ("exec_updates", ctypes.c_long), ("exec_updates_refused", ctypes.c_long),
                ("padded_runs", ctypes.c_long), ("generic_runs", ctypes.c_long), ("generic_replays", ctypes.c_long),
                ("table_refreshes", ctypes.c_long), ("table_bytes", ctypes.c_size_t), ("plans_compiled", ctypes.c_long),
                ("plans_instantiated", ctypes.c_long), ("waits_on_host", ctypes.c_long),
                ("shape_decisions_measured", ctypes.c_long), ("shape_decisions_loaded", ctypes.c_long),
                ("shape_measure_runs", ctypes.c_long)]


class KernelStats(ctypes.Structure):
    _fields_ = [("prepared", ctypes.c_long), ("compiled", ctypes.c_long), ("disk_cache_hits", ctypes.c_long),
                ("modules_loaded", ctypes.c_long), ("generic_new", ctypes.c_long), ("generic_reused", ctypes.c_long),
                ("generic_fallbacks", ctypes.c_long)]


DEVICE_AUTO, DEVICE_SIM, DEVICE_CUDA = 0, 1, 2
MODE_EAGER, MODE_GRAPH, MODE_AUTO = 0, 1, 2
ARENA_PER_SHAPE, ARENA_MAX_SHAPE = 0, 1
PRECISION_MODEL, PRECISION_BF16, PRECISION_F16 = 0, 1, 2

# ---- functions ------------------------------------------------------------------------------

_vp, _i, _sz, _cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
_P = ctypes.POINTER


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_fn("gr_last_error", _cp)
_fn("gr_status_name", _cp, _i)
_fn("gr_dtype_name", _cp, _i)
_fn("gr_dtype_size", _sz, _i)
_fn("gr_graph_load", _i, _cp, _P(_vp))
_fn("gr_graph_destroy", None, _vp)
_fn("gr_graph_num_inputs", _i, _vp)
_fn("gr_graph_num_outputs", _i, _vp)
_fn("gr_graph_input_info", _i, _vp, _i, _P(ValueInfo))
_fn("gr_graph_output_info", _i, _vp, _i, _P(ValueInfo))
_fn("gr_graph_num_dims", _i, _vp)
_fn("gr_graph_dim_info", _i, _vp, _i, _P(DimInfo))
_fn("gr_graph_set_dim_range", _i, _vp, _cp, ctypes.c_int64, ctypes.c_int64)
_fn("gr_graph_input_dims", _i, _vp, _i, _i, _P(_cp), c_int64_p, c_int64_p)
_fn("gr_graph_explain", _i, _vp, _P(_vp))
_fn("gr_free_string", None, _vp)
_fn("gr_session_options_init", None, _P(SessionOptions))
_fn("gr_shape_policy_parse", _i, _cp, _P(_i))
_fn("gr_shape_policy_name", _cp, _i)
_fn("gr_session_create", _i, _vp, _P(SessionOptions), _P(_vp))
_fn("gr_session_destroy", None, _vp)
_fn("gr_session_device_name", _cp, _vp)
_fn("gr_session_device_kind", _i, _vp)
_fn("gr_session_shape_policy", _i, _vp, _P(_i))
_fn("gr_session_set_input", _i, _vp, _cp, _i, _i, c_int64_p, _vp, _sz)
_fn("gr_session_bind_input_device", _i, _vp, _cp, _i, _i, c_int64_p, _vp, _sz)
_fn("gr_session_run", _i, _vp)
_fn("gr_session_run_on_stream", _i, _vp, _vp)
_fn("gr_session_order_stream", _i, _vp, _vp)
_fn("gr_session_wait", _i, _vp)
_fn("gr_session_output", _i, _vp, _i, _P(Output))
_fn("gr_session_output_info", _i, _vp, Output, _P(ValueInfo))
_fn("gr_session_output_read", _i, _vp, Output, _vp, _sz)
_fn("gr_session_output_nbytes", _sz, _vp, Output)
_fn("gr_session_output_device_ptr", _i, _vp, Output, _P(_vp))
_fn("gr_session_stats", _i, _vp, _P(RunStats))
_fn("gr_session_capture_range", _i, _vp, _cp, ctypes.c_int64, ctypes.c_int64, _i, _P(CaptureReport))
_fn("gr_session_kernel_stats", _i, _vp, _P(KernelStats))
_fn("gr_session_explain", _i, _vp, _P(_vp))
_fn("gr_session_device_alloc", _i, _vp, _sz, _P(_vp))
_fn("gr_session_device_free", None, _vp, _vp)
_fn("gr_session_device_upload", _i, _vp, _vp, _vp, _sz)
_fn("gr_session_device_download", _i, _vp, _vp, _vp, _sz)


class DeviceInput(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int), ("dims", c_int64_p),
                ("data", ctypes.c_void_p), ("nbytes", ctypes.c_size_t)]


_fn("gr_session_run_device", _i, _vp, _vp, _i, _P(DeviceInput), _i, _P(Output), _P(_vp))


# ---- generation (graft.h "generation") ----
TOKEN_FN = ctypes.CFUNCTYPE(None, _vp, ctypes.c_int64, c_int64_p, ctypes.c_int64)


class GenerateOptions(ctypes.Structure):
    _fields_ = [("max_new_tokens", ctypes.c_int64), ("eos_id", ctypes.c_int64), ("pad_id", ctypes.c_int64),
                ("beams", ctypes.c_int), ("length_penalty", ctypes.c_double), ("sample", ctypes.c_int),
                ("top_k", ctypes.c_int), ("top_p", ctypes.c_double), ("temperature", ctypes.c_double),
                ("seed", ctypes.c_uint64), ("prompt_mode", ctypes.c_int), ("on_token", TOKEN_FN), ("user", _vp),
                ("input_ids", _cp), ("attention_mask", _cp), ("position_ids", _cp), ("logits", _cp),
                ("engine", ctypes.c_int), ("max_length", ctypes.c_int64), ("steps_per_launch", ctypes.c_int64)]


class GenerateStats(ctypes.Structure):
    _fields_ = [("prompt_us", ctypes.c_double), ("decode_us", ctypes.c_double), ("prompt_steps", ctypes.c_int64),
                ("decode_steps", ctypes.c_int64), ("new_tokens", ctypes.c_int64), ("ms_per_token", ctypes.c_double),
                ("tokens_per_s", ctypes.c_double), ("plans", ctypes.c_long),
                ("engine", ctypes.c_int), ("captures", ctypes.c_long), ("launches", ctypes.c_long)]


_fn("gr_session_bind_state", _i, _vp, _cp, _cp)
_fn("gr_session_bind_state_auto", _i, _vp, _P(_i))
_fn("gr_session_num_states", _i, _vp)
_fn("gr_session_state_info", _i, _vp, _i, _P(_cp), _P(_cp))
_fn("gr_generate_options_init", None, _P(GenerateOptions))
_fn("gr_session_generate", _i, _vp, _P(GenerateOptions), c_int64_p, ctypes.c_int64, ctypes.c_int64, c_int64_p,
    _P(GenerateStats))

def take_string(ptr):
    """A string graft malloc'd (gr_session_explain, ...), freed here."""
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace") if ptr else ""
    finally:
        if ptr:
            lib.gr_free_string(ptr)

# ---- graph builder (graft.h "graphs: build with the API"), used by graft.torch_backend ----

GR_ATTR_INT, GR_ATTR_FLOAT, GR_ATTR_STRING, GR_ATTR_INTS, GR_ATTR_FLOATS = 0, 1, 2, 3, 4


class Attr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("i", ctypes.c_int64), ("f", ctypes.c_double),
                ("s", ctypes.c_char_p), ("ints", c_int64_p), ("floats", ctypes.POINTER(ctypes.c_double)),
                ("n", ctypes.c_int)]


_val = ctypes.c_int32
_fn("gr_graph_create", _i, _P(_vp))
_fn("gr_graph_add_input", _i, _vp, _cp, _i, _i, c_int64_p, _P(_cp), _P(_val))
_fn("gr_graph_add_constant", _i, _vp, _cp, _i, _i, c_int64_p, _vp, _P(_val))
_fn("gr_graph_add_node", _i, _vp, _cp, _cp, _i, _P(_val), _i, _P(Attr), _i, _P(_val))
_fn("gr_graph_set_output", _i, _vp, _val, _cp)
_fn("gr_graph_verify", _i, _vp)
_fn("gr_graph_print", _i, _vp, _P(_vp))
