"""``torch.nn.modules.upsampling``: ``Upsample`` and its two deprecated forms, re-exported from ``nn.vision``."""
from ..vision import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d  # noqa: F401

__all__ = ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"]
