"""``jgrad.optim``: Optimizer, SGD, Adam, AdamW (``torch.optim``), each step one fused XLA kernel."""
from .adam import Adam, AdamW
from .optimizer import Optimizer, required
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "required"]
