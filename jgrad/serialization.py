"""``jg.save`` / ``jg.load``: checkpoints without pickle.

A jgrad checkpoint is a zip archive: ``jgrad/manifest.json`` describes the saved object (nested
dicts, OrderedDicts with their ``_metadata``, lists, tuples, Counters, numbers, strings, None,
dtypes, devices, NumPy arrays and tensors) and every tensor's bytes are an entry of their own
(``jgrad/data/<n>``, raw, little-endian) with its dtype and shape in the manifest. Loading parses
JSON and copies bytes: it never unpickles anything, so a checkpoint cannot run code (PyTorch's
``torch.load(weights_only=True)`` guarantee). A tensor saved twice (a tied weight) is stored once
and loads as one tensor.

``jg.load`` also reads PyTorch checkpoints (``torch.save`` files) when PyTorch is installed: they
go through ``torch.load(weights_only=True)`` (PyTorch's own safe unpickler, whose errors pass
through; ``weights_only=False`` allows arbitrary pickles, as with torch) and every ``torch.Tensor``
in the result becomes a jgrad tensor (a ``torch.nn.Parameter`` a ``jg.nn.Parameter``), so
``model.load_state_dict(jg.load("ckpt.pt"))`` works on a jgrad model with PyTorch's names.

Imports ``_tensor``, ``_device`` and ``_dtype``; ``jgrad.ops.creation`` and ``jgrad.nn.parameter`` at
the call (it sits at the top, beside ``nn``).
"""
from __future__ import annotations

import collections
import io
import json
import math
import os
import zipfile

import numpy as np

from . import _dtype
from ._device import device as _device
from ._tensor import Tensor

__all__ = ["save", "load"]

_MANIFEST = "jgrad/manifest.json"
_FORMAT = "jgrad-checkpoint"
_VERSION = 1
_EXTRA = 'pip install "jgrad[torch]"'


class _Writer:
    def __init__(self, archive):
        self.archive = archive
        self.seen = {}  # id(tensor) -> its entry (a tensor saved twice is stored once)
        self.keep = []  # keeps saved objects alive so that ids stay unique while saving

    def encode(self, obj):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"float": repr(obj)}
        if isinstance(obj, complex):
            return {"complex": [self.encode(obj.real), self.encode(obj.imag)]}
        if isinstance(obj, Tensor):
            return self.tensor(obj)
        if isinstance(obj, np.ndarray):
            return {"ndarray": self.data(obj)}
        if isinstance(obj, np.generic):
            return self.encode(obj.item())
        if isinstance(obj, _dtype.dtype):
            return {"dtype": obj.name}
        if isinstance(obj, _device):
            return {"device": str(obj)}
        if isinstance(obj, collections.Counter):
            return {"counter": [[self.encode(k), self.encode(v)] for k, v in obj.items()]}
        if isinstance(obj, dict):
            out = {"ordered" if isinstance(obj, collections.OrderedDict) else "dict":
                   [[self.encode(k), self.encode(v)] for k, v in obj.items()]}
            meta = getattr(obj, "_metadata", None)
            if meta is not None:
                out["metadata"] = self.encode(meta)
            return out
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return {"tuple": [self.encode(v) for v in obj]}  # a named tuple loads as a plain tuple
        if isinstance(obj, tuple):
            return {"tuple": [self.encode(v) for v in obj]}
        if isinstance(obj, list):
            return {"list": [self.encode(v) for v in obj]}
        raise TypeError(f"jg.save cannot store an object of type {type(obj).__module__}.{type(obj).__qualname__}: "
                        "a checkpoint holds tensors, NumPy arrays, numbers, strings, None, dtypes, devices and "
                        "dicts, lists and tuples of them (no pickle, so loading never runs code). Save its "
                        "state_dict() or convert it to a dict.")

    def data(self, arr):
        arr = np.asarray(arr)
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
        name = f"jgrad/data/{len(self.keep)}"
        self.keep.append(arr)
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        self.archive.writestr(name, raw)
        return {"key": name, "dtype": _dtype.from_np(arr.dtype).name, "shape": list(arr.shape)}

    def tensor(self, t):
        ref = self.seen.get(id(t))
        if ref is not None:
            return {"tensor_ref": ref}
        from .nn.parameter import Parameter
        value = np.asarray(t.detach().cpu().numpy())
        entry = self.data(value)
        entry.update(device=str(t.device), requires_grad=bool(t.requires_grad),
                     parameter=isinstance(t, Parameter))
        index = len(self.seen)
        self.seen[id(t)] = index
        self.keep.append(t)
        return {"tensor": entry, "id": index}


