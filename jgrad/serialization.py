"""``jg.save`` / ``jg.load``: checkpoints that cannot run code unless asked, written atomically.

A jgrad checkpoint is a zip archive: ``jgrad/manifest.json`` describes the saved object (nested
dicts, OrderedDicts with their ``_metadata``, lists, tuples, Counters, numbers, strings, None,
dtypes, devices, NumPy arrays and tensors) and every tensor's bytes are an entry of their own
(``jgrad/data/<n>``, raw, little-endian) with its dtype and shape in the manifest. A tensor saved twice
(a tied weight) is stored once and loads as one tensor. Anything else (a whole module, an
``argparse.Namespace``) is pickled as PyTorch pickles it, into an entry ``jgrad/pickle/<n>`` whose tensors
and arrays are stored as the manifest's are (persistent ids); ``jg.load`` unpickles it only with
``weights_only=False`` or for globals allowed by ``add_safe_globals``/``safe_globals`` (PyTorch's rule and
message): by default loading runs no code.

Saving to a path writes a temporary file in the target's directory, fsyncs it and renames it over the
target, so a save that fails or is interrupted leaves the old file as it was. Loading bounds every entry
it inflates by the size the manifest declares, checking the archive's own sizes first (a zip bomb is
refused before anything is inflated), and refuses any archive or manifest that is not what ``jg.save``
writes with one error, ``RuntimeError("the checkpoint file is damaged: <what>")``; a damaged jgrad
checkpoint is never handed to ``torch.load``.

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
import pickle
import re
import tempfile
import zipfile

import numpy as np

from .core import _dtype
from .core._device import device as _device
from .core._tensor import Tensor
from .nn.parameter import Parameter as _Parameter
from .ops.creation import tensor as _tensor_of

__all__ = ["save", "load", "add_safe_globals", "clear_safe_globals", "get_safe_globals", "safe_globals",
           "get_unsafe_globals_in_checkpoint"]

_MANIFEST = "jgrad/manifest.json"
_FORMAT = "jgrad-checkpoint"
_VERSION = 2          # 2: entries may be pickles (a version-1 reader refuses them)
_EXTRA = 'pip install "jgrad[torch]"'
DEFAULT_PROTOCOL = 2  # PyTorch's pickle protocol


class _Writer:
    def __init__(self, archive, protocol=DEFAULT_PROTOCOL):
        self.archive = archive
        self.protocol = protocol
        self.seen = {}  # id(tensor) -> its entry (a tensor saved twice is stored once)
        self.keep = []  # keeps saved objects alive so that ids stay unique while saving
        self.pickles = 0

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
        if isinstance(obj, tuple):  # a named tuple loads as a plain tuple
            return {"tuple": [self.encode(v) for v in obj]}
        if isinstance(obj, list):
            return {"list": [self.encode(v) for v in obj]}
        return self.pickled(obj)  # a module, a named tuple, a user's class: pickled, as PyTorch does

    def pickled(self, obj):
        """``obj`` pickled into an entry of its own; its tensors and arrays are stored as the manifest's are."""
        refs = []
        writer = self

        class Pickler(pickle.Pickler):
            def persistent_id(self, x):
                if isinstance(x, Tensor):
                    refs.append(writer.tensor(x))
                elif type(x) is np.ndarray:
                    refs.append({"ndarray": writer.data(x)})
                else:
                    return None
                return ("jgrad", len(refs) - 1)

        buf = io.BytesIO()
        Pickler(buf, protocol=self.protocol).dump(obj)
        name = f"jgrad/pickle/{self.pickles}"
        self.pickles += 1
        self.archive.writestr(name, buf.getvalue())
        return {"pickle": {"key": name, "size": buf.tell(), "refs": refs}}

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
        value = np.asarray(t.detach().cpu().numpy())
        entry = self.data(value)
        entry.update(device=str(t.device), requires_grad=bool(t.requires_grad),
                     parameter=isinstance(t, _Parameter))
        index = len(self.seen)
        self.seen[id(t)] = index
        self.keep.append(t)
        return {"tensor": entry, "id": index}


def _write_archive(obj, fh, protocol):
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as archive:
        writer = _Writer(archive, protocol)
        root = writer.encode(obj)
        manifest = {"format": _FORMAT, "version": _VERSION if writer.pickles else 1, "root": root}
        archive.writestr(_MANIFEST, json.dumps(manifest, allow_nan=False))


