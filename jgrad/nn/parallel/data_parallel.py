"""``data_parallel`` and ``DataParallel`` (``torch.nn.parallel``): one process, the batch split over devices.

As PyTorch's: the inputs are split into chunks along ``dim`` (one per device), the module runs once per
device, and the outputs are gathered on ``output_device`` and concatenated along ``dim``. The replica on
``device_ids[0]`` is the module itself; the others use differentiable copies of its parameters
(``p.to(device)``), so the backward pass sums every replica's gradient into the module's parameters, as
PyTorch's ``Broadcast`` does. The replicas are issued one after the other from this thread; JAX runs them on
their devices concurrently. Buffers are copied to the other replicas, so only the first replica's buffer
updates (BatchNorm statistics) are kept, as in PyTorch.

``device_ids`` are GPU indices or jgrad devices (``"cpu:1"`` works too: the virtual CPU devices); without
them, every GPU JAX sees.

Imports ``_device``, ``_tensor``, ``nn.module`` and the op library (``cat``).
"""
from __future__ import annotations

import contextlib
import warnings
from itertools import chain

from ...core import _device
from ...core._tensor import Tensor
from ...ops.shape import cat
from ..module import Module

__all__ = ["data_parallel", "DataParallel"]


def _as_device(d):
    if isinstance(d, int):
        return _device.device("cpu") if d == -1 else _device.device("gpu", d)
    return _device.device(d)


def _default_devices():
    gpus = _device._devices("gpu")
    if not gpus:
        raise RuntimeError("device type could not be determined")
    return [_device.device("gpu", i) for i in range(len(gpus))]


def _scatter(obj, devices, dim):
    """One value per device: tensors split along ``dim`` and moved; containers split field by field."""
    if isinstance(obj, Tensor):
        return [c.to(d) for c, d in zip(obj.chunk(len(devices), dim), devices)]
    if isinstance(obj, tuple) and obj:
        return [type(obj)(x) if not hasattr(obj, "_fields") else type(obj)(*x)
                for x in zip(*[_scatter(o, devices, dim) for o in obj])]
    if isinstance(obj, list) and obj:
        return [list(x) for x in zip(*[_scatter(o, devices, dim) for o in obj])]
    if isinstance(obj, dict) and obj:
        return [dict(zip(obj, x)) for x in zip(*[_scatter(v, devices, dim) for v in obj.values()])]
    return [obj for _ in devices]


def _gather(outputs, target, dim):
    first = outputs[0]
    if isinstance(first, Tensor):
        if all(o.ndim == 0 for o in outputs):
            warnings.warn("Was asked to gather along dimension 0, but all input tensors were scalars; will instead "
                          "unsqueeze and return a vector.", stacklevel=3)
            outputs = [o.unsqueeze(0) for o in outputs]
            dim = 0
        return cat([o.to(target) for o in outputs], dim)
    if first is None:
        return None
    if isinstance(first, dict):
        return type(first)((k, _gather([o[k] for o in outputs], target, dim)) for k in first)
    if isinstance(first, (list, tuple)):
        parts = [_gather(list(x), target, dim) for x in zip(*outputs)]
        return type(first)(*parts) if hasattr(first, "_fields") else type(first)(parts)
    return outputs


@contextlib.contextmanager
def _replica(module, device, home):
    """``module`` with its parameters and buffers moved to ``device`` (differentiable copies) while inside."""
    if device == home:
        yield module
        return
    saved = []
    for mod in module.modules():
        for store in (mod._parameters, mod._buffers):
            for name, t in store.items():
                if t is not None:
                    saved.append((store, name, t))
                    store[name] = t.to(device) if store is mod._parameters else t.detach().to(device)
    try:
        yield module
    finally:
        for store, name, t in saved:
            store[name] = t


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
    """``module(*inputs, **module_kwargs)`` with the batch split over ``device_ids`` (see the module docstring)."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    devices = [_as_device(d) for d in device_ids] if device_ids is not None else _default_devices()
    if not devices:
        raise RuntimeError("no available devices were found")
    target = _as_device(output_device) if output_device is not None else devices[0]
    home = devices[0]
    for t in chain(module.parameters(), module.buffers()):
        if t.device != home:
            raise RuntimeError(f"module must have its parameters and buffers on device {home} (device_ids[0]) but "
                               f"found one of them on device: {t.device}")
    batch = next((t for t in chain(inputs, (module_kwargs or {}).values()) if isinstance(t, Tensor)), None)
    if batch is not None and batch.ndim > 0:
        devices = devices[:max(1, min(len(devices), batch.shape[dim]))]  # a short batch uses fewer devices
    scattered_args = _scatter(inputs, devices, dim)
    scattered_kwargs = _scatter(dict(module_kwargs or {}), devices, dim)
    outputs = []
    for d, args, kwargs in zip(devices, scattered_args, scattered_kwargs):
        with _replica(module, d, home) as replica:
            outputs.append(replica(*args, **kwargs))
    return _gather(outputs, target, dim)


class DataParallel(Module):
    """``data_parallel`` as a module wrapper: ``model = nn.DataParallel(model)``; with no device at all (no GPU
    and no ``device_ids``) it runs ``module`` as it is, as PyTorch's does without CUDA."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module = module
        if device_ids is None:
            device_ids = list(range(len(_device._devices("gpu"))))
        self.device_ids = [_as_device(d) for d in device_ids]
        self.output_device = _as_device(output_device) if output_device is not None else (
            self.device_ids[0] if self.device_ids else None)
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        if not self.device_ids:
            return self.module(*inputs, **kwargs)
        return data_parallel(self.module, inputs, self.device_ids, self.output_device, self.dim, kwargs)
