"""Process groups: ``init_process_group`` on ``jax.distributed.initialize``; ranks are processes.

A rank is a process, as in PyTorch. A PyTorch program runs one process per device; a JAX program
may run one process per host that drives several devices (``jax.local_devices()``). Collectives
(``jgrad.distributed._collectives``) combine one tensor per process; inside one process, the devices
of a mesh cooperate through DTensors (``jgrad.distributed.tensor``) instead.

Imports nothing of jgrad (JAX's distributed runtime only).
"""
from __future__ import annotations

import os
import threading

import jax

_BACKENDS = ("gloo", "nccl", "mpi")


class _State:
    initialized = False        # init_process_group was called (and destroy_process_group not yet)
    jax_initialized = False    # ... and it called jax.distributed.initialize (more than one process)
    backend = None
    world = None               # the WORLD ProcessGroup


_state = _State()
_lock = threading.Lock()


class ProcessGroup:
    """A set of ranks (processes) that collectives combine: ``group.WORLD`` or ``new_group(ranks)``."""

    def __init__(self, ranks, backend=None):
        self.ranks = tuple(int(r) for r in ranks)
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"a process group lists each rank once, got ranks {list(self.ranks)}")
        n = jax.process_count()
        bad = [r for r in self.ranks if not 0 <= r < n]
        if bad:
            raise ValueError(f"ranks {bad} are not ranks of this run: there are {n} process(es), ranks 0..{n - 1}")
        self._backend = backend
        self._meshes = {}

    def size(self) -> int:
        """The number of ranks in the group."""
        return len(self.ranks)

    def rank(self) -> int:
        """This process's rank within the group (-1 when it is not a member)."""
        me = jax.process_index()
        return self.ranks.index(me) if me in self.ranks else -1

    def name(self) -> str:
        return self._backend or _state.backend or "gloo"

    def __repr__(self):
        return f"ProcessGroup(ranks={list(self.ranks)})"

    def __eq__(self, other):
        return isinstance(other, ProcessGroup) and other.ranks == self.ranks

    def __hash__(self):
        return hash(self.ranks)

    def _mesh(self, kind):
        """A 1-D jax mesh with one device of ``kind`` per member process (its first), axis "ranks"."""
        m = self._meshes.get(kind)
        if m is None:
            devs = jax.devices(kind)
            firsts = []
            for r in self.ranks:
                own = [d for d in devs if d.process_index == r]
                if not own:
                    raise RuntimeError(f"rank {r} has no {kind} device, so it cannot take part in a collective on "
                                       f"{kind} tensors")
                firsts.append(own[0])
            import numpy as np
            m = self._meshes[kind] = jax.sharding.Mesh(np.array(firsts), ("ranks",))
        return m


def _world() -> ProcessGroup:
    w = _state.world
    if w is None:
        with _lock:
            w = _state.world
            if w is None:
                w = _state.world = ProcessGroup(range(jax.process_count()))
    return w


class _GroupNamespace:
    """``jgrad.distributed.group.WORLD``: the group of every rank (PyTorch's ``dist.group.WORLD``)."""

    @property
    def WORLD(self) -> ProcessGroup:  # noqa: N802 - PyTorch's name
        return _world()


group = _GroupNamespace()


def _resolve(group_):
    """The ProcessGroup a collective uses (``None``: WORLD)."""
    if group_ is None:
        return _world()
    if not isinstance(group_, ProcessGroup):
        raise TypeError(f"group must be a jgrad.distributed ProcessGroup or None, got {type(group_).__name__}")
    return group_


def _rendezvous(init_method, world_size, rank):
    """(coordinator address, world size, rank) from ``init_method`` and torchrun's environment variables."""
    if init_method is None or init_method == "env://":
        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if world_size == -1 and "WORLD_SIZE" in os.environ:
            world_size = int(os.environ["WORLD_SIZE"])
        if rank == -1 and "RANK" in os.environ:
            rank = int(os.environ["RANK"])
        if world_size == -1:
            world_size = 1  # no WORLD_SIZE: a single process, as `python train.py` without torchrun
        if rank == -1:
            rank = 0
        if world_size > 1 and (addr is None or port is None):
            missing = "MASTER_ADDR" if addr is None else "MASTER_PORT"
            raise ValueError(f"Error initializing jgrad.distributed using env:// rendezvous: environment variable "
                             f"{missing} expected, but not set (a run of {world_size} processes needs the "
                             "coordinator's address: MASTER_ADDR and MASTER_PORT, as torchrun sets them).")
        coordinator = f"{addr}:{port}" if addr is not None and port is not None else None
    elif init_method.startswith("tcp://"):
        coordinator = init_method[len("tcp://"):].rstrip("/")
        if ":" not in coordinator:
            raise ValueError(f"init_method {init_method!r} needs a port: tcp://host:port")
        if world_size == -1 or rank == -1:
            raise ValueError(f"init_method {init_method!r} needs world_size and rank (got world_size={world_size}, "
                             f"rank={rank})")
    else:
        raise ValueError(f"init_method {init_method!r} is not supported by jgrad: use 'env://' (MASTER_ADDR, "
                         "MASTER_PORT, WORLD_SIZE, RANK) or 'tcp://host:port' with world_size and rank.")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    return coordinator, world_size, rank


