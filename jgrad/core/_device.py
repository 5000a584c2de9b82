"""Devices: ``jg.device("cpu")``, ``jg.device("gpu:0")`` (``"cuda:0"`` is an alias).

A jgrad device names one JAX device of this process (indices count the devices this process
addresses, as PyTorch's ``cuda:0`` is a process's first GPU). Virtual CPU devices (from
``--xla_force_host_platform_device_count``) are ``cpu:1``, ``cpu:2``, ...

A ``MeshDevice`` is the device of tensors distributed over a ``jax.sharding.Mesh`` (DTensors,
``jgrad.distributed.tensor``): ops on them run as one SPMD program over the mesh.

Imports nothing of jgrad; ``resolve_devices`` (``_dispatch``'s cold path for an op on tensors of several
devices) looks at tensors through ``Tensor``, which ``_tensor`` installs when it loads.
"""
from __future__ import annotations

import functools

import jax
import numpy as np

_ALIASES = {"cuda": "gpu", "rocm": "gpu", "gpu": "gpu", "cpu": "cpu", "tpu": "tpu"}


class device:
    """A device: ``type`` ('cpu', 'gpu', 'tpu') and ``index``."""

    __slots__ = ("type", "index", "_jax", "__weakref__")

    def __new__(cls, spec="cpu", index=None):
        if isinstance(spec, device):
            return spec
        mesh_device = getattr(spec, "_jgrad_device", None)  # a jgrad.distributed.DeviceMesh
        if mesh_device is not None:
            return mesh_device
        if isinstance(spec, int) and index is None:
            spec, index = _default_accelerator(), spec
        if not isinstance(spec, str):
            raise TypeError(f"device() expects a string such as 'cpu' or 'gpu:0', got {spec!r}")
        kind, _, idx = spec.partition(":")
        if kind not in _ALIASES:
            raise RuntimeError(
                f"Expected one of cpu, gpu, cuda, tpu device type at start of device string: {spec}")
        if idx:
            if index is not None:
                raise RuntimeError(f"device string {spec!r} already has an index; do not pass index={index}")
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{spec}'")
            index = int(idx)
        kind = _ALIASES[kind]
        return _intern(kind, (_current_index.get(kind, 0) if index is None else int(index)))

    def __repr__(self):
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self):
        return f"{self.type}:{self.index}" if self.type != "cpu" or self.index else "cpu"

    def __reduce__(self):
        return (device, (str(self),))

    @property
    def _placement(self):
        """What ``jax.device_put`` takes to put an array on this device."""
        return self.jax_device

    @property
    def jax_device(self) -> jax.Device:
        """The JAX device this names (raises if it does not exist here)."""
        if self._jax is None:
            devs = _devices(self.type)
            if self.index >= len(devs):
                raise RuntimeError(
                    f"{self} is not available: JAX sees {len(devs)} {self.type} device(s). "
                    + ("Install jax with GPU support (pip install 'jax[cuda13]')." if self.type == "gpu" and not devs
                       else "Use an index below the device count."))
            self._jax = devs[self.index]
        return self._jax


# The device an index-less "gpu"/"cuda"/"tpu" names: ``jgrad.cuda.set_device`` (``torch.cuda.set_device``) changes it
# for the whole process (PyTorch's is per thread).
_current_index: dict = {}


@functools.lru_cache(maxsize=None)
def _intern(kind, index):
    d = object.__new__(device)
    d.type, d.index, d._jax = kind, index, None
    return d


@functools.lru_cache(maxsize=None)
def _devices(kind):
    """The JAX devices of ``kind`` that this process addresses (all of them in a single-process run)."""
    try:
        return tuple(jax.local_devices(backend=kind))
    except RuntimeError:
        return ()


def _default_accelerator():
    return "gpu" if _devices("gpu") else "cpu"


_BY_JAX: dict = {}


def from_jax(d: jax.Device) -> device:
    """The jgrad device naming JAX device ``d``."""
    try:
        return _BY_JAX[d]
    except KeyError:
        kind = "gpu" if d.platform in ("gpu", "cuda", "rocm") else d.platform
        out = _intern(kind, _devices(kind).index(d))
        out._jax = d
        _BY_JAX[d] = out
        return out


_default_device = [None]


