"""``Parameter`` and ``Buffer``: tensors that a Module registers when assigned as attributes.

Imports ``_tensor`` and ``ops.creation``.
"""
from __future__ import annotations

from ..core import _tensor
from ..core._tensor import Tensor
from ..ops.creation import tensor as _tensor_of
from ..ops.creation import empty as _empty


def _share(cls, data):
    """A ``cls`` sharing ``data``'s storage and version counter, without its history."""
    if data is None:
        data = _empty(0)
    if not isinstance(data, Tensor):
        raise TypeError(f"{cls.__name__}(): argument 'data' must be a Tensor, not {type(data).__name__}")
    t = cls._make(None, data._device, data._stream)
    _tensor._set_data_to(t, data)  # the memory of data: a write through either reaches the other
    t._slot_gen = 0
    t._vc = data._vc
    return t


class Parameter(Tensor):
    """A Tensor that is a module parameter: ``requires_grad=True`` by default.

    Assigning a Parameter as a Module attribute registers it in
    ``parameters()``. It shares storage with ``data`` (``torch.nn.Parameter``).
    """

    def __new__(cls, data=None, requires_grad=True):
        t = _share(cls, data)
        if requires_grad:
            t.requires_grad_(True)
        return t

    def __init__(self, data=None, requires_grad=True):
        pass  # everything happens in __new__ (Tensor.__init__ would rebuild the storage)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(Tensor._make(self._value, self._device, self._stream), self.requires_grad)
        if self._grad is not None:
            result._grad = Tensor._make(self._grad._value, self._grad._device, self._grad._stream)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, proto):
        import numpy as np
        return (_rebuild_parameter, (np.asarray(self._value), str(self.device), self.requires_grad))


def _rebuild_parameter(arr, dev, requires_grad):
    return Parameter(_tensor_of(arr, device=dev), requires_grad)


class Buffer(Tensor):
    """A Tensor that a Module registers as a buffer when assigned (``torch.nn.Buffer``).

    ``persistent=False`` keeps it out of ``state_dict``.
    """

    def __new__(cls, data=None, *, persistent=True):
        t = _share(cls, data)
        t.persistent = persistent
        return t

    def __init__(self, data=None, *, persistent=True):
        pass