def _timeout_seconds(timeout):
    if timeout is None:
        return 300
    secs = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
    return max(1, int(secs))


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None):
    """Join a run of ``world_size`` processes (``torch.distributed.init_process_group``).

    Calls ``jax.distributed.initialize(coordinator_address, num_processes, process_id)`` with the
    coordinator from ``init_method`` (``"env://"``, the default: ``MASTER_ADDR``/``MASTER_PORT``,
    ``WORLD_SIZE``/``RANK`` as torchrun sets them; or ``"tcp://host:port"``). It must run before
    any JAX computation (JAX's rule). A run of one process initialises nothing in JAX.
    ``backend``: None, ``"gloo"``, ``"nccl"``, ``"mpi"`` or PyTorch's ``"cpu:gloo,cuda:nccl"``;
    JAX picks NCCL for GPUs itself. For CPU collectives it needs
    ``jax_cpu_collectives_implementation`` to be ``"gloo"`` (the default of current jax) or
    ``"mpi"``: this is the one place where jgrad changes JAX's global config, and only when that
    option is unset (``"none"``), or set otherwise while ``backend`` names the other one.
    ``timeout`` (a ``timedelta`` or seconds) bounds the rendezvous. ``store``, ``group_name`` and
    ``pg_options`` are PyTorch's and are not used by JAX (a ``store`` is refused).
    """
    if _state.initialized:
        raise RuntimeError("trying to initialize the default process group twice!")
    if store is not None:
        raise ValueError("jgrad.distributed.init_process_group does not take a store: JAX rendezvous through its "
                         "coordinator service (init_method='env://' or 'tcp://host:port').")
    cpu_backend = _parse_backend(backend)
    coordinator, world_size, rank = _rendezvous(init_method, world_size, rank)
    if world_size > 1:
        if cpu_backend is not None:
            current = jax.config.jax_cpu_collectives_implementation
            if current != cpu_backend:
                jax.config.update("jax_cpu_collectives_implementation", cpu_backend)
        elif jax.config.jax_cpu_collectives_implementation in (None, "none"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        kwargs = {}
        if device_id is not None:
            kwargs["local_device_ids"] = [device_id.index if hasattr(device_id, "index") else int(device_id)]
        try:
            jax.distributed.initialize(coordinator_address=coordinator, num_processes=world_size, process_id=rank,
                                       initialization_timeout=_timeout_seconds(timeout), **kwargs)
        except RuntimeError as e:
            raise RuntimeError(f"init_process_group (rank {rank} of {world_size}, coordinator {coordinator}) failed "
                               f"in jax.distributed.initialize: {e}") from e
        _state.jax_initialized = True
    _state.initialized = True
    _state.backend = backend or ("nccl" if _has_gpu() else "gloo")
    _state.world = None


def _has_gpu():
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def _parse_backend(backend):
    """The CPU collectives implementation ``backend`` asks for (None: JAX's default)."""
    if backend is None:
        return None
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a string such as 'gloo' or 'nccl', got {type(backend).__name__}")
    cpu = None
    for part in backend.lower().split(","):
        name = part.split(":")[-1].strip()
        if name not in _BACKENDS:
            raise ValueError(f"Invalid backend: '{backend}'. jgrad runs collectives through JAX, which offers "
                             f"{', '.join(_BACKENDS)} (NCCL for GPUs, gloo or MPI for CPUs).")
        if name in ("gloo", "mpi") and (":" not in part or part.split(":")[0].strip() == "cpu"):
            cpu = name
    return cpu


def destroy_process_group(group=None):
    """Leave the run (``jax.distributed.shutdown``); the default group only, as collectives use WORLD."""
    if group is not None and group != _world():
        return  # a sub-group holds no resources of its own
    if not _state.initialized:
        raise ValueError("Default process group has not been initialized, please make sure to call "
                         "init_process_group.")
    if _state.jax_initialized:
        jax.distributed.shutdown()
    _state.initialized = _state.jax_initialized = False
    _state.backend = None
    _state.world = None


def is_initialized() -> bool:
    """Whether ``init_process_group`` was called (and ``destroy_process_group`` not since)."""
    return _state.initialized


def is_available() -> bool:
    """Always True: JAX's collectives are there."""
    return True


def get_backend(group=None) -> str:
    """The backend named at ``init_process_group`` ("gloo" on CPUs, "nccl" on GPUs by default)."""
    if not _state.initialized:
        raise ValueError("Default process group has not been initialized, please make sure to call "
                         "init_process_group.")
    return _resolve(group).name()


def get_rank(group=None) -> int:
    """This process's rank (``jax.process_index()``), or its rank within ``group`` (-1 if not a member).

    Without ``init_process_group`` the run is this one process: rank 0 (PyTorch raises instead).
    """
    return _resolve(group).rank()


def get_world_size(group=None) -> int:
    """The number of processes (``jax.process_count()``), or of ranks in ``group``.

    Without ``init_process_group`` the run is this one process: 1 (PyTorch raises instead).
    """
    return _resolve(group).size()


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None):
    """A group of ``ranks`` (every rank when None); every process calls it, as in PyTorch."""
    if backend is not None:
        _parse_backend(backend)
    return ProcessGroup(range(jax.process_count()) if ranks is None else sorted(ranks), backend)
