"""The trace cache of ``jgrad.func``: a transform call that matches an earlier one reuses its trace.

Tracing a function into a jaxpr costs milliseconds of Python on every call; the compiled program is
already cached (``_functional.run``). A call reuses an earlier trace when everything the trace depended on
is the same (``call_key``):

- the function and the transform's static arguments, by *structure*: a function by its code, defaults
  and closure cells, and the globals its code names (functions of ``jgrad`` itself: code and closure),
  recursively; so a lambda made again with the same closure hits;
- values: numbers, strings, booleans, None by value; tuples, lists, dicts and small NumPy arrays by their
  contents; tensors and other objects by identity (each held weakly where it can be, and a dead one never
  matches a new one at the same address); a module or any object with a ``__dict__`` also by its
  attributes (a module's ``training`` flags, parameters, buffers and submodules; a module with hooks is
  not cached);
- the arguments' tree structure, each tensor's type, shape, dtype, device and ``requires_grad``, which
  arguments are the same tensor, and the other leaves by value as above;
- grad mode, inference mode, JAX's x64 flag, jgrad's default dtype and device, the execution mode and the
  float32 matmul precision (inside an autocast region or a dual level a call is not cached).

Anything it cannot key (a tracer, a large NumPy array, a walk of more than ``_BUDGET`` objects) makes the
call uncached: it is traced as before. The walk of the function is done in full only when something it read
last time changed (``_guards``: the transform keeps a record of it); otherwise the last key is reused, and a
call that repeats the transform's last one builds no key at all (``_fastcall``). The arrays of tensors the
function read (its jaxpr's constants) are re-read on every cached call (``jgrad.runtime._trace_log`` records which tensor each came from), so an
in-place update between calls is seen; a trace that drew random numbers, ran a module hook, read a value on
the host, ran a backward pass or wrote into a tensor it did not make is never cached. docs/functional.md
states the rule.

Imports ``_tensor``, ``nn.Module``, grad mode, ``_dtype``, ``_segment``, ``_dispatch``, ``ops.linalg`` (the
modes a trace depends on) and ``_guards``: the library layer.
"""
from __future__ import annotations

import collections
import functools
import os
import sysconfig
import types
import weakref

import jax
import numpy as np

from ..core import _dtype
from ..core._device import get_default_device
from ..core._tensor import Tensor
from ..autograd.grad_mode import state as _state
from ..core._recorder import Buffer
from ..nn.module import Module
from ..runtime import _dispatch, _segment, _trace_log
from ..ops import linalg as _linalg
from . import _guards

__all__ = ["call_key", "clear_trace_cache", "trace_cache_info", "MAX_TRACES"]

#: entry key -> _Entry (least recently used first)
TRACES: collections.OrderedDict = collections.OrderedDict()
MAX_TRACES = 256
_BUDGET = 20000         # objects one key may visit before the call is left uncached
_GLOBAL_DEPTH = 3       # functions named by globals are walked this deep
_NUMPY_BYTES = 4096     # NumPy arrays up to this size are keyed by value
_stats = {"traces": 0, "hits": 0, "kept": 0, "uncached": 0}


def clear_trace_cache() -> None:
    """Forget every cached trace of ``jgrad.func`` (the compiled executables stay)."""
    for e in TRACES.values():
        e.dead = True
    TRACES.clear()
    _guards.clear()


def trace_cache_info() -> dict:
    """``{"traces", "hits", "kept", "uncached", "size", "maxsize"}``: top-level traces made so far, calls that
    reused a trace, those of them that repeated their transform's last call (run without building a key:
    ``_fastcall``), calls that could not be cached (uncacheable key or impure trace), entries held, the bound."""
    return dict(_stats, size=len(TRACES), maxsize=MAX_TRACES)


class Uncacheable(Exception):
    pass


class _Walk:
    __slots__ = ("refs", "budget", "seen", "tensors", "g")

    def __init__(self):
        self.refs = []        # what the key names by identity: weakrefs, or the objects themselves
        self.budget = _BUDGET
        self.seen = set()     # ids of containers and functions on the current path (cycles)
        self.tensors = {}     # id -> the tensors the function can reach (closure, globals, attributes)
        self.g = None         # the _guards.Guards recording this walk of a function, or None

    def ref(self, x):
        try:
            self.refs.append(weakref.ref(x))
        except TypeError:  # not weakly referable: held, so its address is not reused while the entry lives
            self.refs.append(lambda x=x: x)


