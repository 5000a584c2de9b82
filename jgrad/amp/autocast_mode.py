"""``jgrad.autocast`` / ``jgrad.amp.autocast``: mixed precision regions, with PyTorch's op lists.

Inside ``autocast(device_type, dtype)``, an op on tensors of that device type casts its floating inputs
first: ops of the *lower* list (matmuls, convolutions, attention, recurrent layers) to ``dtype``
(``float16`` for "cuda", ``bfloat16`` for "cpu" by default), ops of the *float32* list (losses,
reductions and functions that lose accuracy in 16 bits) to ``float32``, ops of the *promote* list to
their widest floating input type; every other op runs in its inputs' types. The lists are PyTorch's
(CUDA's and CPU's differ), written with jgrad's op names, which are PyTorch's backward-node names.
The casts are ordinary ``to()`` ops: they are differentiable (gradients come back in each input's own
dtype) and are recorded like any op in "auto" mode and in captures. Regions nest; ``enabled=False``
opens a region without casts. ``jgrad.runtime._dispatch.call`` asks ``_cast`` while any region is open.

Imports ``_dispatch``, ``_dtype`` and ``_tensor``.
"""
from __future__ import annotations

import functools
import threading

from ..runtime import _dispatch
from ..core import _dtype
from ..core._tensor import Tensor

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "is_autocast_available"]

_CUDA_LOWER = {"AddmmBackward0", "MmBackward0", "BmmBackward0", "MvBackward0", "EinsumBackward0",
               "ConvolutionBackward0", "ScaledDotProductAttentionBackward0", "PreluKernelBackward0",
               "LinalgMultiDotBackward0", "LstmBackward0", "GruBackward0", "RnnTanhBackward0", "RnnReluBackward0",
               "LstmCellBackward0", "GruCellBackward0", "RnnTanhCellBackward0", "RnnReluCellBackward0"}
_CUDA_FP32 = {"AcosBackward0", "AsinBackward0", "CoshBackward0", "ErfinvBackward0", "ExpBackward0",
              "Expm1Backward0", "LogBackward0", "Log10Backward0", "Log2Backward0", "Log1PBackward0",
              "ReciprocalBackward0", "RsqrtBackward0", "SinhBackward0", "TanBackward0", "PowBackward0",
              "PowBackward1", "SoftplusBackward0", "NativeLayerNormBackward0", "NativeGroupNormBackward0",
              "LinalgVectorNormBackward0", "LinalgMatrixNormBackward0", "NllLossBackward0", "L1LossBackward0",
              "MseLossBackward0", "BinaryCrossEntropyWithLogitsBackward0", "MultilabelMarginLossBackward0",
              "LogsumexpBackward0", "ProdBackward0", "CumprodBackward0", "CumsumBackward0", "SumBackward0",
              "SumBackward1", "SoftmaxBackward0", "LogSoftmaxBackward0", "EmbeddingBagBackward0"}
_PROMOTE = {"AddcdivBackward0", "AddcmulBackward0", "Atan2Backward0", "BilinearBackward0", "LinalgCrossBackward0",
            "DotBackward0", "GridSampler2DBackward0", "GridSampler3DBackward0", "IndexPutBackward0",
            "ScatterAddBackward0", "TensordotBackward0", "CatBackward0", "StackBackward0"}
_CPU_LOWER = {"AddmmBackward0", "MmBackward0", "BmmBackward0", "MvBackward0", "EinsumBackward0",
              "LinalgVecdotBackward0", "ConvolutionBackward0", "ScaledDotProductAttentionBackward0",
              "PreluKernelBackward0", "LstmBackward0", "GruBackward0", "RnnTanhBackward0", "RnnReluBackward0"}
_CPU_FP32 = {"MseLossBackward0", "NllLossBackward0", "L1LossBackward0", "BinaryCrossEntropyBackward0",
             "BinaryCrossEntropyWithLogitsBackward0", "MultilabelMarginLossBackward0", "GridSampler2DBackward0",
             "GridSampler3DBackward0", "ProdBackward0", "QuantileBackward0", "TraceBackward0", "PolarBackward0",
             "ViewAsComplexBackward0", "CholeskySolveBackward0", "GeqrfBackward0", "FftC2CBackward0",
             "FftC2RBackward0", "FftR2CBackward0", "LinalgCholeskyExBackward0", "LinalgDetBackward0",
             "LinalgEighBackward0", "LinalgHouseholderProductBackward0", "LinalgInvExBackward0",
             "LinalgLstsqBackward0", "LinalgMatrixExpBackward0", "LinalgMatrixNormBackward0",
             "LinalgMatrixPowerBackward0", "LinalgPinvBackward0", "LinalgQrBackward0", "LinalgSlogdetBackward0",
             "LinalgSolveExBackward0", "LinalgSolveTriangularBackward0", "LinalgSvdBackward0",
             "LinalgVectorNormBackward0", "LogdetBackward0"}
