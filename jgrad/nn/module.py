"""``Module``: the base class of every layer (``torch.nn.Module``).

Imports ``_tensor``, ``_device``, ``_dtype``, ``grad_mode``, ``nn.hooks``, ``nn.parameter`` and
``nn._state_dict``.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict

from ..core import _dtype
from ..core._device import device as _device
from ..core._tensor import Tensor
from ..autograd.grad_mode import no_grad
from ._state_dict import StateDictMixin, _IncompatibleKeys  # noqa: F401 (re-exported)
from .hooks import BackwardHook, RemovableHandle
from .parameter import Buffer, Parameter
from ..runtime import _graphed, _trace_log

_compile = None  # jgrad.compiler.compile, installed by jgrad.compiler when it loads (the compiler sits above nn)


def _typename(obj) -> str:
    """``torch.typename``: the qualified type name used in error messages."""
    if isinstance(obj, Tensor):
        return f"{type(obj).__module__}.{type(obj).__qualname__}"
    module = getattr(obj, "__module__", "") or ""
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        module, qualname = type(obj).__module__ or "", type(obj).__qualname__
    return qualname if module in ("", "builtins") else f"{module}.{qualname}"


def _addindent(s: str, num_spaces: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * num_spaces + line for line in lines[1:])


def _check_name(module, kind: str, name, store) -> None:
    """The checks shared by register_buffer / register_parameter / add_module, in PyTorch's order."""
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
    if "." in name:
        raise KeyError(f"{kind} name can't contain \".\"" + (f", got: {name}" if kind == "module" else ""))
    if name == "":
        raise KeyError(f"{kind} name can't be empty string \"\"")
    if hasattr(module, name) and name not in store:
        raise KeyError(f"attribute '{name}' already exists")


def _rebind(t: Tensor, new: Tensor) -> None:
    """Point ``t`` at ``new``'s storage and device, keeping ``t``'s identity (``t.data = new``)."""
    t._set_storage(new._value)
    t._device = new._device
    t._stream = new._stream


