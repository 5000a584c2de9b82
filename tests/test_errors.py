"""Issue 17, "no silent wrong answers": bad input gets PyTorch's exception type and message, raised at the op's
line in both execution modes, and nothing is lost (the tensors, parameters and graph stay usable afterwards).

Every case runs the same call on torch and on jgrad (``T`` is the library) and compares the exception's type
and message. Where jgrad words a message differently on purpose (PyTorch's "(position N)" where jgrad's function
serves both ``jg.f(x, ...)`` and ``x.f(...)``, its long "invalid combination of arguments" overload listings),
the case names jgrad's message and the type is still compared with torch's.
"""
import copy

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import interop.torch as itorch
import jgrad as jg
from _op_helpers import SETTINGS


def _raised(fn, T):
    try:
        fn(T)
        if T is jg:
            jg.synchronize()  # values on a GPU are checked beside the kernel, reported at the next sync
    except Exception as e:  # noqa: BLE001 - the point is to see what was raised
        return e
    return None


def _same_message(got, want):
    """Equal, or PyTorch's message followed by where a deferred device-side check was issued and noticed."""
    return got == want or (got.startswith(want + " (") and " issued at " in got and "; noticed at " in got)


def same_outcome(fn):
    """``fn(torch)`` and ``fn(jg)`` both raise (same type and message) or both give the same values."""
    te, je = _raised(fn, torch), _raised(fn, jg)
    assert (te is None) == (je is None), (te, je)
    if te is None:
        assert fn(jg).tolist() == fn(torch).tolist()
    else:
        assert type(je) is type(te) and str(je) == str(te)


def check_cases(cases):
    """``cases``: (id, fn(T), jgrad's message or None for "torch's message"). Both raise, same type and message."""
    for name, fn, own in cases:
        te = _raised(fn, torch)
        assert te is not None, f"{name}: torch did not raise"
        je = _raised(fn, jg)
        assert je is not None, f"{name}: jgrad did not raise (torch: {type(te).__name__}: {te})"
        want_type, expected = type(te).__name__, str(te)
        if isinstance(own, tuple):  # PyTorch releases disagree (type and message): jgrad's are named
            want_type, expected = own
        elif own is not None:
            expected = own
        assert type(je).__name__ == want_type, \
            f"{name}: jgrad raised {type(je).__name__}: {je}; torch {type(te).__name__}: {te}"
        assert _same_message(str(je), expected), f"{name}:\n jgrad: {je}\n want:  {expected}"


class Survivor:
    """A leaf and a parameter with history (a graph still to run backward through): after the errors, their values,
    versions and the graph must be intact."""

    def __init__(self):
        self.x = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
        self.w = jg.nn.Parameter(jg.tensor([0.5, -1.0, 2.0]))
        self.loss = (self.x * self.w).sum()  # saves x and w

    def check(self):
        assert self.x._version == 0 and self.w._version == 0
        assert self.x.tolist() == [1.0, 2.0, 3.0] and self.w.tolist() == [0.5, -1.0, 2.0]
        self.loss.backward()
        assert self.x.grad.tolist() == [0.5, -1.0, 2.0] and self.w.grad.tolist() == [1.0, 2.0, 3.0]
        assert (self.x * 2).tolist() == [2.0, 4.0, 6.0]  # ops on the same tensors still compute


F = lambda T: T.nn.functional  # noqa: E731


