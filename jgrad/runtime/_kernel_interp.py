"""Running a small kernel's jaxpr with NumPy on the host: a new shape without an XLA compile (CPU only).

Why: XLA compiles a kernel for every input shape, and on a 2-core CPU one op's compile costs 20-300 ms
(``benchmarks/diagnostics/new_shapes.py``) against 0.05-0.5 ms for running it: a loop whose shapes keep
changing (REINFORCE's per-episode ``cat``, a sequence that grows by one token per step) paid the compile at
every new length. ``_kernel_cache.Kernel`` runs the first calls of a new shape here instead, when the arrays
are small and on a CPU, and compiles once the shape has proven hot.

``plan(closed_jaxpr)`` says whether every primitive of a traced kernel can run here (else the kernel
compiles as before); ``run(closed_jaxpr, flat_args)`` evaluates it. Structural primitives (reshape, slice,
concatenate, broadcast, gather, dot...) and exactly rounded arithmetic (add, mul, div, sqrt, comparisons,
select) run in NumPy; elementwise primitives NumPy does not round as XLA does (exp, log, tanh, erf, pow...)
run through one XLA kernel per primitive, dtype and power-of-two length, padded (``_bucketed``), which
gives XLA's own bits and compiles a handful of times per process, not once per shape. What still differs
from the kernel compiled whole is the rounding XLA's fusion changes (it contracts ``a * b + c`` into a
fused multiply-add) and the order of a sum's additions: the last bits, as an "auto" mode segment differs
from the same ops run one by one (docs/differences.md).

Imports only jax and numpy; used by ``_kernel_cache``.
"""
from __future__ import annotations

import numpy as np

import jax

#: dtypes evaluated here (no 16-bit floats: XLA computes them in float32 across a fusion; no complex).
DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                         np.uint8, np.uint16, np.uint32, np.uint64, np.bool_))


class Unsupported(Exception):
    """The jaxpr holds something evaluated only by XLA."""


_CALLS = ("jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr",
          "remat", "checkpoint")


def _sub_jaxpr(eqn):
    for k in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        j = eqn.params.get(k)
        if j is not None:
            return j
    raise Unsupported(eqn.primitive.name)


class Program:
    """A jaxpr flattened into steps over numbered slots (calls inlined, literals placed once)."""

    __slots__ = ("steps", "template", "in_slots", "out_slots", "names", "flushes")

    def __init__(self):
        self.steps, self.template, self.in_slots, self.out_slots = [], [], [], []
        self.names = []  # (primitive, in slots, out slots, out dtypes, in shapes, out shape): Note [Exact programs]
        self.flushes = None  # exact programs: per step, whether XLA would flush a subnormal it computes

    def slot(self, value=None):
        self.template.append(value)
        return len(self.template) - 1


def plan(closed, exact=True):
    """``closed`` (a ClosedJaxpr) as a ``Program``, or None when something in it is XLA's only.

    ``exact``: only a program whose every bit equals the compiled kernel's (Note [Exact programs]); else
    NumPy's transcendentals, float sums and products, whose last bits may differ from XLA's.
    """
    prog = Program()
    try:
        prog.in_slots = [prog.slot() for _ in closed.jaxpr.invars]
        prog.out_slots = _flatten(prog, closed.jaxpr, closed.consts, prog.in_slots, exact)
        if exact:
            _check_exact(prog)
            prog.flushes = [any(np.issubdtype(d, np.floating) for d in n[3]) and n[0] not in _MOVES for n in prog.names]
    except Unsupported:
        return None
    return prog


# Elementwise primitives evaluated by XLA's padded kernel (NumPy's rounding differs or NumPy lacks them).
_BUCKETED_OK = frozenset((
    "exp2", "erf", "erfc", "erf_inv", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "cbrt", "pow", "atan2", "rem", "round", "lgamma", "digamma", "nextafter", "sign",
))
#: NumPy's own versions are within an ulp or two of XLA's; exact programs take XLA's padded kernel for them.
_NUMPY_TRANSCENDENTALS = frozenset(("exp", "log", "log1p", "expm1", "tanh", "sin", "cos", "logistic", "rsqrt"))


