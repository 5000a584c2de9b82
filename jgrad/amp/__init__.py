"""``jgrad.amp`` (``torch.amp``): ``autocast`` regions with PyTorch's op lists and ``GradScaler``.

Imports its two modules.
"""
from .autocast_mode import autocast, get_autocast_dtype, is_autocast_available, is_autocast_enabled
from .grad_scaler import GradScaler

__all__ = ["autocast", "GradScaler", "is_autocast_enabled", "get_autocast_dtype", "is_autocast_available"]