def save(obj, f) -> None:
    """Save ``obj`` (a state_dict, an optimizer's, nested dicts/lists of tensors ...) to the path or file ``f``."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            save(obj, fh)
        return
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as archive:
        writer = _Writer(archive)
        root = writer.encode(obj)
        manifest = {"format": _FORMAT, "version": _VERSION, "root": root}
        archive.writestr(_MANIFEST, json.dumps(manifest, allow_nan=False))


_DTYPES = {d.name: d for d in _dtype.ALL}


def _dtype_named(name):
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"jg.load: malformed manifest (unknown dtype {name!r}).") from None


def _check_map_location(loc):
    if loc is not None and not isinstance(loc, (str, _device, dict)):
        raise TypeError(f"jg.load: map_location must be a device, a device name or a dict from saved to target device "
                        f"names, not {type(loc).__name__}.")


class _Reader:
    def __init__(self, archive, map_location):
        self.archive = archive
        self.map_location = map_location
        self.tensors = {}

    def device(self, saved):
        loc = self.map_location
        if loc is None:
            target = saved
        elif isinstance(loc, dict):
            target = loc.get(saved, saved)
        else:
            target = loc
        try:
            return _device(target)
        except Exception as e:  # noqa: BLE001 - re-raised with the remedy
            raise RuntimeError(f"jg.load: the checkpoint has a tensor on {saved}, which this machine does not have "
                               f"({e}); pass map_location='cpu' (or another device) to jg.load.") from None

    def array(self, entry):
        dt = _dtype_named(entry["dtype"]).np
        shape = tuple(int(s) for s in entry["shape"])
        raw = self.archive.read(entry["key"])
        if len(raw) != math.prod(shape) * dt.itemsize:
            raise RuntimeError(f"jg.load: entry {entry['key']} holds {len(raw)} bytes, but a {entry['dtype']} "
                               f"tensor of shape {list(shape)} needs {math.prod(shape) * dt.itemsize}: the file is "
                               "damaged.")
        return np.frombuffer(raw, dt.newbyteorder("<")).astype(dt).reshape(shape)

    def decode(self, node):
        if node is None or isinstance(node, (bool, str, int, float)):
            return node
        if isinstance(node, list):
            raise ValueError("jg.load: malformed manifest (a bare list).")
        ((kind, value), *rest) = node.items()
        if kind == "float":
            return float(value)
        if kind == "complex":
            return complex(self.decode(value[0]), self.decode(value[1]))
        if kind == "tensor":
            return self.tensor(value, node["id"])
        if kind == "tensor_ref":
            return self.tensors[value]
        if kind == "ndarray":
            return self.array(value)
        if kind == "dtype":
            return _dtype_named(value)
        if kind == "device":
            return _device(value)
        if kind == "counter":
            return collections.Counter({self.decode(k): self.decode(v) for k, v in value})
        if kind in ("dict", "ordered"):
            out = (collections.OrderedDict if kind == "ordered" else dict)(
                (self.decode(k), self.decode(v)) for k, v in value)
            if "metadata" in node:
                out._metadata = self.decode(node["metadata"])
            return out
        if kind == "tuple":
            return tuple(self.decode(v) for v in value)
        if kind == "list":
            return [self.decode(v) for v in value]
        raise ValueError(f"jg.load: malformed manifest (unknown entry kind {kind!r}).")

    def tensor(self, entry, index):
        from .nn.parameter import Parameter
        from .ops.creation import tensor
        t = tensor(self.array(entry), device=self.device(entry["device"]))
        if entry.get("parameter"):
            t = Parameter(t, requires_grad=entry.get("requires_grad", True))
        elif entry.get("requires_grad"):
            t.requires_grad_(True)
        self.tensors[index] = t
        return t


def load(f, map_location=None, weights_only=None, **kwargs):
    """Load what ``jg.save`` (or, with PyTorch installed, ``torch.save``) wrote to the path or file ``f``.

    ``map_location``: a device (``"cpu"``, ``jg.device(...)``) or a dict from saved to target device
    names; default: the device each tensor was saved from.
    jgrad checkpoints never unpickle; PyTorch checkpoints load through ``torch.load(weights_only=True)``
    unless ``weights_only=False`` is passed.
    """
    _check_map_location(map_location)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return load(fh, map_location, weights_only, **kwargs)
    data = f.read()
    buf = io.BytesIO(data)
    if zipfile.is_zipfile(buf):
        with zipfile.ZipFile(buf) as archive:
            if _MANIFEST in archive.namelist():
                manifest = json.loads(archive.read(_MANIFEST))
                if manifest.get("format") != _FORMAT:
                    raise ValueError(f"jg.load: {_MANIFEST} is not a jgrad checkpoint manifest.")
                if manifest.get("version", 0) > _VERSION:
                    raise ValueError(f"jg.load: checkpoint format version {manifest['version']} is newer than this "
                                     f"jgrad reads ({_VERSION}); upgrade jgrad.")
                return _Reader(archive, map_location).decode(manifest["root"])
    return _load_torch(io.BytesIO(data), map_location, weights_only, **kwargs)


def _load_torch(buf, map_location, weights_only, **kwargs):
    try:
        import torch
    except ImportError:
        raise ImportError(f"jg.load: this file is not a jgrad checkpoint; if it is a PyTorch checkpoint, reading it "
                          f"needs PyTorch, which is not installed: {_EXTRA}") from None
    torch_loc = map_location
    if isinstance(map_location, (str, _device)):
        torch_loc = "cpu"  # moved to the jgrad device afterwards
    elif isinstance(map_location, dict):
        torch_loc = {k.replace("gpu", "cuda"): v.replace("gpu", "cuda") for k, v in map_location.items()}
    # torch.load's own errors pass through unchanged (pickle.UnpicklingError for what weights_only refuses)
    obj = torch.load(buf, map_location=torch_loc, weights_only=True if weights_only is None else weights_only,
                     **kwargs)
    return _from_torch(obj, torch, map_location)


def _from_torch(obj, torch, map_location):
    """Every torch.Tensor in ``obj`` (nested containers) as a jgrad tensor, copied through host memory."""
    if isinstance(obj, torch.Tensor):
        return _torch_tensor(obj, torch, map_location)
    if isinstance(obj, collections.OrderedDict):
        out = collections.OrderedDict((k, _from_torch(v, torch, map_location)) for k, v in obj.items())
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata
        return out
    if isinstance(obj, dict):
        return {k: _from_torch(v, torch, map_location) for k, v in obj.items()}
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_from_torch(v, torch, map_location) for v in obj)
    if isinstance(obj, list):
        return [_from_torch(v, torch, map_location) for v in obj]
    return obj


def _torch_tensor(t, torch, map_location):
    from .nn.parameter import Parameter
    from .ops.creation import tensor
    x = t.detach().cpu()
    if x.dtype == torch.bfloat16:
        import ml_dtypes
        arr = x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    else:
        arr = x.numpy()
    if isinstance(map_location, (str, _device)):
        dev = _device(map_location)
    else:
        dev = _device("cpu" if t.device.type == "cpu" else f"gpu:{t.device.index or 0}")
    out = tensor(arr, device=dev)
    if isinstance(t, torch.nn.Parameter):
        return Parameter(out, requires_grad=t.requires_grad)
    return out.requires_grad_(True) if t.requires_grad and out.dtype.is_floating_point else out
