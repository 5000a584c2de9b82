"""PyTorch-style tensor repr: ``tensor([1., 2.], grad_fn=<MulBackward0>)``.

Imports ``_dtype`` and ``streams`` (its host-sync hooks: pending device-side checks report when a tensor is
printed); ``jgrad.distributed.tensor`` installs how a DTensor prints (``dtensor_repr``). Used by
``Tensor.__repr__``.
"""
from __future__ import annotations

import math

import numpy as np

from . import _dtype
from ..streams import _sync_hooks


# PyTorch's print options (torch._tensor_str.PRINT_OPTS): its defaults; set_printoptions changes them
PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH, SCI_MODE = 4, 1000, 3, 80, None
_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """``torch.set_printoptions``: a ``profile`` ("default", "short", "full"), then the options given; ``sci_mode``
    is always set (None: chosen per tensor)."""
    global PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH, SCI_MODE
    if profile in _PROFILES:
        PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = _PROFILES[profile]
    PRECISION = PRECISION if precision is None else precision
    THRESHOLD = THRESHOLD if threshold is None else threshold
    EDGEITEMS = EDGEITEMS if edgeitems is None else edgeitems
    LINEWIDTH = LINEWIDTH if linewidth is None else linewidth
    SCI_MODE = sci_mode


def get_printoptions() -> dict:
    """``torch._tensor_str.get_printoptions``: the options as ``set_printoptions`` keywords."""
    return {"precision": PRECISION, "threshold": THRESHOLD, "edgeitems": EDGEITEMS, "linewidth": LINEWIDTH,
            "sci_mode": SCI_MODE}


class _Formatter:
    """torch._tensor_str._Formatter on a NumPy array (floats as float64): one width for all elements."""

    def __init__(self, a: np.ndarray, floating: bool):
        self.floating, self.int_mode, self.sci_mode, self.max_width = floating, True, False, 1
        flat = a.reshape(-1)
        if not floating:
            self.max_width = max([1] + [len(f"{v}") for v in flat.tolist()])
            return
        vals = flat[np.isfinite(flat) & (flat != 0)]
        if vals.size == 0:
            return
        mags = np.abs(vals)
        lo, hi = float(mags.min()), float(mags.max())
        self.int_mode = bool(np.all(vals == np.ceil(vals)))
        self.sci_mode = (hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4) if SCI_MODE is None else SCI_MODE
        if self.sci_mode:
            widths = [len(f"{v:.{PRECISION}e}") for v in vals.tolist()]
        elif self.int_mode:
            widths = [len(f"{v:.0f}") + 1 for v in vals.tolist()]
        else:
            widths = [len(f"{v:.{PRECISION}f}") for v in vals.tolist()]
        self.max_width = max(widths)

    def format(self, v) -> str:
        if not self.floating:
            ret = f"{v}"
        elif self.sci_mode:
            ret = f"{v:{self.max_width}.{PRECISION}e}"
        elif self.int_mode:
            ret = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            ret = f"{v:.{PRECISION}f}"
        return (self.max_width - len(ret)) * " " + ret


def _summarized(a: np.ndarray) -> np.ndarray:
    """The elements a summarized print shows (get_summarized_data)."""
    if a.ndim == 0:
        return a
    n = a.shape[0]
    if a.ndim == 1:
        return np.concatenate([a[:EDGEITEMS], a[-EDGEITEMS:]]) if n > 2 * EDGEITEMS else a
    rows = list(range(EDGEITEMS)) + list(range(n - EDGEITEMS, n)) if n > 2 * EDGEITEMS else range(n)
    return np.stack([_summarized(a[i]) for i in rows])


def _value_str(v, f1, f2) -> str:
    if f2 is None:
        return f1.format(v)
    real, imag = f1.format(v.real), (f2.format(v.imag) + "j").lstrip()
    return real + imag if imag[0] in "+-" else real + "+" + imag


