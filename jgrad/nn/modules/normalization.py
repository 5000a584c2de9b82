"""``torch.nn.modules.normalization``: ``LayerNorm``, ``GroupNorm``, ``RMSNorm``, re-exported from where jgrad
defines them."""
from . import LayerNorm  # noqa: F401
from ..normalization import GroupNorm, RMSNorm  # noqa: F401

__all__ = ["LayerNorm", "GroupNorm", "RMSNorm"]
