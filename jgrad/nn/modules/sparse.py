"""``torch.nn.modules.sparse``: ``Embedding``, re-exported from where jgrad defines them."""
from . import Embedding  # noqa: F401

__all__ = ["Embedding"]
