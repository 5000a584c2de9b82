"""``jg.compile``: PyTorch's ``torch.compile`` name and contract on jgrad's whole-graph capture.

    >>> step = jg.compile(train_step)          # or @jg.compile, or model.compile()
    >>> for x, y in loader:
    ...     loss = step(x, y)                  # after the first call: one cached XLA executable per call

A compiled function keeps a cache of *programs* (``jgrad.runtime._compiled.Program``: the call captured once and
replayed) keyed by its *guards*: what changes the program. A call whose guards match an entry replays it; a
miss captures the call again (a recompile), up to ``config.recompile_limit`` entries per function, past which
the function warns once, as PyTorch does, and runs eagerly for keys it has not compiled.

Guards: each argument's tree structure; each tensor argument's shape, dtype, device and ``requires_grad``;
Python scalars among the arguments, the function's closure cells and the globals it names, by value; other
objects by identity; grad mode and the default dtype; for every ``nn.Module`` among the function's
arguments, ``self`` and closure/global names, each submodule's ``training`` flag and its parameters' and
buffers' identity, ``requires_grad`` and whether their ``.grad`` is set; for every optimizer there, its
hyperparameters, its parameters' identity and whether their state exists.

The first call of a compiled function runs eagerly (a warm-up, as PyTorch's "reduce-overhead" mode does: it
creates lazily made state such as an optimizer's, which a capture would otherwise freeze); so does a call
whose optimizer has a parameter without state. A host read inside the function (``.item()``, printing,
``numpy()``, ``bool(t)``) cannot be captured: that guard key runs eagerly from then on (``fullgraph=True``
raises ``Unsupported`` instead). A capture that fails for another reason (the compile itself) warns and
runs eagerly too; nothing the capture touched is left changed.

Imports ``_compiled``, ``graphs`` (through it), ``_dtype``, ``_tensor``, ``_held`` (the module trees' check, shared
with ``jgrad.func``'s guards), ``autograd.grad_mode``, ``nn`` and ``optim`` (to recognise modules and optimizers);
installs ``Module.compile``'s compiler into ``nn.module``.
"""
from __future__ import annotations

import functools
import itertools
import operator
import threading
import warnings
import weakref

import jax

from .runtime import _compiled, _dispatch
from .core import _dtype, _format
from .runtime._capture import CaptureError
from .core._tensor import Tensor
from .autograd.grad_mode import state as _grad_state
from .streams import active_captures
from .core._device import get_default_device
from .core._held import HeldDicts
from .nn import Module as _Module, module as _nn_module
from .optim import Optimizer as _Optimizer

__all__ = ["compile", "reset", "is_compiling", "config", "Unsupported", "FailOnRecompileLimitHit",
           "InvalidBackend"]

_MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
_BACKENDS = ("inductor", "xla", "eager")
_SCALARS = (int, float, bool, str, complex, type(None))


class Unsupported(RuntimeError):
    """A ``fullgraph=True`` function did something a capture cannot record (PyTorch: a graph break)."""


class FailOnRecompileLimitHit(RuntimeError):
    """A ``fullgraph=True`` function needed a new program past ``config.recompile_limit``."""


class InvalidBackend(RuntimeError):
    """``backend=`` names no backend jgrad has."""


class _Config:
    """``torch._dynamo.config``'s knobs that apply: ``recompile_limit`` (alias ``cache_size_limit``)."""

    def __init__(self):
        self.recompile_limit = 8

    @property
    def cache_size_limit(self):
        return self.recompile_limit

    @cache_size_limit.setter
    def cache_size_limit(self, value):
        self.recompile_limit = value


config = _Config()
_tls = threading.local()
_compiled_fns: "weakref.WeakSet[CompiledFunction]" = weakref.WeakSet()


def is_compiling() -> bool:
    """Whether the calling thread is capturing a call of a compiled function (``torch.compiler.is_compiling``)."""
    return getattr(_tls, "compiling", False)


def reset() -> None:
    """Forget every compiled function's programs (``torch.compiler.reset``): the next call warms up again."""
    for f in list(_compiled_fns):
        f._reset()


def _repr_is_a_host_read(t):
    if is_compiling():
        _dispatch.host_sync(t, "Printing a tensor (Tensor.__repr__)")


_format.unreplayed_repr_hooks.append(_repr_is_a_host_read)


class _Eager:
    """A cache entry that runs the function eagerly (a host read inside it, or a failed compile)."""

    def __init__(self, reason):
        self.reason = reason


