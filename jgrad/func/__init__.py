"""``jgrad.func``: PyTorch's ``torch.func`` transforms, run as JAX's transforms of the function's ops.

``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``, ``jacfwd``, ``hessian`` and ``vmap`` take a
jgrad function (tensors in, tensors out) and return one. The function is traced into JAX
(``jgrad.func._functional``: tensors wrapping tracers go through jgrad's ops, each a ``jax.jit`` kernel) and
the matching JAX transform (``jax.grad``, ``jax.vjp``, ``jax.jvp``, ``jax.jacrev``, ``jax.jacfwd``,
``jax.hessian``, ``jax.vmap``) runs it; the arrays it returns come back as tensors without history.
``vmap`` is JAX's batching (one kernel per op for the whole batch), ``jacfwd`` is forward mode, and
transforms nest because a transformed function is again a function of tensors. ``functional_call`` and
``stack_module_state`` are PyTorch's module helpers. docs/functional.md says what composes and how each maps
to JAX.

Imports ``_functional``, ``_vmap``, ``_tensor``, ``nn`` (functional_call), ``ops`` and autograd: the library
layer. Loading it installs ``autograd.grad(..., is_grads_batched=True)`` and what ``autograd.functional``
needs of the op library and of this module (``jacfwd``), and loads ``runtime._forward_ad`` (the door rule of
``autograd.forward_ad``).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ._functional import array_of, first_device, is_tensor, outputs_to_arrays, run, transform_scope, wrap
from ..core._tensor import Tensor
from ._vmap import check_randomness as _check_randomness, randomness_scope as _randomness_scope, vmap
from . import _fastcall, _guards, _trace_cache, _vmap
from ._trace_cache import clear_trace_cache, trace_cache_info
from ..runtime import _forward_ad  # noqa: F401  (autograd.forward_ad's rule in the op door)
from .. import autograd as _autograd, ops as _ops
from ..autograd import functional as _af
from ..nn._functional_call import functional_call as _fc, stack_module_state as _stack_module_state

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap", "functional_call",
           "stack_module_state", "linearize", "clear_trace_cache", "trace_cache_info"]


# ---- arguments --------------------------------------------------------------------------------------------------
def _argnums_tuple(argnums, n, what):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise RuntimeError(f"{what}: 'argnums' must be non-empty")
    for a in nums:
        if not isinstance(a, int):
            raise RuntimeError(f"{what}: argnums must be int or Tuple[int, ...], got: {type(a).__name__}")
        if not -n <= a < n:
            raise RuntimeError(f"{what}: Got argnums={a}, but only {n} positional inputs")
    return tuple(a % n for a in nums)


def _diff_args(args, nums):
    """For each of ``args[i]`` (i in nums): its tree with tensors as arrays, and the devices of its leaves."""
    trees, devs = [], []
    for i in nums:
        leaves, treedef = jax.tree_util.tree_flatten(args[i], is_leaf=is_tensor)
        for x in leaves:
            if not isinstance(x, Tensor):
                raise RuntimeError(f"Expected differentiable inputs to be Tensors (or trees of Tensors), got an "
                                   f"input of type {type(x).__name__}")
        trees.append(jax.tree_util.tree_unflatten(treedef, [array_of(x) for x in leaves]))
        devs.append([x._device for x in leaves])
    return trees, devs


def _rebuild(args, nums, trees, devs):
    """``args`` with ``args[i]`` (i in nums) replaced by tensors wrapping the (traced) arrays of ``trees``."""
    full = list(args)
    for i, tree, dv in zip(nums, trees, devs):
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        full[i] = jax.tree_util.tree_unflatten(treedef, [wrap(a, d) for a, d in zip(leaves, dv)])
    return full


def _split_aux(out, has_aux, what):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{what}: output of function f should be a tuple: (output, aux) if has_aux is True")
    return out


class _Aux:
    """A function's auxiliary output: tensors go through JAX as arrays, other leaves stay Python objects."""

    def __init__(self):
        self.treedef = None
        self.static = None

    def pack(self, aux):
        leaves, self.treedef = jax.tree_util.tree_flatten(aux, is_leaf=is_tensor)
        self.static = [None if isinstance(x, Tensor) else x for x in leaves]
        return [array_of(x) for x in leaves if isinstance(x, Tensor)]

    def unpack(self, arrays, device):
        it = iter(arrays)
        leaves = [wrap(next(it), device) if s is None else s for s in self.static]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


