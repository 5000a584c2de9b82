"""``torch.nn.modules.batchnorm``: BatchNorm, re-exported from where jgrad defines them."""
from ..normalization import _NormBase, _BatchNorm, BatchNorm1d, BatchNorm2d, BatchNorm3d  # noqa: F401

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]
