"""``torch.cuda.amp``: the deprecated spellings ``torch.cuda.amp.autocast(...)`` and
``torch.cuda.amp.GradScaler(...)`` that many training scripts still use, with PyTorch's FutureWarnings.

``jgrad.cuda`` is a module, not a package, so this registers ``jgrad.cuda.amp`` in ``sys.modules`` (and as the
attribute ``jgrad.cuda.amp``): ``from jgrad.cuda.amp import GradScaler, autocast`` works.

Imports ``_dtype``, ``cuda`` and ``amp``'s two modules.
"""
from __future__ import annotations

import sys
import types
import warnings

from ..core import _dtype
from .. import cuda
from .autocast_mode import autocast as _autocast
from .grad_scaler import GradScaler as _GradScaler


class autocast(_autocast):
    """``torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)``: ``autocast("cuda", ...)``."""

    def __init__(self, enabled=True, dtype=_dtype.float16, cache_enabled=True):
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', "
                      "args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    """``torch.cuda.amp.GradScaler(...)``: ``amp.GradScaler("cuda", ...)``."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use `torch.amp.GradScaler('cuda', "
                      "args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


amp = types.ModuleType("jgrad.cuda.amp", __doc__)
amp.autocast, amp.GradScaler = autocast, GradScaler
sys.modules[amp.__name__] = amp
cuda.amp = amp