# ---- missing range checks ----------------------------------------------------------------
def test_binary_cross_entropy_range():
    s = Survivor()
    p = lambda T, v: T.tensor(v, requires_grad=True)  # noqa: E731
    check_cases([
        ("input > 1", lambda T: F(T).binary_cross_entropy(p(T, [1.5, 0.5]), T.tensor([1.0, 0.0])), None),
        ("input < 0", lambda T: F(T).binary_cross_entropy(p(T, [-0.5, 0.5]), T.tensor([1.0, 0.0])), None),
        ("input nan", lambda T: F(T).binary_cross_entropy(p(T, [float("nan"), 0.5]), T.tensor([1.0, 0.0])), None),
        ("target > 1", lambda T: F(T).binary_cross_entropy(p(T, [0.5, 0.5]), T.tensor([2.0, 0.0])), None),
        ("module", lambda T: T.nn.BCELoss()(p(T, [0.5, 1.0001]), T.tensor([1.0, 0.0])), None),
    ])
    s.check()
    # the boundary values are valid, and the loss still differentiates
    x, t = jg.tensor([0.0, 1.0, 0.25], requires_grad=True), jg.tensor([0.0, 1.0, 1.0])
    xt, tt = torch.tensor([0.0, 1.0, 0.25], requires_grad=True), torch.tensor([0.0, 1.0, 1.0])
    jl, tl = F(jg).binary_cross_entropy(x, t), F(torch).binary_cross_entropy(xt, tt)
    jl.backward(), tl.backward()
    np.testing.assert_allclose(jl.item(), tl.item(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.tolist(), xt.grad.tolist(), rtol=1e-6)


NARROW = [(0, 3, 4), (0, -2, 2), (0, -6, 2), (0, 6, 0), (0, 5, 0), (0, 1, -1), (-1, 0, 3), (1, 2, 2), (1, -3, 3),
          (2, 0, 1), (0, 0, 5)]


def test_narrow_bounds():
    s = Survivor()
    t = np.arange(15).reshape(5, 3)
    for args in NARROW:  # each either raises PyTorch's error or gives PyTorch's values
        same_outcome(lambda T: T.tensor(t).narrow(*args))
    check_cases([("0-d", lambda T: T.tensor(1.0).narrow(0, 0, 1), None),
                 ("float start", lambda T: T.ones(3).narrow(0, T.tensor(1.0), 1), None)])
    assert jg.arange(5).narrow(0, jg.tensor(1), 2).tolist() == [1, 2]
    s.check()


@SETTINGS
@given(size=st.integers(0, 4), start=st.integers(-6, 6), length=st.integers(-1, 6))
def test_narrow_random(size, start, length):
    same_outcome(lambda T: T.arange(size).narrow(0, start, length))


def test_arange_bounds_and_step():
    s = Survivor()
    check_cases([
        ("negative step up", lambda T: T.arange(0, 5, -1), None),
        ("positive step down", lambda T: T.arange(5, 0, 1), None),
        ("step 0", lambda T: T.arange(0, 5, 0), None),
        ("step 0.0", lambda T: T.arange(0.0, 1.0, 0.0), None),
        ("step nan", lambda T: T.arange(1, 2, float("nan")), None),
        ("end nan", lambda T: T.arange(0, float("nan")), None),
        ("end inf", lambda T: T.arange(0.5, float("inf")), None),
        ("start -inf", lambda T: T.arange(float("-inf"), 2), None),
        ("end None", lambda T: T.arange(None), None),
        ("end str", lambda T: T.arange("3"), None),
        ("step str", lambda T: T.arange(0, 3, "1"), "arange(): argument 'step' must be Number, not str"),
    ])
    s.check()
    for args in [(5, 5, -1), (0, 0), (2, -3, -2), (0.0, 1.0, 0.3), (3,), (-1, 1, 0.5)]:
        np.testing.assert_allclose(jg.arange(*args).tolist(), torch.arange(*args).tolist())


@SETTINGS
@given(start=st.integers(-4, 4), end=st.integers(-4, 4), step=st.integers(-3, 3))
def test_arange_random(start, end, step):
    same_outcome(lambda T: T.arange(start, end, step))


def test_repeated_dims():
    s = Survivor()
    x = lambda T: T.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])  # noqa: E731
    cases = [(f"{op}{dims}", (lambda T, op=op, dims=dims: getattr(x(T), op)(dims)), None)
             for op in ("sum", "mean", "amax", "amin", "std", "var", "logsumexp", "flip")
             for dims in ((0, 0), (1, -1), (-2, 1, 0))]
    cases += [("all", lambda T: x(T).bool().all((0, 0)), None), ("any", lambda T: x(T).bool().any((1, -1)), None),
              ("squeeze", lambda T: x(T)[None].squeeze((0, 0)), None),
              ("sum keepdim", lambda T: x(T).sum((0, 0), keepdim=True), None),
              ("jg.sum", lambda T: T.sum(x(T), [1, 1]), None)]
    check_cases(cases)
    s.check()
    # an empty list of dims reduces every dim in PyTorch (sum mean var std norm), none in all/any
    for fn in (lambda T: x(T).sum(()), lambda T: x(T).mean([]), lambda T: x(T).sum((), keepdim=True),
               lambda T: x(T).var(()), lambda T: x(T).std([]), lambda T: x(T).norm(dim=()),
               lambda T: x(T).bool().all(()), lambda T: x(T).amax(())):
        assert fn(jg).shape == tuple(fn(torch).shape)
        np.testing.assert_allclose(fn(jg).tolist(), fn(torch).tolist(), rtol=1e-6)
    # roll accepts a repeated dim (it rolls twice), as PyTorch does; its other checks are PyTorch's
    assert jg.arange(6).reshape(2, 3).roll((1, 1), (1, 1)).tolist() == \
        torch.arange(6).reshape(2, 3).roll((1, 1), (1, 1)).tolist()
    check_cases([("roll align", lambda T: T.ones(2, 3).roll((1, 1), (0,)), None),
                 ("roll no dims", lambda T: T.ones(2, 3).roll((1, 1)), None),
                 ("roll dim range", lambda T: T.ones(2, 3).roll(1, 5), None),
                 ("roll empty", lambda T: T.ones(2, 3).roll((), ()), None),
                 ("roll float", lambda T: T.ones(2, 3).roll(1.5, 0), None)])