# Note [Exact programs]
# ~~~~~~~~~~~~~~~~~~~~~
# Why: a result that depends on whether its shape had compiled yet (a timing question: hot shapes compile in a
# background thread) makes a run irreproducible and lets two DDP ranks drift apart in the last bits. So by
# default a program runs here only when it computes XLA's bits exactly:
# - structural primitives, comparisons, selects, max/min reductions and integer arithmetic are exact anywhere;
# - one IEEE operation (add, sub, mul, div, sqrt) rounds the same in NumPy and XLA, but XLA's CPU backend
#   contracts a float multiply feeding an add or subtract into one fused multiply-add (one rounding, not two),
#   which NumPy cannot do: a program with that pattern compiles (``_check_exact``);
# - XLA rewrites ``A / broadcast(B)`` (a literal, a size-1 dimension) and ``A / constant`` as ``A * (1 / B)``: so
#   does the interpreter; a division by a square root or a transcendental XLA may rewrite otherwise: compiled;
# - transcendentals (exp, log, tanh, atan...) are XLA's own polynomials, and even XLA's elementwise kernel does
#   not give the same bits at every length (its vector loop and its scalar tail round differently: exp, log
#   and atan differ between lengths 5 and 64), so a program holding one compiles;
# - a float sum (``reduce_sum``, ``dot_general``, ``cumsum``) depends on XLA's order of additions: compiled.
#   (A full sum of a few float elements is written as a tree of adds, and so is exact: Note [Tree sums] in
#   ``ops/reduction``.)
# - XLA's CPU code runs with subnormals flushed to zero, in and out (1e-40 > 0 is False there): an exact program
#   that meets a subnormal, as an input or as the result of an arithmetic step, stops (``Subnormal``) and the
#   kernel compiles;
# ``JGRAD_VERIFY_INTERPRETED=1`` (``_kernel_cache._verify``) checks every interpreted call against the compiled
# kernel bit for bit: the whole suite ran with it to find the rewrites above.
_EXACT_FLOAT_NUMPY = frozenset((
    "add", "sub", "mul", "neg", "max", "min", "abs", "floor", "ceil", "sqrt", "square", "is_finite", "eq", "ne",
    "lt", "le", "gt", "ge", "and", "or", "xor", "not", "select_n", "clamp", "stop_gradient", "copy", "copy_p",
    "optimization_barrier", "broadcast_in_dim", "reshape", "squeeze", "expand_dims", "transpose", "concatenate",
    "stack", "add_any", "split", "unstack", "rev", "slice", "dynamic_slice", "dynamic_update_slice", "pad", "iota",
    "gather", "reduce_max", "reduce_min", "reduce_and", "reduce_or", "argmax", "argmin", "div", "convert_element_type",
    "integer_pow",
))
# Primitives that move bits without arithmetic: they neither flush nor make a subnormal.
_MOVES = frozenset(("reshape", "broadcast_in_dim", "squeeze", "expand_dims", "transpose", "concatenate", "stack",
                    "split", "unstack", "rev", "slice", "dynamic_slice", "dynamic_update_slice", "pad", "gather",
                    "copy", "copy_p", "stop_gradient", "optimization_barrier", "select_n"))
_EXACT_BUCKETED = frozenset(("sign", "round", "rem", "nextafter"))  # exact operations: any length, the same bits
_PRODUCTS = frozenset(("mul", "square", "integer_pow", "div"))
_PASS_THROUGH = frozenset(("reshape", "squeeze", "expand_dims", "transpose", "neg", "copy",
                           "copy_p", "stop_gradient", "slice", "unstack", "rev", "concatenate", "select_n", "pad"))
_SUMS = frozenset(("add", "sub", "add_any"))
_RESHAPES = frozenset(("reshape", "squeeze", "expand_dims", "transpose", "copy", "copy_p", "stop_gradient"))
_TRANSCENDENTAL = (frozenset(("sqrt",)) | _BUCKETED_OK | _NUMPY_TRANSCENDENTALS) - _EXACT_BUCKETED