# ---- grad ---------------------------------------------------------------------------------------------------------
def grad_and_value(func, argnums=0, has_aux=False):
    """``func``'s gradient w.r.t. ``args[argnums]`` and its value: ``jax.value_and_grad`` of its ops."""
    box = _guards.new_box()  # the record of func's last key (jgrad/func/_guards.py)
    kept = _fastcall.LastCall()

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        aux_box = _Aux()
        leaves, treedef = jax.tree_util.tree_flatten(args, is_leaf=is_tensor)
        hit = kept.run(leaves, treedef, kwargs, box, (aux_box,))  # a repeated call: its executable at once
        if hit is not None:
            return _grad_results(jax.tree_util.tree_unflatten(hit[1], hit[0]), *kept.extra, has_aux, aux_box)
        what = "grad_and_value(f)(*args)"
        nums = _argnums_tuple(argnums, len(args), what)
        trees, devs = _diff_args(args, nums)
        dev = first_device(args, [d[0] if d else None for d in devs])
        used = []

        def jf(*diff):
            out = func(*_rebuild(args, nums, diff, devs), **kwargs)
            out, aux = _split_aux(out, has_aux, what)
            if not isinstance(out, Tensor):
                raise RuntimeError(f"{what}: Expected f(*args) to return a Tensor, got {type(out)}")
            if out.dim() != 0:
                raise RuntimeError(f"{what}: Expected f(*args) to return a scalar Tensor, got tensor with "
                                   f"{out.dim()} dims. Maybe you wanted to use the vjp or jacrev APIs instead?")
            return array_of(out), (aux_box.pack(aux) if has_aux else [])

        with transform_scope():
            ck = _trace_cache.call_key("grad_and_value", (argnums, has_aux), func, args, kwargs, box=box)
            res = run(lambda *t: jax.value_and_grad(jf, argnums=tuple(range(len(nums))), has_aux=True)(*t),
                      *trees, cache=ck, boxes=(aux_box,), used=used)
        kept.learn(box, leaves, treedef, used, _positions(args, nums), (argnums, devs, dev))
        return _grad_results(res, argnums, devs, dev, has_aux, aux_box)

    return _guards.give_box(wrapper)


def _grad_results(res, argnums, devs, dev, has_aux, aux_box):
    (value, aux), g = res
    grads = [_rebuild_tree(gt, dv) for gt, dv in zip(g, devs)]
    grads = grads[0] if isinstance(argnums, int) else tuple(grads)
    value = wrap(value, dev)
    if has_aux:
        return grads, (value, aux_box.unpack(aux, dev))
    return grads, value


def _positions(args, nums):
    """The leaf positions (of ``args`` flattened with tensors as leaves) of the leaves of ``args[i]``, i in nums:
    where a transform's executable inputs come from (``_fastcall``)."""
    starts, at = [], 0
    for a in args:
        starts.append(at)
        at += jax.tree_util.tree_structure(a, is_leaf=is_tensor).num_leaves
    ends = starts[1:] + [at]
    return [j for i in nums for j in range(starts[i], ends[i])]


def _rebuild_tree(tree, devs):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return jax.tree_util.tree_unflatten(treedef, [wrap(a, d) for a, d in zip(leaves, devs)])


def grad(func, argnums=0, has_aux=False):
    """The gradient of ``func`` (a scalar-valued function) w.r.t. ``args[argnums]``: ``jax.grad`` of its ops."""
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, v = gv(*args, **kwargs)
        return (g, v[1]) if has_aux else g

    return _guards.give_box(wrapper)


