"""``torch.nn.modules.fold``: ``Fold``, ``Unfold``, re-exported from ``nn.vision``."""
from ..vision import Fold, Unfold  # noqa: F401

__all__ = ["Fold", "Unfold"]
