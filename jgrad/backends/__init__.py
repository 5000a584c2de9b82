"""``jgrad.backends`` (``torch.backends``): ``cuda`` (``matmul.allow_tf32`` is jgrad's float32 matmul
precision), ``cudnn`` (its flags, recorded; ``allow_tf32`` is the same precision), ``mps`` (never available);
``use_deterministic_algorithms`` and its companions (re-exported as ``jgrad.*``, torch's top-level names).

Imports its modules.
"""
from . import cuda, cudnn, mps  # noqa: F401
from ._determinism import (are_deterministic_algorithms_enabled, get_deterministic_debug_mode,  # noqa: F401
                           is_deterministic_algorithms_warn_only_enabled, set_deterministic_debug_mode,
                           use_deterministic_algorithms)

__all__ = ["cuda", "cudnn", "mps"]
