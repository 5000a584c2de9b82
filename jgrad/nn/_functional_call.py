"""``functional_call`` and ``stack_module_state`` (``torch.func``'s module helpers).

A module's parameters and buffers are swapped for the given tensors in the owning submodules'
``_parameters``/``_buffers`` dicts for the call and put back afterwards (even when the call raises), so
the module reads them as attributes exactly as it reads its own.

Imports ``nn.module``, ``_tensor`` and ``ops`` (stacking).
"""
from __future__ import annotations

from ..core._tensor import Tensor
from .. import ops


def _owner(module, name):
    path, _, leaf = name.rpartition(".")
    mod = module.get_submodule(path) if path else module
    return mod, leaf


def _tied_names(module):
    """dotted name -> every dotted name of the same parameter or buffer (tied weights)."""
    by_id = {}
    for kind in ("_parameters", "_buffers"):
        for prefix, mod in module.named_modules(remove_duplicate=False):
            for k, v in getattr(mod, kind).items():
                if v is not None:
                    by_id.setdefault(id(v), []).append(prefix + ("." if prefix else "") + k)
    out = {}
    for names in by_id.values():
        for n in names:
            out[n] = names
    return out


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    if isinstance(parameter_and_buffer_dicts, dict):
        values = dict(parameter_and_buffer_dicts)
    elif isinstance(parameter_and_buffer_dicts, (tuple, list)):
        values = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                if k in values:
                    raise ValueError(f"{k} appeared in multiple dictionaries; behavior of functional call is "
                                     "ambiguous")
            values.update(d)
    else:
        raise ValueError(f"Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but got "
                         f"{type(parameter_and_buffer_dicts)}")
    tied = _tied_names(module)
    if tie_weights:
        for name in list(values):
            for other in tied.get(name, ()):
                if other in values and other != name and values[other] is not values[name]:
                    raise ValueError(f"functional_call got multiple values for keys ['{name}', '{other}'], which "
                                     "are tied. Consider using tie_weights=False")
                values.setdefault(other, values[name])
    if strict:
        missing = sorted(n for n in tied if n not in values)
        unexpected = sorted(n for n in values if n not in tied)
        if missing or unexpected:
            parts = []
            if unexpected:
                parts.append("Unexpected key(s): " + ", ".join(repr(k) for k in unexpected) + ".")
            if missing:
                parts.append("Missing key(s): " + ", ".join(repr(k) for k in missing) + ".")
            raise RuntimeError("Error(s) in reparametrizing for " + module._get_name() + ":\n\t" + "\n\t".join(parts))
    saved = []
    try:
        for name, value in values.items():
            mod, leaf = _owner(module, name)
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"functional_call: the value for '{name}' is a {type(value).__name__}, not a Tensor")
            if leaf in mod._parameters:
                store = mod._parameters
            elif leaf in mod._buffers:
                store = mod._buffers
            else:  # a new name: an attribute for the call, as PyTorch's reparametrization sets one
                store = None
                saved.append((mod, None, leaf, mod.__dict__.get(leaf, _MISSING)))
                object.__setattr__(mod, leaf, value)
                continue
            saved.append((mod, store, leaf, store[leaf]))
            store[leaf] = value
        if args is None:
            args = ()
        elif not isinstance(args, tuple):
            args = (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for mod, store, leaf, old in reversed(saved):
            if store is not None:
                store[leaf] = old
            elif old is _MISSING:
                mod.__dict__.pop(leaf, None)
            else:
                object.__setattr__(mod, leaf, old)


_MISSING = object()


def stack_module_state(models):
    if len(models) == 0:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or all(not m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    t0 = type(models[0])
    if not all(type(m) is t0 for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")

    def stack(named, requires_grad):
        out = {}
        for name in named[0]:
            t = ops.stack([n[name].detach() for n in named])
            out[name] = t.requires_grad_(True) if requires_grad else t
        return out

    params = stack([dict(m.named_parameters()) for m in models], True)
    buffers = stack([dict(m.named_buffers()) for m in models], False)
    return params, buffers
