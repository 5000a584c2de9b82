"""PyTorch-style tensor repr: ``tensor([1., 2.], grad_fn=<MulBackward0>)``."""
from __future__ import annotations

import numpy as np

from . import _dtype


def _format_array(a: np.ndarray, indent: int) -> str:
    if a.dtype.kind == "f" or a.dtype.kind == "V" or str(a.dtype) in ("bfloat16", "float16"):
        f = a.astype(np.float64)
        finite = f[np.isfinite(f)]
        integral = finite.size == 0 or np.all(finite == np.round(finite))
        big = finite.size and (np.abs(finite).max() >= 1e8 or (np.abs(finite[finite != 0]).min() < 1e-4
                                                                if np.any(finite != 0) else False))
        if big:
            fmt = lambda x: f"{x:.4e}"  # noqa: E731
        elif integral:
            fmt = lambda x: f"{x:.0f}." if np.isfinite(x) else str(x)  # noqa: E731
        else:
            fmt = lambda x: f"{x:.4f}"  # noqa: E731
        return np.array2string(f, separator=", ", formatter={"float_kind": fmt}, threshold=1000, edgeitems=3,
                               prefix=" " * indent, max_line_width=80)
    if a.dtype == np.bool_:
        return np.array2string(a, separator=", ", formatter={"bool": lambda x: "True" if x else "False"},
                               threshold=1000, prefix=" " * indent, max_line_width=80)
    return np.array2string(a, separator=", ", threshold=1000, prefix=" " * indent, max_line_width=80)


def tensor_repr(t) -> str:
    suffix = []
    if t._data is None:
        body = "<no data yet: captured, replay the graph first>"
        suffix.append(f"size={list(t.shape)}")
    else:
        body = _format_array(np.asarray(t._data), len("tensor("))
    if t.device.type != "cpu" or t.device.index != 0:
        suffix.append(f"device='{t.device}'")
    default_float = _dtype.get_default_dtype()
    dt = t.dtype
    implicit = dt is default_float or dt is _dtype.bool or dt is _dtype._index_dtype()
    if not implicit or t.numel() == 0:
        suffix.append(f"dtype={dt}")
    if t._grad_fn is not None:
        suffix.append(f"grad_fn=<{t._grad_fn.name()}>")
    elif t._req:
        suffix.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + s for s in suffix) + ")"