# ---- vjp, jvp, linearize -----------------------------------------------------------------------------------------
def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn[, aux])``: ``vjp_fn(cotangents)`` is a tuple, one gradient per primal."""
    what = "vjp(f, *primals)"
    nums = tuple(range(len(primals)))
    trees, devs = _diff_args(primals, nums)
    dev = first_device(primals, [d[0] if d else None for d in devs])
    aux_box = _Aux()
    out_box = []

    def jf(*diff):
        out = func(*_rebuild(primals, nums, diff, devs))
        out, aux = _split_aux(out, has_aux, what)
        arrs, treedef = outputs_to_arrays(out, what)
        out_box.append(treedef)
        return arrs, (aux_box.pack(aux) if has_aux else [])

    with transform_scope():  # the pullback is a pytree of residual arrays: it crosses run() as data
        ck = _trace_cache.call_key("vjp", (has_aux,), func, primals, box=_guards.box_of(func))
        out, pullback, aux = run(lambda *t: jax.vjp(jf, *t, has_aux=True), *trees, cache=ck,
                                 boxes=(aux_box, out_box))
    out_tree = out_box[-1]

    def vjp_fn(cotangents, retain_graph=True, create_graph=False):
        leaves, treedef = jax.tree_util.tree_flatten(cotangents, is_leaf=is_tensor)
        if treedef != out_tree:
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as pytree structure of "
                               f"outputs to the function. cotangents: {treedef}, primal output: {out_tree}")
        cts = []
        for c, o in zip(leaves, out):
            a = array_of(c) if isinstance(c, Tensor) else jnp.asarray(c)
            if a.shape != o.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output has a shape of {list(a.shape)} and output has "
                                   f"a shape of {list(o.shape)}.")
            cts.append(a.astype(o.dtype))
        with transform_scope():
            gs = run(_apply, pullback, cts, cache=_trace_cache.PURE)
        return tuple(_rebuild_tree(g, dv) for g, dv in zip(gs, devs))

    outs = jax.tree_util.tree_unflatten(out_tree, [wrap(a, dev) for a in out])
    if has_aux:
        return outs, vjp_fn, aux_box.unpack(aux, dev)
    return outs, vjp_fn


def _apply(f, x):
    return f(x)


def _apply_star(f, xs):
    return f(*xs)


def _jvp_inputs(primals, tangents, what):
    if not isinstance(primals, (tuple, list)):
        raise RuntimeError(f"{what}: Expected primals to be a tuple. E.g. it should be valid to call f(*primals).")
    if not isinstance(tangents, (tuple, list)) or len(tangents) != len(primals):
        raise RuntimeError(f"{what}: Expected primals and tangents to have the same python structure. For "
                           f"example, if primals is a tuple of 3 tensors, tangents also must be. Got primals with "
                           f"structure {jax.tree_util.tree_structure(tuple(primals), is_leaf=is_tensor)} and "
                           f"tangents with structure "
                           f"{jax.tree_util.tree_structure(tuple(tangents), is_leaf=is_tensor)}")
    nums = tuple(range(len(primals)))
    ptrees, devs = _diff_args(tuple(primals), nums)
    ttrees, _ = _diff_args(tuple(tangents), nums)
    for p, t in zip(jax.tree_util.tree_leaves(ptrees), jax.tree_util.tree_leaves(ttrees)):
        if p.shape != t.shape:
            raise RuntimeError(f"{what}: Expected primals and tangents to have the same shape, got "
                               f"{list(p.shape)} and {list(t.shape)}")
    ttrees = jax.tree_util.tree_map(_as_dtype_of, ptrees, ttrees)
    return nums, ptrees, ttrees, devs


def _as_dtype_of(p, t):
    """The tangent ``t`` in the primal's dtype (as it is already, most often: then no conversion is dispatched)."""
    return t if t.dtype == p.dtype and not getattr(t, "weak_type", False) else t.astype(p.dtype)


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``(func(*primals), jvp_out[, aux])``: the Jacobian-vector product by forward mode (``jax.jvp``)."""
    what = "jvp(f, primals, tangents)"
    aux_box = _Aux()
    out_box = []
    box = _guards.box_of(func)
    kept = _fastcall.kept_of(func, ("jvp", has_aux)) if box is not None else None
    if kept is not None and not (isinstance(primals, (tuple, list)) and isinstance(tangents, (tuple, list))):
        kept = None  # (the checks below raise PyTorch's error)
    if kept is not None:
        leaves, treedef = jax.tree_util.tree_flatten((tuple(primals), tuple(tangents)), is_leaf=is_tensor)
        hit = kept.run(leaves, treedef, None, box, (aux_box, out_box))  # a repeated call: its executable at once
        if hit is not None:
            return _jvp_results(jax.tree_util.tree_unflatten(hit[1], hit[0]), out_box, kept.extra, has_aux, aux_box)
    nums, ptrees, ttrees, devs = _jvp_inputs(primals, tangents, what)
    dev = first_device(primals, [d[0] if d else None for d in devs])

    def jf(*diff):
        out = func(*_rebuild(tuple(primals), nums, diff, devs))
        out, aux = _split_aux(out, has_aux, what)
        arrs, treedef = outputs_to_arrays(out, what)
        out_box.append(treedef)
        return arrs, (aux_box.pack(aux) if has_aux else [])

    used = []
    with transform_scope():
        ck = _trace_cache.call_key("jvp", (has_aux,), func, (tuple(primals), tuple(tangents)), box=box)
        res = run(lambda p, t: jax.jvp(jf, p, t, has_aux=True), tuple(ptrees), tuple(ttrees), cache=ck,
                  boxes=(aux_box, out_box), used=used)
    if kept is not None:
        # the executable's inputs are every primal's and tangent's array, unless a tangent was converted
        flat = jax.tree_util.tree_leaves((ptrees, ttrees))
        same = len(flat) == len(leaves) and all(a is x._data for a, x in zip(flat, leaves))
        kept.learn(box, leaves, treedef, used if same else None, range(len(leaves)), dev)
    return _jvp_results(res, out_box, dev, has_aux, aux_box)


def _jvp_results(res, out_box, dev, has_aux, aux_box):
    out, tan, aux = res
    tree = out_box[-1]
    res = (jax.tree_util.tree_unflatten(tree, [wrap(a, dev) for a in out]),
           jax.tree_util.tree_unflatten(tree, [wrap(a, dev) for a in tan]))
    return res + (aux_box.unpack(aux, dev),) if has_aux else res


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)``: ``jvp_fn(*tangents)`` evaluates the linearized function (``jax.linearize``)."""
    what = "linearize(f, *primals)"
    nums = tuple(range(len(primals)))
    trees, devs = _diff_args(primals, nums)
    dev = first_device(primals, [d[0] if d else None for d in devs])
    out_box = []

    def jf(*diff):
        arrs, treedef = outputs_to_arrays(func(*_rebuild(primals, nums, diff, devs)), what)
        out_box.append(treedef)
        return arrs

    with transform_scope():
        ck = _trace_cache.call_key("linearize", (), func, primals, box=_guards.box_of(func))
        out, lin = run(lambda *t: jax.linearize(jf, *t), *trees, cache=ck, boxes=(out_box,))
    tree = out_box[-1]

    def jvp_fn(*tangents):
        ts, _ = _diff_args(tangents, tuple(range(len(tangents))))
        with transform_scope():
            tan = run(_apply_star, lin, ts, cache=_trace_cache.PURE)
        return jax.tree_util.tree_unflatten(tree, [wrap(a, dev) for a in tan])

    return jax.tree_util.tree_unflatten(tree, [wrap(a, dev) for a in out]), jvp_fn