class CompiledFunction:
    """What ``jg.compile(fn)`` returns: call it as ``fn``."""

    def __init__(self, fn, fullgraph, mode, backend):
        self._fn, self._fullgraph, self._mode, self._backend = fn, fullgraph, mode, backend
        functools.update_wrapper(self, fn, updated=())
        self._entries: dict = {}
        self._calls = 0
        self._warned = False
        self._lock = threading.RLock()
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        self._globals = getattr(getattr(fn, "__func__", fn), "__globals__", {})
        self._names = tuple(code.co_names) if code is not None else ()
        _compiled_fns.add(self)

    def __get__(self, obj, objtype=None):  # compiled methods bind like functions
        return self if obj is None else functools.partial(self, obj)

    def _reset(self):
        with self._lock:
            self._entries.clear()
            self._calls = 0
            self._warned = False

    @property
    def cache_info(self):
        """(programs compiled, keys that run eagerly, calls)."""
        progs = sum(isinstance(e, _compiled.Program) for e in self._entries.values())
        return {"programs": progs, "eager": len(self._entries) - progs, "calls": self._calls}

    def __call__(self, *args, **kwargs):
        if self._backend == "eager" or active_captures or is_compiling():
            return self._fn(*args, **kwargs)  # inside another capture: part of it
        flat, tree = _compiled._flatten((args, kwargs))
        watched = _watched(self._fn, flat, self._globals, self._names)
        key = _key(flat, tree, watched, self._fn, self._globals, self._names)
        with self._lock:
            self._calls += 1
            entry = self._entries.get(key)
            if entry is None:
                entry = self._miss(key, flat, watched, args, kwargs)
                if entry is None:
                    return self._fn(*args, **kwargs)
            if isinstance(entry, _compiled.Program):  # (the placeholders are the program's: one call at a time)
                leaves = entry.call([x for x in flat if isinstance(x, Tensor)])
                return _compiled._unflatten(entry.out_tree, leaves)
        return self._fn(*args, **kwargs)

    def _miss(self, key, flat, watched, args, kwargs):
        """A new guard key: warm up, capture, or (past the limit) run eagerly. None: run eagerly this call."""
        first = self._calls == 1
        if first and not self._fullgraph:
            return None
        if len(self._entries) >= config.recompile_limit:
            return self._limit_hit()
        if first:
            self._probe(flat, watched, args, kwargs)  # raises at a graph break; else warm up eagerly
            return None
        prog = _compiled.Program()
        _tls.compiling = True
        try:
            prog.capture(self._fn, args, kwargs, _leaves(flat, watched), _optimizers(watched), _device_of(flat, watched))
        except _compiled.Break as b:
            if b.reason == _compiled.WARM_UP:
                return None
            if self._fullgraph:
                raise Unsupported(self._break_message(b)) from b.error
            if not isinstance(b.error, CaptureError) and b.error is not None:
                warnings.warn(f"jg.compile: {b.reason}; {self._name()} runs eagerly for these inputs.",
                              stacklevel=3)
            self._entries[key] = _Eager(b.reason)
            return None
        finally:
            _tls.compiling = False
        self._entries[key] = prog
        return prog

    def _probe(self, flat, watched, args, kwargs):
        """fullgraph=True's first call: record it once without compiling, so a graph break raises before any
        work runs."""
        prog = _compiled.Program()
        _tls.compiling = True
        try:
            prog.probe(self._fn, args, kwargs, _leaves(flat, watched), _optimizers(watched), _device_of(flat, watched))
        except _compiled.Break as b:
            raise Unsupported(self._break_message(b)) from b.error
        finally:
            _tls.compiling = False

    def _break_message(self, b):
        return (f"jg.compile(fullgraph=True): {self._name()} cannot be captured as one graph: {b.reason}. "
                "Move host reads (item(), printing, numpy(), bool() of a tensor) out of the function, or "
                "compile it with fullgraph=False to run such calls eagerly.")

    def _limit_hit(self):
        limit = config.recompile_limit
        msg = (f"jgrad.compiler hit config.recompile_limit ({limit})\n   function: {self._name()}\n"
               f"   last reason: a guard failed for all {len(self._entries)} cached entries\n"
               "Calls with new guards run eagerly. If recompilations are expected, consider increasing "
               "jgrad.compiler.config.recompile_limit to an appropriate value.")
        if self._fullgraph:
            raise FailOnRecompileLimitHit(f"Hard failure due to fullgraph=True: {msg}")
        if not self._warned:
            self._warned = True
            warnings.warn(msg, stacklevel=4)
        return None

    def _name(self):
        f = getattr(self._fn, "__func__", self._fn)
        code = getattr(f, "__code__", None)
        name = getattr(f, "__qualname__", type(f).__name__)
        return f"'{name}' ({code.co_filename}:{code.co_firstlineno})" if code is not None else f"'{name}'"


