"""JAX <-> jgrad: arrays, functions, and checking gradients against ``jax.grad``.

Arrays
    ``to_jax(t)`` is ``t``'s own ``jax.Array`` (zero copy, no history);
    ``from_jax(a)`` a tensor around ``a`` (zero copy). JAX arrays are
    immutable and jgrad's in-place ops rebind storage, so neither side can
    change what the other holds: after ``a = to_jax(t); t.add_(1)``, ``a`` is
    unchanged.

Functions, both ways
    * In: ``jgrad.ops.from_jax(fn)`` turns any jax function of arrays into a
      jgrad op whose backward is ``jax.vjp`` of ``fn``
      (``softclip = jg.ops.from_jax(lambda x, *, c: c * jnp.tanh(x / c))``).
    * Out: ``functionalize(fn)`` turns a jgrad function (tensors in, tensors
      out; hooks, custom ``Function``\\ s and ``backward``/``grad`` calls inside
      are fine) into a pure jax function of arrays that works under
      ``jax.jit``, ``jax.grad``/``jax.vjp`` and ``jax.vmap``.

How ``functionalize`` works
    Every jgrad op runs a ``jax.jit`` kernel, and jit kernels accept tracers,
    so jgrad tensors whose storage is a tracer flow through jgrad's ops and
    autograd engine unchanged: calling ``fn`` on tensors that wrap the
    (possibly traced) input arrays *is* tracing ``fn`` into JAX. The result is
    a ``jax.custom_vjp``:

    * primal / fwd: run ``fn`` on tensors wrapping the inputs (floating inputs
      are leaves with ``requires_grad=True``, so ``fn`` may call
      ``backward``/``grad`` itself); the residuals are the input arrays only.
    * bwd: run ``fn`` again on tensors wrapping the residuals and call
      ``jg.autograd.grad(outputs, inputs, grad_outputs=cotangents)``, so the
      gradient is jgrad's own (hooks, custom ``Function.backward`` and all),
      evaluated by JAX.

    The jgrad graph is not kept from fwd to bwd: under ``jit`` fwd and bwd are
    traced separately and a graph full of fwd-trace tracers would leak them.
    The price is one extra forward evaluation per backward (as with
    ``jax.checkpoint``). The backward runs on the calling thread
    (``set_multithreading_enabled(False)``): JAX's tracing state is per thread.

Limits of ``functionalize``
    * reverse mode only: ``jax.jvp``/``jax.jacfwd`` of a ``custom_vjp`` raise
      in JAX (use ``jax.jacrev``). Higher-order ``jax.grad`` works (the bwd is
      itself traced through jgrad's jax kernels).
    * under ``jit``/``vmap`` ``fn`` must be traceable: no ``item()``,
      ``tolist()``, ``numpy()``, ``bool(t)`` or Python control flow on tensor
      values (eager ``jax.grad`` without ``jit`` runs on concrete arrays, so
      those work there).
    * under ``vmap``, ``fn`` sees one example: shapes are per example.
    * a tracer has no device: traced tensors are placed on the device of the
      first concrete input, else on jgrad's default device
      (``jg.set_default_device("gpu")`` for a jitted function on a GPU);
      tensors ``fn`` creates must be on that device too.
    * positional arguments are pytrees of arrays (or tensors / Python
      numbers, turned into arrays); keyword arguments are passed to ``fn``
      unchanged (static). Outputs: a tensor or a pytree of tensors.
    * in-place ops on the input tensors follow jgrad's rules (an error on a
      leaf that requires grad); jgrad streams, the sanitizer and graph capture
      do not reach inside a traced call.

Checking gradients
    ``compare_grad(fn, *args, jax_fn=None)`` computes the gradient of ``fn``
    three ways: jgrad's backward, ``jax.grad`` (of ``functionalize(fn)``, or
    of ``jax_fn``, the same math written in ``jax.numpy``), and float64
    central finite differences of ``fn``'s forward, and returns a
    ``GradReport`` with the max absolute and relative error per input; it
    prints as a table and renders as HTML in a notebook.

Imports jgrad (``_tensor``, ``_device``, ``_dtype``, ``_recorder``, ``_dlpack``; ``streams`` and
``autograd`` at the call); jgrad never imports this module.
"""
from __future__ import annotations

