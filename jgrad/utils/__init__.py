"""``jgrad.utils`` (``torch.utils``): ``data``, ``checkpoint``.

Imports ``utils.data`` and ``utils.checkpoint``.
"""
from . import checkpoint, data  # noqa: F401
