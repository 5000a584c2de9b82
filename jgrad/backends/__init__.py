"""``jgrad.backends`` (``torch.backends``): ``cuda`` (``matmul.allow_tf32`` is jgrad's float32 matmul
precision), ``cudnn`` (its flags, recorded; ``allow_tf32`` is the same precision), ``mps`` (never available).

Imports its modules.
"""
from . import cuda, cudnn, mps  # noqa: F401

__all__ = ["cuda", "cudnn", "mps"]