def get_default_device() -> device:
    """The device new tensors go to: 'cpu', as in PyTorch, unless changed."""
    if _default_device[0] is None:
        _default_device[0] = device("cpu")
    return _default_device[0]


def set_default_device(d) -> None:
    """Set the device factories use when none is given (``torch.set_default_device``)."""
    _default_device[0] = device(d) if d is not None else None


def is_available(kind: str = "gpu") -> bool:
    """Whether JAX sees at least one device of this kind."""
    return bool(_devices(_ALIASES.get(kind, kind)))


def device_count(kind: str = "gpu") -> int:
    return len(_devices(_ALIASES.get(kind, kind)))


# ---- meshes ------------------------------------------------------------------------------
class MeshDevice(device):
    """The device of tensors distributed over a ``jax.sharding.Mesh`` (DTensors).

    One per mesh. ``type`` and ``index`` are those of ``local``, the mesh's first device that this
    process addresses, which ``Tensor.device`` reports (as PyTorch's DTensor reports its rank's
    device). For streams, segments (tiered execution) and the device check of every op it is a
    device of its own: an op on DTensors is one SPMD launch over the whole mesh.
    """

    __slots__ = ("mesh", "local", "sharding", "device_mesh")

    def __new__(cls, mesh):
        md = _MESHES.get(mesh)
        if md is None:
            from jax.sharding import NamedSharding, PartitionSpec
            flat = list(mesh.devices.flat)
            mine = [d for d in flat if d.process_index == jax.process_index()]
            if not mine:
                raise RuntimeError(f"This process (index {jax.process_index()}) addresses none of the devices of "
                                   f"{mesh}: it cannot hold tensors distributed over that mesh.")
            md = object.__new__(cls)
            md.mesh = mesh
            md.local = from_jax(mine[0])
            md.type, md.index, md._jax = md.local.type, md.local.index, mine[0]
            md.sharding = NamedSharding(mesh, PartitionSpec())
            md.device_mesh = None  # the jgrad.distributed.DeviceMesh, set by it
            _MESHES[mesh] = md
        return md

    def __repr__(self):
        return repr(self.device_mesh) if self.device_mesh is not None else f"MeshDevice({self.mesh})"

    __str__ = __repr__

    def __reduce__(self):  # a pickled tensor is a plain tensor on the local device (Tensor.__reduce_ex__)
        return (device, (str(self.local),))

    @property
    def _placement(self):
        """Replicated over the mesh: ``jax.device_put(x, md._placement)`` makes a replicated DTensor's array."""
        return self.sharding


_MESHES: dict = {}
# MeshDevice -> join(plain_tensor, args) -> jax.Array or None: how a plain (not 0-d) tensor joins an op on
# DTensors of that mesh, None refusing it. DistributedDataParallel registers its mesh (nn.parallel.distributed):
# a plain target joins laid out as the batch is, as each PyTorch rank's target meets its own part of the output.
PLAIN_JOINS: dict = {}
Tensor = None  # the tensor's class: jgrad.core._tensor installs it when it loads (the tensor sits above devices)


