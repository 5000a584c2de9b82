"""``jgrad.fft``: ``torch.fft`` under its names, on ``jnp.fft`` (re-exports of ``ops.spectral``); docs/math.md.

Imports the op library only.
"""
from .ops.spectral import (fft, fft2, fftfreq, fftn, fftshift, hfft, ifft, ifft2, ifftn, ifftshift,  # noqa: F401
                           ihfft, irfft, irfft2, irfftn, rfft, rfft2, rfftfreq, rfftn)

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
           "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]