import contextlib

import functools
import html
import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np

from jgrad.core import _dtype
from jgrad.core._device import from_jax as _device_from_jax, get_default_device
from jgrad.core._recorder import Buffer as _Buffer
from jgrad.core._tensor import Tensor

from jgrad.runtime._dlpack import _exportable, _place, _wrap_imported, is_tracer

__all__ = ["to_jax", "from_jax", "functionalize", "compare_grad", "GradReport", "GradRow"]


# ---- arrays -------------------------------------------------------------------------------------------------
def to_jax(t) -> jax.Array:
    """``t``'s ``jax.Array`` itself (zero copy; no history; ``t`` may require grad)."""
    what = "interop.jax.to_jax()"
    arr = _exportable(t, what, allow_requires_grad=True)
    from jgrad import streams
    if streams.sanitizer_enabled():
        streams.check_access((t,), (), streams.current_stream(t.device), what)
    return arr


def from_jax(a, *, device=None, copy=None, requires_grad=False) -> Tensor:
    """A tensor around the ``jax.Array`` ``a`` (zero copy unless ``device``/``copy=True`` ask for one).

    A traced ``a`` (inside ``jax.jit``/``vmap``/``grad``) gives a tensor whose
    storage is the tracer, on jgrad's default device (or ``device``): jgrad
    ops then trace into the surrounding JAX computation.
    """
    from jgrad.core._device import device as _jg_device
    if isinstance(a, Tensor):
        raise TypeError("interop.jax.from_jax(): got a jgrad Tensor; it is already a tensor (use t.detach())")
    if not isinstance(a, jax.Array):
        raise TypeError(f"interop.jax.from_jax(): expected a jax.Array, got {type(a).__name__} "
                        "(use jg.tensor(x) for lists and scalars, interop.numpy.from_numpy for NumPy arrays)")
    if is_tracer(a):
        t = _traced_tensor(a, _jg_device(device) if device is not None else None)
    else:
        target = _jg_device(device) if device is not None else None
        t = _wrap_imported(_place(a, target, copy, "interop.jax.from_jax()"), "interop.jax.from_jax()")
    if requires_grad:
        t.requires_grad_(True)
    return t


def _traced_tensor(a, dev=None, req=False):
    t = Tensor._make(a, dev if dev is not None else get_default_device())
    if req:
        t._req = True
    return t


def _concrete_device(x):
    if is_tracer(x) or not isinstance(x, jax.Array):
        return None
    devs = x.devices()
    return _device_from_jax(next(iter(devs))) if len(devs) == 1 else None


def _wrap_inputs(xs, diff):
    """Leaf tensors around input arrays (concrete or traced) for ``functionalize``/``compare_grad``.

    A concrete array keeps its device. A tracer has none: it gets the device
    of the first concrete input (so ``vmap`` over some arguments of a function
    whose other arguments live on a GPU works), else jgrad's default device.
    """
    xs = [x if isinstance(x, jax.Array) else jnp.asarray(x) for x in xs]
    devs = [_concrete_device(x) for x in xs]
    fallback = next((d for d in devs if d is not None), None) or get_default_device()
    out = []
    for x, d, req in zip(xs, devs, diff):
        t = Tensor._make(x, d if d is not None else fallback)
        if req:
            t._req = True
        out.append(t)
    return out


# ---- functionalize --------------------------------------------------------------------------------------------
def _is_diff(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.inexact)


def _as_array(x):
    if isinstance(x, Tensor):
        return _exportable(x, "interop.jax.functionalize()", allow_requires_grad=True)
    if isinstance(x, jax.Array):
        return x
    return jnp.asarray(x)


def _out_array(v):
    if isinstance(v, Tensor):
        d = v._data
        return d if d is not None and type(d) is not _Buffer else v._value
    return jnp.asarray(v)


def _is_tensor(v):
    return isinstance(v, Tensor)


