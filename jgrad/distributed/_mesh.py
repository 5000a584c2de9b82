"""``DeviceMesh`` over a ``jax.sharding.Mesh``; ``init_device_mesh``.

Imports ``_device``, ``_process_group``, ``_cpu_guard`` and ``ops.creation``.
"""
from __future__ import annotations

import math
import threading

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from ..core._device import _ALIASES, MeshDevice
from . import _cpu_guard
from ._process_group import ProcessGroup
from ..ops.creation import tensor


def _kind(device_type):
    if not isinstance(device_type, str) or device_type.split(":")[0] not in _ALIASES:
        raise RuntimeError(f"DeviceMesh: device_type must be one of cpu, cuda, gpu, tpu, got {device_type!r}")
    return _ALIASES[device_type.split(":")[0]]


class DeviceMesh:
    """An n-dimensional array of devices (``torch.distributed.device_mesh.DeviceMesh``).

    ``mesh`` holds device ranks: positions in ``jax.devices(device_type)``, the devices of every
    process (in a one-process run, ``cpu:i`` is rank i). The mesh is a ``jax.sharding.Mesh``
    (``jax_mesh``) whose axes are the mesh dimensions (named ``mesh_dim_names``, else ``dim_0``...)
    in JAX's ``Auto`` mode: ops on tensors distributed over it are compiled by GSPMD, which
    propagates shardings and inserts the collectives. ``jgrad.device(mesh)`` is the device of
    those tensors (their streams: ``jgrad.Stream(mesh)``, ``jgrad.current_stream(mesh)``).
    """

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, _jax_mesh=None):
        self.device_type = device_type
        kind = _kind(device_type)
        ranks = np.asarray(mesh.numpy() if hasattr(mesh, "numpy") else mesh, dtype=np.int64)
        if ranks.ndim == 0:
            ranks = ranks.reshape(1)
        if mesh_dim_names is not None:
            mesh_dim_names = tuple(mesh_dim_names)
            if len(mesh_dim_names) != ranks.ndim:
                raise RuntimeError(f"mesh_dim_names {mesh_dim_names} must have one name per mesh dimension: the mesh "
                                   f"has {ranks.ndim} dimension(s) (shape {tuple(ranks.shape)})")
            if len(set(mesh_dim_names)) != len(mesh_dim_names):
                raise RuntimeError(f"Each mesh_dim_name must be unique, got {mesh_dim_names}")
        self.mesh_dim_names = mesh_dim_names
        self._ranks = ranks
        if _jax_mesh is None:
            devs = jax.devices(kind)
            bad = sorted({int(r) for r in ranks.flat if not 0 <= r < len(devs)})
            if bad:
                raise RuntimeError(f"DeviceMesh: ranks {bad} are not {kind} devices here: JAX sees {len(devs)} {kind} "
                                   f"device(s) in all processes (ranks 0..{len(devs) - 1})")
            if len(set(ranks.ravel().tolist())) != ranks.size:
                raise RuntimeError(f"DeviceMesh: every rank must appear once, got {ranks.tolist()}")
            _jax_mesh = Mesh(np.array([devs[int(r)] for r in ranks.flat], dtype=object).reshape(ranks.shape),
                             self._axis_names(), axis_types=(AxisType.Auto,) * ranks.ndim)
        self._jax_mesh = _jax_mesh
        self._device = MeshDevice(_jax_mesh)
        if self._device.device_mesh is None:
            self._device.device_mesh = self
            _cpu_guard.guard(self._device)

    def _axis_names(self):
        if self.mesh_dim_names is not None:
            return self.mesh_dim_names
        return tuple(f"dim_{i}" for i in range(self._ranks.ndim))

    # ---- what PyTorch's DeviceMesh offers ------------------------------------------------
    @property
    def jax_mesh(self) -> Mesh:
        """The ``jax.sharding.Mesh`` (axis names: ``mesh_dim_names`` or ``dim_0``, ``dim_1``...)."""
        return self._jax_mesh

    @property
    def _jgrad_device(self):
        return self._device  # jgrad.device(mesh)

    @property
    def mesh(self):
        """The device ranks as an integer tensor of the mesh's shape."""
        return tensor(self._ranks)

    @property
    def ndim(self) -> int:
        return self._ranks.ndim

    @property
    def shape(self) -> tuple:
        return tuple(self._ranks.shape)

    def size(self, mesh_dim=None) -> int:
        """The number of devices (along ``mesh_dim`` when given: an index or a name)."""
        return self._ranks.size if mesh_dim is None else self._ranks.shape[self._dim(mesh_dim)]

    def _dim(self, mesh_dim):
        if isinstance(mesh_dim, str):
            if self.mesh_dim_names is None or mesh_dim not in self.mesh_dim_names:
                raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist. Available mesh dimensions are: "
                               f"mesh_dim_names={self.mesh_dim_names}")
            return self.mesh_dim_names.index(mesh_dim)
        d = int(mesh_dim)
        if not -self.ndim <= d < self.ndim:
            raise IndexError(f"mesh_dim {mesh_dim} is out of range for a DeviceMesh of {self.ndim} dimension(s)")
        return d % self.ndim

    def get_coordinate(self):
        """The coordinate of this process's first device of the mesh (None when it has none)."""
        me = jax.process_index()
        for idx in np.ndindex(*self._ranks.shape):
            if self._jax_mesh.devices[idx].process_index == me:
                return list(idx)
        return None

    def get_local_rank(self, mesh_dim=None) -> int:
        """This process's coordinate along ``mesh_dim`` (needed when the mesh has several dimensions)."""
        if mesh_dim is None:
            if self.ndim > 1:
                raise RuntimeError(f"Found the DeviceMesh have {self.ndim} dimensions. Optional kwarg `mesh_dim` "
                                   "needs to be specified when device_mesh.ndim > 1.")
            mesh_dim = 0
        coord = self.get_coordinate()
        if coord is None:
            raise RuntimeError("this process has no device in the mesh")
        return coord[self._dim(mesh_dim)]

    def get_rank(self) -> int:
        """This process's rank in the run (a rank is a process; see ``jgrad.distributed.get_rank``)."""
        return jax.process_index()

    def get_group(self, mesh_dim=None) -> ProcessGroup:
        """The ranks (processes) owning the devices along ``mesh_dim`` through this process's coordinate.

        In a one-process run that is just this process: its devices cooperate through DTensors, not
        through collectives.
        """
        if mesh_dim is None:
            if self.ndim > 1:
                raise RuntimeError(f"Found the DeviceMesh have {self.ndim} dimensions. Optional kwarg `mesh_dim` "
                                   "needs to be specified when device_mesh.ndim > 1.")
            mesh_dim = 0
        d = self._dim(mesh_dim)
        coord = self.get_coordinate()
        if coord is None:
            raise RuntimeError("this process has no device in the mesh, so it is in none of its groups")
        idx = list(coord)
        idx[d] = slice(None)
        procs = []
        for dev in np.asarray(self._jax_mesh.devices[tuple(idx)]).flat:
            if dev.process_index not in procs:
                procs.append(dev.process_index)
        return ProcessGroup(procs)

    def get_all_groups(self) -> list:
        """``get_group(d)`` for every mesh dimension."""
        return [self.get_group(d) for d in range(self.ndim)]

    def __getitem__(self, names) -> "DeviceMesh":
        """The sub-mesh of the named dimension(s) through this process's coordinate (``mesh["dp"]``)."""
        if self.mesh_dim_names is None:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names.")
        names = (names,) if isinstance(names, str) else tuple(names)
        if names == self.mesh_dim_names:
            return self
        dims = [self._dim(n) for n in names]
        coord = self.get_coordinate()
        idx = [slice(None) if i in dims else coord[i] for i in range(self.ndim)]
        order = sorted(range(len(dims)), key=lambda j: dims[j])
        if [dims[j] for j in order] != dims:
            raise KeyError(f"Invalid mesh_dim_names {names}: slice them in the mesh's order {self.mesh_dim_names}")
        ranks = self._ranks[tuple(idx)]
        devices = np.asarray(self._jax_mesh.devices[tuple(idx)], dtype=object)
        jm = Mesh(devices.reshape(ranks.shape), names, axis_types=(AxisType.Auto,) * len(names))
        return DeviceMesh(self.device_type, ranks, mesh_dim_names=names, _jax_mesh=jm)

    def __enter__(self):
        """``with mesh:``: the mesh ``distribute_tensor`` & co. use when given none (this thread)."""
        _tls.__dict__.setdefault("meshes", []).append(self)
        return self

    def __exit__(self, *exc):
        _tls.meshes.pop()
        return False

    def __eq__(self, other):
        return isinstance(other, DeviceMesh) and other._jax_mesh == self._jax_mesh

    def __hash__(self):
        return hash(self._jax_mesh)

    def __repr__(self):
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names is not None else ""
        return f"DeviceMesh('{self.device_type}', {self._ranks.tolist()}{names})"

    def __reduce__(self):
        return (DeviceMesh, (self.device_type, self._ranks), {"mesh_dim_names": self.mesh_dim_names})