def test_integer_negative_power():
    s = Survivor()
    check_cases([
        ("int ** -1", lambda T: T.tensor([2, 3]) ** -1, None),
        ("pow", lambda T: T.pow(T.tensor([2, 3]), -2), None),
        ("pow_", lambda T: T.tensor([2, 3]).pow_(-1), None),
        ("bool", lambda T: T.tensor([True]) ** -1, None),
        ("int32", lambda T: T.tensor([2, 3], dtype=T.int32) ** -1, None),
        ("uint8", lambda T: T.tensor([2], dtype=T.uint8) ** -1, None),
    ])
    s.check()
    # negative powers in a tensor exponent are not an error in PyTorch: 1, +-1 or 0, never garbage
    base, exp = [0, 1, -1, 2, -2, 3, -1], [-1, -1, -3, -1, -3, 2, -2]
    for T in (torch, jg):
        assert (T.tensor(base) ** T.tensor(exp)).tolist() == [0, 1, -1, 0, 0, 9, 1]
    assert (2 ** jg.tensor([-1, 0, 3])).tolist() == (2 ** torch.tensor([-1, 0, 3])).tolist() == [0, 1, 8]
    assert (jg.tensor([2, 3]) ** -1.0).tolist() == (torch.tensor([2, 3]) ** -1.0).tolist()  # a float result