class Module(StateDictMixin):
    """Base class of all neural-network modules.

    Assigning a :class:`Parameter`, a Module or a registered buffer as an
    attribute registers it; ``__call__`` runs forward pre-hooks, ``forward``,
    forward hooks and sets up the full backward hooks.
    """

    dump_patches = False
    _version = 1
    training: bool
    call_super_init = False

    def __init__(self, *args, **kwargs) -> None:
        if not self.call_super_init and (args or kwargs):
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected argument: Module.__init__() "
                            "takes no arguments.")
        d = object.__setattr__
        d(self, "training", True)
        d(self, "_parameters", OrderedDict())
        d(self, "_buffers", OrderedDict())
        d(self, "_non_persistent_buffers_set", set())
        d(self, "_modules", OrderedDict())
        d(self, "_forward_pre_hooks", OrderedDict())
        d(self, "_forward_pre_hooks_with_kwargs", OrderedDict())
        d(self, "_forward_hooks", OrderedDict())
        d(self, "_forward_hooks_with_kwargs", OrderedDict())
        d(self, "_forward_hooks_always_called", OrderedDict())
        d(self, "_backward_pre_hooks", OrderedDict())
        d(self, "_backward_hooks", OrderedDict())
        d(self, "_is_full_backward_hook", None)

    def forward(self, *args, **kwargs):
        """Define the computation; call the module instance rather than this."""
        raise NotImplementedError(f"Module [{type(self).__name__}] is missing the required \"forward\" function")

    # ---- registration --------------------------------------------------
    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Add a buffer (state that is not a parameter); ``persistent=False`` keeps it out of state_dict."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name(self, "buffer", name, self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            "(torch Tensor or None required)")
        if isinstance(tensor, Buffer):
            persistent = tensor.persistent
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param) -> None:
        """Add a parameter (a :class:`Parameter` or None) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name(self, "parameter", name, self._parameters)
        if param is None:
            self._parameters[name] = None
            return
        if not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                            "(torch.nn.Parameter or None required)")
        if param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be "
                             f"created explicitly. To express '{name}' as a function of another Tensor, compute "
                             "the value in the forward() method.")
        self._parameters[name] = param

    def add_module(self, name: str, module) -> None:
        """Add a child module, reachable as the attribute ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        _check_name(self, "module", name, self._modules)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        """The submodule at dotted path ``target`` ("" is this module)."""
        mod = self
        for item in target.split(".") if target else ():
            if not hasattr(mod, item):
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path ``target``."""
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{mod._get_name()} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path ``target``."""
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers:
            raise AttributeError(f"{mod._get_name()} has no buffer `{name}`")
        return mod._buffers[name]

    # ---- attribute protocol --------------------------------------------
    def __getattr__(self, name: str):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_from(name, d, self._buffers, self._modules, self._non_persistent_buffers_set)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        else:
            self._set_module_or_buffer(name, value, d)

    def _set_module_or_buffer(self, name, value, d):
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_from(name, d, self._parameters, self._buffers, self._non_persistent_buffers_set)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                "(torch.nn.Module or None expected)")
            modules[name] = value
        else:
            buffers = d.get("_buffers")
            if isinstance(value, Buffer) or (buffers is not None and name in buffers):
                if value is not None and not isinstance(value, Tensor):
                    raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                    "(torch.Tensor or None expected)")
                persistent = value.persistent if isinstance(value, Buffer) else \
                    name not in self._non_persistent_buffers_set
                self.register_buffer(name, value, persistent)
            else:
                object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name, d, *stores):
        d.pop(name, None)
        for s in stores:
            if isinstance(s, set):
                s.discard(name)
            else:
                s.pop(name, None)

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(super().__dir__()) + list(self._parameters) + list(self._modules) + list(self._buffers)
        return sorted(k for k in set(keys) if not k[0].isdigit())

    def __setstate__(self, state):
        self.__dict__.update(state)

    # ---- iteration -----------------------------------------------------
    def _named_members(self, get_members_fn, prefix="", recurse=True, remove_duplicate=True):
        memo = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for module_prefix, module in modules:
            for k, v in get_members_fn(module):
                if v is None or (remove_duplicate and id(v) in memo):
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield module_prefix + ("." if module_prefix else "") + k, v

    def parameters(self, recurse: bool = True):
        """Iterate over the parameters (of submodules too, when ``recurse``)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """Iterate over ``(dotted name, parameter)`` pairs."""
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        """Iterate over the buffers."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """Iterate over ``(dotted name, buffer)`` pairs."""
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def children(self):
        """Iterate over the immediate child modules."""
        for _, m in self.named_children():
            yield m

    def named_children(self):
        """Iterate over ``(name, child)`` pairs of the immediate children."""
        memo = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in memo:
                memo.add(id(module))
                yield name, module

    def modules(self):
        """Iterate over every module of the tree, this one first."""
        for _, m in self.named_modules():
            yield m

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """Iterate over ``(dotted name, module)`` pairs of the tree, depth first, this one first."""
        if memo is None:
            memo = set()
        if id(self) in memo:
            return
        if remove_duplicate:
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    # ---- modes and gradients -------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set training mode on this module and every descendant."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        """Set evaluation mode (``train(False)``)."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Set ``requires_grad`` on every parameter."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad`` (to None, or to zeros)."""
        for p in self.parameters():
            _zero_grad(p, set_to_none)

    # ---- conversion ------------------------------------------------------
    def _apply(self, fn, recurse: bool = True) -> "Module":
        if recurse:
            for module in self.children():
                module._apply(fn)
        for param in self._parameters.values():
            if param is None:
                continue
            with no_grad():
                new = fn(param)
            _rebind(param, new)
            if param._grad is not None:
                with no_grad():
                    g = fn(param._grad)
                _rebind(param._grad, g)
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self

    def apply(self, fn) -> "Module":
        """Call ``fn`` on every submodule (children first) and on this module."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """Move and/or cast parameters and buffers in place: ``to(device)``, ``to(dtype)``, ``to(tensor)``."""
        device, dtype = _parse_to(*args, **kwargs)
        if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired "
                            f"dtype={dtype}")

        def convert(t):
            out = t
            if device is not None and t.device is not device:
                out = out.to(device)
            if dtype is not None and (t.is_floating_point() or t.is_complex()) and t.dtype is not dtype:
                out = out.to(dtype)
            return out

        return self._apply(convert)

    def cpu(self) -> "Module":
        return self.to("cpu")

    def cuda(self, device=None) -> "Module":
        return self.to(f"gpu:{device or 0}" if not isinstance(device, (str, _device)) else device)

    def type(self, dst_type) -> "Module":
        return self._apply(lambda t: t.to(dst_type))

    def _cast_floats(self, dt) -> "Module":
        return self._apply(lambda t: t.to(dt) if t.is_floating_point() else t)

    def float(self) -> "Module":
        return self._cast_floats(_dtype.float32)

    def double(self) -> "Module":
        return self._cast_floats(_dtype.float64)

    def half(self) -> "Module":
        return self._cast_floats(_dtype.float16)

    def bfloat16(self) -> "Module":
        return self._cast_floats(_dtype.bfloat16)

    # ---- hooks -----------------------------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False):
        """``hook(module, args) -> None | new args`` (``with_kwargs``: ``hook(module, args, kwargs)``)."""
        handle = RemovableHandle(self._forward_pre_hooks, extra_dict=self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False):
        """``hook(module, args, output) -> None | new output``, run after ``forward``."""
        handle = RemovableHandle(self._forward_hooks, extra_dict=[self._forward_hooks_with_kwargs,
                                                                  self._forward_hooks_always_called])
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_pre_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_output) -> None | new grad_output``, run when the output gradients arrive."""
        handle = RemovableHandle(self._backward_pre_hooks)
        self._backward_pre_hooks[handle.id] = hook
        if prepend:
            self._backward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_hook(self, hook, prepend: bool = False):
        """``hook(module, grad_input, grad_output) -> None | new grad_input``, run when the input gradients
        are computed."""
        if self._is_full_backward_hook is False:
            raise RuntimeError("Cannot use both regular backward hooks and full backward hooks on a single "
                               "Module. Please use only one of them.")
        self._is_full_backward_hook = True
        handle = RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        if prepend:
            self._backward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_backward_hook(self, hook):
        """Deprecated in PyTorch; not provided: use ``register_full_backward_hook``."""
        raise NotImplementedError("register_backward_hook is deprecated and not implemented in jgrad; use "
                                  "register_full_backward_hook instead.")

    # ---- call ------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        compiled = self.__dict__.get("_compiled_call_impl")
        if compiled is not None:  # Module.compile()
            return compiled(*args, **kwargs)
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                or self._backward_pre_hooks):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_impl(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks
                or self._backward_pre_hooks):
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def compile(self, *args, **kwargs) -> None:
        """Compile this module's calls in place with ``jg.compile(self._call_impl, *args, **kwargs)``."""
        object.__setattr__(self, "_compiled_call_impl", _compile(self._call_impl, *args, **kwargs))

    def _run_forward_pre_hooks(self, args, kwargs):
        for hook_id, hook in list(self._forward_pre_hooks.items()):
            if hook_id in self._forward_pre_hooks_with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError("forward pre-hook must return None or a tuple of (new_args, "
                                           f"new_kwargs), but got {res}.")
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        return args, kwargs

    def _run_forward_hooks(self, args, kwargs, result, called):
        for hook_id, hook in list(self._forward_hooks.items()):
            if hook_id in self._forward_hooks_always_called:
                called.add(hook_id)
            if hook_id in self._forward_hooks_with_kwargs:
                res = hook(self, args, kwargs, result)
            else:
                res = hook(self, args, result)
            if res is not None:
                result = res
        return result

    def _call_with_hooks(self, args, kwargs):
        if _trace_log.active[0]:  # a jgrad.func trace that ran hooks is never cached (they would not run again)
            _trace_log.impure("a module hook")
        called = set()
        result = None
        try:
            args, kwargs = self._run_forward_pre_hooks(args, kwargs)
            bw_hook = None
            full_hooks = list(self._backward_hooks.values()) if self._is_full_backward_hook else []
            pre_hooks = list(self._backward_pre_hooks.values())
            if full_hooks or pre_hooks:
                bw_hook = BackwardHook(self, full_hooks, pre_hooks)
                args = bw_hook.setup_input_hook(args)
            result = self.forward(*args, **kwargs)
            result = self._run_forward_hooks(args, kwargs, result, called)
            if bw_hook is not None:
                if not isinstance(result, (Tensor, tuple)):
                    warnings.warn("For backward hooks to be called, module output should be a Tensor or a tuple "
                                  f"of Tensors but received {type(result)}", stacklevel=3)
                result = bw_hook.setup_output_hook(result)
            return result
        except Exception:
            self._run_always_called(args, kwargs, result, called)
            raise

    def _run_always_called(self, args, kwargs, result, called):
        for hook_id, hook in list(self._forward_hooks.items()):
            if hook_id not in self._forward_hooks_always_called or hook_id in called:
                continue
            try:
                if hook_id in self._forward_hooks_with_kwargs:
                    res = hook(self, args, kwargs, result)
                else:
                    res = hook(self, args, result)
                if res is not None:
                    result = res
            except Exception as e:  # noqa: BLE001 - PyTorch silences these, with a warning
                warnings.warn("module forward hook with ``always_call=True`` raised an exception that was "
                              f"silenced as another error was raised in forward: {e}", stacklevel=4)

    # ---- repr ------------------------------------------------------------
    def extra_repr(self) -> str:
        """The extra text inside this module's repr (override in subclasses)."""
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for key, module in self._modules.items():
            lines.append(f"({key}): " + _addindent(repr(module), 2))
        if not self._modules:
            return f"{self._get_name()}({extra})"
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


def _zero_grad(p: Tensor, set_to_none: bool) -> None:
    if p._grad is None:
        return
    if set_to_none:
        p._grad = None
        return
    g = p._grad
    if g.grad_fn is not None:
        g.detach_()
    else:
        g.requires_grad_(False)
    with no_grad():
        g.zero_()


def _parse_to(*args, **kwargs):
    """(device, dtype) from ``to``'s positional and keyword forms."""
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() received an invalid combination of arguments: unexpected {sorted(kwargs)}")
    for a in args:
        if isinstance(a, _dtype.dtype):
            dtype = a
        elif isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, bool):
            continue  # non_blocking, positionally
        elif a is not None:
            device = a
    return (_device(device) if device is not None else None), dtype


class OptimizedModule(Module):
    """What ``jg.compile(module)`` returns (PyTorch's ``OptimizedModule``): the module as ``_orig_mod``, its
    calls compiled; other attributes are the original module's."""

    def __init__(self, mod: Module, compiled) -> None:
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_compiled_forward", compiled)
        object.__setattr__(self, "training", mod.training)

    def forward(self, *args, **kwargs):
        return self._compiled_forward(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["_orig_mod"], name)


_graphed._Module[0] = Module  # make_graphed_callables takes Modules (capture sits below nn)
