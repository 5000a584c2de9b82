"""``torch.nn.modules.linear``: ``Identity``, ``Linear``, re-exported from where jgrad defines them."""
from . import Identity, Linear  # noqa: F401

__all__ = ["Identity", "Linear"]
