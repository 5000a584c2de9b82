"""``torch.nn.modules.instancenorm``: InstanceNorm, re-exported from where jgrad defines them."""
from ..normalization import _InstanceNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d  # noqa: F401

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"]
