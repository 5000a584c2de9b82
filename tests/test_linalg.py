"""jgrad.linalg against torch.linalg: values, dtypes and gradients (real and complex, batched), the
top-level and Tensor-method forms, PyTorch's errors, and singular or indefinite inputs reported as
``LinAlgError`` (at once on the CPU, at the next host sync in "auto" mode)."""
import numpy as np
import pytest

import jgrad as jg
from jgrad import linalg as LA

torch = pytest.importorskip("torch")
TL = torch.linalg
from _math_helpers import compare, rand, spd  # noqa: E402
from _vs_torch import same_error  # noqa: E402
from _op_helpers import _THOROUGH as THOROUGH  # noqa: E402

A33 = rand((2, 3, 3), 1)
A43 = rand((4, 3), 2)
C33 = rand((2, 3, 3), 3, np.complex128)


def _abs(x):
    return x.abs()


# name -> (jgrad fn, torch fn, inputs); gauge-dependent outputs (eigenvectors, singular vectors) enter through
# sign-free functions of them.
CASES = {  # one case per function (and the complex convention) in every run
    "inv_complex": (LA.inv, TL.inv, [C33]),
    "det": (LA.det, TL.det, [A33]),
    "slogdet": (lambda a: LA.slogdet(a).logabsdet, lambda a: TL.slogdet(a).logabsdet, [A33]),
    "logdet": (jg.logdet, torch.logdet, [spd((2, 3, 3), 4)]),
    "solve_vec": (LA.solve, TL.solve, [A33, rand((2, 3), 5)]),
    "solve_complex_right": (lambda a, b: LA.solve(a, b, left=False), lambda a, b: TL.solve(a, b, left=False),
                            [C33[0], rand((4, 3), 7, np.complex128)]),
    "cholesky_complex_upper": (lambda a: LA.cholesky(a, upper=True), lambda a: TL.cholesky(a, upper=True),
                               [spd((3, 3), 10, np.complex128)]),
    "eigh": (lambda a: (LA.eigh(a)[0], LA.eigh(a)[1] ** 2), lambda a: (TL.eigh(a)[0], TL.eigh(a)[1] ** 2),
             [spd((2, 3, 3), 11)]),
    "qr": (lambda a: tuple(LA.qr(a)), lambda a: tuple(TL.qr(a)), [A43]),
    "svd": (lambda a: (LA.svd(a, False)[1], _abs(LA.svd(a, False)[2])),
            lambda a: (TL.svd(a, False)[1], _abs(TL.svd(a, False)[2])), [A43]),
    "pinv": (LA.pinv, TL.pinv, [A43]),
    "lstsq_gelsd": (lambda a, b: tuple(LA.lstsq(a, b, driver="gelsd")),
                    lambda a, b: tuple(TL.lstsq(a, b, driver="gelsd")), [A43, rand((4, 2), 14)]),
    "matrix_rank": (LA.matrix_rank, TL.matrix_rank, [np.array([[1.0, 2, 3], [2, 4, 6], [0, 1, 1]])]),
    "matrix_power": (lambda a: LA.matrix_power(a, 3), lambda a: TL.matrix_power(a, 3), [A33]),
    "matrix_exp": (LA.matrix_exp, TL.matrix_exp, [A33 / 2]),
    "vector_norm": (lambda a: [LA.vector_norm(a, o, dim) for o, dim in ((2, None), (np.inf, (0, 2)), (3.5, -1))],
                    lambda a: [TL.vector_norm(a, o, dim) for o, dim in ((2, None), (np.inf, (0, 2)), (3.5, -1))],
                    [A33]),
    "matrix_norm": (lambda a: [LA.matrix_norm(a, o) for o in ("fro", "nuc", 2, np.inf)],
                    lambda a: [TL.matrix_norm(a, o) for o in ("fro", "nuc", 2, np.inf)], [A33]),
    "norm": (lambda a: [LA.norm(a), LA.norm(a[0], np.inf)], lambda a: [TL.norm(a), TL.norm(a[0], np.inf)], [A33]),
    "cross": (LA.cross, TL.cross, [rand((1, 2, 3), 15), rand((4, 1, 3), 16)]),
    "multi_dot": (lambda a, b, c: LA.multi_dot([a, b, c]), lambda a, b, c: TL.multi_dot([a, b, c]),
                  [rand((3,), 19), A43.T.copy(), rand((4, 2), 20)]),
    "vecdot": (LA.vecdot, TL.vecdot, [rand((2, 3), 21, np.complex128), rand((3,), 22, np.complex128)]),
    "solve_triangular": (lambda a, b: LA.solve_triangular(a, b, upper=True),
                         lambda a, b: TL.solve_triangular(a, b, upper=True),
                         [A33 + 3 * np.eye(3), rand((2, 3, 2), 23)]),
    "cholesky_solve": (lambda b, l: jg.cholesky_solve(b, l), torch.cholesky_solve,
                       [rand((3, 2), 24), np.linalg.cholesky(spd((3, 3), 25))]),
    "cholesky_inverse": (lambda l: jg.cholesky_inverse(l), torch.cholesky_inverse,
                         [np.linalg.cholesky(spd((3, 3), 26))]),
}
EXTRA = {  # variants, with JGRAD_TEST_THOROUGH=1 (each compiles its own kernels: seconds of CPU apiece)
    "inv": (LA.inv, TL.inv, [A33]),
    "det_complex": (LA.det, TL.det, [C33]),
    "slogdet_sign": (lambda a: LA.slogdet(a)[0], lambda a: TL.slogdet(a)[0], [A33]),
    "solve": (LA.solve, TL.solve, [A33, rand((2, 3, 2), 5)]),
    "solve_bcast": (LA.solve, TL.solve, [A33[0], rand((4, 3, 1), 5)]),
    "solve_right": (lambda a, b: LA.solve(a, b, left=False), lambda a, b: TL.solve(a, b, left=False),
                    [A33, rand((2, 4, 3), 6)]),
    "solve_complex": (LA.solve, TL.solve, [C33, rand((2, 3), 7, np.complex128)]),
    "cholesky": (LA.cholesky, TL.cholesky, [spd((2, 3, 3), 8)]),
    "cholesky_upper": (lambda a: LA.cholesky(a, upper=True), lambda a: TL.cholesky(a, upper=True), [spd((3, 3), 9)]),
    "eigh_upper_nonsym": (lambda a: LA.eigvalsh(a, "U"), lambda a: TL.eigvalsh(a, "U"), [A33]),
    "eigvalsh_complex": (LA.eigvalsh, TL.eigvalsh, [spd((3, 3), 12, np.complex128)]),
    "qr_wide": (lambda a: tuple(LA.qr(a)), lambda a: tuple(TL.qr(a)), [A43.T.copy()]),
    "qr_r": (lambda a: LA.qr(a.detach(), mode="r")[1], lambda a: TL.qr(a.detach(), mode="r")[1], [A43]),
    "svd_full": (lambda a: (LA.svd(a)[1], _abs(LA.svd(a)[0][:, :3])),
                 lambda a: (TL.svd(a)[1], _abs(TL.svd(a)[0][:, :3])), [A43]),
    "svdvals_complex": (LA.svdvals, TL.svdvals, [C33]),
    "pinv_hermitian": (lambda a: LA.pinv(a, hermitian=True), lambda a: TL.pinv(a, hermitian=True), [spd((3, 3), 13)]),
    "pinv_atol": (lambda a: LA.pinv(a, atol=1.0), lambda a: TL.pinv(a, atol=1.0), [A43]),
    "lstsq": (lambda a, b: LA.lstsq(a, b).solution, lambda a, b: TL.lstsq(a, b).solution, [A43, rand((4, 2), 14)]),
    "matrix_power_neg": (lambda a: LA.matrix_power(a, -2), lambda a: TL.matrix_power(a, -2), [A33]),
    "matrix_power_0": (lambda a: LA.matrix_power(a, 0), lambda a: TL.matrix_power(a, 0), [A33]),
    "vector_norm_more": (lambda a: [LA.vector_norm(a, o, d) for o, d in ((1, 1), (-np.inf, -1), (0, 1))],
                         lambda a: [TL.vector_norm(a, o, d) for o, d in ((1, 1), (-np.inf, -1), (0, 1))], [A33]),
    "vector_norm_complex": (lambda a: LA.vector_norm(a, 2, -1, True), lambda a: TL.vector_norm(a, 2, -1, True), [C33]),
    "vector_norm_zero": (LA.vector_norm, TL.vector_norm, [np.zeros((3,))]),
    "matrix_norm_more": (lambda a: [LA.matrix_norm(a, o) for o in (-2, 1, -1, -np.inf)],
                         lambda a: [TL.matrix_norm(a, o) for o in (-2, 1, -1, -np.inf)], [A33]),
    "norm_more": (lambda a: [LA.norm(a[0], 1), LA.norm(a, dim=(0, 2), keepdim=True), LA.norm(a[0, 0], 3)],
                  lambda a: [TL.norm(a[0], 1), TL.norm(a, dim=(0, 2), keepdim=True), TL.norm(a[0, 0], 3)], [A33]),
    "cross_top": (lambda a, b: jg.cross(a, b, dim=0), lambda a, b: torch.cross(a, b, dim=0), [rand((3, 2), 17),
                                                                                             rand((3, 2), 18)]),
    "methods": (lambda a: (a.det(), a.inverse(), a.matrix_power(2), a.matrix_exp(), a.pinverse(), jg.svd(a)[1]),
                lambda a: (a.det(), a.inverse(), a.matrix_power(2), a.matrix_exp(), a.pinverse(), torch.svd(a)[1]),
                [A33]),
}
if THOROUGH:
    CASES.update(EXTRA)


