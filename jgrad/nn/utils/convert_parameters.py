"""``parameters_to_vector`` / ``vector_to_parameters``: all parameters as one flat vector and back.

Imports ``_tensor`` and ``ops.shape``.
"""
from __future__ import annotations

from ...core._tensor import Tensor
from ...ops.shape import cat

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_devices(parameters):
    device = None
    for p in parameters:
        if device is None:
            device = p.device
        elif p.device is not device:
            raise TypeError("Found two parameters on different devices, this is currently not supported.")


def parameters_to_vector(parameters):
    """One 1-D tensor of every parameter, flattened and concatenated in order (differentiable)."""
    parameters = list(parameters)
    _check_devices(parameters)
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters) -> None:
    """Set the data of ``parameters`` from consecutive slices of the 1-D ``vec`` (no history, as ``p.data = ...``)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__module__}.{type(vec).__qualname__}")
    parameters = list(parameters)
    _check_devices(parameters)
    total = sum(p.numel() for p in parameters)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise RuntimeError(f"vector_to_parameters: expected a 1-D vector of {total} elements (the parameters' "
                           f"total), got a tensor of shape {list(vec.shape)}.")
    pointer = 0
    flat = vec.detach()
    for p in parameters:
        n = p.numel()
        p.data = flat[pointer:pointer + n].reshape(p.shape)
        pointer += n
