"""``torch.nn.modules.flatten``: ``Flatten``, ``Unflatten``, re-exported from where jgrad defines them."""
from . import Flatten, Unflatten  # noqa: F401

__all__ = ["Flatten", "Unflatten"]
