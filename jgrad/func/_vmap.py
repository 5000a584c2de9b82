"""``jgrad.func.vmap``: a jgrad function batched by ``jax.vmap`` of its ops, and ``grad(is_grads_batched=True)``.

The function is traced with tensors that wrap ``jax.vmap``'s batch tracers (``jgrad.func._functional``), so every
jgrad op it calls runs its ``jax.jit`` kernel once for the whole batch, which is JAX's batching rule of that
kernel: one kernel per op, never a Python loop over the examples. ``chunk_size`` runs ``vmap`` on that many
examples at a time and concatenates, as PyTorch does.

Randomness: ``Generator.next_key`` asks the innermost hook of ``random._key_hooks`` while a vmapped function
traces. 'error' raises PyTorch's error, 'same' draws from the generator as usual (one draw, broadcast over
the batch), 'different' gives each example its own key (a key per example, split from the default
generator once per call and batched with the inputs; every draw inside folds in a counter).

``_batched_grad`` is installed as ``autograd._batched_grad``: the engine runs once under ``vmap`` over the
first dimension of the grad_outputs (each backward kernel batched).

Imports ``_functional``, ``_tensor`` and ``random``: the library layer (docs/design.md, "The house").
"""
from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp

from .. import random as _random
from ._functional import (advance_outside_trace, array_of, first_device, is_tensor, outputs_to_arrays, run as _run,
                          transform_scope, wrap)
from ..core._tensor import Tensor
from ..runtime import _trace_log
from . import _fastcall, _guards, _trace_cache
from .. import ops

__all__ = ["vmap"]

_RANDOMNESS = ("error", "different", "same")


def check_randomness(randomness):
    if randomness not in _RANDOMNESS:
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or 'same'. Got "
                           f"{randomness}")


@contextlib.contextmanager
def randomness_scope(randomness, keys=None):
    """While a vmapped function traces: random ops raise ('error'), draw once for the whole batch ('same'),
    or draw from each example's own key (``keys``, batched: 'different')."""
    stack = getattr(_random._key_hooks, "stack", None)
    if stack is None:
        stack = _random._key_hooks.stack = []
    if randomness == "error":
        def hook(gen):
            raise RuntimeError("vmap: called random operation while in randomness error mode. Please either use "
                               "the 'same' or 'different' randomness flags on vmap or perform the randomness "
                               "operation out of vmap")
    elif randomness == "same":
        hook = advance_outside_trace
    else:
        count = [0]

        def hook(gen):
            _trace_log.impure("a random draw")
            count[0] += 1
            return jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(keys), count[0]))
    stack.append(hook)
    try:
        yield
    finally:
        stack.pop()


def _leaf_dims(in_dims, args, what):
    """One in_dim per leaf of ``args``: ``in_dims`` is an int or None for all, or a tuple (a prefix tree of the
    arguments: a tuple, list or dict per argument, or an int/None for all of an argument's leaves)."""
    if isinstance(in_dims, int) or in_dims is None:
        in_dims = (in_dims,) * len(args)
    if not isinstance(in_dims, tuple):
        raise ValueError(f"{what}: expected `in_dims` to be int or a (potentially nested) tuple matching the "
                         f"structure of inputs, got: {type(in_dims)}.")
    if len(in_dims) != len(args):
        raise ValueError(f"{what}: in_dims is not compatible with the structure of `inputs`. in_dims has "
                         f"structure {jax.tree_util.tree_structure(in_dims)} but inputs has structure "
                         f"{jax.tree_util.tree_structure(args, is_leaf=is_tensor)}.")
    dims = []
    for d, a in zip(in_dims, args):
        structure = jax.tree_util.tree_structure(a, is_leaf=is_tensor)
        if d is None or isinstance(d, int):
            dims.extend([d] * structure.num_leaves)
            continue
        try:  # d is a prefix of the argument's structure: an int or None stands for its whole subtree
            per = jax.tree_util.tree_map(lambda dd, sub: _Repeat(dd, sub), d, a, is_leaf=lambda x: x is None)
        except (ValueError, TypeError):
            raise ValueError(f"{what}: in_dims is not compatible with the structure of `inputs`. in_dims has "
                             f"structure {jax.tree_util.tree_structure(d)} but the input has structure "
                             f"{structure}.") from None
        for rep in jax.tree_util.tree_leaves(per, is_leaf=lambda x: isinstance(x, _Repeat)):
            dims.extend([rep.dim] * rep.count)
    return dims


class _Repeat:
    """An in_dim standing for every leaf of a subtree of the arguments."""

    def __init__(self, dim, subtree):
        self.dim, self.count = dim, len(jax.tree_util.tree_leaves(subtree, is_leaf=is_tensor))