def _check_exact(prog):
    """Raise Unsupported where XLA's compile changes the rounding of what the program says; rewrite a division
    by a broadcast as XLA does (a multiply by the reciprocal)."""
    tags = {}  # slot -> set of "product", "transcendental", "broadcast"
    for k, (name, ins, outs, dtypes, shapes, out_shape) in enumerate(prog.names):
        if not any(np.issubdtype(d, np.floating) for d in dtypes):
            continue
        seen = [tags.get(i, frozenset()) for i in ins]
        held = frozenset().union(*seen)
        if name in _SUMS and held & {"product", "transcendental"}:
            raise Unsupported(f"{name} of a product (XLA fuses them into one multiply-add)")
        if name in _TRANSCENDENTAL and "transcendental" in held:
            raise Unsupported(f"{name} of a transcendental (XLA may simplify the pair)")
        if name == "mul" and all("transcendental" in t for t in seen):
            raise Unsupported("a product of two transcendentals (XLA may simplify the pair)")
        if name == "div":
            if "transcendental" in seen[1]:
                raise Unsupported("a division by a square root or a transcendental (XLA may rewrite it)")
            # a literal or a size-1 dimension broadcasts too; XLA takes a constant's reciprocal whatever its shape
            if "broadcast" in seen[1] or shapes[1] != out_shape or prog.template[ins[1]] is not None:
                prog.steps[k] = (_reciprocal_mul,) + prog.steps[k][1:]
        out = set()
        if name in _PRODUCTS:
            out.add("product")
        elif name in _TRANSCENDENTAL:
            out.add("transcendental")
        elif name in _PASS_THROUGH:
            out |= held - {"broadcast"}
            if name in _RESHAPES and "broadcast" in held:
                out.add("broadcast")
        if name == "broadcast_in_dim":
            out |= held | {"broadcast"}
        if out:
            tags.update(dict.fromkeys(outs, frozenset(out)))


def _reciprocal_mul(x, y, **_):
    """XLA's ``A / broadcast(B) => A * broadcast(1 / B)``."""
    if not np.issubdtype(x.dtype, np.floating):
        raise _ToXLA
    return np.multiply(x, np.divide(np.ones((), y.dtype), y))


def _flatten(prog, jaxpr, consts, in_slots, exact):
    env = {}
    for v, x in zip(jaxpr.constvars, consts):
        env[v] = prog.slot(np.asarray(x))
    for v, i in zip(jaxpr.invars, in_slots):
        _dtype_ok(v.aval)
        env[v] = i

    def read(v):
        if type(v).__name__ == "Literal":
            return prog.slot(np.asarray(v.val, dtype=v.aval.dtype))
        return env[v]

    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [read(v) for v in eqn.invars]
        if name in _CALLS:
            sub = _sub_jaxpr(eqn)
            outs = _flatten(prog, getattr(sub, "jaxpr", sub), getattr(sub, "consts", ()), ins, exact)
        else:
            fn = _IMPL.get(name)
            if exact and name not in _EXACT_FLOAT_NUMPY and name not in _EXACT_BUCKETED and any(
                    np.issubdtype(np.dtype(v.aval.dtype), np.inexact) for v in eqn.invars):
                raise Unsupported(f"{name} of floats (its bits are XLA's own)")
            if fn is None:
                if name not in _BUCKETED_OK:
                    raise Unsupported(name)
                fn = _bucketed_rule(eqn)
            elif name in _MAY_DECLINE:
                fn = _declining(fn, _bucketed_rule(eqn))
            if name == "gather" and not _gather_ok(eqn.params):
                raise Unsupported("gather")
            if name == "pad" and any(i != 0 or lo < 0 or hi < 0 for lo, hi, i in eqn.params["padding_config"]):
                raise Unsupported("pad with interior or negative padding")
            for v in eqn.outvars:
                _dtype_ok(v.aval)
            params = {k: v for k, v in eqn.params.items() if k != "sharding"}
            outs = [prog.slot() for _ in eqn.outvars]
            dtypes = tuple(np.dtype(v.aval.dtype) for v in eqn.outvars)
            prog.steps.append((fn, params, tuple(ins), tuple(outs), dtypes, eqn.primitive.multiple_results))
            prog.names.append((name, tuple(ins), tuple(outs), dtypes, tuple(np.shape(v.aval) for v in eqn.invars),
                               np.shape(eqn.outvars[0].aval) if eqn.outvars else ()))  # (an unstack of 0 slices)
        for v, i in zip(eqn.outvars, outs):
            env[v] = i
    return [read(v) for v in jaxpr.outvars]


def _dtype_ok(aval):
    dt = getattr(aval, "dtype", None)
    if dt is None or np.dtype(dt) not in DTYPES:
        raise Unsupported(str(aval))


class Subnormal(Exception):
    """An exact program met a subnormal float, which XLA's CPU code flushes to zero: the kernel compiles."""


