"""DLPack (dmlc.github.io/dlpack) through the PyCapsule protocol, with ctypes.

Consumer: `borrow(obj, stream)` calls obj.__dlpack__ and reads the DLTensor from the
"dltensor" capsule; the capsule is kept by the caller for as long as graft may read the
memory, and its own destructor then calls the producer's deleter (the protocol's rule for
a capsule not renamed "used_dltensor").

Producer: `export(...)` makes a "dltensor" capsule over memory graft owns; the
DLManagedTensor and its shape live in `_live` until the consumer calls the deleter (or
the capsule dies unconsumed), and hold a reference to the owner (the session), so the
memory cannot be freed under the consumer by the session being garbage-collected.
"""
import ctypes

# DLDeviceType
CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
# DLDataTypeCode
INT, UINT, FLOAT, BFLOAT, BOOL = 0, 1, 2, 4, 6


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_api = ctypes.pythonapi
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR)(
    ("PyCapsule_New", _api))
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

_NAME = b"dltensor"

# ---- graft dtype names <-> DLPack (code, bits) --------------------------------------------
TO_DL = {"f32": (FLOAT, 32), "f16": (FLOAT, 16), "bf16": (BFLOAT, 16), "f64": (FLOAT, 64), "i64": (INT, 64),
         "i32": (INT, 32), "i8": (INT, 8), "u8": (UINT, 8), "bool": (BOOL, 8)}
FROM_DL = {v: k for k, v in TO_DL.items()}


class Borrowed:
    """What a producer's capsule describes, and the capsule that keeps it alive."""

    __slots__ = ("capsule", "data", "device_type", "device_id", "dtype", "shape", "contiguous", "nbytes")


def borrow(obj, stream=None):
    kwargs = {} if stream is None else {"stream": stream}
    capsule = obj.__dlpack__(**kwargs)
    if not _is_valid(capsule, _NAME):
        raise TypeError("__dlpack__ of %s did not return a 'dltensor' capsule" % type(obj).__name__)
    t = DLManagedTensor.from_address(_get_pointer(capsule, _NAME)).dl_tensor
    b = Borrowed()
    b.capsule = capsule
    b.device_type, b.device_id = t.device.device_type, t.device.device_id
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    b.dtype = FROM_DL.get((code, bits)) if lanes == 1 else None
    if b.dtype is None:
        b.dtype = "dlpack(code=%d, bits=%d, lanes=%d)" % (code, bits, lanes)
    b.shape = tuple(t.shape[i] for i in range(t.ndim))
    b.data = (t.data or 0) + t.byte_offset
    numel = 1
    for d in b.shape:
        numel *= d
    b.nbytes = numel * bits // 8 * lanes
    b.contiguous = True
    if t.strides and numel > 0:
        want = 1
        for i in reversed(range(t.ndim)):
            if b.shape[i] != 1 and t.strides[i] != want:
                b.contiguous = False
            want *= b.shape[i]
    return b


# ---- producer ----------------------------------------------------------------------------------
_live = {}  # address of a DLManagedTensor -> (struct, shape array, owner)


@_DELETER
def _deleter(address):
    _live.pop(address, None)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule_address):
    # unconsumed (still named "dltensor"): the capsule owns the tensor, so it deletes it
    if _raw_is_valid(capsule_address, _NAME):
        _live.pop(_raw_get_pointer(capsule_address, _NAME), None)


_templates = {}  # (shape, dtype, device) -> (filled DLManagedTensor but data, its shape array): one copy per export


def _template(shape, dtype, device_type, device_id):
    key = (shape, dtype, device_type, device_id)
    hit = _templates.get(key)
    if hit is None:
        code, bits = TO_DL[dtype]
        m = DLManagedTensor()
        shape_arr = (ctypes.c_int64 * max(1, len(shape)))(*shape)  # shared by every export of this key: never written
        m.dl_tensor.device = DLDevice(device_type, device_id)
        m.dl_tensor.ndim = len(shape)
        m.dl_tensor.dtype = DLDataType(code, bits, 1)
        m.dl_tensor.shape = shape_arr
        m.dl_tensor.strides = None  # compact row-major
        m.dl_tensor.byte_offset = 0
        m.deleter = _deleter
        if len(_templates) >= 256:  # many shapes (a dynamic model): keep the table small
            _templates.clear()
        hit = _templates[key] = (bytes(m), shape_arr)
    return hit


def export(data, shape, dtype, device_type, device_id, owner):
    raw, shape_arr = _template(tuple(shape), dtype, device_type, device_id)
    m = DLManagedTensor.from_buffer_copy(raw)
    m.dl_tensor.data = data
    address = ctypes.addressof(m)
    _live[address] = (m, shape_arr, owner)
    return _capsule_new(address, _NAME, _capsule_destructor)


def live_exports():
    """Tensors exported and not yet released by their consumers (for tests)."""
    return len(_live)