def _modules_and_optimizers():
    return _Module, _Optimizer


def _watched(fn, flat, globs, names):
    """The modules and optimizers a call can read: among its arguments, ``self``, closure cells and globals."""
    Module, Optimizer = _modules_and_optimizers()
    found = [x for x in flat if isinstance(x, (Module, Optimizer))]
    f = getattr(fn, "__func__", fn)
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, (Module, Optimizer)):
        found.append(owner)
    for c in getattr(f, "__closure__", None) or ():
        try:
            v = c.cell_contents
        except ValueError:
            continue
        if isinstance(v, (Module, Optimizer)):
            found.append(v)
    for n in names:
        v = globs.get(n)
        if isinstance(v, (Module, Optimizer)):
            found.append(v)
    seen, out = set(), []
    for x in found:
        if id(x) not in seen:
            seen.add(id(x))
            out.append(x)
    return out


def _tensor_key(t):
    return (t.shape, t.dtype, t._device, t._req)


def _key(flat, tree, watched, fn, globs, names):
    parts = [tree, _grad_state.grad_enabled, _dtype.get_default_dtype()]
    for x in flat:
        if isinstance(x, Tensor):
            parts.append(_tensor_key(x))
        elif type(x) in _SCALARS:
            parts.append((type(x), x))
        else:
            parts.append(("id", id(x)))
    f = getattr(fn, "__func__", fn)
    for c in getattr(f, "__closure__", None) or ():
        try:
            v = c.cell_contents
        except ValueError:
            continue
        if type(v) in _SCALARS:
            parts.append(v)
    for n in names:
        v = globs.get(n, _MISSING)
        if type(v) in _SCALARS:
            parts.append((n, v))
    Module, _ = _modules_and_optimizers()
    for w in watched:
        parts.append(_module_key(w) if isinstance(w, Module) else _optimizer_key(w))
    return tuple(parts)


_MISSING = object()


def _module_key(m):
    """Every submodule's ``training`` flag; each parameter's identity, shape, dtype, ``requires_grad`` and whether
    its ``.grad`` is set; each buffer's identity. The submodules, parameters and buffers are those of the last
    walk of the ``_modules`` dicts (``_ModuleTree``) while none of the dicts it read changed; the flags, grads and
    shapes are read on every call, each kind in one bulk step."""
    tree = _module_tree(m)
    params = tree.params
    data = list(map(_DATA, params))
    try:
        shapes, dtypes = tuple(map(_SHAPE, data)), tuple(map(_DTYPE, data))
    except AttributeError:  # a parameter without an array (a capture's placeholder)
        shapes = tuple([getattr(d, "shape", None) for d in data])
        dtypes = tuple([getattr(d, "dtype", None) for d in data])
    return (id(m), m.training, tuple(map(_TRAINING, tree.mods)), tree.param_ids,
            tuple(map(operator.is_, map(_GRAD, params), itertools.repeat(None))), tuple(map(_REQ, params)),
            shapes, dtypes, tree.buf_ids)


_DATA, _SHAPE, _DTYPE = operator.attrgetter("_data"), operator.attrgetter("shape"), operator.attrgetter("dtype")
_TRAINING, _GRAD, _REQ = operator.attrgetter("training"), operator.attrgetter("_grad"), operator.attrgetter("_req")
_DICTS = operator.attrgetter("_parameters", "_buffers", "_modules")


class _ModuleTree:
    """One walk of a module's ``_modules`` dicts (a walk costs ~30x more than checking it on a 12-layer GPT): its
    submodules (the module itself is not held: the tree goes with it), the de-duplicated parameters, the
    buffers' identities, and the dicts it read with their values, so that ``holds`` can tell in a few bulk steps
    that a walk now would find the same."""

    __slots__ = ("mods", "params", "param_ids", "buf_ids", "dicts")

    def __init__(self, m):
        mods, params, bufs, dicts, seen = [], [], [], [], set()
        stack = [m]
        while stack:
            s = stack.pop()
            if s is None:
                continue
            if s is not m:
                mods.append(s)
            ps, bs, ms = _DICTS(s)
            dicts += (ps, bs, ms)
            for p in ps.values():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
            bufs.extend(map(id, bs.values()))
            stack.extend(ms.values())
        self.mods, self.params, self.param_ids, self.buf_ids = mods, params, tuple(map(id, params)), tuple(bufs)
        self.dicts = HeldDicts(keys=False)  # (the walk reads the values alone: the keys need no check)
        self.dicts.extend(dicts)
        self.dicts.finish()

    def holds(self, m):
        """Whether ``m`` and each submodule still have the same three dicts, of the same lengths and values (by
        identity)."""
        dicts = self.dicts
        return (all(map(operator.is_, itertools.chain(_DICTS(m), *map(_DICTS, self.mods)), dicts.dicts))
                and dicts.hold())


