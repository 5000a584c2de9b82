"""The trace cache's first-level check: what a walk of a function read, checked again in a few bulk steps.

Building a call's key walks the function, its closure, the globals it names and the objects they reach
(``_trace_cache._fp``: about 140 objects for a small MLP's loss, 0.1-0.6 ms of Python on every call). The
walk's result depends only on what it read, and each thing it read is one of: an attribute of a function,
module or object (``__code__``, ``__defaults__``, ``__kwdefaults__``, ``__module__``, ``__dict__``,
``__class__``, a partial's parts), a closure cell's contents, a global by name, a dict's, list's or set's
entries, a tensor's type, ``requires_grad``, shape and dtype, a small NumPy array's bytes. Everything else it
keys is immutable (numbers, strings, tuples, code, jax arrays) or keyed by identity.

``Guards`` records, while the full walk runs, each of those reads as the identity of what was read (``id``), and
keeps every object so identified alive or watched: held where it cannot be weakly referenced (numbers,
strings, tuples, dicts, lists: small), else weakly with a callback that drops the record when it dies, so an
address is never reused while the record stands. ``holds()`` checks them all again (most in C: ``map``,
``chain``, tuple compares); when they hold, a new walk would visit the same objects and read the same
values, so it would give the same key, and the recorded one is returned. When anything differs (a rebound
global or cell, a replaced parameter, a flipped ``training`` flag, a registered hook, a tensor with a new
shape, dtype or ``requires_grad``, a mutated dict, list or small array) the full walk runs and records anew. A
tensor updated in place (a new array of the same shape and dtype) is seen by the tensor check's slower path
(its shape and dtype read again), not by a new walk.

Imports ``_tensor`` only through the caller's ``aval`` function: the library layer.
"""
from __future__ import annotations

import collections
import itertools
import operator
import types
import weakref

__all__ = ["Guards", "memo_key", "memo_of", "remember", "clear"]

_MISSING = object()        # a global name not bound (yet)
_NEVER = object()          # a tensor whose array was not concrete when recorded: its shape is always read again
_DATA = operator.attrgetter("_data")
_REQ = operator.attrgetter("_req")
_CELL = operator.attrgetter("cell_contents")
_VALUES = operator.methodcaller("values")
_FN_ATTRS = operator.attrgetter("__code__", "__defaults__", "__kwdefaults__", "__module__")
_OBJ_ATTRS = operator.attrgetter("__dict__", "__class__")
_PARTIAL_ATTRS = operator.attrgetter("func", "args", "keywords")
_call, _is, _chain, _repeat = operator.call, operator.is_, itertools.chain.from_iterable, itertools.repeat
_never = lambda: _NEVER  # noqa: E731

#: the memo of each function (by identity): its last walk's key and guards
_MEMOS: dict = {}
MAX_MEMOS = 1024