_BY_VALUE = frozenset({type(None), bool, int, float, complex, str, bytes, type(Ellipsis)})
_UNKEYED = {_guards.Guards}  # and _fastcall.LastCall, added there
_DICTS = (dict, collections.OrderedDict)
_EMPTY_DICT = ("empty dict",)  # an empty dict or OrderedDict (a module's hook dicts): one key, no walk


def _fp(w, x, depth):
    """The key of ``x`` (see the module docstring); raises ``Uncacheable``."""
    w.budget -= 1
    if w.budget < 0:
        raise Uncacheable
    t = type(x)
    if t is str or x is None:  # equal only to themselves: their own key
        return x
    if t in _BY_VALUE:
        return t, x
    if isinstance(x, Tensor):
        return _tensor(w, x)
    i = id(x)
    if i in w.seen:
        return "cycle", i
    if t in (tuple, list) or isinstance(x, (tuple, list)):
        if w.g is not None:
            w.g.seq(x) if isinstance(x, list) else w.g.tuple_like(x)
        w.seen.add(i)
        r = t, tuple([_fp(w, e, depth) for e in x])
        w.seen.discard(i)
        return r
    if isinstance(x, dict):
        if w.g is not None:
            w.g.mapping(x)
        if not x:
            return t, ()
        w.seen.add(i)
        r = t, tuple([(k if type(k) is str else _fp(w, k, depth),
                       _EMPTY_DICT if type(v) in _DICTS and not v else _fp(w, v, depth)) for k, v in x.items()])
        w.seen.discard(i)
        return r
    if isinstance(x, (set, frozenset)):
        if w.g is not None and t is not frozenset:
            w.g.seq(x)
        return t, frozenset(_fp(w, e, depth) for e in x)
    if isinstance(x, types.FunctionType):
        return _function(w, x, depth)
    if isinstance(x, functools.partial):
        if w.g is not None:
            w.g.partial(x)
        return "partial", _fp(w, x.func, depth), _fp(w, x.args, depth), _fp(w, x.keywords, depth)
    if isinstance(x, types.MethodType):
        return "method", _fp(w, x.__func__, depth), _fp(w, x.__self__, depth)
    if isinstance(x, jax.core.Tracer):
        raise Uncacheable
    if isinstance(x, np.ndarray):
        if x.nbytes > _NUMPY_BYTES or x.dtype == object:
            raise Uncacheable
        r = "ndarray", x.shape, x.dtype.str, x.tobytes()
        if w.g is not None:
            w.g.ndarray(x, r)
        return r
    if isinstance(x, np.generic):
        return t, x.item()
    if t in _UNKEYED:  # a transform's own bookkeeping in its closure (what its last call ran): not the program
        return t.__name__
    if isinstance(x, (types.ModuleType, type, jax.Array)) or not hasattr(x, "__dict__"):
        w.ref(x)  # a Python module, a class, an immutable array, or an object without attributes to walk
        if w.g is not None:
            w.g.typed_obj(x)
        return "id", t, i
    if isinstance(x, Module):
        return _module(w, x, t, i, depth)
    # Another object: its identity and the values of its attributes, so that a rebound attribute is seen.
    w.ref(x)
    if w.g is not None:
        w.g.obj(x)
    w.seen.add(i)
    r = "obj", t, i, _fp(w, vars(x), depth)
    w.seen.discard(i)
    return r


_MODULE_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_MODULE_SKIP = frozenset(_MODULE_HOOKS + ("_forward_pre_hooks_with_kwargs", "_forward_hooks_with_kwargs",
                                          "_forward_hooks_always_called", "_non_persistent_buffers_set",
                                          "_is_full_backward_hook"))


