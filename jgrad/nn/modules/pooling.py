"""``torch.nn.modules.pooling``: pooling, re-exported from where jgrad defines them."""
from ..conv import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AvgPool1d,  # noqa: F401
                    AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d, _AvgPoolNd, _MaxPoolNd)

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
           "AdaptiveAvgPool2d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d"]
