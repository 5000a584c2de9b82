"""``torch.nn.modules.pixelshuffle``: ``PixelShuffle``, ``PixelUnshuffle``, re-exported from ``nn.vision``."""
from ..vision import PixelShuffle, PixelUnshuffle  # noqa: F401

__all__ = ["PixelShuffle", "PixelUnshuffle"]