# ---- Jacobians and Hessians -----------------------------------------------------------------------------------
def _jacobian(jax_jac, name, func, argnums, has_aux, chunk_size=None):
    box = _guards.new_box()
    kept = _fastcall.LastCall()

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        aux_box = _Aux()
        out_box = []
        leaves, treedef = jax.tree_util.tree_flatten(args, is_leaf=is_tensor)
        hit = kept.run(leaves, treedef, kwargs, box, (aux_box, out_box))  # a repeated call: at once
        if hit is not None:
            jac = jax.tree_util.tree_unflatten(hit[1], hit[0])
            return _jacobian_results(jac, *kept.extra, argnums, has_aux, aux_box, out_box)
        what = f"{name}(f, ...)(*args)"
        nums = _argnums_tuple(argnums, len(args), what)
        trees, devs = _diff_args(args, nums)
        dev = first_device(args, [d[0] if d else None for d in devs])
        used = []

        def jf(*diff):
            out = func(*_rebuild(args, nums, diff, devs), **kwargs)
            out, aux = _split_aux(out, has_aux, what)
            arrs, treedef = outputs_to_arrays(out, what)
            out_box.append(treedef)
            return arrs, (aux_box.pack(aux) if has_aux else [])

        kw = {"chunk_size": chunk_size} if chunk_size is not None and name == "jacrev" else {}
        with transform_scope():
            ck = _trace_cache.call_key(name, (argnums, has_aux, chunk_size), func, args, kwargs, box=box)
            jac = run(lambda *t: _jac_call(jax_jac, jf, len(nums), kw)(*t), *trees, cache=ck,
                      boxes=(aux_box, out_box), used=used)
        kept.learn(box, leaves, treedef, used, _positions(args, nums), (devs, dev))
        return _jacobian_results(jac, devs, dev, argnums, has_aux, aux_box, out_box)

    return _guards.give_box(wrapper)


