"""Convolution and pooling layers: Conv1d/2d/3d, ConvTranspose1d/2d/3d, MaxPool1d/2d/3d,
AvgPool1d/2d/3d, AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d (``torch.nn``), initialised as PyTorch does.

Imports ``nn.functional``, ``nn.init``, ``nn.module``, ``nn.parameter`` and ``ops.creation``.
"""
from __future__ import annotations

import math

from ..ops.creation import empty
from . import functional as F, init
from .module import Module
from .parameter import Parameter

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "MaxPool1d",
           "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
           "AdaptiveMaxPool1d", "AdaptiveMaxPool2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _ntuple(value, n):
    return (value,) * n if isinstance(value, int) else tuple(value)


class _ConvNd(Module):
    _nd = 0
    _transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None, output_padding=0):
        super().__init__()
        nd = self._nd
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = _ntuple(kernel_size, nd), _ntuple(stride, nd)
        self.dilation, self.output_padding = _ntuple(dilation, nd), _ntuple(output_padding, nd)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {['valid', 'same']}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _ntuple(padding, nd)
        self.padding_mode = padding_mode
        if self._transposed:
            if padding_mode != "zeros":
                raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        self.weight = Parameter(empty(*shape, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's default: kaiming_uniform_(a=sqrt(5)) weights, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) bias."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _explicit_padding(self):
        """(pad list for F.pad, in PyTorch's last-dim-first order) for a non-zeros padding_mode."""
        if self.padding == "valid":
            return [0, 0] * self._nd
        if self.padding == "same":
            pads = []
            for d, k in zip(reversed(self.dilation), reversed(self.kernel_size)):
                total = d * (k - 1)
                pads += [total // 2, total - total // 2]
            return pads
        return [p for p in reversed(self.padding) for _ in range(2)]

    def _conv(self, input, weight, bias):
        fn = (F.conv1d, F.conv2d, F.conv3d)[self._nd - 1]
        if self.padding_mode != "zeros":
            mode = {"reflect": "reflect", "replicate": "replicate", "circular": "circular"}[self.padding_mode]
            input = F.pad(input, self._explicit_padding(), mode=mode)
            return fn(input, weight, bias, self.stride, 0, self.dilation, self.groups)
        return fn(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._nd:
            s += f", padding={self.padding!r}" if isinstance(self.padding, str) else f", padding={self.padding}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if self._transposed and self.output_padding != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class Conv1d(_ConvNd):
    """1-D convolution over ``(N, C_in, L)``: weight ``(C_out, C_in / groups, k)``."""

    _nd = 1


class Conv2d(_ConvNd):
    """2-D convolution over ``(N, C_in, H, W)``: weight ``(C_out, C_in / groups, kH, kW)``."""

    _nd = 2


class Conv3d(_ConvNd):
    """3-D convolution over ``(N, C_in, D, H, W)``."""

    _nd = 3


class _ConvTransposeNd(_ConvNd):
    _transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype, output_padding=output_padding)

    def forward(self, input, output_size=None):
        output_padding = self.output_padding
        if output_size is not None:
            output_padding = self._output_padding(input, output_size)
        fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[self._nd - 1]
        return fn(input, self.weight, self.bias, self.stride, self.padding, output_padding, self.groups,
                  self.dilation)

    def _output_padding(self, input, output_size):
        nd = self._nd
        output_size = tuple(output_size)[-nd:]
        pads = []
        for i in range(nd):
            smallest = ((input.shape[-nd + i] - 1) * self.stride[i] - 2 * self.padding[i]
                        + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            if not smallest <= output_size[i] < smallest + self.stride[i]:
                raise ValueError(f"requested an output size of {list(output_size)}, but valid sizes range from "
                                 f"{smallest} to {smallest + self.stride[i] - 1} (for an input of "
                                 f"{list(input.shape[-nd:])})")
            pads.append(output_size[i] - smallest)
        return tuple(pads)


class ConvTranspose1d(_ConvTransposeNd):
    """1-D transposed convolution: weight ``(C_in, C_out / groups, k)``."""

    _nd = 1


class ConvTranspose2d(_ConvTransposeNd):
    """2-D transposed convolution: weight ``(C_in, C_out / groups, kH, kW)``."""

    _nd = 2


class ConvTranspose3d(_ConvTransposeNd):
    """3-D transposed convolution."""

    _nd = 3


# ---- pooling ------------------------------------------------------------------------------
class _MaxPoolNd(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding, self.dilation,
                              ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """Maximum over sliding windows of ``(N, C, L)``."""

    _fn = staticmethod(F.max_pool1d)


class MaxPool2d(_MaxPoolNd):
    """Maximum over sliding windows of ``(N, C, H, W)``."""

    _fn = staticmethod(F.max_pool2d)


class MaxPool3d(_MaxPoolNd):
    """Maximum over sliding windows of ``(N, C, D, H, W)``."""

    _fn = staticmethod(F.max_pool3d)


class _AvgPoolNd(Module):
    _nd = 0

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.ceil_mode, self.count_include_pad = padding, ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        if self._nd == 1:
            return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                                self.count_include_pad)
        fn = F.avg_pool2d if self._nd == 2 else F.avg_pool3d
        return fn(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                  self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPoolNd):
    """Average over sliding windows of ``(N, C, L)``."""

    _nd = 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


class AvgPool2d(_AvgPoolNd):
    """Average over sliding windows of ``(N, C, H, W)``."""

    _nd = 2


class AvgPool3d(_AvgPoolNd):
    """Average over sliding windows of ``(N, C, D, H, W)``."""

    _nd = 3


class _AdaptivePool(Module):
    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePool):
    """Average over ``output_size`` adaptive bins of the last dim."""

    def __init__(self, output_size):
        super().__init__(output_size)

    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(_AdaptivePool):
    """Average over ``output_size`` adaptive bins of the last two dims (``(1, 1)``: global average pooling)."""

    def __init__(self, output_size):
        super().__init__(output_size)

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveMaxPool1d(_AdaptivePool):
    """Maximum over ``output_size`` adaptive bins of the last dim."""

    def forward(self, input):
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool2d(_AdaptivePool):
    """Maximum over ``output_size`` adaptive bins of the last two dims."""

    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)
