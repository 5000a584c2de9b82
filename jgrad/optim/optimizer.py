"""``Optimizer``: param groups, per-parameter state, state_dict, step hooks (``torch.optim.Optimizer``).

Subclasses update every parameter of a group with one compiled kernel
(``_dispatch.call_foreach``): hyperparameters travel as dynamic scalars, so a
learning-rate schedule never recompiles.

Imports ``_dtype``, ``_segment`` (the end of ``step()`` is a barrier in "auto" mode), ``_tensor``,
``grad_mode``, ``nn.hooks`` and ``nn.module``.
"""
from __future__ import annotations

import functools
import warnings
from collections import OrderedDict, defaultdict
from copy import deepcopy
from itertools import chain

from ..core import _dtype
from ..runtime import _segment
from ..core._tensor import Tensor
from ..autograd.grad_mode import enable_grad
from ..nn.hooks import RemovableHandle
from ..nn.module import _typename, _zero_grad

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    """Marks a hyperparameter that every param group must give (``lr`` of SGD in old PyTorch)."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _scalar_dtype():
    """PyTorch's ``_get_scalar_dtype``: float64 when that is the default dtype, else float32."""
    return _dtype.float64 if _dtype.get_default_dtype() is _dtype.float64 else _dtype.float32


def _with_step_hooks(step):
    """Run the step pre-hooks and post-hooks around ``step`` (PyTorch's ``profile_hook_step``)."""
    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        for pre_hook in list(self._optimizer_step_pre_hooks.values()):
            result = pre_hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, new_kwargs), but got "
                                       f"{result}.")
                args, kwargs = result
        out = step(self, *args, **kwargs)
        for post_hook in list(self._optimizer_step_post_hooks.values()):
            post_hook(self, args, kwargs)
        _segment.step_boundary()
        return out

    wrapper._hooked = True
    return wrapper


