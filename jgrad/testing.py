"""``jgrad.testing`` (``torch.testing``): ``assert_close``, with PyTorch's default tolerances and messages.

The comparison reads both sides on the host (NumPy): it is a test helper, not an op. Tensors, NumPy arrays and
Python numbers compare by value; sequences and mappings element by element, the failing item named as PyTorch
names it (``The failure occurred for item [1]['a']``).

Imports ``_tensor`` and ``_dtype``.
"""
from __future__ import annotations

import collections.abc
import numbers

import numpy as np

from .core import _dtype
from .core._tensor import Tensor

__all__ = ["assert_close"]

# torch.testing._comparison._DTYPE_PRECISIONS: (rtol, atol) by dtype; other dtypes compare exactly
_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
               "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7)}


class _Mismatch(AssertionError):
    pass


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    """Raise ``AssertionError`` unless ``actual`` and ``expected`` are close: ``|a - e| <= atol + rtol * |e|``
    elementwise, with the same shape, device, dtype and layout (each check can be turned off)."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         f"{'rtol' if rtol is None else 'atol'}.")
    opts = dict(rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=check_device, check_dtype=check_dtype,
                check_layout=check_layout)
    try:
        _compare(actual, expected, "", opts)
    except _Mismatch as e:
        text = str(e)
        if msg is not None:
            text = msg(text) if callable(msg) else msg
        raise AssertionError(text) from None


def _is_tensor_like(x):
    return isinstance(x, (Tensor, np.ndarray))


def _compare(actual, expected, where, opts):
    if _is_tensor_like(actual) and _is_tensor_like(expected):
        return _located(where, _compare_tensors, actual, expected, opts)
    if isinstance(actual, (numbers.Number, np.generic)) and isinstance(expected, (numbers.Number, np.generic)) \
            and not _is_tensor_like(actual):
        return _located(where, _compare_scalars, actual, expected, opts)
    seq = (collections.abc.Sequence,)
    if isinstance(actual, seq) and isinstance(expected, seq) and not isinstance(actual, str):
        if len(actual) != len(expected):
            raise _Mismatch(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{where}[{i}]", opts)
        return
    if isinstance(actual, collections.abc.Mapping) and isinstance(expected, collections.abc.Mapping):
        if set(actual) != set(expected):
            raise _Mismatch(f"The keys of the mappings do not match:\nMissing keys in the actual mapping: "
                            f"{sorted(set(expected) - set(actual), key=repr)}\nExtra keys in the actual mapping: "
                            f"{sorted(set(actual) - set(expected), key=repr)}")
        for k in expected:
            _compare(actual[k], expected[k], f"{where}[{k!r}]", opts)
        return
    if actual is None and expected is None:
        return
    raise TypeError(f"No comparison pair was able to handle inputs of type {type(actual)} and {type(expected)}.")


def _located(where, fn, *args):
    try:
        fn(*args)
    except _Mismatch as e:
        if not where or "The failure occurred for item" in str(e):
            raise
        raise _Mismatch(f"{e}\n\nThe failure occurred for item {where}") from None


def _attr(name, a, e):
    if a != e:
        raise _Mismatch(f"The values for attribute '{name}' do not match: {a} != {e}.")


def _host(t):
    if isinstance(t, Tensor):
        return np.asarray(t.detach().to_dense().numpy())
    return np.asarray(t)


def _dtype_name(x):
    return x.dtype.name if isinstance(x, Tensor) else np.dtype(x.dtype).name


def _tolerances(names, opts):
    if opts["rtol"] is not None:
        return opts["rtol"], opts["atol"]
    pairs = [_TOLERANCES.get(n, (0.0, 0.0)) for n in names]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _compare_tensors(actual, expected, opts):
    _attr("shape", tuple(actual.shape), tuple(expected.shape))
    if opts["check_device"] and isinstance(actual, Tensor) and isinstance(expected, Tensor):
        _attr("device", actual.device, expected.device)
    if opts["check_dtype"]:
        _attr("dtype", actual.dtype, expected.dtype)
    if opts["check_layout"] and isinstance(actual, Tensor) and isinstance(expected, Tensor):
        _attr("layout", actual.layout, expected.layout)
    names = (_dtype_name(actual), _dtype_name(expected))
    a, e = _host(actual), _host(expected)
    common = np.result_type(a.dtype, e.dtype)
    if common == np.bool_:
        common = np.dtype(np.int64)
    a, e = a.astype(common), e.astype(common)
    rtol, atol = _tolerances(names, opts)
    if a.size == 1:
        return _compare_scalars(a.reshape(()).item(), e.reshape(()).item(), opts, (rtol, atol))  # as Python numbers
    ok = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=opts["equal_nan"]) if rtol or atol else \
        (a == e) | (opts["equal_nan"] & np.isnan(a) & np.isnan(e) if a.dtype.kind in "fc" else False)
    if ok.all():
        return
    exact = not (rtol or atol)
    diff = np.abs(a - e) if common.kind in "fc" else np.abs(a.astype(np.int64) - e.astype(np.int64))
    fdt = common if common.kind in "fc" else np.dtype(_dtype.get_default_dtype().np)
    rel = diff.astype(fdt) / np.abs(e).astype(fdt)
    bad = int(ok.size - ok.sum())
    at_abs, at_rel = np.unravel_index(np.argmax(diff), diff.shape), np.unravel_index(np.argmax(rel), rel.shape)
    lines = [f"Tensor-likes are not {'equal' if exact else 'close'}!", "",
             f"Mismatched elements: {bad} / {ok.size} ({bad / ok.size:.1%})",
             f"Greatest absolute difference: {diff[at_abs].item()} at index {tuple(int(i) for i in at_abs)}"
             + ("" if exact else f" (up to {atol} allowed)"),
             f"Greatest relative difference: {rel[at_rel].item()} at index {tuple(int(i) for i in at_rel)}"
             + ("" if exact else f" (up to {rtol} allowed)")]
    raise _Mismatch("\n".join(lines))


def _compare_scalars(actual, expected, opts, tolerances=None):
    if tolerances is None:
        kind = "float64" if isinstance(expected, float) or isinstance(actual, float) else (
            "complex128" if isinstance(expected, complex) else "int")
        tolerances = _tolerances((kind,), opts)
    rtol, atol = tolerances
    a, e = np.asarray(actual), np.asarray(expected)
    if a.dtype == np.bool_:
        a, e = a.astype(np.int64), e.astype(np.int64)
    if bool(np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=opts["equal_nan"])):
        return
    exact = not (rtol or atol)
    diff = np.abs(a - e)
    rel = diff / np.abs(e) if diff.dtype.kind in "fc" else np.float64(diff) / np.float64(abs(e))
    raise _Mismatch(f"Scalars are not {'equal' if exact else 'close'}!\n\nExpected {e.item()} but got {a.item()}.\n"
                    f"Absolute difference: {diff.item()}" + ("" if exact else f" (up to {atol} allowed)") + "\n"
                    f"Relative difference: {rel.item()}" + ("" if exact else f" (up to {rtol} allowed)"))