_CPU_PROMOTE = {"StackBackward0", "CatBackward0", "IndexCopyBackward0"}
# device type -> (lower, float32, promote, default dtype); "cuda" also serves jgrad's other accelerators
_LISTS = {"cuda": (_CUDA_LOWER, _CUDA_FP32, _PROMOTE), "cpu": (_CPU_LOWER, _CPU_FP32, _CPU_PROMOTE)}
_DEFAULT = {"cuda": _dtype.float16, "cpu": _dtype.bfloat16}
_CUDA_TYPES = ("cuda", "gpu", "tpu", "xla")
# every op name a region may act on (BinaryCrossEntropy's for its error under CUDA autocast)
_LISTED = frozenset().union(*(names for lists in _LISTS.values() for names in lists)) | {"BinaryCrossEntropyBackward0"}
_LOW_FLOATS = (_dtype.float16, _dtype.bfloat16)


class _Regions(threading.local):
    def __init__(self):
        self.stack = []  # (device type, dtype, enabled) of the open regions, innermost last


_regions = _Regions()
_open = [0]  # open regions over all threads (the dispatch hook is installed while > 0)
_lock = threading.Lock()


def _kind(device_type):
    return "cuda" if device_type in _CUDA_TYPES else device_type


def _active(kind):
    for dt, dtype, enabled in reversed(_regions.stack):
        if dt == kind:
            return dtype if enabled else None
    return None


def _cast(op, args):
    name = op.name
    if name not in _LISTED or not _regions.stack:  # most ops: nothing to cast (this runs for every op in a region)
        return args
    first = next((a for a in args if isinstance(a, Tensor)), None)
    if first is None:
        return args
    kind = _kind(first.device.type)
    low = _active(kind)
    if low is None or kind not in _LISTS:
        return args
    lower, fp32, promote = _LISTS[kind]
    if name in lower:
        target = low
    elif name in fp32:
        target = _dtype.float32
    elif name in promote:
        floats = [a.dtype for a in args if isinstance(a, Tensor) and a.dtype.is_floating_point]
        if len(set(floats)) < 2:
            return args
        target = max(floats, key=lambda d: (d.itemsize, d == _dtype.float32))
    else:
        if name == "BinaryCrossEntropyBackward0" and kind == "cuda":
            raise RuntimeError("torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
                               "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
                               "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_"
                               "with_logits\nor torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
                               "BCEWithLogits are\nsafe to autocast.")
        return args
    if target == _dtype.float32:  # only 16-bit floats widen (float64 stays)
        return tuple(a.to(target) if isinstance(a, Tensor) and a.dtype in _LOW_FLOATS else a for a in args)
    return tuple(a.to(target) if isinstance(a, Tensor) and a.dtype.is_floating_point and a.dtype != target else a
                 for a in args)


class autocast:
    """``with jgrad.autocast("cuda", dtype=jgrad.bfloat16): ...`` (also a decorator). ``enabled=False`` opens a
    region in which nothing is cast; ``cache_enabled`` is accepted (casts are not cached: XLA fuses them)."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.device = device_type
        self.fast_dtype = dtype if dtype is not None else _DEFAULT.get(_kind(device_type), _dtype.bfloat16)
        if enabled and self.fast_dtype not in _LOW_FLOATS and not (
                self.fast_dtype == _dtype.float32 and _kind(device_type) == "cuda"):
            import warnings
            warnings.warn(f"In {device_type} autocast, but the target dtype is not supported. Disabling autocast.\n"
                          f"{device_type} Autocast only supports dtypes of torch.bfloat16, torch.float16 currently.",
                          UserWarning, stacklevel=2)
            enabled = False
        self._enabled = bool(enabled)

    def __enter__(self):
        _regions.stack.append((_kind(self.device), self.fast_dtype, self._enabled))
        with _lock:
            _open[0] += 1
            _dispatch.autocast_hook[0] = _cast
        return self

    def __exit__(self, *exc):
        _regions.stack.pop()
        with _lock:
            _open[0] -= 1
            if not _open[0]:
                _dispatch.autocast_hook[0] = None
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled):
                return fn(*args, **kwargs)
        return wrapped


def is_autocast_enabled(device_type=None):
    """Whether an enabled autocast region for ``device_type`` ("cuda" when omitted) is open in this thread."""
    return _active(_kind(device_type or "cuda")) is not None


def get_autocast_dtype(device_type):
    """The dtype of the innermost region for ``device_type`` (its default when none is open)."""
    kind = _kind(device_type)
    for dt, dtype, _ in reversed(_regions.stack):
        if dt == kind:
            return dtype
    return _DEFAULT.get(kind, _dtype.bfloat16)


def is_autocast_available(device_type):
    """Whether autocast has op lists for ``device_type``."""
    return _kind(device_type) in _LISTS