class Optimizer:
    """Base class of optimizers: ``Optimizer(params, defaults)``.

    ``params`` is an iterable of tensors, of ``(name, tensor)`` pairs or of
    dicts (param groups with their own hyperparameters).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_hooked", False):
            cls.step = _with_step_hooks(step)

    def __init__(self, params, defaults: dict) -> None:
        self.defaults = defaults
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            "but got " + _typename(params))
        self.state = defaultdict(dict)
        self.param_groups = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for param_group in param_groups:
            self.add_param_group(dict(param_group))

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__.setdefault("_optimizer_step_pre_hooks", OrderedDict())
        self.__dict__.setdefault("_optimizer_step_post_hooks", OrderedDict())
        self.defaults.setdefault("differentiable", False)

    def __repr__(self):
        s = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += f"\nParameter Group {i}\n"
            for key in sorted(group):
                if key != "params":
                    s += f"    {key}: {group[key]}\n"
        return s + ")"

    # ---- param groups ------------------------------------------------------
    @staticmethod
    def _extract_params(param_group):
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering "
                            "of tensors in sets will change between runs. Please use a list instead.")
        else:
            params = list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        param_group["params"] = [p[1] if isinstance(p, tuple) else p for p in params]
        if names:
            if len(names) != len(params):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            param_group["param_names"] = names

    def _check_params(self, params):
        for param in params:
            if not isinstance(param, Tensor):
                raise TypeError("optimizer can only optimize Tensors, but one of the params is " + _typename(param))
            if not self.defaults.get("differentiable", None) and not (param.is_leaf or param.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters, with hyperparameters defaulting to ``defaults``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        self._extract_params(param_group)
        self._check_params(param_group["params"])
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            param_group.setdefault(name, default)
        params = param_group["params"]
        if len(params) != len({id(p) for p in params}):
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will "
                          "cause an error; see github.com/pytorch/pytorch/issues/40967 for more information",
                          stacklevel=3)
        seen = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                which = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {which} to the optimizer")
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    # ---- gradients and steps -------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of every optimized tensor (to None by default, else to zeros)."""
        if not (set_to_none and _segment.auto[0]):
            for group in self.param_groups:
                for p in group["params"]:
                    _zero_grad(p, set_to_none)
            return
        # In "auto" mode the next step's executable may write its results (the new gradients) into the memory of
        # the ones let go of here, if nothing else holds them by then: no allocation and no free per step.
        spares = []
        for group in self.param_groups:
            for p in group["params"]:
                g = p._grad
                if g is not None:
                    if g._alias is None:
                        spares.append((g._data, g._device))
                    p._grad = None
        if spares:
            _segment.recycle(spares)

    def step(self, closure=None):
        """Perform one optimization step (subclasses implement this)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement step()")

    @staticmethod
    def _closure_loss(closure):
        if closure is None:
            return None
        with enable_grad():
            return closure()

    def register_step_pre_hook(self, hook) -> RemovableHandle:
        """``hook(optimizer, args, kwargs) -> None | (args, kwargs)``, run before each ``step``."""
        handle = RemovableHandle(self._optimizer_step_pre_hooks)
        self._optimizer_step_pre_hooks[handle.id] = hook
        return handle

    def register_step_post_hook(self, hook) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)``, run after each ``step``."""
        handle = RemovableHandle(self._optimizer_step_post_hooks)
        self._optimizer_step_post_hooks[handle.id] = hook
        return handle

    # ---- state_dict ------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{'state': {index: state}, 'param_groups': [group with 'params' as indices]}`` (not copied)."""
        mapping = {}
        start = 0

        def pack_group(group):
            nonlocal start
            packed = {k: v for k, v in group.items() if k != "params"}
            mapping.update({id(p): i for i, p in enumerate(group["params"], start) if id(p) not in mapping})
            packed["params"] = [mapping[id(p)] for p in group["params"]]
            start += len(packed["params"])
            return packed

        param_groups = [pack_group(g) for g in self.param_groups]
        packed_state = {(mapping[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()}
        return {"state": packed_state, "param_groups": param_groups}

    def _cast_state(self, param, value, key=None):
        """A copy of a loaded state value, on the parameter's device (and dtype, except ``step``)."""
        if isinstance(value, Tensor):
            if key == "step":
                out = value.to(param._device)
            elif param.is_floating_point():
                out = value.to(param._device, param.dtype)
            else:
                out = value.to(param._device)
            return out.detach().clone() if out is value else out.detach()
        if isinstance(value, dict):
            return {k: self._cast_state(param, v, k) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._cast_state(param, v) for v in value)
        return value

    def load_state_dict(self, state_dict: dict) -> None:
        """Load hyperparameters and state saved by ``state_dict`` (state tensors are copied)."""
        groups = self.param_groups
        saved_groups = deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))
        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                state[id_map[k]] = self._cast_state(id_map[k], v)
            else:
                state[k] = v

        def update_group(group, new_group):
            new_group["params"] = group["params"]
            if "param_names" in group and "param_names" not in new_group:
                new_group["param_names"] = group["param_names"]
            return new_group

        self.__setstate__({"state": state, "param_groups": [update_group(g, ng) for g, ng in
                                                             zip(groups, saved_groups)]})

    # ---- helpers for subclasses -------------------------------------------------
    def _check_grads(self):
        """A ``.grad`` of another shape than its parameter (``p.grad.data = ...`` or ``p.data = ...`` can make one)
        is refused before any parameter of any group is updated, naming both shapes."""
        for group in self.param_groups:
            for p in group["params"]:
                g = p._grad
                if g is not None and g.shape != p.shape:
                    raise RuntimeError(f"{type(self).__name__}.step(): a parameter of shape {list(p.shape)} has a "
                                       f"gradient of shape {list(g.shape)}; a gradient must have its parameter's "
                                       "shape (was .grad.data or the parameter's .data assigned a tensor of another "
                                       "shape?)")

    @staticmethod
    def _by_device(params):
        """Split ``params`` into lists that share a device (one fused kernel each)."""
        buckets = {}
        for p in params:
            buckets.setdefault(p._device, []).append(p)  # a DTensor's mesh, not its local device
        return list(buckets.values())
