"""A transform's kept handle: a call that repeats the last one runs its executable without building a key.

A cached call of ``vmap(f)``, ``grad(f)``, ``jacrev(f)``... builds its trace-cache key
(``_trace_cache.call_key``: the arguments' structure and signatures, the function's key, the modes), looks the
trace up, re-reads the tensors it read, and only then calls the executable: 50-100 us of Python, where
``jax.jit``'s own call costs ~10 us. A research loop calls the same transformed function on arguments of the
same kind over and over, so each transform keeps a ``LastCall`` (``jvp`` keeps one per transform result it is
called on: ``jvp(grad(f), ...)``, ``kept_of``): what its last cached call was keyed on, in a
form that can be compared without hashing (the arguments' tree structure, each leaf's signature, the
function's ``_guards`` record, the modes), the trace entry it ran, and where each of the executable's inputs
came from among the arguments. A call that compares equal on all of these would build the same key and find
the same entry, so it goes straight to the entry's executable; anything else takes the full path, which
learns again.

What a kept call checks, in order: no keyword arguments, no enclosing trace, the same tree structure, each
leaf's signature (a tensor's type, shape, dtype, device, ``requires_grad``, which earlier argument it is; a
number, string, bool or None by value; anything else is not kept), the function's record still holds
(``_guards.Guards.holds``: nothing the function reaches was rebound or mutated), the same modes, the entry
still cached, the same weak types, and the constants re-read (``Entry.current_consts``: each tensor the
trace read). The figures: docs/functional.md, "What a cached call costs".

Imports ``_tensor``, ``_dtype``, ``_trace_log``, ``_trace_cache`` and ``_functional``: the library
layer.
"""
from __future__ import annotations

import operator

from ..core import _dtype
from ..core._tensor import Tensor
from ..runtime import _trace_log
from . import _trace_cache
from ._functional import restore
from ._trace_cache import tensor_signature

__all__ = ["LastCall", "kept_of"]

#: False: every call builds its key (the full path), as before kept calls existed; for measuring what they save.
enabled = True
_BY_VALUE = (int, float, bool, str, type(None))
_WEAK = operator.attrgetter("weak_type")


def signature(leaves):
    """Each leaf's signature (see the module docstring), or None when a leaf cannot be kept (a tracer, an object
    keyed by identity or contents)."""
    sig = []
    first = {}
    for n, x in enumerate(leaves):
        if isinstance(x, Tensor):
            ts = tensor_signature(x, n, first)
            if ts is None:
                return None
            sig.append(ts)
        elif type(x) in _BY_VALUE:
            sig.append((type(x), x))
        else:
            return None
    return sig


class _Kept(tuple):
    """One kept call: (treedef, sig, record, modes, entry, positions, weak, extra), replaced whole (a call on
    another thread reads one consistent record)."""

    __slots__ = ()


class LastCall:
    """What a transform's last cached call ran (see the module docstring). ``positions``: the argument leaves
    whose arrays are the executable's inputs, in order; ``extra``: what the transform needs to build its
    results (devices, argnums), valid for every call with the same signature."""

    __slots__ = ("kept",)

    def __init__(self):
        self.kept = None

    @property
    def extra(self):
        return self.kept[7]

    def learn(self, box, leaves, treedef, used, positions, extra):
        """After a full call: keep it when it ran a cached entry (``used``: what ``run`` reported) and the
        function has a record (``box``). Otherwise forget the last one."""
        self.kept = None
        entry = used[0] if used else None
        record = box[0] if box is not None else None
        if entry is None or record is None:
            return
        sig = signature(leaves)
        try:
            modes = _trace_cache._modes()
        except _trace_cache.Uncacheable:
            return
        if sig is not None:
            weak = tuple(map(_WEAK, used[1]))
            self.kept = _Kept((treedef, sig, record, modes, entry, tuple(positions), weak, extra))

    def run(self, leaves, treedef, kwargs, box, boxes=()):
        """``(the executable's outputs, their tree)`` when this call repeats the kept one, else None (the caller
        takes the full path). ``boxes``: the transform's boxes for this call, filled as a cached ``run`` fills
        them."""
        kept = self.kept
        if kept is None or kwargs or _trace_log.active[0] or not enabled:
            return None
        kdef, sig, record, modes, entry, positions, weak, _ = kept
        if entry.dead or treedef != kdef or box[0] is not record or signature(leaves) != sig \
                or not record.holds(_trace_cache._aval):
            return None
        try:
            if _trace_cache._modes() != modes:
                return None
        except _trace_cache.Uncacheable:
            return None
        flat = [leaves[i]._value for i in positions]
        if tuple(map(_WEAK, flat)) != weak:
            return None
        consts = entry.current_consts(leaves)
        if consts is None:
            return None
        stats = _trace_cache._stats
        stats["hits"] += 1
        stats["kept"] += 1
        for b, state in zip(boxes, entry.boxes):
            restore(b, state)
        with _dtype.x64_scope():
            out = entry.exe(consts, flat)
        return out, entry.out_tree


def kept_of(func, tag):
    """The ``LastCall`` a function transform (``jvp``) keeps for ``func``, a transform's result (its table:
    ``_guards.give_box``); made on first use. None for any other function."""
    table = getattr(func, "__jgrad_kept__", None)
    if type(table) is not dict:
        return None
    kept = table.get(tag)
    if kept is None:
        kept = table[tag] = LastCall()
    return kept


_trace_cache._UNKEYED.add(LastCall)