def _module(w, m, t, i, depth):
    """A module: its identity, ``training`` flag, parameters, buffers, submodules and other attributes. One
    with hooks is not cached (they run on every call), so its hook dicts are only looked at."""
    d = vars(m)
    g = w.g
    for h in _MODULE_HOOKS:
        hooks = d.get(h)
        if hooks:
            raise Uncacheable
        if g is not None and hooks is not None:
            g.mapping(hooks)  # a hook registered later fills this dict in place
    w.ref(m)
    if g is not None:
        g.obj(m)
        g.mapping(d)
    w.seen.add(i)
    parts = []
    for k, v in d.items():  # the common cases inline: this runs for every module on every call
        tv = type(v)
        if k in _MODULE_SKIP:
            continue
        if tv is str or v is None:
            parts.append((k, v))
        elif tv is bool or tv is int:
            parts.append((k, tv, v))
        elif tv in _DICTS and not v:
            if g is not None:
                g.mapping(v)
            parts.append((k, _EMPTY_DICT))
        elif k == "_parameters" or k == "_buffers":
            if g is not None:
                g.mapping(v)
            parts.append((k, tuple([(n, None if p is None else _tensor(w, p)) for n, p in v.items()])))
        elif k == "_modules":
            if g is not None:
                g.mapping(v)
            parts.append((k, tuple([(n, None if c is None else _fp(w, c, depth)) for n, c in v.items()])))
        else:
            parts.append((k, _fp(w, v, depth)))
    w.seen.discard(i)
    return "module", t, i, tuple(parts)


def _tensor(w, x):
    """A tensor: by identity (its array is re-read on every call), with its type, shape, dtype, requires_grad."""
    w.budget -= 1
    i = id(x)
    w.refs.append(weakref.ref(x))
    w.tensors[i] = x
    av = _aval(x)
    if w.g is not None:
        w.g.tensor(x, av)
    return "T", i, type(x), av, x._req


def _function(w, f, depth):
    i = id(f)
    w.seen.add(i)
    try:
        code = f.__code__
        cells = f.__closure__
        if w.g is not None:
            w.g.function(f)
        parts = [code, _fp(w, f.__defaults__, depth), _fp(w, f.__kwdefaults__, depth),
                 tuple([_cell(w, c, depth) for c in cells]) if cells else ()]
        if depth < _GLOBAL_DEPTH and not _is_library(code.co_filename):
            g = f.__globals__
            names = _global_names(code)
            if w.g is not None:
                w.g.named_globals(g, names)
            for name in names:
                if name in g:
                    parts.append((name, _fp(w, g[name], depth + 1)))
    finally:
        w.seen.discard(i)
    return ("fn", *parts)


def _cell(w, c, depth):
    if w.g is not None:
        w.g.cell(c)
    try:
        v = c.cell_contents
    except ValueError:  # an empty cell (a name not assigned yet)
        return "empty"
    return _fp(w, v, depth)


@functools.lru_cache(maxsize=1024)
def _is_library(filename):
    """Whether functions whose code is in ``filename`` are a library's (jgrad, an installed package, the standard
    library): their globals are not the user's state, and walking them would cost every call. By the code's
    file, not ``__module__``: ``functools.wraps`` gives a wrapper (every ``jgrad.func`` transform) the module of
    the function it wraps."""
    if not filename or filename.startswith("<"):  # typed in, exec'd, a notebook cell: the user's; frozen: stdlib
        return filename.startswith("<frozen")
    path = os.path.abspath(filename)
    return (path.startswith(_JGRAD) or "site-packages" in path or "dist-packages" in path
            or path.startswith(_STDLIB))


_JGRAD = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])


@functools.lru_cache(maxsize=4096)
def _global_names(code):
    """The names ``code`` (and the code of functions defined inside it) loads: globals among them."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.update(_global_names(c))
    return tuple(sorted(names))


def _modes():
    """The global state a trace depends on; an autocast region or a dual level (whose rules rewrite every op)
    leaves the call uncached."""
    if _dispatch.autocast_hook[0] is not None or _dispatch.forward_ad_hook is not None:
        raise Uncacheable
    return (_state.grad_enabled, getattr(_state, "inference", False), bool(jax.config.jax_enable_x64),
            _dtype.get_default_dtype(), get_default_device(), _segment.auto[0], _linalg._precision[0])


class CallKey:
    """A transform call's key, what it names by identity, and its tensor arguments (by leaf position)."""

    __slots__ = ("key", "refs", "leaves", "positions", "_tensors", "_memo")

    def __init__(self, key, refs, leaves, positions, tensors, memo=None):
        self.key, self.refs, self.leaves, self.positions, self._tensors = key, refs, leaves, positions, tensors
        self._memo = memo

    @property
    def tensors(self):
        """id -> the tensors the function and the non-tensor arguments reach (read only when a trace is kept)."""
        if self._memo is not None:
            self._tensors.update(self._memo.tensors_now())
            self._memo = None
        return self._tensors