class Guards:
    """What one walk of a function read (see the module docstring), and that walk's results."""

    __slots__ = ("ok", "token", "mkey", "keep", "wrefs", "getters", "owners", "attr_ids", "dicts", "dict_lens",
                 "dict_keys", "str_keys", "dict_vals", "seqs", "seq_lens", "seq_ids", "cells", "cell_ids", "typed", "type_ids",
                 "globs", "tensors", "ttypes", "treqs", "tavals", "tdatas", "arrays", "fk", "refs", "used")

    def __init__(self, mkey, roots):
        self.ok = True
        self.token = object()
        self.mkey = mkey
        self.keep, self.wrefs = [], []
        self.getters, self.owners, self.attr_ids = [], [], []
        self.dicts, self.dict_lens, self.dict_keys, self.dict_vals = [], [], [], []
        self.seqs, self.seq_lens, self.seq_ids = [], [], []
        self.cells, self.cell_ids = [], []
        self.typed, self.type_ids = [], []
        self.globs = []
        self.tensors, self.ttypes, self.treqs, self.tavals, self.tdatas = [], [], [], [], []
        self.arrays = []
        self.fk = self.refs = None
        self.used = 0
        for r in roots:
            self.pin(r)

    # ---- recording (during the full walk) --------------------------------------------------------------------
    def pin(self, x):
        """``id(x)``, with ``x`` kept from being replaced at its address while this record stands."""
        try:
            self.wrefs.append(weakref.ref(x, self._kill_cb()))
        except TypeError:
            self.keep.append(x)
        return id(x)

    def _kill_cb(self):
        mkey, token = self.mkey, self.token

        def kill(_):
            m = _MEMOS.get(mkey)
            if m is not None and m.token is token:
                _MEMOS.pop(mkey, None)
        return kill

    def _ids(self, xs):
        return [self.pin(x) for x in xs]

    def attrs(self, getter, obj):
        """The attributes ``getter`` reads of ``obj`` (a tuple of them) are read again by identity."""
        self.getters.append(getter)
        self.owners.append(self._held(obj))
        self.attr_ids.extend(self._ids(getter(obj)))

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
        self.dicts.append(d)  # not weakly referable: held
        self.dict_lens.append(len(d))
        for k in d:
            if type(k) is not str:
                self.pin(k)
            self.dict_keys.append(k)
        self.dict_vals.extend(self._ids(d.values()))

    def seq(self, s):
        """A list or set (a tuple's entries cannot change)."""
        base = list if isinstance(s, list) else set
        if not (type(s) is base or _plain(type(s), base)):
            self.ok = False
            return
        self.seqs.append(s)
        self.seq_lens.append(len(s))
        self.seq_ids.extend(self._ids(s))

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
        self.cell_ids.append(self.pin(v))

    def typed_obj(self, x):
        self.typed.append(self._held(x))
        self.type_ids.append(self.pin(type(x)))

    def named_globals(self, g, names):
        self.globs.append((g, names, tuple(self._ids([g.get(n, _MISSING) for n in names]))))

    def tensor(self, t, aval):
        self.tensors.append(self._held(t))
        self.ttypes.append(type(t))
        self.treqs.append(t._req)
        self.tavals.append(aval)
        self.tdatas.append(_data_ref(t))

    def ndarray(self, x, key):
        self.arrays.append((x, key))  # NumPy arrays are weakly referable, but their bytes are read: held

    def _held(self, x):
        """``x`` as the record holds it: a weak reference (called to get it), or ``x`` itself in a closure."""
        self.pin(x)
        try:
            return weakref.ref(x)
        except TypeError:
            return lambda x=x: x

    def finish(self):
        # string keys (nearly all) are held and compared as they are (is); a record with others, by identity
        self.str_keys = all(type(k) is str for k in self.dict_keys)
        if not self.str_keys:
            self.dict_keys = [id(k) for k in self.dict_keys]
        for name in ("attr_ids", "dict_lens", "dict_keys", "dict_vals", "seq_lens", "seq_ids", "cell_ids",
                     "type_ids", "ttypes", "treqs", "tavals"):
            setattr(self, name, tuple(getattr(self, name)))

    # ---- checking (on every call) ------------------------------------------------------------------------------
    def holds(self, aval):
        """Whether a walk now would read what the recorded one read (``aval``: a tensor's shape and dtype)."""
        try:
            if (tuple(map(id, _chain(map(_call, self.getters, map(_call, self.owners))))) != self.attr_ids
                    or tuple(map(id, map(_CELL, self.cells))) != self.cell_ids
                    or tuple(map(len, self.dicts)) != self.dict_lens
                    or not (all(map(_is, _chain(self.dicts), self.dict_keys)) if self.str_keys
                            else tuple(map(id, _chain(self.dicts))) == self.dict_keys)
                    or tuple(map(id, _chain(map(_VALUES, self.dicts)))) != self.dict_vals
                    or tuple(map(len, self.seqs)) != self.seq_lens
                    or tuple(map(id, _chain(self.seqs))) != self.seq_ids
                    or tuple(map(id, map(type, map(_call, self.typed)))) != self.type_ids):
                return False
            for g, names, ids in self.globs:
                if tuple(map(id, map(g.get, names, _repeat(_MISSING)))) != ids:
                    return False
            for x, key in self.arrays:
                if x.nbytes != len(key[3]) or (x.shape, x.dtype.str, x.tobytes()) != key[1:]:
                    return False
            return not self.tensors or self._tensors_hold(aval)
        except Exception:  # noqa: BLE001 - an object that changed kind (a cell emptied, a dead reference...): walk
            return False

    def _tensors_hold(self, aval):
        ts = tuple(map(_call, self.tensors))
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
        return {id(t): t for t in map(_call, self.tensors)}


def _plain(t, base):
    """Whether ``t`` (a subclass of ``base``) iterates and lists its values as ``base`` does."""
    return (t.__iter__ is base.__iter__ and getattr(t, "values", None) is getattr(base, "values", None)
            and getattr(t, "items", None) is getattr(base, "items", None))


def _data_ref(t):
    d = t._data
    try:
        return weakref.ref(d) if d is not None and hasattr(d, "shape") and hasattr(d, "dtype") else _never
    except TypeError:
        return _never


def memo_key(func):
    """What identifies ``func`` across calls, and the objects that make it up (a bound method is made anew on
    every attribute access: its function and instance)."""
    if isinstance(func, types.MethodType):
        return (id(func.__func__), id(func.__self__)), (func.__func__, func.__self__)
    return id(func), (func,)


def memo_of(mkey):
    return _MEMOS.get(mkey)


def remember(g):
    if not g.ok:
        return
    g.finish()
    _MEMOS[g.mkey] = g
    if len(_MEMOS) > MAX_MEMOS:
        _MEMOS.pop(next(iter(_MEMOS)), None)


def clear():
    _MEMOS.clear()
