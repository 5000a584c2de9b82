"""``jgrad.nn``: Module, layers, losses, containers, ``functional`` and ``init`` (``torch.nn``)."""
from . import functional, init  # noqa: F401
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .hooks import RemovableHandle
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss
from .module import Module
from .modules import (ELU, GELU, Dropout, Embedding, Flatten, Identity, LayerNorm, LeakyReLU, Linear, LogSoftmax,
                      ReLU, ReLU6, Sigmoid, SiLU, Softmax, Softmin, Softplus, Softsign, Tanh, Unflatten)
from .parameter import Buffer, Parameter

__all__ = ["Module", "Parameter", "Buffer", "RemovableHandle", "Sequential", "ModuleList", "ModuleDict",
           "ParameterList", "ParameterDict", "Identity", "Linear", "Embedding", "LayerNorm", "Dropout", "Flatten",
           "Unflatten", "ReLU", "ReLU6", "LeakyReLU", "ELU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softplus",
           "Softsign", "Softmax", "Softmin", "LogSoftmax", "MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss",
           "BCELoss", "BCEWithLogitsLoss", "HuberLoss", "SmoothL1Loss", "functional", "init"]

from . import parallel  # noqa: E402,F401  (DistributedDataParallel; imports jgrad.distributed)
