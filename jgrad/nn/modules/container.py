"""``torch.nn.modules.container``: containers, re-exported from where jgrad defines them."""
from ..container import Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict  # noqa: F401

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]