def functionalize(fn, *, name=None):
    """A pure jax function of arrays computing ``fn`` (a jgrad function) with jgrad's gradients.

    ``functionalize(fn)(*arrays, **static)`` returns ``fn``'s outputs as jax
    arrays; it works under ``jax.jit``, ``jax.grad``/``vjp``/``jacrev`` and
    ``jax.vmap`` (see the module docstring for how, and for its limits).
    """
    from jgrad.autograd import enable_grad, grad as jg_grad, set_multithreading_enabled

    def call(flat, treedef, kwargs):
        tensors = _wrap_inputs(flat, [_is_diff(jnp.result_type(x)) for x in flat])
        # A backward inside fn must run on this thread: jax's tracers belong to the thread tracing them
        # (a GPU's backward would otherwise run on the engine's device thread).
        with set_multithreading_enabled(False), enable_grad():
            out = fn(*jax.tree_util.tree_unflatten(treedef, tensors), **kwargs)
        leaves, out_tree = jax.tree_util.tree_flatten(out, is_leaf=_is_tensor)
        return tensors, leaves, out_tree

    @functools.wraps(fn)
    def jax_fn(*args, **kwargs):
        flat, treedef = jax.tree_util.tree_flatten(args, is_leaf=_is_tensor)
        flat = [_as_array(x) for x in flat]
        out_tree_box = []

        def primal(*xs):
            _, leaves, out_tree = call(xs, treedef, kwargs)
            out_tree_box.append(out_tree)
            return [_out_array(v) for v in leaves]

        def fwd(*xs):
            return primal(*xs), xs

        def bwd(xs, cts):
            tensors, leaves, _ = call(xs, treedef, kwargs)
            roots, grads = [], []
            for o, g in zip(leaves, cts):
                if isinstance(o, Tensor) and o._req and _is_diff(o.dtype.np) and g.dtype != jax.dtypes.float0:
                    roots.append(o)
                    grads.append(Tensor._make(jnp.asarray(g, o.dtype.np), o.device))
            wrt = [t for t in tensors if t._req]
            res = [None] * len(wrt)
            if roots and wrt:
                with set_multithreading_enabled(False), enable_grad():
                    res = list(jg_grad(roots, wrt, grad_outputs=grads, allow_unused=True))
            it = iter(res)
            out = []
            for x, t in zip(xs, tensors):
                if not t._req:
                    out.append(np.zeros(x.shape, jax.dtypes.float0))
                    continue
                g = next(it)
                out.append(jnp.zeros(x.shape, x.dtype) if g is None else jnp.asarray(g._value, x.dtype))
            return tuple(out)

        f = jax.custom_vjp(primal)
        f.defvjp(fwd, bwd)
        out_leaves = f(*flat)
        return jax.tree_util.tree_unflatten(out_tree_box[-1], out_leaves)

    jax_fn.jgrad_fn = fn
    if name is not None:
        jax_fn.__name__ = jax_fn.__qualname__ = name
    return jax_fn


# ---- compare_grad ---------------------------------------------------------------------------------------------
class GradRow:
    """One input's line of a ``GradReport`` (``None`` where a comparison was not made)."""

    __slots__ = ("name", "shape", "dtype", "abs_jax", "rel_jax", "ok_jax", "abs_fd", "rel_fd", "ok_fd", "fd_note")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    @property
    def ok(self) -> bool:
        return self.ok_jax is not False and self.ok_fd is not False

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self):
        return f"GradRow({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"