def _batched_leaves(leaves, dims, what):
    """(indices of the batched leaves, their in_dims, the batch size), checked as PyTorch checks them."""
    batched, axes, sizes = [], [], []
    for i, (x, d) in enumerate(zip(leaves, dims)):
        if d is None:
            continue
        if not isinstance(d, int):
            raise ValueError(f"{what}: in_dim for input {i} must be an int or None, got {type(d).__name__}.")
        if not isinstance(x, Tensor):
            raise ValueError(f"{what}: Got in_dim={d} for an input but the input is of type {type(x)}. We cannot "
                             f"vmap over non-Tensor arguments, please use None as the respective in_dim")
        if x.dim() == 0 or not -x.dim() <= d < x.dim():
            raise ValueError(f"{what}: Got in_dim={d} for some input, but that input is a Tensor of "
                             f"dimensionality {x.dim()} so expected in_dim to satisfy -{x.dim()} <= in_dim < "
                             f"{x.dim()}.")
        batched.append(i)
        axes.append(d % x.dim())
        sizes.append(x.shape[d])
    if not batched:
        raise ValueError(f"{what}: There are no Tensors with a non-None in_dim among the inputs (in_dims="
                         f"{dims}); vmap needs at least one input to map over.")
    if len(set(sizes)) != 1:
        raise ValueError(f"{what}: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{sizes} for the mapped dimension")
    return batched, axes, sizes[0]


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """Batch ``func`` over a dimension of its inputs: ``jax.vmap`` of its ops (one batched kernel per op).

    ``in_dims`` gives each input's batch dimension (None: not batched), as an int or a tuple matching the
    arguments; ``out_dims`` where the batch dimension goes in each output (an int or a tree matching them).
    ``randomness`` is 'error' (random ops raise), 'same' (one draw shared by the batch) or 'different' (one per
    example). ``chunk_size`` maps that many examples at a time and concatenates; keyword arguments are not
    batched. The results are new tensors without autograd history (docs/functional.md).
    """
    check_randomness(randomness)
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")

    what = f"vmap({getattr(func, '__name__', 'f')}, in_dims={in_dims}, ...)(<inputs>)"
    statics = (in_dims, out_dims, randomness, chunk_size)
    last = [(None, None)]  # the arguments' structure last time and its in_dim per leaf
    box = _guards.new_box()  # the record of func's last key (jgrad/func/_guards.py)

    kept = _fastcall.LastCall() if randomness != "different" and chunk_size is None else None

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        leaves, treedef = jax.tree_util.tree_flatten(args, is_leaf=is_tensor)
        if kept is not None:  # the same kind of call as the last one: its executable at once (_fastcall)
            hit = kept.run(leaves, treedef, kwargs, box)
            if hit is not None:
                dev = kept.extra
                return jax.tree_util.tree_unflatten(hit[1], [wrap(a, dev) for a in hit[0]])
        tree, dims = last[0]
        if tree is None or tree != treedef:
            dims = _leaf_dims(in_dims, args, what)
            last[0] = treedef, dims
        batched, axes, size = _batched_leaves(leaves, dims, what)
        devs = [x._device if isinstance(x, Tensor) else None for x in leaves]
        dev = first_device(leaves, devs)

        def jf(keys, *arrays):
            full = list(leaves)
            for i, a in zip(batched, arrays):
                full[i] = wrap(a, devs[i])
            with randomness_scope(randomness, keys):
                out = func(*jax.tree_util.tree_unflatten(treedef, full), **kwargs)
            arrs, otree = outputs_to_arrays(out, what)
            return jax.tree_util.tree_unflatten(otree, arrs)

        def run(keys, arrays, n):
            in_axes = (None if keys is None else 0,) + tuple(axes)
            try:
                # the transform is made only when it is traced (a cached call does not)
                return _run(lambda *a: jax.vmap(jf, in_axes=in_axes, out_axes=out_dims, axis_size=n)(*a), keys,
                            *arrays, cache=ck, used=used)
            except ValueError as e:
                if "out_axes" in str(e):
                    raise ValueError(f"{what}: out_dims={out_dims} is not compatible with the outputs: {e}") from None
                raise

        with transform_scope():
            ck = _trace_cache.call_key("vmap", statics, func, args, kwargs, flat=(leaves, treedef), box=box)
            arrays = [array_of(leaves[i]) for i in batched]
            keys = None
            if randomness == "different":
                gen = _random.default_generator(dev)
                keys = jax.random.key_data(jax.random.split(jax.random.wrap_key_data(advance_outside_trace(gen)), size))
            used = [] if kept is not None else None
            if chunk_size is None or chunk_size >= size:
                out = run(keys, arrays, size)
            else:
                out = _chunked(run, keys, arrays, axes, size, chunk_size, out_dims)
        if kept is not None:
            kept.learn(box, leaves, treedef, used, batched, dev)
        return jax.tree_util.tree_map(lambda a: wrap(a, dev), out)

    return _guards.give_box(wrapper)


