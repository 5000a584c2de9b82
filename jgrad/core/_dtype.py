"""jgrad dtypes: thin named wrappers over NumPy/JAX dtypes, with PyTorch's names
and PyTorch's type-promotion rules.

Imports nothing of jgrad; ``set_default_dtype`` runs ``default_dtype_hooks``, where ``runtime._dispatch``
drops its compiled kernels (type promotion depends on the default dtype).
"""
from __future__ import annotations

import contextlib
import threading

import jax
import jax.numpy as jnp
import numpy as np


class dtype:
    """A jgrad dtype (``jg.float32`` ...). ``dtype.np`` is the NumPy/JAX dtype."""

    __slots__ = ("name", "np", "is_floating_point", "is_complex", "is_signed", "itemsize", "_category")

    def __init__(self, name: str, np_dtype):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.is_floating_point = jnp.issubdtype(self.np, jnp.floating)
        self.is_complex = jnp.issubdtype(self.np, jnp.complexfloating)
        self.is_signed = self.np.kind in "fci" or self.np == jnp.bfloat16
        self.itemsize = self.np.itemsize
        # bool < integer < floating < complex, as in PyTorch's promotion.
        self._category = 0 if self.np == np.bool_ else 3 if self.is_complex else 2 if self.is_floating_point else 1

    def __repr__(self):
        return f"jgrad.{self.name}"

    def __reduce__(self):
        return (_from_name, (self.name,))

    def to_real(self):
        """The real dtype of a complex one (``complex64`` -> ``float32``); other dtypes are returned as they are."""
        return {"complex64": float32, "complex128": float64}.get(self.name, self)

    def to_complex(self):
        """The complex dtype of a floating one (``float64`` -> ``complex128``). JAX has no complex32, so ``float16``
        and ``bfloat16`` give ``complex64``."""
        if self.is_complex:
            return self
        if not self.is_floating_point:
            raise RuntimeError(f"to_complex: expected a floating point or complex dtype, got {self}")
        return complex128 if self.name == "float64" else complex64


def _from_name(name):
    return globals()[name]


float16 = dtype("float16", jnp.float16)
bfloat16 = dtype("bfloat16", jnp.bfloat16)
float32 = dtype("float32", np.float32)
float64 = dtype("float64", np.float64)
complex64 = dtype("complex64", np.complex64)
complex128 = dtype("complex128", np.complex128)
uint8 = dtype("uint8", np.uint8)
int8 = dtype("int8", np.int8)
int16 = dtype("int16", np.int16)
int32 = dtype("int32", np.int32)
int64 = dtype("int64", np.int64)
bool = dtype("bool", np.bool_)  # noqa: A001 - PyTorch's name
half, float, double, long, int = float16, float32, float64, int64, int32  # noqa: A001
cfloat, cdouble, short, char = complex64, complex128, int16, int8

ALL = (float16, bfloat16, float32, float64, complex64, complex128, uint8, int8, int16, int32, int64, bool)
_BY_NP = {d.np: d for d in ALL}


# PyTorch's ScalarType names, which its error messages use ("Got: Long").
_SCALAR_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
                 "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                 "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def scalar_name(dt) -> str:
    """PyTorch's name of a dtype in error messages (``int64`` -> ``Long``)."""
    name = getattr(dt, "name", None) or str(dt)
    return _SCALAR_NAMES.get(name, name)


def from_np(np_dtype) -> dtype:
    """The jgrad dtype of a NumPy/JAX dtype."""
    try:
        return _BY_NP[np_dtype]
    except KeyError:
        d = np.dtype(np_dtype)
        if d in _BY_NP:
            return _BY_NP[d]
        raise TypeError(f"jgrad has no dtype for {np_dtype!r}; supported: {[x.name for x in ALL]}") from None


def x64_enabled() -> bool:
    """Whether JAX's 64-bit types are on in this thread (globally, or inside ``x64_scope()``)."""
    return jax.config.jax_enable_x64


def _x64_context():
    enable = getattr(jax, "enable_x64", None)  # jax >= 0.8: a config state, a context manager when called
    if enable is not None and callable(enable):
        return lambda: enable(True)
    from jax.experimental import enable_x64  # older jax
    return enable_x64


_enter_x64 = _x64_context()
_NULL = contextlib.nullcontext()


def _x64_state():
    """JAX's ``jax_enable_x64`` config state when it offers a thread-local swap without hooks, else None."""
    try:
        from jax._src import config as _config
        state = _config.enable_x64
        if (callable(getattr(state, "swap_local", None)) and callable(getattr(state, "set_local", None))
                and getattr(state, "_update_thread_local_hook", None) is None):
            return state
    except (ImportError, AttributeError):  # pragma: no cover - another jax layout: jax's context manager
        pass
    return None


_X64_STATE = _x64_state()


class _X64On:
    """What ``jax.enable_x64(True)`` does on entry and exit (swap the thread-local value, put it back), without
    building jax's context manager and running its parser per kernel call: 1.3 -> ~0.5 us on the 2-core CPU."""

    __slots__ = ("prev",)

    def __enter__(self):
        self.prev = _X64_STATE.swap_local(True)

    def __exit__(self, *exc):
        _X64_STATE.set_local(self.prev)