class GradReport:
    """What ``compare_grad`` found: one ``GradRow`` per differentiable input.

    ``ok``: every comparison within tolerance; ``assert_ok()`` raises an
    ``AssertionError`` with the table otherwise. ``str(report)`` is a table,
    ``report._repr_html_()`` the same as HTML (notebooks render it).
    """

    def __init__(self, name, rows, reference, value_err, cotangent, fd_dtype, tolerances):
        self.name = name
        self.rows = rows
        self.reference = reference
        self.value_err = value_err
        self.cotangent = cotangent
        self.fd_dtype = fd_dtype
        self.tolerances = tolerances

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    @property
    def max_abs_err(self) -> float:
        vals = [v for r in self.rows for v in (r.abs_jax, r.abs_fd) if v is not None]
        return max(vals) if vals else 0.0

    def __getitem__(self, key) -> GradRow:
        if isinstance(key, int):
            return self.rows[key]
        for r in self.rows:
            if r.name == key:
                return r
        raise KeyError(key)

    def assert_ok(self) -> "GradReport":
        if not self.ok:
            raise AssertionError(f"gradient mismatch\n{self}")
        return self

    def _header(self):
        what = ("d out / d input" if self.cotangent == "scalar"
                else "d sum(out * v) / d input, v a fixed random cotangent")
        fd = f"{self.fd_dtype} central differences" if self.fd_dtype else "no finite differences (fd=False)"
        return f"compare_grad({self.name}): {what}; jgrad backward vs {self.reference} and {fd}"

    _COLS = ("input", "shape", "dtype", "abs err vs jax", "rel err vs jax", "abs err vs fd", "rel err vs fd", "ok")

    def _cells(self, r):
        def f(v):
            return "-" if v is None else f"{v:.2e}"
        fd_abs = f(r.abs_fd) if r.fd_note is None or r.abs_fd is not None else r.fd_note
        return (r.name, str(r.shape), r.dtype, f(r.abs_jax), f(r.rel_jax), fd_abs, f(r.rel_fd),
                "yes" if r.ok else "NO")

    def __str__(self):
        rows = [self._COLS] + [self._cells(r) for r in self.rows]
        widths = [max(len(str(row[i])) for row in rows) for i in range(len(self._COLS))]
        lines = [self._header()]
        for j, row in enumerate(rows):
            lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
            if j == 0:
                lines.append("  ".join("-" * w for w in widths))
        if self.value_err is not None:
            lines.append(f"forward values: max abs difference jgrad vs {self.reference}: {self.value_err:.2e}")
        notes = sorted({r.fd_note for r in self.rows if r.fd_note and r.abs_fd is not None})
        lines.extend(f"note: {n}" for n in notes)
        lines.append(f"tolerances: {self.tolerances}")
        lines.append("all gradients agree" if self.ok else "MISMATCH")
        return "\n".join(lines)

    def __repr__(self):
        return f"<GradReport {self.name}: {'ok' if self.ok else 'MISMATCH'}, max abs err {self.max_abs_err:.2e}>"

    def _repr_html_(self):
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in self._COLS)
        body = []
        for r in self.rows:
            cells = self._cells(r)
            color = "#d4edda" if r.ok else "#f8d7da"
            tds = "".join(f"<td>{esc(str(c))}</td>" for c in cells[:-1])
            tds += f'<td style="background:{color}">{esc(cells[-1])}</td>'
            body.append(f"<tr>{tds}</tr>")
        foot = ""
        if self.value_err is not None:
            foot += f"<p>forward values: max abs difference jgrad vs {esc(self.reference)}: {self.value_err:.2e}</p>"
        verdict = "all gradients agree" if self.ok else "MISMATCH"
        foot += f"<p>tolerances: {esc(str(self.tolerances))}; <b>{verdict}</b></p>"
        return (f'<div class="jgrad-grad-report"><p>{esc(self._header())}</p>'
                f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{foot}</div>")


_DEFAULT_TOL = {  # (rtol, atol) for jgrad vs jax.grad at the input's own precision
    "float16": (1e-2, 1e-3), "bfloat16": (5e-2, 1e-2), "float32": (1e-4, 1e-6), "complex64": (1e-4, 1e-6),
    "float64": (1e-7, 1e-10), "complex128": (1e-7, 1e-10)}


def _errs(a, b):
    a = np.asarray(a, np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64)
    b = np.asarray(b, a.dtype)
    if a.size == 0:
        return 0.0, 0.0, 0.0
    diff = float(np.max(np.abs(a - b)))
    scale = float(np.max(np.abs(b)))
    return diff, diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf), scale


def _arg_names(fn, n):
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params[:n]]
        if any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values()):
            names += [f"args[{i}]" for i in range(len(names), n)]
    except (TypeError, ValueError):
        names = []
    return names + [f"arg{i}" for i in range(len(names), n)]


