"""``torch.nn.modules.loss``: losses, re-exported from where jgrad defines them."""
from ..loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss,  # noqa: F401
                    SmoothL1Loss, _Loss, _WeightedLoss)

__all__ = ["MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "HuberLoss",
           "SmoothL1Loss"]
