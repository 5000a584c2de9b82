"""``jgrad.optim``: Optimizer, SGD, Adam, AdamW (``torch.optim``), each step one fused XLA kernel; ``lr_scheduler``."""
from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer, required
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "required", "lr_scheduler"]