#: The key of a pure JAX function of its arguments (a vjp's pullback, a linearized function): what it computes
#: is in the arguments' tree structure (the function a ``jax.tree_util.Partial`` holds), so that is the key.
PURE = CallKey(("pure",), (), (), {}, {})


def call_key(tag, statics, func, args, kwargs=None, flat=None, box=None):
    """The key of calling transform ``tag`` (with ``statics``) of ``func`` on ``args``/``kwargs``, or None when
    the call cannot be cached (it is then traced as before). ``flat``: ``args`` flattened (tensors as leaves),
    when the caller has it; ``box``: where the transform keeps the record of ``func``'s last walk
    (``_guards``), if it has one."""
    try:
        leaves, treedef = flat or jax.tree_util.tree_flatten(tuple(args), is_leaf=_is_tensor)
        if kwargs:
            kl, kt = jax.tree_util.tree_flatten(kwargs, is_leaf=_is_tensor)
            leaves, treedef = leaves + kl, (treedef, kt)
        sig = []
        positions = {}
        for n, x in enumerate(leaves):
            if isinstance(x, Tensor):
                ts = tensor_signature(x, n, positions)
                if ts is None:
                    return None  # inside another transform: it compiles the whole
                sig.append(ts)
            else:
                sig.append(x)  # keyed below, once the function is known to be cacheable
        w = _Walk()
        fk, memo = _function_key(w, func, box)
        for n, x in enumerate(leaves):
            if not isinstance(x, Tensor):
                sig[n] = _fp(w, x, 0)
        key = _Key((tag, _fp(w, statics, 0), fk, treedef, tuple(sig), _modes()))
    except Exception:  # noqa: BLE001 - Uncacheable, an unhashable value, an object that refuses to be walked
        _stats["uncached"] += 1
        return None
    return CallKey(key, w.refs, leaves, positions, w.tensors, memo)


def tensor_signature(x, n, first):
    """Tensor argument ``x`` (leaf ``n``) as a key keys it: its type, shape, dtype, device, ``requires_grad`` and
    the first leaf position it holds (``first``: id -> position, filled in); None for a tensor holding a tracer."""
    d = x._data
    if d is None or type(d) is Buffer:
        d = x._value  # see _aval
    if isinstance(d, jax.core.Tracer):
        return None
    return type(x), d.shape, d.dtype, x._device, x._req, first.setdefault(id(x), n)


def _function_key(w, func, box):
    """The key of ``func`` (see the module docstring): its last walk's, when ``_guards`` finds that nothing the
    walk read has changed since; else a new walk, recorded for the next call. Returns (key, record or None)."""
    if box is None:
        return _Key(_fp(w, func, 0)), None
    m = _guards.memo_of(box, func)
    if m is not None and m.holds(_aval):
        w.refs.extend(m.refs)
        w.budget -= m.used
        return m.fk, m
    g = w.g = _guards.Guards(func)
    try:
        fk = _Key(_fp(w, func, 0))
    finally:
        w.g = None
    g.fk, g.refs, g.used = fk, list(w.refs), _BUDGET - w.budget
    _guards.remember(g, box)
    return fk, None


class _Key:
    """A key whose hash is computed once (the walk's tuples are deep; a cached call hashes its key three times)."""

    __slots__ = ("k", "h")

    def __init__(self, k):
        self.k, self.h = k, hash(k)

    def __hash__(self):
        return self.h

    def __eq__(self, other):
        return self is other or (type(other) is _Key and self.h == other.h and self.k == other.k)


def _aval(x):
    """A tensor's shape and dtype (its array's, read without the tensor's properties: this runs per call)."""
    d = x._data
    if d is None or type(d) is Buffer:  # a view not read yet (or made stale), a pending value: read it now, so
        d = x._value                   # that the trace finds its array rather than regenerating it as a tracer
    if isinstance(d, jax.core.Tracer):
        raise Uncacheable
    return d.shape, d.dtype


def _is_tensor(x):
    return isinstance(x, Tensor)