def _chunked(run, keys, arrays, axes, size, chunk, out_dims):
    parts = []
    for s in range(0, size, chunk):
        e = min(s + chunk, size)
        sub = [jax.lax.slice_in_dim(a, s, e, axis=ax) for a, ax in zip(arrays, axes)]
        parts.append(run(None if keys is None else keys[s:e], sub, e - s))
    structure = jax.tree_util.tree_structure(parts[0])
    oax = _leaf_axes(out_dims, parts[0])
    flat = [jax.tree_util.tree_leaves(p) for p in parts]
    cat = [flat[0][j] if oax[j] is None else jnp.concatenate([f[j] for f in flat], axis=oax[j])
           for j in range(len(oax))]
    return jax.tree_util.tree_unflatten(structure, cat)


def _leaf_axes(out_dims, out):
    """One out_dim per leaf of ``out`` (``out_dims`` is a prefix of its structure)."""
    per = jax.tree_util.tree_map(lambda d, sub: jax.tree_util.tree_map(lambda _: d, sub), out_dims, out,
                                 is_leaf=lambda x: x is None)
    return jax.tree_util.tree_leaves(per, is_leaf=lambda x: x is None)


# ---- autograd.grad(..., is_grads_batched=True) ---------------------------------------------------------------------
def _check_batched(outputs, grad_outputs):
    for i, (g, o) in enumerate(zip(grad_outputs, outputs)):
        if not isinstance(g, Tensor):
            continue
        if g.dim() == 0 or tuple(g.shape[1:]) != tuple(o.shape):
            raise RuntimeError(f"If `is_grads_batched=True`, we interpret the first dimension of each grad_output "
                               f"as the batch dimension. The sizes of the remaining dimensions are expected to "
                               f"match the shape of corresponding output, but a mismatch was detected: "
                               f"grad_output[{i}] has a shape of {list(g.shape)} and output[{i}] has a shape of "
                               f"{list(o.shape)}. If you only want some tensors in `grad_output` to be considered "
                               f"batched, consider using vmap.")
    sizes = {g.shape[0] for g in grad_outputs if isinstance(g, Tensor)}
    if len(sizes) > 1:
        raise RuntimeError(f"If `is_grads_batched=True`, every grad_output must have the same size in its first "
                           f"(batch) dimension, got sizes {sorted(sizes)}.")
    if not sizes:
        raise RuntimeError("If `is_grads_batched=True`, at least one grad_output must be a Tensor whose first "
                           "dimension is the batch dimension.")
    return sizes.pop()


def batched_grad(grad_fn, outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                 materialize_grads):
    """``autograd.grad(..., is_grads_batched=True)``: the first dimension of each grad_output is a batch.

    Without create_graph the engine runs once under ``vmap`` (each backward kernel batched). With it, once
    per row, the rows stacked by a differentiable op: a graph recorded under ``vmap`` would hold its tracers.
    """
    n = _check_batched(outputs, grad_outputs)
    if create_graph:
        rows = [grad_fn(outputs, inputs, [g[k] if isinstance(g, Tensor) else g for g in grad_outputs],
                        retain_graph=True if k < n - 1 else retain_graph, create_graph=True,
                        allow_unused=allow_unused, materialize_grads=materialize_grads) for k in range(n)]
        return tuple(None if r[0] is None else ops.stack(list(r)) for r in zip(*rows))
    unused = [False] * len(inputs)
    batched = [i for i, g in enumerate(grad_outputs) if isinstance(g, Tensor)]

    def one(*gs):
        full = list(grad_outputs)
        for i, g in zip(batched, gs):
            full[i] = g
        res = grad_fn(outputs, inputs, full, retain_graph=retain_graph, create_graph=False, allow_unused=True)
        out = []
        for j, (r, t) in enumerate(zip(res, inputs)):
            if r is None:
                unused[j] = True
                r = t.new_zeros(t.shape)
            out.append(r)
        return tuple(out)

    res = vmap(one)(*[grad_outputs[i] for i in batched])
    if any(unused) and not allow_unused:
        raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                           "Set allow_unused=True if this is the desired behavior.")
    return tuple(None if u and not materialize_grads else r for r, u in zip(res, unused))
