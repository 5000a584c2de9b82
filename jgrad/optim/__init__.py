"""``jgrad.optim``: Optimizer, SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam (each step one
fused XLA kernel), LBFGS (PyTorch's algorithm, on the host); ``lr_scheduler`` and ``swa_utils`` (``torch.optim``).

Imports its modules. Optimizers sit beside ``nn``: they import ``_dispatch`` (``call_foreach``),
``_segment`` (a step ends with a barrier), ``_tensor``, ``grad_mode``, ``ops.creation`` and ``nn``
(hooks, ``Module``).
"""
from . import lr_scheduler, swa_utils
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .lbfgs import LBFGS
from .nadam import NAdam
from .optimizer import Optimizer, required
from .radam import RAdam
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "LBFGS",
           "required", "lr_scheduler", "swa_utils"]