class Entry:
    """A cached trace: its executable, constants, where each tensor's constant is read from, and the Python
    state the trace left in the transform's boxes (output trees, aux leaves)."""

    __slots__ = ("exe", "consts", "sources", "out_tree", "boxes", "refs", "dead")

    def __init__(self, exe, consts, sources, out_tree, boxes, refs):
        self.exe, self.consts, self.sources, self.out_tree = exe, consts, sources, out_tree
        self.boxes, self.refs = boxes, refs
        self.dead = False  # dropped from the cache (a transform's kept handle must not run it)

    def current_consts(self, leaves):
        """The constants with each tensor's array read now (``leaves``: the call's argument leaves), or None
        (retrace) when a tensor named by identity died or a tensor's shape or dtype changed."""
        for r in self.refs:
            if r() is None:
                return None
        consts = list(self.consts)
        done = {}
        for j, pos, ref, aval in self.sources:
            t = leaves[pos] if pos is not None else ref()
            if t is None:  # gone (a tensor reached other than through the key): trace again
                return None
            a = _array_now(t)
            if a is None or (a.shape, a.dtype) != aval:
                return None
            if done.setdefault(j, a) is not a:  # two tensors shared this array when traced, not now
                return None
            consts[j] = a
        return consts


def _array_now(t):
    """``t``'s array as ``_functional.array_of`` reads it, reported to an enclosing trace's recorder."""
    d = t._data
    if d is None or type(d) is Buffer:
        d = t._value
    if isinstance(d, jax.core.Tracer):
        return None
    if _trace_log.active[0]:
        _trace_log.read(t, d)
    return d


def sources_of(rec, consts, ck):
    """For each constant that is a tensor's array the trace read: (index, the argument's leaf position or None,
    a weak reference to the tensor, its aval). None when the trace cannot be cached: a read array that is not a
    constant (its value was used on the host), a tensor written while tracing, an argument also in the closure,
    or a tensor gone since whose storage is still another's and does not hold that array.

    A tensor gone by now was a temporary of the trace: made from a concrete array (``jg.tensor([1., 2.])``), its
    array stays a constant; one that shared storage (``w.detach()``) is read through the storage's root."""
    where = {id(c): j for j, c in enumerate(consts)}
    # a storage's hidden root (what reading a view of a closure tensor reads) is read through that tensor
    roots = {id(x._alias.storage.root): x for x in ck.tensors.values()
             if x._alias is not None and x._alias.storage.root._data is x._data}
    out, later, seen = [], [], set()
    for t, a in rec.reads:
        j = where.get(id(a))
        if j is None or t._data is not a:
            return None
        if (id(t), j) in seen:
            continue
        seen.add((id(t), j))
        aval = (a.shape, a.dtype)
        pos = ck.positions.get(id(t))
        if pos is not None:
            if id(t) in ck.tensors:
                return None
            out.append((j, pos, None, aval))
            continue
        owner = roots.get(id(t))
        if owner is not None:
            out.append((j, None, weakref.ref(owner), aval))
            continue
        later.append((j, weakref.ref(t), aval, _sharers(t, a)))
    rec.reads.clear()  # the temporaries die here
    t = a = None
    for j, ref, aval, sharers in later:
        if ref() is not None:
            out.append((j, None, ref, aval))
        elif sharers is None:  # a temporary made from a concrete array: it stays a constant
            continue
        else:  # a temporary sharing storage (w.detach()): read the array through a member that outlives it
            alive = next((r for r in sharers if r() is not None), None)
            if alive is None:
                return None
            out.append((j, None, alive, aval))
    for j, pos, ref, _ in out:
        if pos is not None or id(ref()) in ck.tensors:
            consts[j] = None  # always re-read (an argument, or a tensor the key holds): the entry keeps no copy
    return out


def _sharers(t, a):
    """For a tensor that shares storage: weak references to the other members (and the storage's root) that
    hold the same array ``a`` now; None for a tensor with storage of its own."""
    al = t._alias
    if al is None:
        return None
    st = al.storage
    out = [r for r in st.members if r() is not None and r() is not t and r()._data is a]
    if st.root._data is a:
        out.append(weakref.ref(st.root))
    return out


def lookup(key):
    e = TRACES.get(key)
    if e is not None:
        try:
            TRACES.move_to_end(key)
        except KeyError:  # another thread dropped it meanwhile
            pass
    return e


def store(key, entry):
    old = TRACES.get(key)
    if old is not None and old is not entry:
        old.dead = True
    TRACES[key] = entry
    while len(TRACES) > MAX_TRACES:
        try:
            TRACES.popitem(last=False)[1].dead = True
        except KeyError:
            break