@pytest.mark.one_execution_mode  # numerics of the kernels; "auto" mode reruns them with the same values
@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_vs_torch(name):
    jf, tf, arrays = CASES[name]
    compare(jf, tf, arrays, rtol=1e-6, atol=1e-8, what=name)


@pytest.mark.one_execution_mode
def test_linalg_aliases_and_float32():
    """torch.det, Tensor.det ...: the top-level and method forms give torch's values."""
    for name, args in (("det", ()), ("logdet", ()), ("matrix_power", (3,)), ("matrix_exp", ()), ("inverse", ())):
        x = spd((2, 3, 3), 4) if name in ("cholesky", "logdet") else A33 / 2 if name == "matrix_exp" else A33
        expected = getattr(torch, name)(torch.tensor(x), *args).numpy()
        np.testing.assert_allclose(getattr(jg, name)(jg.tensor(x), *args), expected, rtol=1e-7, err_msg=name)
        np.testing.assert_allclose(getattr(jg.tensor(x), name)(*args), expected, rtol=1e-7, err_msg=name)
    a = rand((3, 4), 30, np.float32)
    U, S, Vh = LA.svd(jg.tensor(a), full_matrices=False)
    np.testing.assert_allclose((U * S[None]) @ Vh, a, rtol=1e-5, atol=1e-5)
    assert U.dtype is jg.float32 and S.dtype is jg.float32
    assert LA.svdvals(jg.tensor(rand((2, 2), 1, np.complex64))).dtype is jg.float32