def resolve_devices(opname, args, arrays):
    """``(device, args)``: the device an op on tensors of several devices runs on (``_dispatch``'s cold path),
    or PyTorch's error, and the args (a joined plain tensor replaced by its DTensor).

    Plain devices: 0-d tensors may live anywhere (PyTorch's CPU scalars); any other mismatch is an error.
    DTensors: all on one mesh; a plain 0-d tensor joins them replicated (its entry of ``arrays`` is
    replaced), a plain tensor on a mesh of ``PLAIN_JOINS`` (DistributedDataParallel's) as that join lays it
    out; any other plain tensor is PyTorch's "got mixed torch.Tensor and DTensor" error.
    """
    first = None
    meshes = []
    for a in args:
        if isinstance(a, Tensor):
            d = a._device
            if first is None:
                first = d
            if type(d) is MeshDevice and a._data is not None and d not in meshes:
                meshes.append(d)
    if not meshes:
        # The op runs where its tensors of one or more dimensions are (a 0-d one first in the arguments does not
        # decide it); a 0-d tensor elsewhere comes along, as PyTorch's CPU scalars do.
        dev = next((a._device for a in args if isinstance(a, Tensor) and a.ndim != 0), first)
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and a._device is not dev and a._data is not None:
                if a.ndim != 0:
                    raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two "
                                       f"devices, {dev} and {a._device}! (in {opname})")
                moved = a.to(dev)  # (a transfer node when it needs a gradient: that comes back to its device)
                args = args[:i] + (moved,) + args[i + 1:]
                arrays[i] = moved._data
        return dev, args
    if len(meshes) > 1:
        raise RuntimeError(f"{opname}: DTensor does not support cross-mesh operation: got DTensors on "
                           f"{meshes[0]} and on {meshes[1]}. Move one onto the other's mesh first "
                           "(t.redistribute(device_mesh, placements)).")
    md = meshes[0]
    for i, a in enumerate(args):
        if isinstance(a, Tensor) and a._device is not md and a._data is not None:
            join = PLAIN_JOINS.get(md) if a.ndim != 0 else None
            joined = join(a, args) if join is not None else None
            if joined is not None:  # the op sees (and saves) the joined DTensor in the plain tensor's place
                args = args[:i] + (joined,) + args[i + 1:]
                arrays[i] = joined._value
                continue
            if a.ndim != 0:
                raise RuntimeError(
                    f"{opname}: got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor "
                    f"before calling distributed operators! (jgrad: a plain Tensor of shape {list(a.shape)} on "
                    f"{a._device} met a DTensor on {md}; distribute it with "
                    "jgrad.distributed.tensor.distribute_tensor(t, device_mesh, placements); 0-d tensors are "
                    "replicated automatically.)")
            arrays[i] = jax.device_put(a._value, md.sharding)
    return md, args


# ---- host arrays onto a device ------------------------------------------------------------------------------------
try:  # the C++ call under jax.device_put for a NumPy array (~20 us, where jax.device_put costs ~120 us: 2-core CPU)
    from jax._src.lib import xla_client as _xc
    _batched_put = [_xc.batched_device_put, False]  # the call, and whether it was checked against jax.device_put
except (ImportError, AttributeError):  # pragma: no cover - another jax layout
    _batched_put = [None, True]
_PUT_AVALS: dict = {}
_SHARDINGS: dict = {}


def single_sharding(jax_device):
    """The ``SingleDeviceSharding`` of ``jax_device``, made once (transfers to it name it at every call)."""
    sh = _SHARDINGS.get(jax_device)
    if sh is None:
        sh = _SHARDINGS[jax_device] = jax.sharding.SingleDeviceSharding(jax_device)
    return sh


def put_host(arr, jax_device):
    """``jax.device_put(arr, jax_device)`` (committed to that device; JAX aliases aligned host memory on a CPU as
    it does there): for a NumPy array, JAX's own C++ transfer without its Python layers, whose cost is most of
    what ``jg.tensor(ndarray)`` costs (a REINFORCE policy step makes one per environment step). Callers run it
    inside jgrad's 64-bit scope: the array's dtype is taken as it is."""
    put = _batched_put[0]
    if put is None or type(arr) is not np.ndarray or not isinstance(jax_device, jax.Device):
        return jax.device_put(arr, jax_device)
    key = (arr.shape, arr.dtype)
    aval = _PUT_AVALS.get(key)
    if aval is None:
        aval = _PUT_AVALS[key] = jax.core.ShapedArray(arr.shape, arr.dtype)
    sharding = single_sharding(jax_device)
    if not _batched_put[1]:
        return _first_put(aval, sharding, arr, jax_device)
    return put(aval, sharding, [arr], [jax_device], True, enable_x64=True)


def _first_put(aval, sharding, arr, jax_device):
    """The first transfer checks the C++ call against jax.device_put (another jax may change its signature or
    meaning) and keeps to the public path if they disagree."""
    want = jax.device_put(arr, jax_device)
    try:
        got = _batched_put[0](aval, sharding, [arr], [jax_device], True, enable_x64=True)
        same = (got.dtype == want.dtype and got.shape == want.shape and got.committed == want.committed
                and got.sharding == want.sharding and np.array_equal(np.asarray(got), np.asarray(want)))
    except Exception:  # noqa: BLE001 - any failure means: the public path
        same = False
    _batched_put[:] = [_batched_put[0] if same else None, True]
    return want
