"""``torch.nn.modules.dropout``: ``Dropout``, re-exported from where jgrad defines them."""
from . import Dropout  # noqa: F401

__all__ = ["Dropout"]