def save(obj, f, pickle_module=None, pickle_protocol=DEFAULT_PROTOCOL, **kwargs) -> None:
    """Save ``obj`` (a state_dict, an optimizer's, nested dicts/lists of tensors, a module ...) to the path or
    file ``f``, as ``torch.save``.

    To a path, the checkpoint is written to a temporary file in the same directory, fsynced and renamed over
    ``f``: a save that fails (an object that cannot be pickled, a full disk, Ctrl-C) leaves ``f`` as it was.
    To a file object, it is written once complete.
    """
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("jg.save: only the standard pickle module is supported (pickle_module=pickle).")
    if isinstance(f, (str, os.PathLike)):
        _save_atomically(obj, os.fspath(f), pickle_protocol)
        return
    buf = io.BytesIO()
    _write_archive(obj, buf, pickle_protocol)
    f.write(buf.getbuffer())


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _umask()


def _save_atomically(obj, path, protocol):
    path = os.path.realpath(path)  # through a symlink: replace what it points to, as open() would write it
    folder, name = os.path.split(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    except PermissionError:  # a directory we may not create in: write in place, once the archive is complete
        buf = io.BytesIO()
        _write_archive(obj, buf, protocol)
        with open(path, "wb") as fh:
            fh.write(buf.getbuffer())
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            _write_archive(obj, fh, protocol)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            mode = os.stat(path).st_mode & 0o7777  # the old file's permissions; else what open() would give
        except FileNotFoundError:
            mode = 0o666 & ~_UMASK
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # the rename itself survives a crash once the directory is synced
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


# ---- safe globals (PyTorch's weights_only allowlist) ---------------------------------------------------
_safe_globals: list = []


def add_safe_globals(safe_globals) -> None:
    """Allow these globals (classes, functions, or ``(obj, "module.name")`` pairs) in ``weights_only`` loads."""
    _safe_globals.extend(safe_globals)


def clear_safe_globals() -> None:
    """Forget the globals ``add_safe_globals`` allowed."""
    _safe_globals.clear()


def get_safe_globals() -> list:
    """The globals ``add_safe_globals`` (and open ``safe_globals`` blocks) allowed."""
    return list(_safe_globals)


class safe_globals:
    """Context manager: allow these globals in ``weights_only`` loads inside the block."""

    def __init__(self, safe_globals):
        self.globals = list(safe_globals)

    def __enter__(self):
        _safe_globals.extend(self.globals)
        return self

    def __exit__(self, *exc):
        for g in self.globals:
            _safe_globals.remove(g)
        return False


def _global_name(g):
    if isinstance(g, tuple):
        return g[1]
    return f"{g.__module__}.{g.__qualname__}"


# What a weights_only load allows by default: containers and jgrad's own dtypes and devices.
_DEFAULT_SAFE = {"collections.OrderedDict": collections.OrderedDict, "collections.Counter": collections.Counter,
                 "builtins.set": set, "builtins.frozenset": frozenset, "builtins.complex": complex,
                 "builtins.slice": slice, "builtins.range": range, "builtins.bytearray": bytearray,
                 "jgrad.core._dtype._from_name": _dtype._from_name, "jgrad.core._device.device": _device}

# jgrad's private modules before they moved into packages (docs/design.md, "The house"): a pickle written then
# names a dtype as ``jgrad._dtype._from_name``, a device as ``jgrad._device.device``; it loads as it did.
_MOVED = {f"jgrad.{m}": f"jgrad.{pkg}.{m}" for pkg, names in (
    ("core", "_accelerators _device _dtype _factories _format _host_copies _idmap _layout _recorder _tensor _tls"),
    ("runtime", "_backward_plan _capture _checks _compile _compiled _dispatch _dlpack _graphed _kernel_cache "
                "_segment _segment_fail _segment_info _segment_run _tape _view_writes _views"),
    ("func", "_export _functional _vmap")) for m in names.split()}


def _weights_only_error(name):
    return pickle.UnpicklingError(
        "Weights only load failed. This file can still be loaded, to do so you have two options, do those steps "
        "only if you trust the source of the checkpoint. \n\t(1) As in PyTorch 2.6 and later, `weights_only` "
        "defaults to True. Re-running `jg.load` with `weights_only` set to `False` will likely succeed, but it "
        "can result in arbitrary code execution. Do it only if you got the file from a trusted source.\n\t(2) "
        "Alternatively, to load with `weights_only=True` please check the recommended steps in the following "
        f"error message.\n\tWeightsUnpickler error: Unsupported global: GLOBAL {name} was not an allowed global "
        f"by default. Please use `jgrad.serialization.add_safe_globals([{name}])` or the "
        f"`jgrad.serialization.safe_globals([{name}])` context manager to allowlist this global if you trust this "
        "class/function.\n\nCheck the documentation of jg.load (docs/porting.md, Checkpoints) to learn more "
        "about types accepted by default with weights_only.")


def _resolve_global(module, name, weights_only):
    import _compat_pickle
    if (module, name) in _compat_pickle.NAME_MAPPING:  # protocol-2 names (__builtin__.set)
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    module = _compat_pickle.IMPORT_MAPPING.get(module, module)
    module = _MOVED.get(module, module)
    full = f"{module}.{name}"
    if not weights_only:
        return None
    hit = _DEFAULT_SAFE.get(full)
    if hit is not None:
        return hit
    for g in _safe_globals:
        if _global_name(g) == full:
            return g[0] if isinstance(g, tuple) else g
    raise _Refused(_weights_only_error(full))


class _Refused(Exception):
    """An error of loading that is not damage (a weights_only refusal, a user's class failing to unpickle)."""

    def __init__(self, error):
        super().__init__(error)
        self.error = error


class _Damaged(Exception):
    """The archive or its manifest is not what jg.save writes."""

_DTYPES = {d.name: d for d in _dtype.ALL}
#: Largest manifest read (bytes): a checkpoint's structure, not its tensors, is in it.
max_manifest_bytes = 1 << 30
_MAX_RATIO = 1032  # deflate inflates at most ~1032:1; an entry declaring more is a bomb
_DATA_NAME = re.compile(r"jgrad/(data|pickle)/\d+")
_KINDS = {"float", "complex", "tensor", "tensor_ref", "ndarray", "dtype", "device", "counter", "dict", "ordered",
          "tuple", "list", "pickle"}


def _check_map_location(loc):
    if loc is not None and not isinstance(loc, (str, _device, dict)):
        raise TypeError(f"jg.load: map_location must be a device, a device name or a dict from saved to target device "
                        f"names, not {type(loc).__name__}.")


def _expect(cond, what):
    if not cond:
        raise _Damaged(what)


class _Reader:
    def __init__(self, archive, map_location, weights_only):
        self.archive = archive
        self.map_location = map_location
        self.weights_only = weights_only
        self.tensors = {}
        self.infos = {i.filename: i for i in archive.infolist()}

    def entry(self, name, size):
        """The bytes of entry ``name``, which the manifest says hold ``size``: sizes are checked before anything
        is inflated, and no more than ``size`` bytes ever are."""
        _expect(isinstance(name, str) and _DATA_NAME.fullmatch(name), f"an entry name {name!r} that jg.save never "
                                                                      "writes")
        info = self.infos.get(name)
        _expect(info is not None, f"the entry {name} the manifest names is missing")
        _expect(info.file_size == size, f"the entry {name} holds {info.file_size} bytes where the manifest declares "
                                        f"{size}")
        _expect(info.compress_type == zipfile.ZIP_STORED or info.file_size <= _MAX_RATIO * max(info.compress_size, 1),
                f"the entry {name} would inflate {info.compress_size} bytes to {info.file_size} bytes (a zip bomb)")
        with self.archive.open(info) as fh:
            raw = fh.read(size + 1)  # reading to the end checks the entry's CRC
        _expect(len(raw) == size, f"the entry {name} holds {len(raw)} bytes where the manifest declares {size}")
        return raw

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
            raise _Refused(RuntimeError(f"jg.load: the checkpoint has a tensor on {saved}, which this machine does "
                                        f"not have ({e}); pass map_location='cpu' (or another device) to jg.load."))

    def array(self, entry):
        _expect(isinstance(entry, dict) and {"key", "dtype", "shape"} <= entry.keys(), "an array without its key, "
                "dtype or shape")
        name, shape = entry["dtype"], entry["shape"]
        _expect(name in _DTYPES, f"an unknown dtype {name!r}")
        _expect(isinstance(shape, list) and all(type(n) is int and 0 <= n < 2 ** 62 for n in shape),
                f"a shape {shape!r} that is not a list of sizes")
        dt = _DTYPES[name].np
        size = math.prod(shape) * dt.itemsize
        raw = self.entry(entry["key"], size)
        return np.frombuffer(raw, dt.newbyteorder("<")).astype(dt).reshape(shape)

    def decode(self, node):
        if node is None or isinstance(node, (bool, str, int, float)):
            return node
        _expect(isinstance(node, dict) and node, f"a {type(node).__name__} where an entry belongs")
        kind, value = next(iter(node.items()))
        _expect(kind in _KINDS, f"an unknown entry kind {kind!r}")
        if kind == "float":
            _expect(value in ("inf", "-inf", "nan"), f"a float {value!r}")
            return float(value)
        if kind == "complex":
            _expect(isinstance(value, list) and len(value) == 2, "a complex number without two parts")
            re_, im = self.decode(value[0]), self.decode(value[1])
            _expect(isinstance(re_, (int, float)) and isinstance(im, (int, float)), "a complex number's parts")
            return complex(re_, im)
        if kind == "tensor":
            _expect(isinstance(node.get("id"), int) and node["id"] not in self.tensors, "a tensor's id")
            return self.tensor(value, node["id"])
        if kind == "tensor_ref":
            _expect(isinstance(value, int) and value in self.tensors, f"a reference to tensor {value!r}, which "
                                                                      "comes nowhere before it")
            return self.tensors[value]
        if kind == "ndarray":
            return self.array(value)
        if kind == "dtype":
            _expect(value in _DTYPES, f"an unknown dtype {value!r}")
            return _DTYPES[value]
        if kind == "device":
            _expect(isinstance(value, str), "a device that is not a name")
            return _device(value)
        if kind == "pickle":
            return self.unpickle(value)
        _expect(isinstance(value, list), f"a {kind} that is not a list")
        if kind in ("tuple", "list"):
            items = [self.decode(v) for v in value]
            return tuple(items) if kind == "tuple" else items
        _expect(all(isinstance(kv, list) and len(kv) == 2 for kv in value), f"a {kind} item that is not a pair")
        pairs = [(self.decode(k), self.decode(v)) for k, v in value]
        _expect(all(isinstance(k, collections.abc.Hashable) for k, _ in pairs), f"a {kind} key that is not hashable")
        if kind == "counter":
            return collections.Counter(dict(pairs))
        out = (collections.OrderedDict if kind == "ordered" else dict)(pairs)
        if "metadata" in node:
            out._metadata = self.decode(node["metadata"])
        return out

    def tensor(self, entry, index):
        _expect(isinstance(entry, dict) and isinstance(entry.get("device"), str), "a tensor without its device")
        t = _tensor_of(self.array(entry), device=self.device(entry["device"]))
        if entry.get("parameter"):
            t = _Parameter(t, requires_grad=bool(entry.get("requires_grad", True)))
        elif entry.get("requires_grad"):
            _expect(t.dtype.is_floating_point or t.dtype.is_complex, "an integer tensor that requires grad")
            t.requires_grad_(True)
        self.tensors[index] = t
        return t

    def unpickle(self, value):
        _expect(isinstance(value, dict) and isinstance(value.get("size"), int) and isinstance(value.get("refs"), list),
                "a pickle entry without its size or references")
        raw = self.entry(value.get("key"), value["size"])
        refs = [self.decode(r) for r in value["refs"]]  # in the order they were saved (tensor ids)
        weights_only = self.weights_only

        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                hit = _resolve_global(module, name, weights_only)
                return hit if hit is not None else super().find_class(_MOVED.get(module, module), name)

            def persistent_load(self, pid):
                _expect(isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "jgrad" and type(pid[1]) is int
                        and 0 <= pid[1] < len(refs), f"a pickle referring to {pid!r}")
                return refs[pid[1]]

        try:
            return Unpickler(io.BytesIO(raw)).load()
        except (_Refused, _Damaged):
            raise
        except Exception as e:  # noqa: BLE001 - the CRC held: a user's class failing to rebuild, not damage
            raise _Refused(e) from None


def _names_jgrad(data) -> bool:
    """Whether ``data`` is a jgrad checkpoint, however damaged: the manifest's name in a zip record (a local
    header or the central directory; one damaged byte cannot hit both)."""
    name = _MANIFEST.encode()
    at = data.find(name)
    while at >= 0:
        if data[at - 30:at - 26] == b"PK\x03\x04" or data[at - 46:at - 42] == b"PK\x01\x02":
            return True
        at = data.find(name, at + 1)
    # cut short before the manifest: its first entry is one of jg.save's (a torch archive's is <name>/data.pkl)
    n = int.from_bytes(data[26:28], "little")
    return data[:4] == b"PK\x03\x04" and _DATA_NAME.fullmatch(data[30:30 + n].decode("latin-1")) is not None


def _a_broken_zip(data) -> bool:
    """Whether ``data`` begins as a zip archive (or the start of one) that cannot be read."""
    if data[:4] != b"PK\x03\x04"[:len(data[:4])]:
        return False
    try:
        zipfile.ZipFile(io.BytesIO(data)).close()
    except Exception:  # noqa: BLE001 - whatever the damage
        return True
    return False


def _describe(e):
    if isinstance(e, _Damaged):
        return str(e)
    if isinstance(e, RecursionError):
        return "the manifest nests too deeply"
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **kwargs):
    """Load what ``jg.save`` (or, with PyTorch installed, ``torch.save``) wrote to the path or file ``f``.

    ``map_location``: a device (``"cpu"``, ``jg.device(...)``) or a dict from saved to target device
    names; default: the device each tensor was saved from. ``weights_only`` (default True, as PyTorch's):
    pickled objects in the checkpoint are rebuilt only from the globals ``add_safe_globals`` allows; False
    unpickles anything (only for files you trust). PyTorch checkpoints load through ``torch.load``.
    """
    _check_map_location(map_location)
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("jg.load: only the standard pickle module is supported (pickle_module=pickle).")
    # mmap: the file is read once either way (jgrad's arrays live on the device, not in a mapped file)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return load(fh, map_location, pickle_module, weights_only=weights_only, mmap=mmap, **kwargs)
    data = f.read()
    if not data:
        raise RuntimeError("the checkpoint file is damaged: it is empty")
    if not _names_jgrad(data):
        if _a_broken_zip(data):  # jgrad's or PyTorch's zip checkpoint, cut short or damaged
            raise RuntimeError("the checkpoint file is damaged: it is not a complete zip archive")
        return _load_torch(io.BytesIO(data), map_location, weights_only, **kwargs)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            reader = _Reader(archive, map_location, weights_only is not False)
            info = reader.infos.get(_MANIFEST)
            _expect(info is not None, f"it has no {_MANIFEST}")
            _expect(info.file_size <= max_manifest_bytes, f"its manifest declares {info.file_size} bytes")
            _expect(info.compress_type == zipfile.ZIP_STORED or info.file_size <= _MAX_RATIO * max(info.compress_size, 1),
                    f"its manifest would inflate {info.compress_size} bytes to {info.file_size} bytes (a zip bomb)")
            with archive.open(info) as fh:
                text = fh.read(info.file_size + 1)
            _expect(len(text) == info.file_size, "its manifest is shorter than declared")
            manifest = json.loads(text)
            _expect(isinstance(manifest, dict) and manifest.get("format") == _FORMAT and "root" in manifest,
                    f"{_MANIFEST} is not a jgrad checkpoint manifest")
            version = manifest.get("version")
            _expect(type(version) is int and version >= 1, f"a format version {version!r}")
            if version > _VERSION:
                raise _Refused(ValueError(f"jg.load: checkpoint format version {version} is newer than this jgrad "
                                          f"reads ({_VERSION}); upgrade jgrad."))
            return reader.decode(manifest["root"])
    except _Refused as e:
        raise e.error from None
    except Exception as e:  # noqa: BLE001 - whatever a damaged archive raises, said one way
        raise RuntimeError(f"the checkpoint file is damaged: {_describe(e)}") from None


def get_unsafe_globals_in_checkpoint(f) -> list:
    """The globals a checkpoint's pickles name that a ``weights_only`` load would refuse (``"module.name"``)."""
    import pickletools
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return get_unsafe_globals_in_checkpoint(fh)
    out = []
    with zipfile.ZipFile(io.BytesIO(f.read())) as archive:
        for name in archive.namelist():
            if not name.startswith("jgrad/pickle/"):
                continue
            stack = []
            for op, arg, _ in pickletools.genops(archive.read(name)):
                if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
                    stack.append(arg)
                names = [arg.replace(" ", ".")] if op.name == "GLOBAL" else \
                    [f"{stack[-2]}.{stack[-1]}"] if op.name == "STACK_GLOBAL" and len(stack) >= 2 else []
                for full in names:
                    try:
                        _resolve_global(*full.rsplit(".", 1), True)
                    except _Refused:
                        if full not in out:
                            out.append(full)
    return out


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
    out = _tensor_of(arr, device=dev)
    if isinstance(t, torch.nn.Parameter):
        return _Parameter(out, requires_grad=t.requires_grad)
    return out.requires_grad_(True) if t.requires_grad and out.dtype.is_floating_point else out
