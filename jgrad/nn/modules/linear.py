"""``torch.nn.modules.linear``: ``Identity``, ``Linear``, ``Bilinear``, re-exported from where jgrad defines them."""
from . import Identity, Linear  # noqa: F401
from ..vision import Bilinear  # noqa: F401

__all__ = ["Identity", "Linear", "Bilinear"]