def _errors():
    f, i = np.ones((2, 3)), np.ones((2, 2), np.int64)
    sq, v = np.ones((3, 3)), np.ones(3)
    return [
        ("inv", lambda L, T: L.inv(T(f))), ("inv", lambda L, T: L.inv(T(v))), ("inv", lambda L, T: L.inv(T(i))),
        ("det", lambda L, T: L.det(T(f))), ("cholesky", lambda L, T: L.cholesky(T(v))),
        ("solve", lambda L, T: L.solve(T(sq), T(np.ones(2)))),
        ("solve", lambda L, T: L.solve(T(sq), T(np.ones((2, 4))), left=False)),
        ("solve", lambda L, T: L.solve(T(sq), T(np.ones(3, np.float32)))),
        ("eigh", lambda L, T: L.eigh(T(sq), UPLO="X")), ("eigh", lambda L, T: L.eigh(T(i))),
        ("qr", lambda L, T: L.qr(T(sq), mode="foo")), ("svd", lambda L, T: L.svd(T(i))),
        ("pinv", lambda L, T: L.pinv(T(v))), ("lstsq", lambda L, T: L.lstsq(T(sq), T(np.ones((2, 1))))),
        ("lstsq", lambda L, T: L.lstsq(T(sq), T(np.ones((3, 1))), driver="foo")),
        ("matrix_rank", lambda L, T: L.matrix_rank(T(v))),
        ("cross", lambda L, T: L.cross(T(np.ones(4)), T(np.ones(4)))),
        ("cross", lambda L, T: L.cross(T(f), T(np.ones((4, 2, 3))))),
        ("multi_dot", lambda L, T: L.multi_dot([T(v)])),
        ("multi_dot", lambda L, T: L.multi_dot([T(sq), T(np.ones((2, 3, 3)))])),
        ("multi_dot", lambda L, T: L.multi_dot([T(sq), T(f)])),
        ("multi_dot", lambda L, T: L.multi_dot([T(sq), T(v), T(sq)])),
        ("matrix_power", lambda L, T: L.matrix_power(T(f), 2)),
        ("matrix_power", lambda L, T: L.matrix_power(T(sq), 1.5)),
        ("matrix_exp", lambda L, T: L.matrix_exp(T(f))), ("matrix_norm", lambda L, T: L.matrix_norm(T(sq), ord=3)),
        ("matrix_norm", lambda L, T: L.matrix_norm(T(sq), dim=(0, 0))),
        ("vector_norm", lambda L, T: L.vector_norm(T(i))), ("vector_norm", lambda L, T: L.vector_norm(T(v), ord="fro")),
        ("norm", lambda L, T: L.norm(T(np.ones((2, 2, 2))), ord=2)), ("norm", lambda L, T: L.norm(T(v), ord="nuc")),
        ("norm", lambda L, T: L.norm(T(np.ones((2, 2, 2))), dim=(0, 1, 2))),
        ("inv", lambda L, T: L.inv(T(np.ones((2, 2), np.float16)))),
    ]


