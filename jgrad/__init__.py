"""jgrad: PyTorch's autograd engine and stream semantics, with every kernel an XLA-compiled JAX function.

    >>> import jgrad as jg
    >>> x = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4., 6.])

The public API, re-exports only. It imports jgrad's parts bottom-up (docs/design.md, "The house"), installs
the engine's "auto"-mode fast path (``_backward_plan``) once the door exists, and never imports
``interop``.
"""
from .core import _dtype
from .core._device import device, device_count, get_default_device, is_available, set_default_device
from .core._dtype import (bfloat16, bool, complex64, complex128, double, dtype, float, float16,  # noqa: A004
                          float32, float64, get_default_dtype, half, int8, int16, int32, int64, long,
                          set_default_dtype, uint8)
from .core._tensor import Tensor
from . import autograd
from .autograd import (enable_grad, inference_mode, is_grad_enabled, is_inference, is_inference_mode_enabled,
                       no_grad, set_grad_enabled)
from . import ops
from .runtime import _backward_plan  # noqa: F401  (installs the engine's "auto"-mode fast path; needs OpNode)
from .ops import *  # noqa: F401,F403
from .ops import from_jax, get_float32_matmul_precision, set_float32_matmul_precision
from .ops.creation import from_numpy
from . import random, streams
from .streams import Event, Stream, StreamRaceError, current_stream, default_stream, set_stream, stream, synchronize
from .random import Generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state
from . import nn, optim  # noqa: E402
from . import distributed  # noqa: E402  (DeviceMesh, DTensors, process groups: JAX's SPMD under PyTorch's names)
from . import graphs  # noqa: E402
from .runtime._segment import execution_mode, get_execution_mode, set_execution_mode  # noqa: E402
from .graphs import Graph, graph, graph_pool_handle, make_graphed_callables  # noqa: E402
from . import profiler, viz  # noqa: E402  (matplotlib is imported lazily, only to draw)
from .serialization import load, save  # noqa: E402
from . import utils  # noqa: E402
from .runtime._dlpack import from_dlpack  # noqa: E402  (DLPack, the protocol of jgrad tensors; interop/ adapts)
from . import accelerator, backends, cuda, onnx  # noqa: E402  (torch.accelerator/backends/cuda/onnx)
from .core._format import set_printoptions  # noqa: E402,F401  (torch.set_printoptions)
from . import testing  # noqa: E402,F401  (torch.testing.assert_close)
from .backends import (are_deterministic_algorithms_enabled, get_deterministic_debug_mode,  # noqa: E402,F401
                       is_deterministic_algorithms_warn_only_enabled, set_deterministic_debug_mode,
                       use_deterministic_algorithms)
from .func._export import export_stablehlo  # noqa: E402  (jgrad's export: StableHLO through jax.export)

import importlib as _importlib  # noqa: E402
linalg = _importlib.import_module(".linalg", __name__)  # torch.linalg's names (not ops.linalg, which `*` exported)
from . import distributions, fft, special  # noqa: E402  (torch.distributions', torch.fft's, torch.special's names)
from . import amp  # noqa: E402  (torch.amp: autocast regions and GradScaler)
from .amp import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: E402
from .amp import legacy as _amp_legacy  # noqa: E402,F401  (jgrad.cuda.amp: the deprecated spellings)
from . import sparse  # noqa: E402  (torch.sparse's mm and sum; COO tensors are BCOO's parts: ops.sparse_coo)
from .core._dtype import cdouble, cfloat, finfo, iinfo  # noqa: E402
from . import compiler  # noqa: E402  (jg.compile: torch.compile's contract on capture)
from .compiler import compile  # noqa: E402,A004
from . import func  # noqa: E402  (torch.func: JAX's transforms of jgrad functions; installs autograd's batched grad)

__version__ = "0.1.0"


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def numel(t) -> int:
    return t.numel()


