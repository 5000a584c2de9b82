"""``torch.nn.modules.transformer``: Transformer layers, re-exported from where jgrad defines them."""
from ..transformer import MultiheadAttention, TransformerEncoderLayer, TransformerEncoder  # noqa: F401
from ..transformer_decoder import Transformer, TransformerDecoder, TransformerDecoderLayer  # noqa: F401

__all__ = ["TransformerEncoderLayer", "TransformerEncoder", "Transformer", "TransformerDecoder",
           "TransformerDecoderLayer"]