def _jacobian_results(res, devs, dev, argnums, has_aux, aux_box, out_box):
    jac, aux = res
    # jac: one entry per output leaf, each a tuple over argnums of trees of arrays
    per_out = []
    for entry in jac:
        per_arg = [_rebuild_tree(t, dv) for t, dv in zip(entry, devs)]
        per_out.append(per_arg[0] if isinstance(argnums, int) else tuple(per_arg))
    res = jax.tree_util.tree_unflatten(out_box[-1], per_out)
    return (res, aux_box.unpack(aux, dev)) if has_aux else res


def _jac_call(jax_jac, jf, n, kw):
    if kw:  # jax's jacrev has no chunking: vmap the pullback in chunks of the basis
        return _chunked_jacrev(jf, n, kw["chunk_size"])
    return jax_jac(jf, argnums=tuple(range(n)), has_aux=True)


def _chunked_jacrev(jf, n, chunk):
    def chunked(*trees):
        out, pullback, aux = jax.vjp(jf, *trees, has_aux=True)
        res = []
        for o in out:
            m = int(np.prod(o.shape))
            basis = jnp.eye(m, dtype=o.dtype).reshape((m,) + o.shape)
            zeros = [jnp.zeros_like(p) for p in out]
            parts = []
            for s in range(0, m, chunk):
                def one(c, o=o):
                    cts = [c if q is o else z for q, z in zip(out, zeros)]
                    return pullback(cts)
                parts.append(jax.vmap(one)(basis[s:s + chunk]))
            cat = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *parts)
            res.append(jax.tree_util.tree_map(lambda j, o=o: jnp.moveaxis(j, 0, 0).reshape(o.shape + j.shape[1:]),
                                              cat))
        return res, aux
    return chunked


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """The Jacobian of ``func`` w.r.t. ``args[argnums]`` by reverse mode (``jax.jacrev``: a vmapped pullback)."""
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")
    return _jacobian(jax.jacrev, "jacrev", func, argnums, has_aux, chunk_size)


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian of ``func`` w.r.t. ``args[argnums]`` by forward mode (``jax.jacfwd``: a vmapped jvp)."""
    _check_randomness(randomness)
    jac = _jacobian(jax.jacfwd, "jacfwd", func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        # One function is differentiated: 'different' draws once too (each basis direction sees the same draw).
        with _randomness_scope("same" if randomness == "different" else randomness):
            return jac(*args, **kwargs)

    return _guards.give_box(wrapper)


def hessian(func, argnums=0):
    """The Hessian of ``func`` w.r.t. ``args[argnums]``: ``jacfwd(jacrev(func))``, as PyTorch and JAX compute it."""
    return jacfwd(jacrev(func, argnums), argnums)


# ---- modules --------------------------------------------------------------------------------------------------------
def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """Call ``module`` with its parameters and buffers replaced by those of ``parameter_and_buffer_dicts``
    (a dict, or a tuple of dicts, of dotted names to tensors); the module is unchanged afterwards."""
    return _fc(module, parameter_and_buffer_dicts, args, kwargs, tie_weights=tie_weights, strict=strict)


def stack_module_state(models):
    """``(params, buffers)``: each name's tensors of the ``models`` stacked along a new first dimension
    (the parameters as new leaves that require grad), for ``vmap`` over an ensemble."""
    return _stack_module_state(models)




_autograd._batched_grad = _vmap.batched_grad
_af._stack, _af._eye, _af._func_jacfwd = _ops.stack, _ops.eye, jacfwd
