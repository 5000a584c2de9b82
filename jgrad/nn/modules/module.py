"""``torch.nn.modules.module``: the ``Module`` base class, re-exported from where jgrad defines them."""
from ..module import Module  # noqa: F401

__all__ = ["Module"]