_TREES: dict = {}  # id(module) -> (a weak reference to it, its _ModuleTree), dropped with the module


def _module_tree(m):
    kept = _TREES.get(id(m))
    if kept is not None and kept[0]() is m and kept[1].holds(m):
        return kept[1]
    tree = _ModuleTree(m)
    i = id(m)
    _TREES[i] = (weakref.ref(m, lambda _, i=i: _TREES.pop(i, None)), tree)
    return tree


def _optimizer_key(opt):
    parts = [id(opt), len(opt.state)]
    for group in opt.param_groups:
        parts.append(tuple([(k, v if type(v) in _SCALARS or isinstance(v, tuple) else id(v))
                            for k, v in group.items() if k != "params"]))
        parts.append(tuple(map(id, group["params"])))
    return tuple(parts)


def _leaves(flat, watched):
    """Tensors whose ``.grad`` a capture may create: the watched modules' and optimizers' parameters."""
    Module, _ = _modules_and_optimizers()
    out = []
    for w in watched:
        if isinstance(w, Module):
            out.extend(w.parameters())
        else:
            for group in w.param_groups:
                out.extend(group["params"])
    return out


def _optimizers(watched):
    _, Optimizer = _modules_and_optimizers()
    return [w for w in watched if isinstance(w, Optimizer)]


def _device_of(flat, watched):
    """The device a call runs on: its first tensor argument's, else its first parameter's, else the default."""
    for x in flat:
        if isinstance(x, Tensor):
            return x._device
    for t in _leaves(flat, watched):
        return t._device
    return get_default_device()


def compile(model=None, *, fullgraph: bool = False, dynamic=None, backend="inductor", mode=None, disable=False):
    """Compile a function or Module into cached XLA executables (``torch.compile``).

    Args:
        model: the function or ``nn.Module`` (None: return a decorator).
        fullgraph: raise ``Unsupported`` where the call cannot be captured whole, instead of running it eagerly.
        dynamic: accepted for PyTorch's signature; every shape compiles its own program (XLA's shapes are
            static), so True and None behave as False.
        backend: "inductor" (PyTorch's default name) or "xla": jgrad's capture; "eager": run uncompiled.
        mode: one of PyTorch's modes; all compile the same way here.
        disable: return ``model`` unchanged.
    """
    _check_args(fullgraph, dynamic, backend, mode)
    if model is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 disable=disable)
    if not callable(model):
        raise AssertionError(f"A callable function is expected, but {type(model)} is provided.")
    if disable:
        return model
    Module, _ = _modules_and_optimizers()
    b = "inductor" if backend is None else backend
    if isinstance(model, Module):
        return _nn_module.OptimizedModule(model, CompiledFunction(model.__call__, fullgraph, mode, b))
    return CompiledFunction(model, fullgraph, mode, b)


def _check_args(fullgraph, dynamic, backend, mode):
    if not isinstance(fullgraph, (bool, int)):
        raise TypeError(f"fullgraph must be a bool, got {type(fullgraph).__name__}")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise AssertionError(f"Expected enable to be a bool, got {type(dynamic)}")
    if mode is not None and mode not in _MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(_MODES)}")
    if backend is not None and backend not in _BACKENDS:
        if callable(backend):
            raise InvalidBackend("Invalid backend: jg.compile compiles through jgrad's capture onto XLA; a custom "
                                 "backend callable (which PyTorch hands an FX graph) is not supported. Use "
                                 f"one of {', '.join(_BACKENDS)}.")
        raise InvalidBackend(f"Invalid backend: {backend!r}, see `jgrad.compiler.list_backends()` for available "
                             "backends.")


def list_backends():
    """The backend names ``jg.compile`` accepts."""
    return list(_BACKENDS)


_nn_module._compile = compile  # Module.compile(): nn sits below the compiler
