"""``torch.nn.modules.conv``: convolutions, re-exported from where jgrad defines them."""
from ..conv import (Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, _ConvNd,  # noqa: F401
                    _ConvTransposeNd)

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]
