"""The trace cache's first-level check: what a walk of a function read, checked again in a few bulk steps.

Building a call's key walks the function, its closure, the globals it names and the objects they reach
(``_trace_cache._fp``: about 140 objects for a small MLP's loss, 0.1-0.6 ms of Python on every call). The
walk's result depends only on what it read, and each thing it read is one of: an attribute of a function,
module or object (``__code__``, ``__defaults__``, ``__kwdefaults__``, ``__module__``, ``__dict__``,
``__class__``, a partial's parts), a closure cell's contents, a global by name, a dict's, list's or set's
entries, a tensor's type, ``requires_grad``, shape and dtype, a small NumPy array's bytes. Everything else it
keys is immutable (numbers, strings, tuples, code, jax arrays) or keyed by identity.

``Guards`` records, while the full walk runs, each of those reads: the object read, held. ``holds()`` reads
them all again and compares by identity (``is``, in a few bulk steps in C: ``map``, ``chain``, ``all``);
the recorded objects are alive, so none can have been replaced by a new one at its address. When all hold,
a new walk would visit the same objects and read the same values, so it would give the same key, and the
recorded one is returned. When anything differs (a rebound global or cell, a replaced parameter, a flipped
``training`` flag, a registered hook, a tensor with a new shape, dtype or ``requires_grad``, a mutated dict,
list or small array) the full walk runs and records anew. A tensor updated in place (a new array of the
same shape and dtype) is seen by the tensor check's slower path (its shape and dtype read again), not by a
new walk; tensors' arrays are never held.

The record lives in a box of the transform that calls the function (``vmap(f)`` keeps the record of ``f``;
``grad(f)``'s result carries a box for ``jvp(grad(f), ...)``), never in a global table: what it holds (the
objects the last walk read, which the function itself reached then) is freed with the transform, and a
record that reaches the function back is an ordinary cycle for the garbage collector.

Imports ``core._held`` (the dicts' check, shared with ``jg.compile``'s module trees); ``_tensor`` only through the
caller's ``aval`` function: the library layer.
"""
from __future__ import annotations

import collections
import itertools
import operator
import types
import weakref

from ..core._held import HeldDicts

__all__ = ["Guards", "new_box", "box_of", "give_box", "memo_of", "remember", "clear"]

_MISSING = object()        # a global name not bound (yet)
_NEVER = object()          # a tensor whose array was not concrete when recorded: its shape is always read again
_DATA = operator.attrgetter("_data")
_REQ = operator.attrgetter("_req")
_CELL = operator.attrgetter("cell_contents")
_FN_ATTRS = operator.attrgetter("__code__", "__defaults__", "__kwdefaults__", "__module__")
_OBJ_ATTRS = operator.attrgetter("__dict__", "__class__")
_PARTIAL_ATTRS = operator.attrgetter("func", "args", "keywords")
_call, _is, _chain, _repeat = operator.call, operator.is_, itertools.chain.from_iterable, itertools.repeat
_never = lambda: _NEVER  # noqa: E731
_generation = [0]  # clear() makes every record older than the cache


