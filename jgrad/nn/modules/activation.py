"""``torch.nn.modules.activation``: activations and ``MultiheadAttention``, re-exported from where jgrad defines
them."""
from . import (ELU, GELU, LeakyReLU, LogSoftmax, ReLU, ReLU6, Sigmoid, SiLU, Softmax, Softmin, Softplus,  # noqa: F401
               Softsign, Tanh)
from ..transformer import MultiheadAttention  # noqa: F401

__all__ = ["ReLU", "ReLU6", "LeakyReLU", "ELU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softplus", "Softsign", "Softmax",
           "Softmin", "LogSoftmax", "MultiheadAttention"]