def compare_grad(fn, *args, jax_fn=None, eps=1e-6, rtol=None, atol=None, fd=True, fd_max_elements=2048,
                 seed=0, name=None) -> GradReport:
    """Check jgrad's gradient of ``fn`` against ``jax.grad`` and float64 finite differences.

    ``fn`` takes tensors and returns one tensor; ``args`` are tensors, JAX or
    NumPy arrays or numbers (every floating one is differentiated). For a
    non-scalar output the gradient of ``sum(out * v)`` is compared, ``v`` a
    fixed random cotangent. The JAX gradient is ``jax.vjp`` of ``jax_fn``
    (the same math in ``jax.numpy``) when given, else of
    ``functionalize(fn)``. Finite differences evaluate ``fn``'s forward at
    float64 (with 64-bit arguments or JAX_ENABLE_X64 on; else float32) with step ``eps``, on at most
    ``fd_max_elements`` randomly chosen elements per input (``fd=False``: none).
    With a 64-bit argument the comparison runs in jgrad's x64 scope (JAX_ENABLE_X64 is not needed).
    ``rtol``/``atol`` default per dtype (float32: 1e-4/1e-6); finite
    differences are held to ``max(rtol, 1e-4)`` (1e-2 below float32) and
    ``max(atol, 1e-6)``.
    """
    with (_dtype.x64_scope() if any(_is_wide(a) for a in args) else contextlib.nullcontext()):
        return _compare_grad(fn, *args, jax_fn=jax_fn, eps=eps, rtol=rtol, atol=atol, fd=fd,
                             fd_max_elements=fd_max_elements, seed=seed, name=name)


def _is_wide(x) -> bool:
    """Whether an argument of compare_grad is 64-bit (float64, complex128, int64): then the whole comparison runs in
    jgrad's x64 scope, so its dtype survives without JAX_ENABLE_X64 (jax.grad of jax_fn and the finite differences
    included)."""
    dt = x.dtype.np if isinstance(x, Tensor) else getattr(x, "dtype", None)
    return dt is not None and np.dtype(dt).itemsize >= 8 and np.dtype(dt).kind in "fci"


def _compare_grad(fn, *args, jax_fn=None, eps=1e-6, rtol=None, atol=None, fd=True, fd_max_elements=2048,
                 seed=0, name=None) -> GradReport:
    from jgrad.autograd import grad as jg_grad

    name = name or getattr(fn, "__name__", "fn")
    arrays = [_as_array(a) for a in args]
    names = _arg_names(fn, len(arrays))
    diff_idx = [i for i, a in enumerate(arrays) if _is_diff(a.dtype)]
    if not diff_idx:
        raise ValueError("compare_grad(): no floating-point argument to differentiate")

    # jgrad
    tensors = _wrap_inputs(arrays, [i in diff_idx for i in range(len(arrays))])
    out = fn(*tensors)
    if not isinstance(out, Tensor):
        raise TypeError(f"compare_grad(): fn must return one Tensor, got {type(out).__name__}")
    out_arr = out._value
    rng = np.random.default_rng(seed)
    if out.numel() == 1:
        v = jnp.ones(out_arr.shape, out_arr.dtype)
        cot = "scalar"
    else:
        vn = rng.standard_normal(out_arr.shape)
        if jnp.issubdtype(out_arr.dtype, jnp.complexfloating):
            vn = vn + 1j * rng.standard_normal(out_arr.shape)
        v = jax.device_put(jnp.asarray(vn, out_arr.dtype), next(iter(out_arr.devices())))
        cot = "random"
    wrt = [tensors[i] for i in diff_idx]
    if out._req:
        g_jg = jg_grad([out], wrt, grad_outputs=[Tensor._make(v, out.device)], allow_unused=True)
        g_jg = [np.zeros(t.shape, t.dtype.np) if g is None else np.asarray(g._value) for g, t in zip(g_jg, wrt)]
    else:
        g_jg = [np.zeros(t.shape, t.dtype.np) for t in wrt]

    # jax
    reference = "jax.grad(jax_fn)" if jax_fn is not None else "jax.grad(functionalize(fn))"
    f_jax = jax_fn if jax_fn is not None else functionalize(fn)

    def partial(*diff):
        full = list(arrays)
        for j, i in enumerate(diff_idx):
            full[i] = diff[j]
        return f_jax(*full)

    out_j, vjp = jax.vjp(partial, *[arrays[i] for i in diff_idx])
    out_j = jnp.asarray(out_j)
    if out_j.shape != out_arr.shape:
        raise ValueError(f"compare_grad(): jgrad's output has shape {out_arr.shape} but {reference}'s has "
                         f"{out_j.shape}")
    g_jax = [np.asarray(g) for g in vjp(jnp.asarray(v, out_j.dtype))]
    value_err = _errs(out_arr, out_j)[0]

    # finite differences
    x64 = _dtype.x64_enabled()
    fd_dtype = ("float64" if x64 else "float32") if fd else None
    g_fd, fd_notes = [None] * len(diff_idx), [None] * len(diff_idx)
    if fd:
        g_fd, fd_notes = _finite_differences(fn, arrays, diff_idx, np.asarray(v), eps, fd_max_elements, rng, x64)

    rows = []
    tol_desc = {}
    for j, i in enumerate(diff_idx):
        dt = str(np.dtype(arrays[i].dtype))
        r0, a0 = _DEFAULT_TOL.get(dt, (1e-4, 1e-6))
        r_t = rtol if rtol is not None else r0
        a_t = atol if atol is not None else a0
        fd_r = max(r_t, 1e-4 if dt in ("float32", "float64", "complex64", "complex128") else 1e-2)
        fd_a = max(a_t, 1e-6)
        tol_desc[dt] = f"rtol={r_t:g} atol={a_t:g} (fd: rtol={fd_r:g} atol={fd_a:g})"
        ab, rel, scale = _errs(g_jg[j], g_jax[j])
        row = GradRow(name=names[i], shape=tuple(arrays[i].shape), dtype=dt, abs_jax=ab, rel_jax=rel,
                      ok_jax=ab <= a_t + r_t * scale, fd_note=fd_notes[j])
        if g_fd[j] is not None:
            sel, vals = g_fd[j]
            ab, rel, scale = _errs(np.asarray(g_jg[j]).reshape(-1)[sel], vals)
            row.abs_fd, row.rel_fd, row.ok_fd = ab, rel, ab <= fd_a + fd_r * scale
        rows.append(row)
    tol = "; ".join(f"{k}: {v}" for k, v in tol_desc.items())
    return GradReport(name, rows, reference, value_err, cot, fd_dtype, tol)