def test_integer_division_by_zero():
    s = Survivor()
    a = lambda T: T.tensor([2, -3, 7])  # noqa: E731
    check_cases([
        ("//", lambda T: a(T) // 0, None), ("%", lambda T: a(T) % 0, None), ("// False", lambda T: a(T) // False, None),
        ("floor", lambda T: T.div(a(T), 0, rounding_mode="floor"), None),
        ("trunc", lambda T: T.div(a(T), 0, rounding_mode="trunc"), None),
        ("floor_divide", lambda T: T.floor_divide(a(T), 0), None),
        ("remainder", lambda T: T.remainder(a(T), 0), None), ("fmod", lambda T: T.fmod(a(T), 0), None),
        ("div_", lambda T: a(T).div_(0, rounding_mode="floor"), None),
        ("// tensor", lambda T: a(T) // T.tensor([1, 0, 2]), None),
        ("% tensor", lambda T: a(T) % T.tensor([1, 0, 2]), None),
        ("0-d tensor", lambda T: a(T) // T.tensor(0), None),
        ("int32", lambda T: a(T).int() // T.tensor([1, 2, 0], dtype=T.int32), None),
        ("rfloordiv", lambda T: 5 // T.tensor([0, 1]), None), ("rmod", lambda T: 5 % T.tensor([0, 1]), None),
    ])
    s.check()
    # what stays legal: float division, true division of integers, non-zero divisors
    for fn in (lambda T: a(T) // T.tensor([2, 2, 2]), lambda T: a(T) % 3, lambda T: a(T) / 0,
               lambda T: a(T).double() // 0, lambda T: T.fmod(a(T), -2), lambda T: a(T) // 0.5):
        np.testing.assert_array_equal(np.asarray(fn(jg).tolist()), np.asarray(fn(torch).tolist()))


def test_size_types():
    s = Survivor()
    check_cases([
        ("ones(2.5)", lambda T: T.ones(2.5), None), ("zeros(None)", lambda T: T.zeros(None), None),
        ("ones('3')", lambda T: T.ones("3"), None), ("ones([2.5])", lambda T: T.ones([2.5]), None),
        ("ones(2, 2.5)", lambda T: T.ones(2, 2.5), None), ("ones((2, 2.5))", lambda T: T.ones((2, 2.5)), None),
        ("ones(True)", lambda T: T.ones(True), None), ("empty(2.0)", lambda T: T.empty(2.0), None),
        ("ones(float tensor)", lambda T: T.ones(T.tensor(2.0)), None),
        # torch 2.13's wording; 2.11 lists every overload
        ("ones()", lambda T: T.ones(), 'ones() missing 1 required positional arguments: "size"'),
        ("full(2.5)", lambda T: T.full((2.5,), 1.0), None), ("full(int)", lambda T: T.full(2, 1.0), None),
        ("randn(2.5)", lambda T: T.randn(2.5), None), ("rand(None)", lambda T: T.rand(None), None),
        ("zeros(2**63)", lambda T: T.zeros(2 ** 63), "zeros(): argument 'size' failed to unpack the object at pos 1 "
                                                     'with error "Overflow when unpacking long long"'),
        ("reshape", lambda T: T.ones(4).reshape((2.0, 2)), None), ("reshape str", lambda T: T.ones(3).reshape("3"), None),
        ("expand", lambda T: T.ones(1).expand(2.0), None), ("repeat", lambda T: T.ones(1).repeat((2.0,)), None),
        ("view", lambda T: T.ones(2).view(2.0), "view(): argument 'size' (position 1) must be tuple of ints, not float"),
        ("eye", lambda T: T.eye(2.5), None), ("split", lambda T: T.ones(4).split(1.5), None),
        ("split list", lambda T: T.ones(4).split([1.0, 3]), None),
    ])
    s.check()
    # integer-like sizes stay accepted: NumPy integers, one-element integer tensors, torch-style Size tuples
    assert jg.ones(np.int64(2), 3).shape == (2, 3) and jg.zeros(jg.tensor(2)).shape == (2,)
    assert jg.ones(4).reshape(np.int32(2), -1).shape == (2, 2) and jg.ones([2, 3]).shape == (2, 3)


# ---- internal JAX or Python errors that reached the user ----------------------------------
def test_where_bad_shapes():
    s = Survivor()
    b = lambda T, *shape: T.ones(*shape, dtype=T.bool)  # noqa: E731
    check_cases([
        ("cond", lambda T: T.where(T.tensor([True, False]), T.ones(3), T.ones(3)), None),
        ("others", lambda T: T.where(b(T, 2, 1), T.ones(3), T.ones(4)), None),
        ("batch", lambda T: T.where(b(T, 3), T.ones(2, 3), T.ones(4, 3)), None),
        ("scalar other", lambda T: T.where(b(T, 5), T.ones(2, 3), 1.0), None),
        ("method", lambda T: T.ones(3).where(b(T, 2), T.ones(3)), None),
    ])
    s.check()
    assert jg.where(jg.tensor([True, False]), jg.ones(2, 2), 0.0).tolist() == [[1.0, 0.0], [1.0, 0.0]]


def test_tril_triu_split_chunk():
    s = Survivor()
    check_cases([
        ("tril 1-D", lambda T: T.tril(T.ones(3)), None), ("triu 1-D", lambda T: T.ones(3).triu(), None),
        ("tril 0-D", lambda T: T.tril(T.tensor(1.0)), None),
        ("split 0", lambda T: T.ones(4).split(0), None), ("split -1", lambda T: T.ones(4).split(-1), None),
        ("split sizes", lambda T: T.ones(4).split([5, -1]), None), ("chunk 0", lambda T: T.ones(4).chunk(0), None),
        ("split sum", lambda T: T.ones(2, 3).split([1, 1], 1), None),
    ])
    s.check()
    assert [t.shape for t in jg.ones(0).split(0)] == [(0,)]
    assert [t.shape for t in jg.ones(4).split([0, 4])] == [(0,), (4,)]


def test_reductions_over_empty_dims():
    s = Survivor()
    e = lambda T: T.ones(2, 0)  # noqa: E731
    check_cases([
        ("max dim", lambda T: e(T).max(dim=1), None), ("min dim", lambda T: e(T).min(1, True), None),
        ("argmax dim", lambda T: e(T).argmax(dim=1), None), ("argmin dim", lambda T: e(T).argmin(dim=-1), None),
        ("amax dim", lambda T: e(T).amax(dim=1), None), ("amin dims", lambda T: e(T).amin(dim=(0, 1)), None),
        ("kthvalue", lambda T: e(T).kthvalue(1, dim=1), None),
        ("argmax", lambda T: e(T).argmax(), None), ("argmin", lambda T: T.ones(0).argmin(), None),
        ("max", lambda T: T.ones(0).max(), None), ("amax", lambda T: e(T).amax(), None),
        ("amin", lambda T: T.ones(0).amin(), None),
    ])
    s.check()
    # reducing a non-empty dim of an empty tensor is fine; so is dim 0 of a 0-d tensor
    assert jg.ones(2, 0).max(dim=0).values.shape == (0,) and jg.ones(2, 0).amax(dim=0).shape == (0,)
    assert jg.tensor(7.0).argmax(0).tolist() == jg.tensor(7.0).argmin(-1, keepdim=True).tolist() == 0


def test_negative_sizes():
    s = Survivor()
    check_cases([
        ("zeros", lambda T: T.zeros(-1), None), ("zeros 2-D", lambda T: T.zeros(2, -3), None),
        ("ones", lambda T: T.ones(2, -1, -3), None), ("empty", lambda T: T.empty(-1), None),
        ("full", lambda T: T.full((-1,), 1.0), None), ("new_zeros", lambda T: T.ones(2).new_zeros(-1), None),
        ("new_ones", lambda T: T.ones(2).new_ones((2, -1)), None), ("randn", lambda T: T.randn(2, -3), None),
        ("rand", lambda T: T.rand(-1), None), ("randint", lambda T: T.randint(0, 5, (-1,)), None),
        ("randperm", lambda T: T.randperm(-1), None), ("eye", lambda T: T.eye(-1), None),
        ("eye m", lambda T: T.eye(2, -1), None), ("linspace", lambda T: T.linspace(0, 1, -1), None),
        ("reshape", lambda T: T.ones(2).reshape(-2, -1), None), ("reshape two -1", lambda T: T.ones(2).view(-1, -1), None),
        ("repeat", lambda T: T.ones(2).repeat(-1), None), ("expand", lambda T: T.ones(1, 1).expand(1, -2), None),
        ("negative beats overflow", lambda T: T.ones(10 ** 12, 10 ** 12, -1), None),
    ])
    s.check()


def test_type_errors():
    s = Survivor()
    x = lambda T: T.tensor([1.0, -2.0, 3.0])  # noqa: E731
    check_cases([
        ("exp(None)", lambda T: T.exp(None), None), ("exp(str)", lambda T: T.exp("a"), None),
        ("exp(list)", lambda T: T.exp([1.0]), None), ("exp(int)", lambda T: T.exp(3), None),
        ("sin", lambda T: T.sin(None), None), ("relu", lambda T: T.relu(None), None),
        ("neg", lambda T: T.neg("a"), None), ("sum", lambda T: T.sum(None), None),
        ("sigmoid", lambda T: T.sigmoid(np.float64(1.0)), None),
        ("x + str", lambda T: x(T) + "a", None), ("x + None", lambda T: x(T) + None, None),
        ("x + list", lambda T: x(T) + [1, 2, 3], None), ("x - str", lambda T: x(T) - "a", None),
        ("x // str", lambda T: x(T) // "a", None), ("x ** str", lambda T: x(T) ** "a", None),
        ("x < str", lambda T: x(T) < "a", None), ("x @ str", lambda T: x(T) @ "a", None),
        ("add(x, str)", lambda T: T.add(x(T), "a"), "add(): argument 'other' must be Tensor, not str"),
        ("add(None, x)", lambda T: T.add(None, x(T)), None),
        ("x.mul_(None)", lambda T: x(T).mul_(None), "mul_(): argument 'other' must be Tensor, not NoneType"),
        ("maximum", lambda T: T.maximum(x(T), "a"), "maximum(): argument 'other' must be Tensor, not str"),
        ("matmul", lambda T: T.matmul(x(T), None), "matmul(): argument 'other' must be Tensor, not NoneType"),
        # (type, message): torch 2.13's TypeError where 2.11 takes a string as a dimension name (RuntimeError:
        # Name 'a' not found) in the ops that have named-dimension overloads
        ("sum(dim=str)", lambda T: x(T).sum(dim="a"), ("TypeError", "sum(): argument 'dim' must be tuple of ints, not str")),
        ("sum(dim=1.5)", lambda T: x(T).sum(dim=1.5), "sum(): argument 'dim' must be tuple of ints, not float"),
        ("mean(dim=[str])", lambda T: x(T).mean(dim=["a"]),
         ("TypeError", "mean(): argument 'dim' must be tuple of ints, but found element of type str at pos 0")),
        ("amax(dim=str)", lambda T: x(T).amax(dim="a"), None),
        ("argmax(dim=str)", lambda T: x(T).argmax(dim="a"), None),
        ("max(dim=str)", lambda T: x(T).max(dim="a"), ("TypeError", "max(): argument 'dim' must be int, not str")),
        ("transpose", lambda T: x(T).transpose("a", 0),
         ("TypeError", "transpose(): argument 'dim0' must be int, not str")),
        ("unsqueeze", lambda T: x(T).unsqueeze(None), "unsqueeze(): argument 'dim' must be int, not NoneType"),
        ("cat(None)", lambda T: T.cat(None), None), ("cat([x, None])", lambda T: T.cat([x(T), None]), None),
        ("stack(x)", lambda T: T.stack(x(T)), None),
        ("where cond", lambda T: T.where(None, x(T), x(T)), "where(): argument 'condition' must be Tensor, not NoneType"),
        ("clamp", lambda T: x(T).clamp("a"), "clamp(): argument 'min' must be Number or Tensor, not str"),
        ("norm ord", lambda T: x(T).norm((0, 0)), "linalg_vector_norm(): argument 'ord' must be Number, not tuple"),
    ])
    s.check()
    assert (jg.tensor([1, 2]) == "a") is False  # as in PyTorch: == with a non-number is False, not an error


# ---- sizes whose storage overflows: an error, never an abort of the process (SIGABRT) -------------
def test_overflowing_sizes():
    s = Survivor()
    big = 10 ** 12
    check_cases([
        ("zeros", lambda T: T.zeros(big, big), None), ("zeros bytes", lambda T: T.zeros(2 ** 61), None),
        ("ones", lambda T: T.ones(2 ** 40, 2 ** 40, dtype=T.bool), None), ("full", lambda T: T.full((big, big), 1.0), None),
        ("empty", lambda T: T.empty(big, big, 0), None), ("new_zeros", lambda T: T.ones(2).new_zeros(big, big), None),
        ("rand", lambda T: T.rand(big, big), None), ("randn", lambda T: T.randn(big, big), None),
        ("randint", lambda T: T.randint(0, 3, (big, big)), None), ("randperm", lambda T: T.randperm(2 ** 62), None),
        ("linspace", lambda T: T.linspace(0, 1, 2 ** 62), None),
        ("expand", lambda T: T.ones(1, 1).expand(big, big), None),
        ("broadcast_to", lambda T: T.broadcast_to(T.ones(1), (big, big)), None),
        ("reshape", lambda T: T.ones(0).reshape(big, big, 0), None), ("view", lambda T: T.ones(0).view(big, big, 0), None),
        ("repeat", lambda T: T.ones(2).repeat(big, big), None),
    ])
    # Sizes PyTorch accepts as views or without storage, which XLA cannot make (its byte size, computed dimension by
    # dimension, overflows): a RuntimeError saying so, not an abort.
    with pytest.raises(RuntimeError, match=r"^expand\(\): XLA cannot make a tensor of shape \[2147483648, 2147483648\]"):
        jg.ones(1, 1).expand(2 ** 31, 2 ** 31)
    with pytest.raises(RuntimeError, match=r"^reshape\(\): XLA cannot make a tensor of shape \[2305843009213693952, 0\]"):
        jg.ones(0).reshape(2 ** 61, 0)
    with pytest.raises(RuntimeError, match=r"^Storage size calculation overflowed with sizes=\[2305843009213693952, 0\]$"):
        jg.zeros(2 ** 61, 0)
    s.check()
    # a zero leading dimension keeps every partial product at 0: allowed, as in XLA
    assert jg.zeros(0, big, big).shape == (0, big, big) and jg.ones(0).reshape(0, big, big).shape == (0, big, big)


@SETTINGS
@given(shape=st.lists(st.integers(1, 2 ** 40), min_size=2, max_size=4).filter(
    lambda s: np.prod(np.asarray(s, dtype=object)) * 4 > 2 ** 63 - 1))
def test_overflowing_sizes_random(shape):
    for fn in (lambda T: T.zeros(*shape), lambda T: T.randn(shape), lambda T: T.full(shape, 2.0)):
        te, je = _raised(fn, torch), _raised(fn, jg)
        assert type(je) is type(te) is RuntimeError and str(je) == str(te) == \
            f"Storage size calculation overflowed with sizes={list(shape)}"
    assert _raised(lambda T: T.ones(*[1] * len(shape)).expand(*shape), jg) is not None


def test_random_factories_keep_the_generator_on_error():
    jg.manual_seed(3)
    expected = jg.rand(4).tolist()
    jg.manual_seed(3)
    for bad in (lambda: jg.rand(-1), lambda: jg.randn(2.5), lambda: jg.randint(0, 3, (10 ** 12, 10 ** 12)),
                lambda: jg.randperm(-2), lambda: jg.normal(0.0, 1.0, (-1,))):
        with pytest.raises((RuntimeError, TypeError)):
            bad()
    assert jg.rand(4).tolist() == expected  # no key was drawn by a refused call


# ---- the others ----------------------------------------------------------------------------
def test_max_min_backward_with_nan():
    nan = float("nan")
    for data in ([1.0, nan, 3.0, nan], [[1.0, nan], [3.0, 2.0]], [[1.0, 5.0], [5.0, 2.0]]):
        for fn in (lambda T, x: x.max(), lambda T, x: T.min(x), lambda T, x: x.amax(), lambda T, x: x.amin(),
                   lambda T, x: x.max(dim=0)[0], lambda T, x: x.min(dim=-1).values, lambda T, x: x.amax(dim=0),
                   lambda T, x: x.amin(dim=-1)):
            grads = []
            for T in (torch, jg):
                x = T.tensor(data, requires_grad=True)
                y = fn(T, x)
                (y * T.arange(1.0, 1.0 + y.numel()).reshape(y.shape)).sum().backward()
                grads.append(np.asarray(x.grad.tolist()))
            np.testing.assert_array_equal(grads[1], grads[0], err_msg=str(data))


def test_data_has_its_own_version_and_shares_storage():
    for T in (torch, jg):
        x = T.ones(3, requires_grad=True)
        y = x * 2  # saves x (for the gradient of the 2, which nothing asks for) as PyTorch's MulBackward0 does
        z = (x * x).sum()  # saves x, read by its backward
        d = x.data
        d.mul_(3)  # no version bump of x: backward does not complain
        assert x._version == 0 and d._version == 1 and x.tolist() == [3.0, 3.0, 3.0]
        y.sum().backward()
        assert x.grad.tolist() == [2.0, 2.0, 2.0]
        x.data.zero_()
        x.data[0] = 5.0
        assert x.tolist() == [5.0, 0.0, 0.0] and x.requires_grad and x.is_leaf and x._version == 0
        x.data.data.add_(1.0)  # a view of a view is a view of x
        assert x.tolist() == [6.0, 1.0, 1.0]
        z.backward()  # backward reads what the storage holds now (the version did not change)
        assert x.grad.tolist() == [14.0, 4.0, 4.0]
    # the version check still guards in-place changes made through the tensor itself, and detach() shares it
    x = jg.ones(3, requires_grad=True)
    y = (x * x).sum()
    with jg.no_grad():
        x.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_numpy_protocol_refuses_requires_grad():
    check_cases([("leaf", lambda T: np.asarray(T.ones(3, requires_grad=True)), None),
                 ("non-leaf", lambda T: np.asarray(T.ones(3, requires_grad=True) * 2), None),
                 ("dtype", lambda T: np.asarray(T.ones(2, requires_grad=True), dtype=np.float64), None)])
    x = jg.ones(3, requires_grad=True)
    np.testing.assert_array_equal(np.asarray(x.detach()), [1.0, 1.0, 1.0])
    (x * 2).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_manual_seed_range(monkeypatch):
    # torch.manual_seed queues CUDA's seeding before it checks the range: a refused seed would break torch's
    # CUDA initialisation for the rest of the process (and the interop tests after this one) on a GPU machine
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: None)
    for seed in (-1, -2 ** 63, 2 ** 63, 2 ** 64 - 1, 0, 7, 1.5, "3"):
        for T in (torch, jg):
            T.manual_seed(seed)  # int(seed) first
            assert T.initial_seed() == int(seed) % 2 ** 64
            if type(seed) is int:
                assert T.Generator().manual_seed(seed).initial_seed() == seed % 2 ** 64
    # -1 and 2**64 - 1 are the same seed; 2**63 and -2**63 too; 2**63 is not 0 (all 64 bits count)
    draw = lambda seed: (jg.manual_seed(seed), jg.rand(3).tolist())[1]  # noqa: E731
    assert draw(-1) == draw(2 ** 64 - 1) and draw(-2 ** 63) == draw(2 ** 63) != draw(0)
    jg.manual_seed(11)
    first = jg.rand(2).tolist()
    check_cases([("2**64", lambda T: T.manual_seed(2 ** 64), None), ("-2**63-1", lambda T: T.manual_seed(-2 ** 63 - 1), None),
                 ("generator", lambda T: T.Generator().manual_seed(2 ** 64), None),
                 ("generator float", lambda T: T.Generator().manual_seed(1.5), None),
                 ("generator None", lambda T: T.Generator().manual_seed(None), None),
                 ("None", lambda T: T.manual_seed(None), None)])
    # the refused seeds changed nothing: the default generator goes on where it was
    second = jg.rand(2).tolist()
    jg.manual_seed(11)
    assert jg.rand(2).tolist() == first and jg.rand(2).tolist() == second and jg.initial_seed() == 11


def test_optimizer_step_with_wrong_shape_grad():
    for opt in (jg.optim.SGD, jg.optim.Adam, jg.optim.AdamW):
        a, b = jg.nn.Parameter(jg.ones(2)), jg.nn.Parameter(jg.ones(3))
        o = opt([{"params": [a]}, {"params": [b]}], lr=0.1)
        (a.sum() + (b * b).sum()).backward()
        b.grad.data = jg.ones(1)  # a wrong shape gets in through .data (p.grad = ... is checked)
        with pytest.raises(RuntimeError, match=rf"^{opt.__name__}\.step\(\): a parameter of shape \[3\] has a "
                                               r"gradient of shape \[1\];"):
            o.step()
        assert a.tolist() == [1.0, 1.0] and b.tolist() == [1.0, 1.0, 1.0]  # no group was updated
        b.grad = jg.full((3,), 2.0)
        o.step()  # usable again
        assert a.tolist()[0] < 1.0 and b.tolist()[0] < 1.0


def test_dlpack_import_of_torch_conjugate_and_negative_views():
    c = torch.tensor([1 + 2j, 3 - 4j])
    n = torch._neg_view(torch.tensor([1.0, 2.0]))
    nt = torch._neg_view(torch.tensor([[1.0, 2.0], [3.0, 4.0]]).t())
    for src in (c.conj(), n, nt, torch._neg_view(c.conj())):
        assert src.is_conj() or src.is_neg()
        expected = src.resolve_conj().resolve_neg().numpy()
        np.testing.assert_array_equal(itorch.from_torch(src).numpy(), expected)
        np.testing.assert_array_equal(jg.from_dlpack(src).numpy(), expected)
        with pytest.raises(BufferError, match="(conjugate|negative) view"):
            itorch.from_torch(src, copy=False)
    assert n.is_neg() and n.tolist() == [-1.0, -2.0]  # the source is untouched


def test_deepcopy():
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    (x * 3).sum().backward()
    x.tag = {"k": [1]}
    with jg.no_grad():
        x.add_(0.0)
    y = copy.deepcopy(x)
    assert y is not x and y.requires_grad and y.is_leaf and y._version == x._version == 1
    assert y.grad is not x.grad and y.grad.tolist() == [3.0, 3.0]
    assert y.tag == x.tag and y.tag["k"] is not x.tag["k"]
    with jg.no_grad():
        y.add_(1.0)
    assert x.tolist() == [1.0, 2.0] and y.tolist() == [2.0, 3.0]
    (y * y).sum().backward()
    assert y.grad.tolist() == [7.0, 9.0] and x.grad.tolist() == [3.0, 3.0]
    memo = copy.deepcopy({"a": x, "b": x})
    assert memo["a"] is memo["b"]
    check_cases([("non-leaf", lambda T: copy.deepcopy(T.ones(2, requires_grad=True) * 2), None)])
    assert copy.deepcopy(jg.ones(2) * 2).is_leaf  # no history: a leaf, as in PyTorch
    x.grad = None
    (x * 5).sum().backward()  # the original's graph machinery is untouched
    assert x.grad.tolist() == [5.0, 5.0]