def test_linalg_errors_match_torch():
    for name, fn in _errors():
        same_error(lambda: fn(LA, jg.tensor), lambda: fn(TL, torch.tensor))


def test_singular_and_indefinite_inputs_raise_linalg_error():
    sing = np.stack([np.eye(3), np.zeros((3, 3))])
    indef = np.stack([np.eye(3), np.diag([1.0, -1.0, 2.0])])
    cases = [(lambda L, T: L.inv(T(sing))), (lambda L, T: L.solve(T(sing[1]), T(np.ones(3)))),
             (lambda L, T: L.cholesky(T(indef)))]
    for fn in cases:  # eager: raised at the op (CPU values); "auto": at the host read, with where it was issued
        with pytest.raises(LA.LinAlgError) as info:
            fn(LA, jg.tensor).numpy()
        with pytest.raises(TL.LinAlgError) as expected:
            fn(TL, torch.tensor)
        assert str(info.value).startswith(str(expected.value)) and type(info.value).__name__ == "_LinAlgError"
    assert issubclass(LA.LinAlgError, RuntimeError)
    # The QR gradient PyTorch refuses is refused at backward, with its words.
    a = jg.tensor(A43, requires_grad=True)
    with pytest.raises(RuntimeError, match="depends on Q, which is not computed when mode='r'"):
        LA.qr(a, mode="r")[1].sum().backward()
