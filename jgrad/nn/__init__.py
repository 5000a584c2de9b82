"""``jgrad.nn``: Module, layers, losses, containers, ``functional`` and ``init`` (``torch.nn``).

Imports its modules. ``nn`` is a user of the op library: its modules import ``jgrad.ops`` (mostly
through ``functional``), ``_tensor``, autograd, and ``_dispatch`` for fused updates outside autograd.
Below it, nothing imports it: ``nn.module`` installs ``Module`` into ``runtime._graphed``.
"""
from . import functional, init, utils  # noqa: F401
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AvgPool1d, AvgPool2d,
                   AvgPool3d, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, MaxPool1d,
                   MaxPool2d, MaxPool3d)
from .hooks import RemovableHandle
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss
from .module import Module
from .modules import AlphaDropout, FeatureAlphaDropout, LocalResponseNorm  # noqa: F401  (issue 26)
from .modules import (ELU, GELU, Dropout, Embedding, Flatten, Identity, LayerNorm, LeakyReLU, Linear, LogSoftmax,
                      ReLU, ReLU6, Sigmoid, SiLU, Softmax, Softmin, Softplus, Softsign, Tanh, Unflatten)
from .normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, InstanceNorm1d, InstanceNorm2d,
                            InstanceNorm3d, RMSNorm)
from .parameter import Buffer, Parameter
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell
from .transformer import MultiheadAttention, TransformerEncoder, TransformerEncoderLayer

__all__ = ["Module", "Parameter", "Buffer", "RemovableHandle", "Sequential", "ModuleList", "ModuleDict",
           "ParameterList", "ParameterDict", "Identity", "Linear", "Embedding", "LayerNorm", "Dropout", "Flatten",
           "AlphaDropout", "FeatureAlphaDropout", "LocalResponseNorm", "Unflatten", "ReLU", "ReLU6", "LeakyReLU", "ELU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softplus",
           "Softsign", "Softmax", "Softmin", "LogSoftmax", "MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss",
           "BCELoss", "BCEWithLogitsLoss", "HuberLoss", "SmoothL1Loss", "functional", "init",
           "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "MaxPool1d",
           "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d",
           "InstanceNorm2d", "InstanceNorm3d", "GroupNorm", "RMSNorm", "RNNBase", "RNN", "LSTM", "GRU", "RNNCell",
           "LSTMCell", "GRUCell", "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "utils"]

from .vision import (Bilinear, Fold, PixelShuffle, PixelUnshuffle, Unfold, Upsample,  # noqa: E402  (issue 30)
                     UpsamplingBilinear2d, UpsamplingNearest2d)
__all__ += ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle", "Unfold",
            "Fold", "Bilinear"]
from .transformer_decoder import Transformer, TransformerDecoder, TransformerDecoderLayer  # noqa: E402
__all__ += ["Transformer", "TransformerDecoder", "TransformerDecoderLayer"]

from . import parallel  # noqa: E402,F401  (DistributedDataParallel; imports jgrad.distributed)
from .parallel import DataParallel  # noqa: E402,F401
for _path in ("activation", "batchnorm", "container", "conv", "dropout", "flatten", "instancenorm", "linear", "loss",
              "module", "normalization", "pooling", "rnn", "sparse", "transformer", "upsampling", "pixelshuffle",
              "fold"):
    # PyTorch's class paths (jgrad.nn.modules.rnn.LSTM), imported without rebinding jgrad.nn.rnn & co
    __import__(f"{__name__}.modules.{_path}")
