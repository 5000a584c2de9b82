"""Issue 30: ``stft`` and ``istft`` against PyTorch: spectra, reconstructions and gradients over PyTorch's options
(window, hop, center and its padding modes, normalization, one- and two-sided, batched, complex input), and its
errors."""
import warnings

import numpy as np
import pytest

import jgrad as jg

torch = pytest.importorskip("torch")

_CASES = [dict(n_fft=8, win_length=6, window="hann", hop_length=3, pad_mode="replicate"),  # each a compile: few
          dict(n_fft=8, center=False, normalized=True, onesided=False)]


def _run(lib, signal, kw):
    kw = dict(kw)
    if kw.get("window") == "hann":
        kw["window"] = lib.tensor(np.hanning(6).astype(np.float32) + 0.1)
    x = lib.tensor(signal, requires_grad=True)
    spec = x.stft(return_complex=True, **kw)  # the Tensor methods, in both libraries
    kw.pop("pad_mode", None)
    y = spec.istft(kw.pop("n_fft"), length=signal.shape[-1], **kw)
    ramp = lib.tensor(np.linspace(0, 1, signal.shape[-1], dtype=np.float32))
    (spec.abs().sum() + (y * ramp).sum()).backward()
    return spec.detach().numpy(), y.detach().numpy(), x.grad.numpy()


@pytest.mark.one_execution_mode  # one op each way: the modes run the same kernels
def test_stft_and_istft_against_pytorch():
    signal = np.random.default_rng(0).standard_normal((2, 40)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's rectangular-window warning
        for kw in _CASES:
            for ours, theirs in zip(_run(jg, signal, kw), _run(torch, signal, kw)):
                np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4, err_msg=str(kw))
        z = (signal[0] + 1j * signal[1]).astype(np.complex64)  # complex input: two-sided, round trip
        for lib in (jg, torch):
            spec = lib.stft(lib.tensor(z), 8, return_complex=True)
            assert tuple(spec.shape) == (8, 21)
            np.testing.assert_allclose(lib.istft(spec, 8, return_complex=True, length=40).numpy(), z, atol=1e-5)
        real_view = jg.stft(jg.tensor(signal), 8, center=False, normalized=True, onesided=False,
                            return_complex=False)  # the deprecated real view (the kernel of the second case)
        assert real_view.shape == (2, 8, 17, 2)  # PyTorch's shape
    x = jg.randn(40)
    for call, match in [(lambda: jg.stft(x, 8), "requires the return_complex parameter"),
                        (lambda: jg.stft(x, 8, hop_length=0, return_complex=True), "expected hop_length > 0"),
                        (lambda: jg.stft(x, 8, win_length=9, return_complex=True), "expected 0 < win_length <= n_fft"),
                        (lambda: jg.stft(x, 8, window=jg.ones(5), return_complex=True), "1D window tensor of size"),
                        (lambda: jg.stft(jg.randn(2, 2, 20), 8, return_complex=True), "expected a 1D or 2D tensor"),
                        (lambda: jg.stft(x, 8, return_complex=True, align_to_window=True), "align_to_window"),
                        (lambda: jg.istft(jg.randn(5, 3), 8), "requires a complex-valued input")]:
        with pytest.raises(RuntimeError, match=match):
            call()
