"""``stft`` and ``istft`` (``torch.stft``, ``torch.istft``) on ``jnp.fft``: PyTorch's framing, window padding,
``center`` padding, normalization and one-sided spectra; ``istft`` is the windowed overlap-add divided by the
summed squared window. Both are one op each, so their gradients are ``jax.vjp`` of the same functions.

Imports ``_dispatch``, ``ops._registry`` and ``ops.complex_ops``.
"""
from __future__ import annotations

import warnings

import jax.numpy as jnp

from ..runtime._dispatch import call
from ._registry import tensor_method
from .complex_ops import view_as_real, wirtinger_op

__all__ = ["stft", "istft"]

_PAD_MODES = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}


def _padded_window(window, win_length, n_fft, dtype):
    w = jnp.ones((win_length,), dtype) if window is None else window
    left = (n_fft - win_length) // 2
    return jnp.pad(w, (left, n_fft - win_length - left))


def _stft_fwd(x, window, *, n_fft, hop, win_length, center, pad_mode, normalized, onesided):
    if center:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(n_fft // 2, n_fft // 2)], mode=_PAD_MODES[pad_mode])
    w = _padded_window(window, win_length, n_fft, x.real.dtype)
    n_frames = 1 + (x.shape[-1] - n_fft) // hop
    idx = jnp.arange(n_frames)[:, None] * hop + jnp.arange(n_fft)[None, :]
    frames = x[..., idx] * w
    spec = jnp.fft.rfft(frames, axis=-1) if onesided else jnp.fft.fft(frames, axis=-1)
    if normalized:
        spec = spec / jnp.sqrt(jnp.asarray(n_fft, spec.real.dtype))
    return jnp.swapaxes(spec, -1, -2)


def _istft_fwd(spec, window, *, n_fft, hop, win_length, center, normalized, onesided, length, return_complex):
    spec = jnp.swapaxes(spec, -1, -2)  # (..., frames, freq)
    if normalized:
        spec = spec * jnp.sqrt(jnp.asarray(n_fft, spec.real.dtype))
    frames = jnp.fft.irfft(spec, n=n_fft, axis=-1) if onesided else jnp.fft.ifft(spec, n=n_fft, axis=-1)
    if not return_complex and not onesided:
        frames = frames.real
    w = _padded_window(window, win_length, n_fft, spec.real.dtype)
    frames = frames * w
    n_frames = frames.shape[-2]
    total = n_fft + hop * (n_frames - 1)
    idx = (jnp.arange(n_frames)[:, None] * hop + jnp.arange(n_fft)[None, :]).reshape(-1)
    y = jnp.zeros(frames.shape[:-2] + (total,), frames.dtype).at[..., idx].add(
        frames.reshape(frames.shape[:-2] + (-1,)))
    env = jnp.zeros((total,), w.dtype).at[idx].add(jnp.tile(w * w, n_frames))
    start = n_fft // 2 if center else 0
    end = total - n_fft // 2 if center else total
    if length is not None:
        end = start + length
    y, env = y[..., start:min(end, total)], env[start:min(end, total)]
    y = y / jnp.where(env > 1e-11, env, 1.0)
    if end > total:  # a longer ``length`` than the frames cover: zeros, as PyTorch pads
        y = jnp.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, end - total)])
    return y


# jax.vjp in PyTorch's complex-gradient convention (Note [Conjugate Wirtinger gradients] in ops.complex_ops)
_STFT = wirtinger_op("StftBackward0", _stft_fwd)
_ISTFT = wirtinger_op("IstftBackward0", _istft_fwd)


def _describe(name, input, n_fft, hop, win_length):
    return f"{name}(input of shape {list(input.shape)}, n_fft={n_fft}, hop_length={hop}, win_length={win_length})"


def _lengths(name, input, n_fft, hop_length, win_length, window):
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    where = _describe(name, input, n_fft, hop, win)
    if hop <= 0:
        raise RuntimeError(f"{where} : expected hop_length > 0, but got hop_length={hop}")
    if not 0 < win <= n_fft:
        raise RuntimeError(f"{where} : expected 0 < win_length <= n_fft, but got win_length={win}")
    if window is not None and (window.ndim != 1 or window.shape[0] != win):
        raise RuntimeError(f"{where} : expected a 1D window tensor of size equal to win_length={win}, but got "
                           f"window with size {list(window.shape)}")
    return hop, win


@tensor_method()
def stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",
         normalized=False, onesided=None, return_complex=None, align_to_window=None):
    """The short-time Fourier transform: (..., n_fft // 2 + 1 or n_fft, frames), complex."""
    if center and align_to_window is not None:
        raise RuntimeError("stft align_to_window should only be set when center = false")
    if align_to_window:
        raise RuntimeError("stft: align_to_window=True is not supported by jgrad")
    if pad_mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {pad_mode}")
    complex_in = input.dtype.is_complex or (window is not None and window.dtype.is_complex)
    if return_complex is None and not complex_in:
        raise RuntimeError("stft requires the return_complex parameter be given for real inputs, and will further "
                           "require that return_complex=True in a future PyTorch release.")
    hop, win = _lengths("stft", input, n_fft, hop_length, win_length, window)
    if input.ndim not in (1, 2):
        raise RuntimeError(f"{_describe('stft', input, n_fft, hop, win)} : expected a 1D or 2D tensor")
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise RuntimeError(f"{_describe('stft', input, n_fft, hop, win)} : expected a tensor of floating point or "
                           f"complex values")
    if onesided and complex_in:
        raise RuntimeError("Cannot have onesided output if window or input is complex")
    length = input.shape[-1] + (2 * (n_fft // 2) if center else 0)
    if not 0 < n_fft <= length:
        raise RuntimeError(f"{_describe('stft', input, n_fft, hop, win)} : expected 0 < n_fft <= {length}, but got "
                           f"n_fft={n_fft}")
    out = call(_STFT, input, window, n_fft=n_fft, hop=hop, win_length=win, center=bool(center), pad_mode=pad_mode,
               normalized=bool(normalized), onesided=not complex_in if onesided is None else bool(onesided))
    if return_complex is False:
        warnings.warn("stft with return_complex=False is deprecated. In a future pytorch release, stft will return "
                      "complex tensors for all inputs, and return_complex=False will raise an error.", UserWarning,
                      stacklevel=2)
        return view_as_real(out)
    return out


@tensor_method()
def istft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, normalized=False,
          onesided=None, length=None, return_complex=False):
    """The inverse of ``stft``: windowed overlap-add over the frames, divided by the summed squared window."""
    if not input.dtype.is_complex:
        raise RuntimeError("istft requires a complex-valued input tensor matching the output from stft with "
                           "return_complex=True.")
    hop, win = _lengths("istft", input, n_fft, hop_length, win_length, window)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"{_describe('istft', input, n_fft, hop, win)}: expected a tensor with 2 or 3 "
                           f"dimensions of complex dtype, but got {input.ndim}")
    sided = input.shape[-2] != n_fft if onesided is None else bool(onesided)
    if sided and return_complex:
        raise RuntimeError("cannot have onesided output if window or input is complex")
    return call(_ISTFT, input, window, n_fft=n_fft, hop=hop, win_length=win, center=bool(center),
                normalized=bool(normalized), onesided=sided, length=None if length is None else int(length),
                return_complex=bool(return_complex))
