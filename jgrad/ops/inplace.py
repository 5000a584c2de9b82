"""In-place variants (``x.atan2_(y)``, ``x.cumsum_(0)`` ...) of the ops that have no in-place kernel of their
own, and augmented assignment (``x //= y``, ``x **= 2``, ``x &= m``, ``x <<= 1`` ...) that writes ``x``.

Such a variant runs the out-of-place op and writes its result into the tensor through ``write`` (one
``CopyBackwards`` step through the door): the tensor is rebound and its version bumped, as every in-place op
of jgrad does, PyTorch's checks of an in-place result apply (its shape must be the tensor's, its dtype must
cast to the tensor's: ``result type Float can't be cast to the desired output type Long``), and the gradient
flows through the op's own backward. The ops with a fused in-place kernel (``add_``, ``mul_``, ``relu_``...)
keep it. Loaded after every op family: the variants are made for the methods that exist by then.

Imports ``_dispatch``, ``_tensor`` and ``ops._registry``.
"""
from __future__ import annotations

from ..runtime._dispatch import Op, call_inplace
from ..core._tensor import Tensor
from ._registry import broadcast_shapes, scalar_type_name, tensor_method


def _assign_bwd(ctx, g):
    return None, g.astype(ctx.in_avals[1][1])


ASSIGN = Op("CopyBackwards", lambda a, r: r.astype(a.dtype), _assign_bwd, save=())


def write(target, result, name=""):
    """Write ``result`` (an op's output) into ``target`` in place, with PyTorch's checks; returns ``target``."""
    if tuple(result.shape) != tuple(target.shape):
        raise RuntimeError(f"output with shape {list(target.shape)} doesn't match the broadcast shape "
                           f"{list(result.shape)}")
    src, dst = result.dtype, target.dtype
    if src is not dst and src._category > dst._category:
        raise RuntimeError(f"result type {scalar_type_name(src)} can't be cast to the desired output type "
                           f"{scalar_type_name(dst)}")
    return call_inplace(ASSIGN, target, result)


def _variant(base, name):
    def method(self, *args, **kwargs):
        if name in _BINARY and args and isinstance(args[0], Tensor) and tuple(args[0].shape) != tuple(self.shape):
            shape = broadcast_shapes(tuple(self.shape), tuple(args[0].shape))
            if shape != tuple(self.shape):  # PyTorch checks the output's shape before anything else
                raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                                   f"{list(shape)}")
        if name.startswith("bitwise_") and args and not (self.dtype.is_floating_point or self.dtype.is_complex):
            _check_cast(self, args[0])
        # the op reads a copy: the write below bumps self's version, which would stale what the op saved of it
        src = self.clone() if self.requires_grad else self
        try:
            out = base(src, *args, **kwargs)
        except TypeError as e:  # argument errors name the in-place op, as PyTorch's
            msg = str(e)
            if msg.startswith(f"{name}(): "):
                raise TypeError(f"{name}_(): " + msg[len(name) + 4:]) from None
            raise
        if name in _FUSED_ADD and tuple(out.shape) != tuple(self.shape):
            raise RuntimeError(f"Bad in-place call: input tensor size {list(self.shape)} and output tensor size "
                               f"{list(out.shape)} should match")
        if name in _NO_BOOL and self.dtype.name == "bool":
            if self.ndim and self.numel():
                raise NotImplementedError(f"\"{_NO_BOOL[name]}\" not implemented for 'Bool'")
            return call_inplace(ASSIGN, self, out)  # nothing for the kernel to do: PyTorch writes it back
        return write(self, out)
    return method


# PyTorch's in-place methods whose out-of-place op jgrad has and that have no kernel of their own here. The
# views' in-place forms (squeeze_, t_, transpose_...) belong with the views (ops/shape.py).
_NAMES = """absolute acos acosh addbmm addmm addmv addr arccos arccosh arcsin arcsinh arctan arctan2 arctanh asin
asinh atan atan2 atanh baddbmm bitwise_and bitwise_left_shift bitwise_not bitwise_or bitwise_right_shift
bitwise_xor clamp_max clamp_min copysign cosh cumprod cumsum deg2rad divide eq erf erfc exp2 fix float_power
floor_divide fmod frac ge greater greater_equal gt hypot index_copy index_fill ldexp le less less_equal log10
log2 logical_and logical_not logical_or logical_xor logit lt masked_scatter multiply nan_to_num ne negative
not_equal rad2deg remainder scatter_reduce sgn sinc sinh subtract tan tril triu true_divide xlogy
lgamma digamma erfinv i0 conj_physical polygamma""".split()


# elementwise binary ops: the output's shape is checked first (PyTorch's order); in-place forms without a bool kernel
_BINARY = set("""arctan2 atan2 bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor copysign divide
eq float_power floor_divide fmod ge greater greater_equal gt hypot ldexp le less less_equal logical_and logical_or
logical_xor lt multiply ne not_equal remainder true_divide xlogy""".split())
_NO_BOOL = {"cumsum": "cumsum_out_cpu", "cumprod": "cumprod_out_cpu"}
_FUSED_ADD = {"addmm", "addmv", "addbmm", "baddbmm", "addr"}


def _check_cast(self, other):
    """An integer tensor written with a float operand: PyTorch's cast error comes before the kernel's refusal."""
    if isinstance(other, float) or (isinstance(other, Tensor) and (other.dtype.is_floating_point or
                                                                   other.dtype.is_complex) and other.ndim):
        name = "Float" if isinstance(other, float) else scalar_type_name(other.dtype)
        raise RuntimeError(f"result type {name} can't be cast to the desired output type "
                           f"{scalar_type_name(self.dtype)}")


def install():
    """Attach ``name_`` for every name above whose op exists and whose in-place form does not."""
    for name in _NAMES:
        base = getattr(Tensor, name, None)
        if base is not None and not hasattr(Tensor, name + "_"):
            tensor_method(name + "_")(_variant(base, name))


install()


# ---- augmented assignment ------------------------------------------------------------------------
def _augmented(method_name):
    def op(self, other):
        return getattr(self, method_name)(other)
    return op


for _dunder, _method in (("ipow", "pow_"), ("ifloordiv", "floor_divide_"), ("imod", "remainder_"),
                         ("iand", "bitwise_and_"), ("ior", "bitwise_or_"), ("ixor", "bitwise_xor_"),
                         ("ilshift", "bitwise_left_shift_"), ("irshift", "bitwise_right_shift_")):
    setattr(Tensor, f"__{_dunder}__", _augmented(_method))
