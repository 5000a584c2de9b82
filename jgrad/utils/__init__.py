"""``jgrad.utils`` (``torch.utils``): ``data``.

Imports ``utils.data``.
"""
from . import data  # noqa: F401
