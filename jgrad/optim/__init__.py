"""``jgrad.optim``: Optimizer, SGD, Adam, AdamW (``torch.optim``), each step one fused XLA kernel; ``lr_scheduler``.

Imports its modules. Optimizers sit beside ``nn``: they import ``_dispatch`` (``call_foreach``),
``_segment`` (a step ends with a barrier), ``_tensor``, ``grad_mode``, ``ops.creation`` and ``nn``
(hooks, ``Module``).
"""
from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer, required
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "required", "lr_scheduler"]