_tls = threading.local()


def _current_mesh():
    """The innermost ``with mesh:`` of this thread, or None."""
    stack = getattr(_tls, "meshes", None)
    return stack[-1] if stack else None


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None, backend_override=None):
    """A ``DeviceMesh`` of ``mesh_shape`` over the first ``prod(mesh_shape)`` devices of ``device_type``.

    PyTorch's version needs exactly the world's devices; jgrad takes the first ``prod(mesh_shape)`` of
    ``jax.devices(device_type)`` (every process's devices, in JAX's order), so a smaller mesh is fine.
    """
    kind = _kind(device_type)
    shape = tuple(int(s) for s in (mesh_shape if isinstance(mesh_shape, (tuple, list)) else (mesh_shape,)))
    if not shape or any(s < 1 for s in shape):
        raise RuntimeError(f"init_device_mesh: mesh_shape must be positive sizes, got {mesh_shape}")
    if mesh_dim_names is not None and len(tuple(mesh_dim_names)) != len(shape):
        raise RuntimeError(f"mesh_shape and mesh_dim_names should have same length! Found len(mesh_dim_names): "
                           f"{len(tuple(mesh_dim_names))} and len(mesh_shape):{len(shape)}.")
    n = math.prod(shape)
    devs = jax.devices(kind)
    if n > len(devs):
        raise RuntimeError(f"init_device_mesh: a mesh of shape {shape} needs {n} {kind} devices, but JAX sees "
                           f"{len(devs)} (on the CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N "
                           "virtual devices)")
    return DeviceMesh(device_type, np.arange(n).reshape(shape), mesh_dim_names=mesh_dim_names)