def run(prog, args):
    """Evaluate ``prog`` on NumPy ``args``; its flat outputs as NumPy arrays."""
    env = list(prog.template)
    flushes = prog.flushes
    for i, x in zip(prog.in_slots, args):
        if flushes is not None and _subnormal(x):
            raise Subnormal
        env[i] = x
    with np.errstate(all="ignore"):  # XLA does not warn: inf and NaN are values
        for k, (fn, params, ins, outs, dtypes, multiple) in enumerate(prog.steps):
            res = fn(*[env[i] for i in ins], **params)
            if not multiple:
                res = (res,)
            for i, x, dt in zip(outs, res, dtypes):
                x = np.asarray(x)
                env[i] = x = x if x.dtype == dt else x.astype(dt)
                if flushes is not None and flushes[k] and _subnormal(x):
                    raise Subnormal
    return [env[i] for i in prog.out_slots]


def _subnormal(x):
    """Whether float array ``x`` holds a subnormal (XLA's CPU code treats them as zero, in and out)."""
    x = np.asarray(x)
    if x.dtype.kind != "f":
        return False
    m = np.abs(x)
    small = m < np.finfo(x.dtype).tiny
    return bool(small.any()) and bool((small & (m > 0)).any())


# ---- elementwise primitives through XLA, padded to a power-of-two length --------------------------------
_bucket_fns: dict = {}


def _bucketed_rule(eqn):
    def rule(*ins, **_):
        return _bucketed(eqn, ins)
    return rule


def _declining(fn, fallback):
    def rule(*ins, **params):
        try:
            return fn(*ins, **params)
        except _ToXLA:
            return fallback(*ins)
    return rule


def _bucketed(eqn, ins):
    """One elementwise primitive on flat, padded inputs: XLA's bits, compiled once per length bucket."""
    shape = np.broadcast_shapes(*(x.shape for x in ins))
    n = int(np.prod(shape, dtype=np.int64))
    size = max(64, 1 << max(0, n - 1).bit_length())
    flat = []
    for x in ins:
        f = np.zeros(size, x.dtype)
        f[:n] = np.broadcast_to(x, shape).reshape(-1)
        flat.append(f)
    params = tuple(sorted((k, v) for k, v in eqn.params.items() if k != "sharding"))
    key = (eqn.primitive, params, tuple(f.dtype for f in flat), size)
    fn = _bucket_fns.get(key)
    if fn is None:
        prim, kw = eqn.primitive, dict(eqn.params)
        fn = _bucket_fns[key] = jax.jit(lambda *a: prim.bind(*a, **kw))
    with jax.default_device(_cpu()):
        out = np.asarray(fn(*flat))
    return out[:n].reshape(shape)


def _cpu():
    if not _cpu_dev:
        _cpu_dev.append(jax.devices("cpu")[0])
    return _cpu_dev[0]


_cpu_dev: list = []


# ---- NumPy implementations ----------------------------------------------------------------------------
def _broadcast_in_dim(x, shape, broadcast_dimensions, **_):
    expanded = [1] * len(shape)
    for d, s in zip(broadcast_dimensions, x.shape):
        expanded[d] = s
    return np.broadcast_to(x.reshape(expanded), shape)


def _iota(dtype, shape, dimension, **_):
    r = np.arange(shape[dimension], dtype=dtype)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return np.broadcast_to(r.reshape(view), shape)


def _slice(x, start_indices, limit_indices, strides, **_):
    return x[tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, strides or [1] * x.ndim))]


def _clamped_starts(x_shape, sizes, starts):
    return [min(max(int(s), 0), d - z) for s, d, z in zip(starts, x_shape, sizes)]


def _dynamic_slice(x, *starts, slice_sizes, **_):
    st = _clamped_starts(x.shape, slice_sizes, starts)
    return x[tuple(slice(a, a + z) for a, z in zip(st, slice_sizes))]


def _dynamic_update_slice(x, u, *starts, **_):
    st = _clamped_starts(x.shape, u.shape, starts)
    out = np.array(x)
    out[tuple(slice(a, a + z) for a, z in zip(st, u.shape))] = u
    return out


def _pad(x, padval, padding_config, **_):
    return np.pad(x, [(lo, hi) for lo, hi, _ in padding_config], constant_values=padval)