class Guards:
    """What one walk of ``func`` read (see the module docstring), and that walk's results."""

    __slots__ = ("ok", "func", "gen", "getters", "owners", "attr_vals", "maps", "seqs", "seq_lens", "seq_vals",
                 "cells", "cell_vals", "typed", "types", "globs", "tensors", "ttypes", "treqs", "tavals", "tdatas",
                 "arrays", "fk", "refs", "used")

    def __init__(self, func):
        self.ok = True
        self.func, self.gen = func, _generation[0]
        self.getters, self.owners, self.attr_vals = [], [], []
        self.maps = HeldDicts()
        self.seqs, self.seq_lens, self.seq_vals = [], [], []
        self.cells, self.cell_vals = [], []
        self.typed, self.types = [], []
        self.globs = []
        self.tensors, self.ttypes, self.treqs, self.tavals, self.tdatas = [], [], [], [], []
        self.arrays = []
        self.fk = self.refs = None
        self.used = 0

    # ---- recording (during the full walk) --------------------------------------------------------------------
    def attrs(self, getter, obj):
        """The attributes ``getter`` reads of ``obj`` (a tuple of them) are read again by identity."""
        self.getters.append(getter)
        self.owners.append(obj)
        self.attr_vals.extend(getter(obj))

    def function(self, f):
        self.attrs(_FN_ATTRS, f)

    def partial(self, p):
        self.attrs(_PARTIAL_ATTRS, p)

    def obj(self, x):
        self.attrs(_OBJ_ATTRS, x)

    def mapping(self, d):
        t = type(d)
        if not (t is dict or t is collections.OrderedDict or _plain(t, dict) or _plain(t, collections.OrderedDict)):
            self.ok = False
            return
        self.maps.add(d)

    def seq(self, s):
        """A list or set (a tuple's entries cannot change)."""
        base = list if isinstance(s, list) else set
        if not (type(s) is base or _plain(type(s), base)):
            self.ok = False
            return
        self.seqs.append(s)
        self.seq_lens.append(len(s))
        self.seq_vals.extend(s)

    def tuple_like(self, t):
        if type(t) is not tuple and type(t).__iter__ is not tuple.__iter__:
            self.ok = False

    def cell(self, c):
        try:
            v = c.cell_contents
        except ValueError:  # an empty cell: not remembered (rare: a name assigned later)
            self.ok = False
            return
        self.cells.append(c)
        self.cell_vals.append(v)

    def typed_obj(self, x):
        self.typed.append(x)
        self.types.append(type(x))

    def named_globals(self, g, names):
        self.globs.append((g, names, [g.get(n, _MISSING) for n in names]))

    def tensor(self, t, aval):
        self.tensors.append(t)
        self.ttypes.append(type(t))
        self.treqs.append(t._req)
        self.tavals.append(aval)
        self.tdatas.append(_data_ref(t))

    def ndarray(self, x, key):
        self.arrays.append((x, key))

    def finish(self):
        self.maps.finish()
        for name in ("seq_lens", "ttypes", "treqs", "tavals"):
            setattr(self, name, tuple(getattr(self, name)))

    # ---- checking (on every call) ------------------------------------------------------------------------------
    def holds(self, aval):
        """Whether a walk now would read what the recorded one read (``aval``: a tensor's shape and dtype).
        Every count is fixed or checked first (``map`` stops at the shorter), so ``all`` compares one to one."""
        try:
            if not (self.gen == _generation[0]
                    and all(map(_is, _chain(map(_call, self.getters, self.owners)), self.attr_vals))
                    and all(map(_is, map(_CELL, self.cells), self.cell_vals))
                    and self.maps.hold()
                    and tuple(map(len, self.seqs)) == self.seq_lens
                    and all(map(_is, _chain(self.seqs), self.seq_vals))
                    and all(map(_is, map(type, self.typed), self.types))):
                return False
            for g, names, vals in self.globs:
                if not all(map(_is, map(g.get, names, _repeat(_MISSING)), vals)):
                    return False
            for x, key in self.arrays:
                if x.nbytes != len(key[3]) or (x.shape, x.dtype.str, x.tobytes()) != key[1:]:
                    return False
            return not self.tensors or self._tensors_hold(aval)
        except Exception:  # noqa: BLE001 - an object that changed kind (a cell emptied...): walk again
            return False

    def _tensors_hold(self, aval):
        ts = self.tensors
        if tuple(map(type, ts)) != self.ttypes or tuple(map(_REQ, ts)) != self.treqs:
            return False
        now = tuple(map(_DATA, ts))
        if all(map(_is, now, map(_call, self.tdatas))) and not any(map(_is, now, _repeat(None))):
            return True  # the same arrays as last time (arrays are immutable): the same shapes and dtypes
        for t, av in zip(ts, self.tavals):  # updated in place (or a view made stale): read shape and dtype again
            if aval(t) != av:
                return False
        self.tdatas = [_data_ref(t) for t in ts]
        return True

    def tensors_now(self):
        return {id(t): t for t in self.tensors}


def _plain(t, base):
    """Whether ``t`` (a subclass of ``base``) iterates and lists its values as ``base`` does."""
    return (t.__iter__ is base.__iter__ and getattr(t, "values", None) is getattr(base, "values", None)
            and getattr(t, "items", None) is getattr(base, "items", None))


def _data_ref(t):
    """A weak reference to ``t``'s array (its arrays are never held: an in-place update frees the old one)."""
    d = t._data
    try:
        return weakref.ref(d) if d is not None and hasattr(d, "shape") and hasattr(d, "dtype") else _never
    except TypeError:
        return _never


def new_box():
    """Where a transform keeps the record of the function it calls: the transform's own (a record lives as long
    as the transformed function, and no longer)."""
    return [None]


def box_of(func):
    """The box a ``jgrad.func`` transform's result carries for being transformed in turn (``jvp(grad(f))``), or
    None (a user's function: ``jvp``, ``vjp`` and ``linearize`` walk it on every call)."""
    b = getattr(func, "__jgrad_key_box__", None) if type(func) is types.FunctionType else None
    return b if type(b) is list and len(b) == 1 else None


def give_box(wrapper):
    """Give a transform's result its own box (``functools.wraps`` copied the wrapped function's attributes), and
    its own table of the last calls that ``jvp`` made of it (``_fastcall.kept_of``)."""
    wrapper.__jgrad_key_box__ = new_box()
    wrapper.__jgrad_kept__ = {}
    return wrapper


def memo_of(box, func):
    m = box[0]
    return m if m is not None and m.func is func else None


def remember(g, box):
    if g.ok:
        g.finish()
        box[0] = g


def clear():
    _generation[0] += 1
