"""Max/Min/Mean/Norm of a numpy array, by the reference's MindSpore rules (framework-free).

Shared by the MindSpore PyNative collector (arrays from ``Tensor.asnumpy()``) and the static-graph
converter (arrays from MindSpore's own ``.npy`` kernel dump), so both dumps carry the same numbers:

* empty array: nothing is filled in (the record keeps its nulls);
* bool: Max = any, Min = all, Mean/Norm stay null;
* 0-dim: all four are the value itself (complex: ``|z|``);
* complex: statistics of ``|z|``;
* int, float64, extension types (bf16 stored as such) and everything with ``high`` are cast to float32;
  float16 and float32 are reduced in their own dtype (float16 accumulates in float32 and is rounded).
"""
import numpy as np

from msprobe.core.dump import writer as jw


def fill_stats(a, rec, high=False):
    """Write ``Max``, ``Min``, ``Mean`` and ``Norm`` of the array ``a`` into the record ``rec``."""
    if a.size == 0:
        return
    kind = a.dtype.kind
    if kind == "b":
        rec["Max"] = bool(a.any())
        rec["Min"] = bool(a.all())
        return
    if a.ndim == 0:
        v = a.item()
        if isinstance(v, complex):
            v = abs(v)
        v = jw.number(v) if isinstance(v, float) else v
        rec["Max"] = rec["Min"] = rec["Mean"] = rec["Norm"] = v
        return
    if kind == "c":
        a = np.abs(a)
    elif kind in "iu" or a.dtype == np.float64 or high or a.dtype.itemsize < 2:
        a = a.astype(np.float32)
    elif kind != "f":
        a = a.astype(np.float32)
    flat = a.reshape(-1)
    rec["Max"] = jw.number(float(flat.max()))
    rec["Min"] = jw.number(float(flat.min()))
    if a.dtype == np.float16:
        rec["Mean"] = jw.number(float(np.float16(flat.mean(dtype=np.float32))))
        f32 = flat.astype(np.float32)
        rec["Norm"] = jw.number(float(np.float16(np.sqrt(np.dot(f32, f32)))))
    else:
        rec["Mean"] = jw.number(float(flat.mean()))
        rec["Norm"] = jw.number(float(np.sqrt(np.dot(flat, flat))))