def _dot_general(a, b, dimension_numbers, preferred_element_type=None, **_):
    (lc, rc), (lb, rb) = dimension_numbers
    lf = [d for d in range(a.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(b.ndim) if d not in rc and d not in rb]
    A = a.transpose(list(lb) + lf + list(lc))
    B = b.transpose(list(rb) + list(rc) + rf)
    bs = [a.shape[d] for d in lb]
    m = int(np.prod([a.shape[d] for d in lf], dtype=np.int64))
    k = int(np.prod([a.shape[d] for d in lc], dtype=np.int64))
    n = int(np.prod([b.shape[d] for d in rf], dtype=np.int64))
    out = np.matmul(A.reshape(bs + [m, k]), B.reshape(bs + [k, n]))
    out = out.reshape(bs + [a.shape[d] for d in lf] + [b.shape[d] for d in rf])
    return out if preferred_element_type is None else out.astype(preferred_element_type)


def _gather_ok(params):
    dn = params["dimension_numbers"]
    mode = str(params.get("mode", "")).upper()
    return (not getattr(dn, "operand_batching_dims", ()) and not getattr(dn, "start_indices_batching_dims", ())
            and "ONE_HOT" not in mode)


def _gather(x, idx, dimension_numbers, slice_sizes, mode=None, fill_value=None, **_):
    dn = dimension_numbers
    batch_shape = idx.shape[:-1]
    nb = int(np.prod(batch_shape, dtype=np.int64))
    starts = np.zeros((nb, x.ndim), np.int64)
    starts[:, list(dn.start_index_map)] = idx.reshape(nb, idx.shape[-1])
    high = np.asarray(x.shape) - np.asarray(slice_sizes)
    valid = ((starts >= 0) & (starts <= high)).all(axis=1)
    starts = np.clip(starts, 0, high)  # XLA clamps the windows (FILL_OR_DROP fills the out-of-bounds ones below)
    index = []
    for d, z in enumerate(slice_sizes):
        view = [1] * (1 + x.ndim)
        view[1 + d] = z
        index.append((starts[:, d].reshape([nb] + [1] * x.ndim) + np.arange(z).reshape(view)))
    win = x[tuple(index)]  # (nb, *slice_sizes)
    keep = [z for d, z in enumerate(slice_sizes) if d not in dn.collapsed_slice_dims]
    out = win.reshape(tuple(batch_shape) + tuple(keep))
    if "FILL" in str(mode).upper() and not valid.all():
        win = np.array(win)
        win[~valid] = _fill(x.dtype, fill_value)
        out = win.reshape(tuple(batch_shape) + tuple(keep))
    k = len(batch_shape)
    return np.moveaxis(out, list(range(k, k + len(keep))), list(dn.offset_dims))


def _fill(dtype, value):
    """jax's default fill of an out-of-bounds gather: NaN, the most negative (signed) or largest (unsigned)
    integer, True."""
    if value is not None:
        return value
    if np.issubdtype(dtype, np.inexact):
        return np.nan
    if dtype == np.bool_:
        return True
    info = np.iinfo(dtype)
    return info.min if np.issubdtype(dtype, np.signedinteger) else info.max


def _reduce(fn):
    def impl(x, axes, **_):
        return fn(x, axis=tuple(axes))
    return impl


def _arg(fn):
    def impl(x, axes, index_dtype, **_):
        return fn(x, axis=axes[0]).astype(index_dtype)
    return impl


def _split(x, sizes, axis, **_):
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _unstack(x, axis, **_):
    """jax 0.11's ``unstack`` (iterating an array, as ``a, b = idx`` does): its slices along ``axis``."""
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


def _select_n(pred, *cases):
    if len(cases) == 1:
        return cases[0]
    if pred.dtype == np.bool_:
        return np.where(pred, cases[1], cases[0])
    return np.choose(pred, np.broadcast_arrays(*cases))


_IMPL = {
    "add": lambda x, y, **_: np.add(x, y), "sub": lambda x, y, **_: np.subtract(x, y),
    "mul": lambda x, y, **_: np.multiply(x, y), "neg": lambda x, **_: np.negative(x),
    "max": lambda x, y, **_: np.maximum(x, y), "min": lambda x, y, **_: np.minimum(x, y),
    "abs": lambda x, **_: np.abs(x), "floor": lambda x, **_: np.floor(x), "ceil": lambda x, **_: np.ceil(x),
    "sqrt": lambda x, **_: np.sqrt(x), "square": lambda x, **_: np.multiply(x, x),
    "is_finite": lambda x, **_: np.isfinite(x),
    "eq": lambda x, y, **_: np.equal(x, y), "ne": lambda x, y, **_: np.not_equal(x, y),
    "lt": lambda x, y, **_: np.less(x, y), "le": lambda x, y, **_: np.less_equal(x, y),
    "gt": lambda x, y, **_: np.greater(x, y), "ge": lambda x, y, **_: np.greater_equal(x, y),
    "and": lambda x, y, **_: np.bitwise_and(x, y), "or": lambda x, y, **_: np.bitwise_or(x, y),
    "xor": lambda x, y, **_: np.bitwise_xor(x, y),
    "not": lambda x, **_: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x),
    "select_n": _select_n, "clamp": lambda lo, x, hi, **_: np.minimum(np.maximum(x, lo), hi),
    "stop_gradient": lambda x, **_: x, "copy": lambda x, **_: x, "copy_p": lambda x, **_: x,
    "optimization_barrier": lambda *xs, **_: xs,
    "broadcast_in_dim": _broadcast_in_dim, "reshape": lambda x, new_sizes, **_: x.reshape(new_sizes),
    "squeeze": lambda x, dimensions, **_: np.squeeze(x, axis=tuple(dimensions)),
    "expand_dims": lambda x, dimensions, **_: np.expand_dims(x, tuple(dimensions)),
    "transpose": lambda x, permutation, **_: x.transpose(permutation),
    "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
    "stack": lambda *xs, axis, **_: np.stack(xs, axis=axis), "add_any": lambda x, y, **_: np.add(x, y),
    "split": _split, "unstack": _unstack, "rev": lambda x, dimensions, **_: np.flip(x, tuple(dimensions)),
    "slice": _slice, "dynamic_slice": _dynamic_slice, "dynamic_update_slice": _dynamic_update_slice,
    "pad": _pad, "iota": _iota, "gather": _gather, "dot_general": _dot_general,
    "reduce_sum": _reduce(np.sum), "reduce_max": _reduce(np.max), "reduce_min": _reduce(np.min),
    "reduce_and": _reduce(np.all), "reduce_or": _reduce(np.any), "reduce_prod": _reduce(np.prod),
    "argmax": _arg(np.argmax), "argmin": _arg(np.argmin),
    # Transcendentals: NumPy's are within an ulp or two of XLA's (neither is correctly rounded); the rarer
    # ones (erf, pow, atan2, rounding modes...) take XLA's padded kernel.
    "exp": lambda x, **_: np.exp(x), "log": lambda x, **_: np.log(x), "log1p": lambda x, **_: np.log1p(x),
    "expm1": lambda x, **_: np.expm1(x), "tanh": lambda x, **_: np.tanh(x), "sin": lambda x, **_: np.sin(x),
    "cos": lambda x, **_: np.cos(x), "logistic": lambda x, **_: 1 / (1 + np.exp(-x)),
    "rsqrt": lambda x, **_: 1 / np.sqrt(x), "integer_pow": lambda x, y, **_: _integer_pow(x, y),
}




def _integer_pow(x, y):
    """``lax.integer_pow`` as XLA expands it: square and multiply, then one division for a negative power."""
    if y == 0:
        return np.ones_like(x)
    neg, y, acc = y < 0, abs(y), None
    while y > 0:
        if y & 1:
            acc = x if acc is None else acc * x
        y >>= 1
        if y > 0:
            x = x * x
    return (1 / acc).astype(acc.dtype) if neg else acc


class _ToXLA(Exception):
    """A NumPy rule declined these operands (integer division, float to integer): XLA's padded kernel runs it."""


def _div(x, y, **_):
    if not np.issubdtype(x.dtype, np.floating):
        raise _ToXLA
    return np.divide(x, y)


def _convert(x, new_dtype, **_):
    new = np.dtype(new_dtype)
    if np.issubdtype(x.dtype, np.floating) and new != np.bool_ and not np.issubdtype(new, np.floating):
        raise _ToXLA  # XLA's saturating conversion
    return x.astype(new)


_IMPL["div"] = _div
_IMPL["convert_element_type"] = _convert
_MAY_DECLINE = frozenset(("div", "convert_element_type"))
