"""Random numbers: a Generator is a JAX PRNG key that advances on every draw.

``manual_seed`` seeds the default generator of every device. Draws split the
key (``jax.random.split``), so a sequence of draws is reproducible from the
seed; capture threads the key through the compiled executable.

Imports ``_segment`` (a draw is recorded in "auto" mode), ``_recorder``, ``streams``, ``_dtype`` and
``_factories`` (``get_state`` returns a tensor) and ``_device``. Never the op library: the
random ops (``jgrad.ops.random_ops``) are built on this module.
"""
from __future__ import annotations

import threading

import jax
import numpy as np

from .core import _factories
from .runtime import _segment
from .core._dtype import x64_scope as _x64_scope
from .core._recorder import Buffer as _Buffer
from .streams import _current_for
from .core._device import device as _device, get_default_device as _get_default_device


class Generator:
    """A PRNG state: ``Generator(device=None).manual_seed(s)``."""

    def __init__(self, device=None):
        self.device = _device(device) if device is not None else _get_default_device()
        self._lock = threading.Lock()
        self._seed = 0
        self._key = None
        self.manual_seed(67280421310721)  # PyTorch's default seed

    def manual_seed(self, seed: int) -> "Generator":
        """Seed with any integer in [-2**63, 2**64): PyTorch's range, where a negative seed is the unsigned 64-bit
        number with the same bits (``manual_seed(-1)`` is ``manual_seed(2**64 - 1)``; ``initial_seed()`` returns
        that). Out of range: PyTorch's ``ValueError``. All 64 bits make the key, whatever JAX's x64 flag.
        An integer is required (``jg.manual_seed`` converts with ``int()`` first, as ``torch.manual_seed``)."""
        if type(seed) is not int and (isinstance(seed, bool) or not isinstance(seed, np.integer)):
            raise RuntimeError(f"manual_seed expected a long, but got {type(seed).__name__}")
        seed = _seed_value(seed)
        with self._lock:
            self._seed = seed
            with _x64_scope():
                data = jax.random.key_data(jax.random.key(np.uint64(seed)))
            self._key = jax.device_put(data, self.device._placement)
        return self

    seed = manual_seed

    def initial_seed(self) -> int:
        return self._seed

    def next_key(self):
        """Advance the state and return a fresh key (raw uint32 key data)."""
        hooks = getattr(_key_hooks, "stack", None)
        if hooks:  # inside jgrad.func.vmap: its randomness rule decides (jgrad.func)
            return hooks[-1](self)
        return self._advance()

    def _advance(self):
        s = _current_for(self.device)
        if s._capture is not None:
            return s._capture.next_key(self, s)  # the key is threaded through the executable
        if _segment.auto[0]:  # tiered mode: the split is recorded, the key a pending result
            seg = _segment.segment_for(self.device)
            with self._lock:
                res = seg.record(_split, (self._key,), s)
                if res is not _segment.NOT_RECORDED:
                    self._key, sub = res
                    seg.gens.append(self)
                    return sub
        with self._lock, _x64_scope():  # as every kernel runs (and auto mode's op-by-op tier): one compile of it
            self._key, sub = _split(self._key)
        return sub

    def get_state(self):
        key = self._key
        if type(key) is _Buffer:
            key = key.value  # a pending segment's result: a barrier
        return _factories.tensor(np.asarray(key))

    def set_state(self, state) -> "Generator":
        arr = state._value if hasattr(state, "_value") else np.asarray(state)
        with self._lock:
            self._key = jax.device_put(np.asarray(arr, np.uint32), self.device._placement)
        return self


#: Per thread, a stack of ``hook(generator) -> key`` that replace ``next_key`` (``jgrad.func.vmap``'s randomness).
_key_hooks = threading.local()


def _seed_value(seed) -> int:
    """A seed as the unsigned 64-bit value PyTorch keeps (``int(seed)`` first, as ``torch.manual_seed`` does)."""
    seed = int(seed)
    if not -2 ** 63 <= seed < 2 ** 64:
        raise ValueError("Overflow when unpacking long long")
    return seed % 2 ** 64


@jax.jit
def _split(key):
    k = jax.random.wrap_key_data(key)
    a, b = jax.random.split(k)
    return jax.random.key_data(a), jax.random.key_data(b)


_default_generators: dict = {}


def default_generator(device=None) -> Generator:
    """The default generator of ``device`` (the default device when None)."""
    dev = _device(device) if device is not None else _get_default_device()
    gen = _default_generators.get(dev)
    if gen is None:
        gen = _default_generators[dev] = Generator(dev)
        if _seed_for_new[0] is not None:
            gen.manual_seed(_seed_for_new[0])
    return gen


def manual_seed(seed: int) -> Generator:
    """Seed the default generators of all devices; returns the default device's."""
    seed = _seed_value(seed)  # checked before any generator changes
    for gen in _default_generators.values():
        gen.manual_seed(seed)
    _seed_for_new[0] = seed
    gen = default_generator()
    gen.manual_seed(seed)
    return gen


_seed_for_new = [None]


def seed() -> int:
    s = int(np.random.SeedSequence().entropy % (2 ** 63))
    manual_seed(s)
    return s


def initial_seed() -> int:
    return default_generator().initial_seed()


def get_rng_state(device=None):
    return default_generator(device).get_state()


def set_rng_state(state, device=None) -> None:
    default_generator(device).set_state(state)


def _generator_for(generator, device):
    return generator if generator is not None else default_generator(device)
