"""jgrad.fft and complex numbers against PyTorch: transforms with n/s, dim and norm, their dtypes and
gradients in PyTorch's conjugate Wirtinger convention; real/imag/view_as_real/view_as_complex/conj/angle/
sgn/polar/complex; complex type promotion; finfo/iinfo; PyTorch's errors."""
import numpy as np
import pytest

import jgrad as jg
from jgrad import fft as F

torch = pytest.importorskip("torch")
TF = torch.fft
from _math_helpers import compare, rand  # noqa: E402
from _vs_torch import same_error  # noqa: E402

X = rand((4, 6), 1)
Z = rand((4, 6), 2, np.complex128)
Z3 = rand((3,), 3, np.complex128)


def _both(name, *args, **kw):
    return (lambda *t: getattr(F, name)(*t, *args, **kw)), (lambda *t: getattr(TF, name)(*t, *args, **kw))


CASES = {
    "fft_real": (*_both("fft"), [X]),
    "fft_complex_n_ortho": (*_both("fft", n=8, dim=0, norm="ortho"), [Z]),
    "ifft_forward": (*_both("ifft", norm="forward"), [Z]),
    "rfft_n": (*_both("rfft", n=5), [X]),
    "irfft": (*_both("irfft"), [Z]),
    "irfft_n_ortho": (*_both("irfft", n=7, dim=0, norm="ortho"), [Z]),
    "hfft": (*_both("hfft"), [Z]),
    "ihfft": (*_both("ihfft"), [X]),
    "fft2_s": (*_both("fft2", s=(3, 8)), [Z]),
    "ifftn": (*_both("ifftn"), [Z]),
    "rfft2": (*_both("rfft2"), [X]),
    "irfftn_s": (*_both("irfftn", s=(4, 6)), [Z]),
    "rfftn_dim": (*_both("rfftn", dim=(1, 0), norm="forward"), [X]),
    "fftshift": (*_both("fftshift", dim=1), [Z]),
    "ifftshift": (*_both("ifftshift"), [X]),
    "real_imag": (lambda z: (z.real, z.imag), lambda z: (z.real, z.imag), [Z3]),
    "view_as_real": (jg.view_as_real, torch.view_as_real, [Z3]),
    "view_as_complex": (jg.view_as_complex, torch.view_as_complex, [rand((3, 2), 4)]),
    "conj_angle_abs_sgn": (lambda z: (z.conj() * 1, z.angle(), z.abs(), z.sgn()),
                           lambda z: (z.conj() * 1, z.angle(), z.abs(), z.sgn()), [Z3]),
    "angle_real": (jg.angle, torch.angle, [np.array([-1.5, 0.5, 2.0])]),
    "polar_complex": (lambda r, t: (jg.polar(r, t), jg.complex(r, t)), lambda r, t: (torch.polar(r, t),
                                                                                     torch.complex(r, t)),
                      [np.abs(rand((3,), 5)), rand((3,), 6)]),
}


@pytest.mark.one_execution_mode  # numerics of the kernels; "auto" mode reruns them with the same values
@pytest.mark.parametrize("name", sorted(CASES))
def test_fft_and_complex_vs_torch(name):
    jf, tf, arrays = CASES[name]
    compare(jf, tf, arrays, rtol=1e-7, atol=1e-9, what=name)


def test_fft_dtypes_freqs_and_promotion():
    for dt in (np.float32, np.int64, np.bool_):
        a = np.arange(4).astype(dt)
        assert F.fft(jg.tensor(a)).dtype.name == str(TF.fft(torch.tensor(a)).dtype).split(".")[1]
        assert F.irfft(jg.tensor(a)).dtype.name == str(TF.irfft(torch.tensor(a)).dtype).split(".")[1]
    for args, kw in (((5, 0.1), {}), ((6,), {"dtype": jg.float64})):
        tkw = {"dtype": torch.float64} if kw else {}
        np.testing.assert_allclose(F.fftfreq(*args, **kw), TF.fftfreq(*args, **tkw), rtol=1e-7)
        np.testing.assert_allclose(F.rfftfreq(*args, **kw), TF.rfftfreq(*args, **tkw), rtol=1e-7)
        assert F.fftfreq(*args, **kw).dtype.name == str(TF.fftfreq(*args, **tkw).dtype).split(".")[1]
    # PyTorch's promotion: a complex operand keeps a float64 tensor's precision
    for a, b in ((np.ones(2), 1j), (np.ones(2), np.array(1j, np.complex64)), (np.ones(2, np.int64), np.array(1j)),
                 (np.ones(2, np.float32), 1j)):
        jb = jg.tensor(b) if isinstance(b, np.ndarray) else b
        tb = torch.tensor(b) if isinstance(b, np.ndarray) else b
        assert (jg.tensor(a) * jb).dtype.name == str((torch.tensor(a) * tb).dtype).split(".")[1], (a.dtype, b)
    assert jg.cfloat is jg.complex64 and jg.float64.to_complex() is jg.complex128
    for d in ("float32", "float64", "float16", "bfloat16", "complex64"):
        ji, ti = jg.finfo(getattr(jg, d)), torch.finfo(getattr(torch, d))
        assert (ji.eps, ji.max, ji.tiny, ji.bits, ji.resolution) == (ti.eps, ti.max, ti.tiny, ti.bits, ti.resolution)
    for d in ("int8", "int32", "int64", "uint8"):
        assert (jg.iinfo(getattr(jg, d)).min, jg.iinfo(getattr(jg, d)).max) == (
            torch.iinfo(getattr(torch, d)).min, torch.iinfo(getattr(torch, d)).max)


def test_fft_and_complex_errors_match_torch():
    x, z = np.ones((4, 4)), np.ones((4, 4), np.complex64)
    cases = [
        lambda L, T: L.fft.rfft(T(z)), lambda L, T: L.fft.fft(T(x), n=0), lambda L, T: L.fft.fft(T(x), norm="foo"),
        lambda L, T: L.fft.fft(T(x), dim=2), lambda L, T: L.fft.fft2(T(np.ones(4))),
        lambda L, T: L.fft.fftn(T(x), s=(2,), dim=(0, 1)), lambda L, T: L.fft.fftn(T(x), s=(2, 2, 2)),
        lambda L, T: L.fft.fftn(T(x), dim=(0, 0)), lambda L, T: L.fft.irfft(T(np.ones(1, np.complex64))),
        lambda L, T: L.fft.fft(T(np.ones(4, np.float16))), lambda L, T: L.fft.fft(T(np.array(1.0))),
        lambda L, T: L.view_as_real(T(x)), lambda L, T: L.view_as_complex(T(np.ones((2, 3)))),
        lambda L, T: L.view_as_complex(T(np.ones((2, 2), np.int64))), lambda L, T: T(x).imag,
        lambda L, T: L.complex(T(np.ones(2)), T(np.ones(2, np.float32))),
        lambda L, T: L.polar(T(np.ones(2, np.int64)), T(np.ones(2, np.int64))),
        lambda L, T: L.fft.fftfreq(-1),
    ]
    for fn in cases:
        same_error(lambda: fn(jg, jg.tensor), lambda: fn(torch, torch.tensor))
