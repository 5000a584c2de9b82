"""``torch.nn.modules.transformer``: Transformer layers, re-exported from where jgrad defines them."""
from ..transformer import TransformerEncoderLayer, TransformerEncoder  # noqa: F401

__all__ = ["TransformerEncoderLayer", "TransformerEncoder"]
