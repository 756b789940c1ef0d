"""graft: a tensor-graph compiler and runtime (CUDA graphs; a CPU simulator of CUDA).

    import graft
    s = graft.load("model.onnx")            # or .gir; device="auto"|"sim"|"cuda", mode="auto"|"graph"|"eager"
    out = s(x=numpy_array)                   # or any DLPack tensor (torch, cupy)
    print(s.explain(), s.stats())
    ids = graft.generate("decoder_step.onnx", prompt_ids, max_new_tokens=16)   # KV-cache decode loop (beams=, sample=)

Errors are graft.GraftError subclasses (ShapeError, StaleError, ...) carrying graft's
message and status name. The bindings are ctypes over include/graft.h (see _capi.py).
"""
from ._capi import (LIBRARY_PATH, DeviceError, GraftError, HazardError, InternalError, InvalidError, NotFoundError,
                    OutOfMemoryError, ParseError, ShapeError, StaleError, UnsupportedError)
from ._capi import IOError_ as IOError  # noqa: A001 - graft's GR_ERR_IO, a GraftError (not the builtin)
from .generate import generate
from .session import DeviceTensor, DimInfo, Session, TensorInfo, load

__version__ = "0.1.0"


def explain():
    """What torch.compile(model, backend="graft") made of each graph this process compiled:
    graft subgraphs, the ATen ops lowered, the ops left to PyTorch (and why), fallbacks."""
    import sys
    backend = sys.modules.get("graft.torch_backend")
    return backend.explain() if backend else "graft: no torch.compile(backend=\"graft\") graph compiled in this process"


__all__ = ["load", "generate", "explain", "Session", "DeviceTensor", "TensorInfo", "DimInfo", "GraftError", "InvalidError", "OutOfMemoryError",
           "IOError", "ParseError", "ShapeError", "UnsupportedError", "DeviceError", "StaleError", "NotFoundError",
           "HazardError", "InternalError", "LIBRARY_PATH"]