def _finite_differences(fn, arrays, diff_idx, v, eps, max_elements, rng, x64):
    """Central differences of <fn(x), v> per differentiable input: [(indices, values)] and notes."""
    hi = np.float64 if x64 else np.float32
    chi = np.complex128 if x64 else np.complex64

    def up(a):
        a = np.asarray(a)
        if np.iscomplexobj(a):
            return a.astype(chi)
        return a.astype(hi) if _is_diff(a.dtype) else a

    base = [jnp.asarray(up(a)) for a in arrays]
    vv = jnp.asarray(up(v))
    f = functionalize(fn)

    def loss(*xs):
        o = jnp.asarray(f(*xs))
        return jnp.real(jnp.sum(o.astype(vv.dtype) * vv))

    results, notes = [], []
    for i in diff_idx:
        a = base[i]
        if jnp.issubdtype(a.dtype, jnp.complexfloating):
            results.append(None)
            notes.append("n/a (complex)")
            continue
        n = int(a.size)
        sel = np.arange(n) if n <= max_elements else np.sort(rng.choice(n, max_elements, replace=False))
        note = None if n <= max_elements else f"finite differences on {len(sel)} of {n} elements"
        flat = a.reshape(-1)

        def at(d, i=i, flat=flat, shape=a.shape):
            xs = list(base)
            xs[i] = (flat + d).reshape(shape)
            return loss(*xs)

        dirs = np.zeros((len(sel), n), flat.dtype)
        dirs[np.arange(len(sel)), sel] = eps
        vals = _eval_batched(at, dirs)
        results.append((sel, vals))
        notes.append(note)
    return results, notes


def _eval_batched(at, dirs, chunk=256):
    """(L(x + d) - L(x - d)) / 2|d| for each row d of ``dirs``: jit+vmap in chunks, else one by one."""
    eps = float(np.max(np.abs(dirs))) if dirs.size else 1.0
    try:
        batched = jax.jit(jax.vmap(at))
        out = []
        for s in range(0, len(dirs), chunk):
            d = jnp.asarray(dirs[s:s + chunk])
            out.append(np.asarray(batched(d)) - np.asarray(batched(-d)))
        return np.concatenate(out) / (2 * eps) if out else np.zeros(0)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
            jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError, TypeError):
        # fn is not traceable (item(), numpy(), Python control flow on values): evaluate eagerly
        return np.array([(float(at(jnp.asarray(d))) - float(at(jnp.asarray(-d)))) / (2 * eps) for d in dirs])
