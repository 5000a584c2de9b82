"""``jgrad.backends.mps`` (``torch.backends.mps``): Apple's Metal backend, which jgrad (JAX) does not use.

Imports nothing of jgrad.
"""

__all__ = ["is_available", "is_built"]


def is_available() -> bool:
    """False: jgrad runs on JAX's CPU, GPU and TPU backends."""
    return False


def is_built() -> bool:
    return False