def _vector_str(a, indent, summarize, f1, f2):
    element_length = f1.max_width + 2 + (f2.max_width + 1 if f2 is not None else 0)
    per_line = max(1, math.floor((LINEWIDTH - indent) / element_length))
    if summarize and a.shape[0] > 2 * EDGEITEMS:
        data = ([_value_str(v, f1, f2) for v in a[:EDGEITEMS].tolist()] + [" ..."]
                + [_value_str(v, f1, f2) for v in a[-EDGEITEMS:].tolist()])
    else:
        data = [_value_str(v, f1, f2) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested_str(a, indent, summarize, f1, f2):
    if a.ndim == 0:
        return _value_str(a.item(), f1, f2)
    if a.ndim == 1:
        return _vector_str(a, indent, summarize, f1, f2)
    n = a.shape[0]
    if summarize and n > 2 * EDGEITEMS:
        slices = ([_nested_str(a[i], indent + 1, summarize, f1, f2) for i in range(EDGEITEMS)] + ["..."]
                  + [_nested_str(a[i], indent + 1, summarize, f1, f2) for i in range(n - EDGEITEMS, n)])
    else:
        slices = [_nested_str(a[i], indent + 1, summarize, f1, f2) for i in range(n)]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _format_array(a: np.ndarray, indent: int, dt) -> str:
    """torch._tensor_str._tensor_str: PRECISION digits, elements right-justified to one width."""
    if a.size == 0:
        return "[]"
    summarize = a.size > THRESHOLD
    if dt.is_complex:
        a = a.astype(np.complex128)
        f1 = _Formatter(_summarized(a.real) if summarize else a.real, True)
        f2 = _Formatter(_summarized(a.imag) if summarize else a.imag, True)
    else:
        if dt.is_floating_point:
            a = a.astype(np.float64)
        f1, f2 = _Formatter(_summarized(a) if summarize else a, dt.is_floating_point), None
    return _nested_str(a, indent, summarize, f1, f2)


def _add_suffixes(text: str, suffixes, indent: int) -> str:
    """torch._tensor_str._add_suffixes: a suffix that would pass LINEWIDTH goes on its own line."""
    out = [text]
    last = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last + len(suffix) + 2 > LINEWIDTH:
            out.append(",\n" + " " * indent + suffix)
            last = indent + len(suffix)
        else:
            out.append(", " + suffix)
            last += len(suffix) + 2
    out.append(")")
    return "".join(out)


# How a DTensor prints: jgrad.distributed.tensor installs it when it loads (it sits far above the tensor).
dtensor_repr = None


def tensor_repr(t) -> str:
    """``repr`` as PyTorch's ``_str_intern`` writes it for a strided tensor (a DTensor's as PyTorch's DTensor's)."""
    if getattr(t._device, "device_mesh", None) is not None:
        return dtensor_repr(t, _tensor_repr(t))
    return _tensor_repr(t)


def _report_checks():
    """Printing reads values: pending device-side checks report first, as at any host read (not a capture's
    host sync: printing a captured tensor shows that it has no value yet)."""
    for hook in _sync_hooks:
        hook("printing a tensor", None)


# Called with the tensor when one that has no value yet (captured, not replayed) is printed: jg.compile makes
# that a host read (a graph break), where a plain capture prints a placeholder.
unreplayed_repr_hooks: list = []


def _tensor_repr(t) -> str:
    prefix = "tensor("
    suffix = []
    _report_checks()
    data = t._fresh()._data  # a view not read yet, or one a write made stale: its value now
    if data is not None and not isinstance(data, np.ndarray) and getattr(data, "owner", None) is not None:
        data = data.value  # a captured buffer: its value once replayed
    if t.device.type != "cpu" or t.device.index != 0:
        suffix.append(f"device='{t.device}'")
    default_float = _dtype.get_default_dtype()
    default_complex = _dtype.complex128 if default_float is _dtype.float64 else _dtype.complex64
    dt = t.dtype
    if data is None:
        for hook in unreplayed_repr_hooks:
            hook(t)
        body = "<no data yet: captured, replay the graph first>"
        suffix.append(f"size={list(t.shape)}")
        if dt not in (default_float, default_complex, _dtype.bool, _dtype._index_dtype()):
            suffix.append(f"dtype={dt}")
    elif t.numel() == 0:
        body = "[]"
        if t.ndim != 1:
            suffix.append(f"size={tuple(t.shape)}")
        if dt is not default_float:  # no element shows the dtype
            suffix.append(f"dtype={dt}")
    else:
        body = _format_array(np.asarray(data), len(prefix), dt)
        if dt not in (default_float, default_complex, _dtype.bool, _dtype._index_dtype()):
            suffix.append(f"dtype={dt}")
    if t._grad_fn is not None:
        suffix.append(f"grad_fn=<{t._grad_fn.name()}>")
    elif t._req:
        suffix.append("requires_grad=True")
    return _add_suffixes(prefix + body, suffix, len(prefix))