def with_x64(fn):
    """``fn`` run inside ``x64_scope()`` (for jgrad functions that call jax directly, outside kernels)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with x64_scope():
            return fn(*args, **kwargs)
    return wrapper


def x64_scope():
    """The context every jgrad kernel runs in: JAX's 64-bit types on for this thread only.

    PyTorch programs write ``torch.long`` and ``float64`` freely; JAX disables 64-bit types unless
    ``jax_enable_x64`` is set. jgrad never changes that global setting (the user's own jax code keeps
    JAX's defaults): it turns 64-bit types on thread-locally around its own kernels, compiles and
    transfers (~0.6 us a time on a CPU; nothing when the global setting is already on).
    """
    if _X64_STATE is None:
        return _NULL if jax.config.jax_enable_x64 else _enter_x64()
    return _NULL if _X64_STATE.value else _X64On()


def canonical(d) -> dtype:
    """Accept a jgrad dtype, a NumPy/JAX dtype or a Python type; check it can exist."""
    if d is None:
        return get_default_dtype()
    if isinstance(d, dtype):
        out = d
    elif d is builtins_float:
        out = float64  # PyTorch maps Python's float to torch.float64 (as NumPy does), not the default dtype
    elif d is builtins_int:
        out = int64
    elif d is builtins_bool:
        out = bool
    else:
        out = from_np(np.dtype(d))
    return out


import builtins as _builtins  # noqa: E402

builtins_float, builtins_int, builtins_bool = _builtins.float, _builtins.int, _builtins.bool

_state = threading.local()
_default = [float32]


def get_default_dtype() -> dtype:
    """The default floating dtype (``float32`` unless changed), as ``torch.get_default_dtype``."""
    return _default[0]


# Run when the default dtype changes: jgrad.runtime._dispatch drops its compiled kernels (it sits above dtypes).
default_dtype_hooks: list = []


def set_default_dtype(d) -> None:
    """Set the default floating dtype; only float32 or float64 (as in PyTorch)."""
    d = canonical(d)
    if d not in (float32, float64, float16, bfloat16):
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default[0] = d
    for hook in default_dtype_hooks:  # promotion depends on it: compiled kernels must not be reused
        hook()


def _index_dtype():
    return int64  # PyTorch's: jgrad's kernels always run with 64-bit types (x64_scope)


def result_type(*operands) -> np.dtype:
    """PyTorch's type promotion over jax values (arrays or tracers) and Python scalars.

    Dimensioned tensors decide first; 0-d tensors and then Python scalars only
    matter when they belong to a higher category (bool < int < float < complex),
    in which case a float scalar gives the default dtype. Called at trace time.
    """
    dims, zerod, scalars = [], [], []
    for x in operands:
        if isinstance(x, (_builtins.bool, _builtins.int, _builtins.float, _builtins.complex)):
            scalars.append(x)
            continue
        weak = getattr(getattr(x, "aval", None), "weak_type", False)
        if weak:
            scalars.append(x)
        elif x.ndim == 0:
            zerod.append(x.dtype)
        else:
            dims.append(x.dtype)

    def cat(d):
        return _BY_NP[np.dtype(d)]._category

    def promote(ds):
        return jnp.promote_types(ds[0], ds[1]) if len(ds) == 2 else (
            ds[0] if len(ds) == 1 else promote([jnp.promote_types(ds[0], ds[1])] + ds[2:]))

    def combine(higher, lower):
        # PyTorch's combine_categories: a complex operand of a lower-priority group keeps a floating result's
        # precision (a float64 tensor times a complex64 0-d tensor or a complex scalar is complex128).
        if cat(lower) == 3 and cat(higher) == 2:
            return np.dtype(np.complex128 if np.dtype(higher) == np.float64 else np.complex64)
        return lower if cat(lower) > cat(higher) else higher

    res = promote(dims) if dims else None
    if zerod:
        z = promote(zerod)
        res = z if res is None else combine(res, z)
    if scalars:
        def scat(s):
            if isinstance(s, (_builtins.bool, _builtins.int, _builtins.float, _builtins.complex)):
                return 0 if isinstance(s, _builtins.bool) else 1 if isinstance(s, _builtins.int) else 2 if isinstance(s, _builtins.float) else 3
            return cat(s.dtype)
        sc = max(scat(s) for s in scalars)
        if res is None or sc > cat(res):
            if sc == 3:
                c = np.dtype(np.complex128 if get_default_dtype() is float64 else np.complex64)
                res = c if res is None else combine(res, c)
            elif sc == 2:
                res = get_default_dtype().np
            elif sc == 1:
                res = _index_dtype().np
            else:
                res = np.dtype(np.bool_)
    return np.dtype(res)


class finfo:
    """Machine limits of a floating (or complex: of its real part) dtype, as ``torch.finfo``."""

    def __init__(self, type=None):  # noqa: A002 - PyTorch's name
        d = canonical(type)
        if not (d.is_floating_point or d.is_complex):
            raise TypeError(f"torch.finfo() requires a floating point input type. Use torch.iinfo to handle "
                            f"'torch.finfo'")
        i = jnp.finfo(d.to_real().np)
        self.dtype = d.to_real().name
        self.bits, self.eps = _builtins.int(i.bits), _builtins.float(i.eps)
        self.max, self.min = _builtins.float(i.max), _builtins.float(i.min)
        self.tiny = self.smallest_normal = _builtins.float(i.tiny)
        self.resolution = 10.0 ** -_builtins.int(i.precision)

    def __repr__(self):
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.tiny:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer (or bool) dtype, as ``torch.iinfo``."""

    def __init__(self, type):  # noqa: A002 - PyTorch's name
        d = canonical(type)
        if d.is_floating_point or d.is_complex:
            raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to handle 'torch.iinfo'")
        if d is bool:
            raise TypeError("torch.bool is not supported by torch.iinfo")
        i = np.iinfo(d.np)
        self.dtype, self.bits = d.name, _builtins.int(i.bits)
        self.min, self.max = _builtins.int(i.min), _builtins.int(i.max)

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
