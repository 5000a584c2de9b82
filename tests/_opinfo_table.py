"""The OpInfo table: one entry per public op of jgrad (``tests/_opinfo.py`` runs them against PyTorch).

Adding an op is one line: ``OpInfo("name", samples, dtypes, ...)`` with a sample generator below (or a
lambda). ``PENDING`` lists the public names whose entries belong to work in progress elsewhere; ``NOT_OPS``
the public names that are not ops (streams, modes, serialization...). ``tests/test_opinfo.py`` fails for a
public name in none of the three.
"""
from __future__ import annotations

import numpy as np

import jgrad as jg
from _opinfo import ALL, FLOATS, INTS, TF, D, OpInfo, S, _Missing, torch

NUM = FLOATS + INTS  # numbers, not bool
F32 = ("float32", "float64")
FI = ("float32", "float64", "int64", "int32")

# ---- values -------------------------------------------------------------------------------------
_EDGE = {
    "f": [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.75, np.nan, np.inf, -np.inf, 1e-3, 20.0],
    "i": [0, 1, -1, 2, -3, 7, 100, -128, 5, -7, 3, 0],
    "u": [0, 1, 2, 7, 100, 255, 3, 0, 5, 9, 6, 1],
    "b": [True, False, True, True, False, False, True, False, True, False, False, True],
}


def edge(dt, n=12):
    """A 1-D tensor of the dtype's edge values (NaN, infinities, signed zeros; int limits), length ``n``."""
    k = np.dtype(dt).kind
    v = _EDGE[k]
    return np.asarray((v * (n // len(v) + 1))[:n], dtype=dt)


def rnd(dt, shape, seed=0, lo=-3.0, hi=3.0):
    """Random values of ``dt`` in [lo, hi) (integers: rounded; bool: a coin)."""
    rng = np.random.default_rng(seed)
    k = np.dtype(dt).kind
    if k == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if k in "iu":
        lo = max(lo, 0) if k == "u" else lo
        return np.asarray(rng.integers(int(lo), int(hi) + 1, shape), dtype=dt)
    return np.asarray(rng.uniform(lo, hi, shape), dtype=dt)


def distinct(dt, shape, seed=0):
    """Values without ties (sorting ops' indices are unspecified at ties, in PyTorch as here)."""
    n = int(np.prod(shape))
    v = np.random.default_rng(seed).permutation(n) - (n // 2 if np.dtype(dt).kind != "u" else 0)
    return np.asarray(v.reshape(shape) * (1.5 if np.dtype(dt).kind == "f" else 1), dtype=dt)


def finite(dt):
    """The edge values without NaN and infinities (casting those to integers is undefined behaviour in C++)."""
    e = edge(dt)
    return e[np.isfinite(e)] if e.dtype.kind == "f" else e


def pos(dt, shape, seed=0):
    return rnd(dt, shape, seed, 0.1, 3.0)


def other_dt(dt):
    """A dtype that promotes with ``dt`` to something else (PyTorch's promotion table)."""
    return {"float32": "float64", "float64": "int64", "int64": "float32", "int32": "int64", "uint8": "int32",
            "bool": "int32"}[dt]


# ---- sample generators ----------------------------------------------------------------------------
def unary(dt):
    return [S(edge(dt)), S(rnd(dt, (3, 4), 1)), S(rnd(dt, ())), S(rnd(dt, (0, 3)))]


def unary_pos(dt):  # log-like domains: positive values plus the edges
    return [S(edge(dt)), S(pos(dt, (3, 4))), S(pos(dt, ())), S(rnd(dt, (0, 3)))]


def unary_unit(dt):  # asin/acos/atanh: values in (-1, 1) plus the edges
    return [S(edge(dt)), S(rnd(dt, (3, 4), 1, -0.9, 0.9)), S(rnd(dt, (), 0, -0.9, 0.9))]


def binary(dt):
    e = edge(dt)
    return [S(e, np.roll(e, 3)), S(rnd(dt, (3, 1), 1), rnd(dt, (4,), 2)), S(rnd(dt, (2, 3), 3), 2),
            S(rnd(dt, (2, 3), 3), 2.5), S(rnd(dt, (2, 3), 4), rnd(other_dt(dt), (3,), 5)),
            S(rnd(dt, (3,), 6), rnd("float64", (), 7)), S(rnd(dt, (2, 3), 8), rnd(dt, (0, 3), 9)),
            S(rnd(dt, (3,), 10), rnd(dt, (4,), 11), grad=False)]


def binary_pos(dt):  # a positive second operand (division-like)
    e = edge(dt)
    return [S(e, np.roll(e, 3)), S(rnd(dt, (3, 1), 1), pos(dt, (4,), 2)), S(rnd(dt, (2, 3), 3), 2),
            S(rnd(dt, (2, 3), 3), 2.5), S(rnd(dt, (2, 3), 4), pos(other_dt(dt), (3,), 5)),
            S(rnd(dt, (3,), 10), rnd(dt, (4,), 11), grad=False)]


def binary_tensors(dt):  # both operands tensors (ops PyTorch refuses Python scalars for)
    e = edge(dt)
    return [S(e, np.roll(e, 3)), S(rnd(dt, (3, 1), 1), rnd(dt, (4,), 2)), S(rnd(dt, (2, 3), 3), 2),
            S(rnd(dt, (2, 3), 4), rnd(other_dt(dt), (3,), 5)), S(rnd(dt, (3,), 10), rnd(dt, (4,), 11), grad=False)]


def shift(dt):
    return [S(rnd(dt, (6,), 1, 0, 9), rnd(dt, (6,), 2, 0, 3)), S(rnd(dt, (2, 3), 3, 0, 9), 2)]


def reduction(dt):
    x = rnd(dt, (3, 4), 1)
    return [S(edge(dt)), S(x), S(x, 1), S(x, dim=0, keepdim=True), S(x, (0, 1)), S(x, -1), S(rnd(dt, ())),
            S(rnd(dt, ()), 0), S(rnd(dt, (0, 3)), 1), S(rnd(dt, (0, 3)), 0), S(x, 2, grad=False)]


def reduction_dim(dt):  # a dim is required (cumsum, softmax...)
    x = rnd(dt, (3, 4), 1)
    return [S(edge(dt), 0), S(x, 1), S(x, 0), S(x, -1), S(rnd(dt, ()), 0), S(rnd(dt, (0, 3)), 1),
            S(x, 2, grad=False)]


def reduction_nonempty(dt):  # max/argmax...: no identity
    x = rnd(dt, (3, 4), 1)
    return [S(edge(dt)), S(x), S(x, 1), S(x, 0, True), S(x, -1), S(rnd(dt, ())), S(rnd(dt, ()), 0),
            S(rnd(dt, (0, 3)), 1), S(rnd(dt, (0, 3)), grad=False), S(np.asarray([1, 1, 2, 2], dt), 0)]


def var_like(dt):
    x = rnd(dt, (3, 4), 1)
    big = np.asarray([1e30, 0, 1], dt) if np.dtype(dt).kind == "f" else x
    return [S(edge(dt)), S(x), S(x, 1), S(x, 0, keepdim=True), S(x, 1, correction=0), S(x, 1, correction=5),
            S(x, unbiased=False), S(rnd(dt, ())), S(big), S(rnd(dt, (0, 3)), 1)]


def matmul2(dt):
    return [S(rnd(dt, (2, 3), 1), rnd(dt, (3, 4), 2)), S(rnd(dt, (3,), 3), rnd(dt, (3,), 4)),
            S(rnd(dt, (2, 2, 3), 5), rnd(dt, (3, 2), 6)), S(rnd(dt, (2, 3), 1), rnd(dt, (4, 2), 7), grad=False),
            S(rnd(dt, (2, 3), 1), rnd(other_dt(dt), (3, 4), 2), grad=False)]


def where_s(dt):
    c = rnd("bool", (3, 4), 1)
    return [S(c, rnd(dt, (3, 4), 2), rnd(dt, (4,), 3)), S(c, rnd(dt, (3, 4), 2), 0.5),
            S(c, rnd(dt, (3, 4), 2), rnd(other_dt(dt), (3, 4), 4)), S(rnd("int64", (3, 4)), rnd(dt, (3, 4)), 1)]


def clamp_s(dt):
    x = edge(dt)
    return [S(x, -1, 2), S(x, min=0.5), S(x, max=1), S(rnd(dt, (3, 4), 1), rnd(dt, (4,), 2), rnd(dt, (3, 1), 3)),
            S(x, 2, -1), S(x), S(rnd(dt, (3,)), 2, 2)]


def one_arg(*extra):
    return lambda dt: [S(edge(dt), *extra), S(rnd(dt, (3, 4), 1), *extra), S(rnd(dt, ()), *extra)]


def loss_s(dt):
    a, b = rnd(dt, (3, 4), 1), rnd(dt, (3, 4), 2)
    return [S(a, b), S(a, b, reduction="sum"), S(a, b, reduction="none"), S(a, a.copy()),
            S(rnd(dt, ()), rnd(dt, ())), S(a, b, reduction="bogus", grad=False)]


def prob_loss_s(dt):  # probabilities and targets in [0, 1]
    p, y = rnd(dt, (3, 4), 1, 0.05, 0.95), rnd(dt, (3, 4), 2, 0, 1)
    return [S(p, y), S(p, y, reduction="sum"), S(p, y, reduction="none"), S(p, y, rnd(dt, (4,), 3, 0, 2)),
            S(np.asarray([0.0, 1.0, 0.5], dt), np.asarray([0.0, 1.0, 1.0], dt))]


def logits_loss_s(dt):
    x, y = rnd(dt, (3, 4), 1), rnd(dt, (3, 4), 2, 0, 1)
    return [S(x, y), S(x, y, reduction="sum"), S(x, y, pos_weight=rnd(dt, (4,), 3, 0.5, 2)),
            S(x, y, rnd(dt, (4,), 4, 0, 2), reduction="none")]


def ce_s(dt):
    x = rnd(dt, (3, 5), 1)
    t = np.asarray([0, 4, 2])
    return [S(x, t), S(x, t, reduction="sum"), S(x, t, label_smoothing=0.1), S(x, t, rnd(dt, (5,), 2, 0.1, 2)),
            S(x, np.asarray([-100, -100, -100])), S(x, np.asarray([0, -100, 2]), reduction="none"),
            S(rnd(dt, (3, 5, 2), 3), np.asarray([[0, 1], [4, 3], [2, 2]])), S(x, rnd(dt, (3, 5), 4, 0, 1)),
            S(rnd(dt, (5,), 5), np.asarray(3)), S(x, t.astype(np.int32), grad=False),
            S(x, np.asarray([0, 5, 1]), grad=False)]


def nll_s(dt):
    x = rnd(dt, (3, 5), 1, -3, 0)
    t = np.asarray([0, 4, 2])
    return [S(x, t), S(x, t, reduction="sum"), S(x, t, rnd(dt, (5,), 2, 0.1, 2)), S(x, np.asarray([-100] * 3)),
            S(x, np.asarray([0, -100, 2]), reduction="none"), S(x, t.astype(np.int32), grad=False)]


def kind_of(dt):
    return np.dtype(dt).kind


def act(dt, *extra, **kw):
    return [S(edge(dt), *extra, **kw), S(rnd(dt, (3, 4), 1), *extra, **kw), S(rnd(dt, ()), *extra, **kw)]


def act_s(*extra, **kw):
    return lambda dt: act(dt, *extra, **kw)


def softmax_s(dt):
    x = rnd(dt, (3, 4), 1)
    return [S(x, 1), S(x, 0), S(edge(dt), 0), S(rnd(dt, ()), 0), S(x, -1, dtype=D("float64")),
            S(rnd(dt, (0, 3)), 1)]


def cat_s(dt):
    a, b = rnd(dt, (2, 3), 1), rnd(dt, (1, 3), 2)
    return [S([a, b]), S([a, rnd(dt, (2, 2), 3)], 1), S([a, rnd(other_dt(dt), (2, 3), 4)]),
            S([a, rnd(dt, (0,), 5)]), S([a, rnd(dt, (2, 4), 6)], grad=False), S([], grad=False)]


def stack_s(dt):
    a, b = rnd(dt, (2, 3), 1), rnd(dt, (2, 3), 2)
    return [S([a, b]), S([a, b], 1), S([a, b], -1), S([rnd(dt, ()), rnd(dt, ())]), S([a, rnd(dt, (3, 2))], grad=False)]


def lin_s(dt):
    return [S(rnd(dt, (2, 3), 1), rnd(dt, (4, 3), 2), rnd(dt, (4,), 3)), S(rnd(dt, (3,), 1), rnd(dt, (4, 3), 2)),
            S(rnd(dt, (2, 3), 1), rnd(dt, (4, 2), 2), grad=False)]


def index_s(fn):
    return fn


def alias(name, ref, samples=unary, dtypes=FLOATS, **kw):
    """A jgrad name whose PyTorch twin lives elsewhere (``jg.gelu`` is ``F.gelu``; ``jg.repeat`` is
    ``Tensor.repeat``): ``ref`` names it (``"F.gelu"``, ``"Tensor.repeat"``, ``"torch.embedding"``)."""
    def reference(*a, **k):
        if ref.startswith("F."):
            return getattr(TF, ref[2:])(*a, **k)
        if ref.startswith("Tensor."):
            return getattr(a[0], ref[7:])(*a[1:], **k)
        return getattr(torch, ref[6:])(*a, **k)
    def ours(*a, **k):
        fn = getattr(jg, name, None) if "." not in name else getattr(a[0], name[7:], None)
        if fn is None:
            raise _Missing(name)
        return fn(*a, **k) if "." not in name else fn(*a[1:], **k)
    return OpInfo(name, samples, dtypes, call=(ours, reference), **kw)


# ---- the table --------------------------------------------------------------------------------------
def U(name, samples=unary, dtypes=ALL, **kw):
    return OpInfo(name, samples, dtypes, **kw)


TABLE = [
    # the math namespaces' elementwise functions (ops/special_ops.py, ops/complex_ops.py)
    U("lgamma", unary_pos, F32), U("digamma", unary_pos, F32), U("erfinv", unary_unit, F32), U("i0", unary, F32),
    U("angle", unary, F32), U("conj", unary, F32), U("conj_physical", unary, F32), U("resolve_conj", unary, F32),
    U("resolve_neg", unary, F32), OpInfo("polygamma", lambda dt: [S(1, pos(dt, (3, 4))), S(2, pos(dt, ()))], F32),
    # -- elementwise unary (float results for integer inputs) --
    U("exp", auto=True), U("log", unary_pos), U("log2", unary_pos), U("log10", unary_pos), U("log1p", unary_pos),
    U("expm1"), U("sqrt", unary_pos), U("rsqrt", unary_pos), U("sin", auto=True), U("cos"), U("tan"), U("tanh"),
    U("asin", unary_unit), U("acos", unary_unit), U("atan"), U("arcsin", unary_unit), U("arccos", unary_unit),
    U("arctan"), U("sinh"), U("cosh"), U("sigmoid"), U("erf"), U("reciprocal"),
    U("asinh"), U("acosh", unary_pos), U("atanh", unary_unit), U("arcsinh"), U("arccosh", unary_pos),
    U("arctanh", unary_unit), U("exp2"), U("erfc"), U("sinc"), U("deg2rad"), U("rad2deg"), U("frac", dtypes=FLOATS),
    U("logit", unary_unit), U("signbit"), U("positive"),
    # -- elementwise unary keeping the dtype --
    U("neg", auto=True), U("negative"), U("abs"), U("absolute"), U("square"), U("sign"), U("sgn"), U("floor"),
    U("ceil"), U("round"), U("trunc"), U("fix"), U("relu"), U("bitwise_not", dtypes=INTS + ("bool",)),
    U("logical_not"), U("isnan"), U("isinf"), U("isfinite"), U("isposinf"), U("isneginf"), U("isreal"),
    U("nan_to_num"), U("nan_to_num", lambda dt: [S(edge(dt), 0.5, 9.0, -9.0), S(edge(dt), posinf=1.0)],
                        dtypes=FLOATS),
    U("round", lambda dt: [S(rnd(dt, (3, 4)), decimals=1), S(edge(dt), decimals=2)], dtypes=FLOATS),
    # -- binary arithmetic --
    U("add", binary, auto=True), U("sub", binary), U("mul", binary), U("div", binary), U("true_divide", binary),
    U("divide", binary), U("multiply", binary), U("subtract", binary),
    U("add", lambda dt: [S(rnd(dt, (3,)), rnd(dt, (3,)), alpha=2), S(rnd(dt, (3,)), rnd(dt, (3,)), alpha=0.5)]),
    U("sub", lambda dt: [S(rnd(dt, (3,)), rnd(dt, (3,)), alpha=2)]),
    U("div", lambda dt: [S(edge(dt), np.roll(edge(dt), 3), rounding_mode=m) for m in ("trunc", "floor")]
      + [S(rnd(dt, (3, 1)), rnd(dt, (4,)) + 5, rounding_mode="trunc"), S(rnd(dt, (3,)), 2, rounding_mode="bogus")],
      dtypes=FI),
    U("floor_divide", binary_pos, FI), U("remainder", binary_pos, FI), U("fmod", binary_pos, FI),
    U("pow", lambda dt: binary(dt) + [S(2, rnd(dt, (3,))), S(rnd(dt, (3,)), True), S(rnd(dt, (3,)), -1)]),
    U("float_power", binary_pos, FI), U("maximum", binary_tensors), U("minimum", binary_tensors),
    U("fmax", binary_tensors, NUM), U("fmin", binary_tensors, NUM),
    U("atan2", binary_tensors), U("arctan2", binary_tensors), U("hypot", binary_tensors, FLOATS),
    U("logaddexp", binary_tensors, FLOATS), U("logaddexp2", binary_tensors, FLOATS),
    U("copysign", binary, NUM), U("xlogy", binary), U("ldexp", binary_tensors, FLOATS),
    U("clamp", clamp_s, NUM, auto=True), U("clip", clamp_s, NUM), U("clamp_min", one_arg(0.5), NUM),
    U("clamp_max", one_arg(0.5), NUM),
    U("lerp", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (4,), 1), 0.3), S(rnd(dt, (3,)), rnd(dt, (3,), 1),
                                                                      rnd(dt, (3,), 2))], FLOATS),
    U("addcmul", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (4,), 1), rnd(dt, (3, 1), 2), value=0.5)], NUM),
    U("addcdiv", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (4,), 1), pos(dt, (3, 1), 2), value=2)], NUM),
    # -- comparisons and logic --
    U("eq", binary, auto=True), U("ne", binary), U("lt", binary), U("le", binary), U("gt", binary), U("ge", binary),
    U("greater", binary), U("greater_equal", binary), U("less", binary), U("less_equal", binary),
    U("not_equal", binary), U("logical_and", binary_tensors), U("logical_or", binary_tensors),
    U("logical_xor", binary_tensors), U("bitwise_and", binary_tensors, INTS + ("bool", "float32")),
    U("bitwise_or", binary_tensors, INTS + ("bool", "float32")),
    U("bitwise_xor", binary_tensors, INTS + ("bool", "float32")),
    U("bitwise_left_shift", shift, INTS), U("bitwise_right_shift", shift, INTS),
    U("isclose", binary_tensors, NUM), U("allclose", binary_tensors, FLOATS), U("equal", binary_tensors),
    U("isin", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (5,), 1)), S(rnd(dt, (3,)), rnd(dt, (2,), 1), invert=True)],
      NUM, grad=False),
    U("where", where_s, auto=True),
    # -- reductions --
    U("sum", reduction, auto=True), U("nansum", reduction, NUM), U("mean", reduction, ALL), U("nanmean", reduction,
                                                                                               FLOATS),
    U("prod", lambda dt: [s for s in reduction(dt) if len(s.args) < 2 or not isinstance(s.args[1], tuple)]),
    U("amax", reduction_nonempty), U("amin", reduction_nonempty), U("max", reduction_nonempty),
    U("min", reduction_nonempty), U("argmax", reduction_nonempty), U("argmin", reduction_nonempty),
    U("all", reduction), U("any", reduction), U("logsumexp", reduction_dim), U("var", var_like, FLOATS + ("int64",)),
    U("std", var_like, FLOATS + ("int64",)), U("var_mean", var_like, FLOATS), U("std_mean", var_like, FLOATS),
    U("median", lambda dt: [S(edge(dt)), S(distinct(dt, (3, 4))), S(distinct(dt, (3, 4)), 1),
                            S(distinct(dt, (3, 4)), 0, True), S(rnd(dt, ())), S(rnd(dt, (0, 3)), 1)], NUM),
    U("nanmedian", lambda dt: [S(edge(dt)), S(distinct(dt, (3, 4))), S(distinct(dt, (3, 4)), 1),
                               S(np.where(distinct(dt, (3, 4)) > 2, np.nan, distinct(dt, (3, 4))).astype(dt), 1)
                               if np.dtype(dt).kind == "f" else S(distinct(dt, (3, 4)), 0)], NUM),
    U("count_nonzero", lambda dt: [S(edge(dt)), S(rnd(dt, (3, 4))), S(rnd(dt, (3, 4)), 1), S(rnd(dt, (3, 4)), (0, 1)),
                                   S(rnd(dt, ())), S(rnd(dt, (0, 3)), 1)], ALL, grad=False),
    U("norm", lambda dt: [S(edge(dt)), S(rnd(dt, (3, 4))), S(rnd(dt, (3, 4)), 1, 1), S(np.asarray([0.0, 1, -2], dt), 1),
                          S(rnd(dt, (3, 4)), float("inf"), 0), S(rnd(dt, (3, 4)), 0), S(rnd(dt, (3, 4)), 3, (0, 1)),
                          S(np.zeros(3, dt))], FLOATS + ("int64",)),
    U("cumsum", reduction_dim), U("cumprod", reduction_dim), U("logcumsumexp", reduction_dim, FLOATS),
    U("cummax", reduction_dim, NUM), U("cummin", reduction_dim, NUM),
    U("softmax", softmax_s, ALL), U("log_softmax", softmax_s, ALL),
    # -- matrix products --
    U("matmul", matmul2, FI, auto=True), U("mm", matmul2, FI), U("bmm", lambda dt: [
        S(rnd(dt, (2, 2, 3)), rnd(dt, (2, 3, 4), 1)), S(rnd(dt, (2, 3)), rnd(dt, (2, 3)), grad=False)], FI),
    U("dot", lambda dt: [S(rnd(dt, (3,)), rnd(dt, (3,), 1)), S(rnd(dt, (3,)), rnd(dt, (4,), 1), grad=False)], FI),
    U("vdot", lambda dt: [S(rnd(dt, (3,)), rnd(dt, (3,), 1))], FI),
    U("inner", lambda dt: [S(rnd(dt, (2, 3)), rnd(dt, (4, 3), 1)), S(rnd(dt, (3,)), rnd(dt, (3,), 1))], FI),
    U("mv", lambda dt: [S(rnd(dt, (2, 3)), rnd(dt, (3,), 1)), S(rnd(dt, (2, 3)), rnd(dt, (2,), 1), grad=False)], FI),
    U("outer", lambda dt: [S(rnd(dt, (3,)), rnd(dt, (4,), 1)), S(rnd(dt, (3,)), rnd(other_dt(dt), (2,), 1))], FI),
    U("ger", lambda dt: [S(rnd(dt, (3,)), rnd(dt, (4,), 1))], FI),
    U("addmm", lambda dt: [S(rnd(dt, (2, 4)), rnd(dt, (2, 3), 1), rnd(dt, (3, 4), 2)),
                           S(rnd(dt, (4,)), rnd(dt, (2, 3), 1), rnd(dt, (3, 4), 2), beta=0.5, alpha=2)], FI),
    U("addmv", lambda dt: [S(rnd(dt, (2,)), rnd(dt, (2, 3), 1), rnd(dt, (3,), 2))], FI),
    U("addbmm", lambda dt: [S(rnd(dt, (2, 4)), rnd(dt, (3, 2, 3), 1), rnd(dt, (3, 3, 4), 2))], FI),
    U("baddbmm", lambda dt: [S(rnd(dt, (3, 2, 4)), rnd(dt, (3, 2, 3), 1), rnd(dt, (3, 3, 4), 2))], FI),
    U("addr", lambda dt: [S(rnd(dt, (2, 4)), rnd(dt, (2,), 1), rnd(dt, (4,), 2))], FI),
    U("tensordot", lambda dt: [S(rnd(dt, (2, 3, 4)), rnd(dt, (3, 4, 5), 1), 2),
                               S(rnd(dt, (2, 3)), rnd(dt, (3, 2), 1), ([1], [0]))], FI),
    U("cross", lambda dt: [S(rnd(dt, (2, 3)), rnd(dt, (2, 3), 1)), S(rnd(dt, (3, 2)), rnd(dt, (3, 2), 1), dim=0)],
      FI),
    U("kron", lambda dt: [S(rnd(dt, (2, 2)), rnd(dt, (2, 3), 1))], FI),
    U("trace", lambda dt: [S(rnd(dt, (3, 4)))], FI),
    U("einsum", lambda dt: [S("ij,jk->ik", rnd(dt, (2, 3)), rnd(dt, (3, 4), 1)), S("ii", rnd(dt, (3, 3)))], FI,
      variants=("fn",)),
    alias("linear", "F.linear", lin_s, FI), U("F.linear", lin_s, FI),
    # -- tensors made from others --
    U("diag", lambda dt: [S(rnd(dt, (3,))), S(rnd(dt, (3, 4))), S(rnd(dt, (3,)), 1), S(rnd(dt, (3, 4)), -1)]),
    U("diag_embed", lambda dt: [S(rnd(dt, (2, 3)))]), U("diagflat", lambda dt: [S(rnd(dt, (2, 2)))]),
    U("tile", lambda dt: [S(rnd(dt, (2, 3)), (2, 1)), S(rnd(dt, (3,)), (2, 2)), S(rnd(dt, ()), (2,))]),
    U("hstack", cat_s), U("vstack", cat_s), U("dstack", stack_s), U("column_stack", stack_s),
    U("row_stack", cat_s), U("cat", cat_s, auto=True), U("concat", cat_s), U("concatenate", cat_s),
    U("stack", stack_s), U("atleast_1d", unary), U("atleast_2d", unary), U("atleast_3d", unary),
    U("meshgrid", lambda dt: [S(rnd(dt, (3,)), rnd(dt, (2,), 1), indexing="ij"),
                              S(rnd(dt, (3,)), rnd(dt, (2,), 1), indexing="xy")]),
    U("cartesian_prod", lambda dt: [S(rnd(dt, (3,)), rnd(dt, (2,), 1))]),
    U("tril", lambda dt: [S(rnd(dt, (3, 4))), S(rnd(dt, (3, 4)), 1), S(rnd(dt, (2, 3, 3)), -1)]),
    U("triu", lambda dt: [S(rnd(dt, (3, 4))), S(rnd(dt, (3, 4)), 1), S(rnd(dt, (2, 3, 3)), -1)]),
    U("flip", lambda dt: [S(rnd(dt, (3, 4)), (0,)), S(rnd(dt, (3, 4)), [0, 1])]),
    U("fliplr", lambda dt: [S(rnd(dt, (3, 4)))]), U("flipud", lambda dt: [S(rnd(dt, (3, 4)))]),
    U("rot90", lambda dt: [S(rnd(dt, (3, 4))), S(rnd(dt, (3, 4)), 2), S(rnd(dt, (3, 4)), -1, [0, 1])]),
    U("roll", lambda dt: [S(rnd(dt, (3, 4)), 1), S(rnd(dt, (3, 4)), (1, -2), (0, 1))]),
    U("repeat_interleave", lambda dt: [S(rnd(dt, (2, 3)), 2), S(rnd(dt, (2, 3)), 2, 1)]),
    U("clone", unary), U("masked_fill", lambda dt: [S(rnd(dt, (3, 4)), rnd("bool", (3, 4), 1), 0.5),
                                                    S(rnd(dt, (3, 4)), rnd("bool", (4,), 1), 2)]),
    U("masked_select", lambda dt: [S(rnd(dt, (3, 4)), rnd("bool", (3, 4), 1))]),
    U("gather", lambda dt: [S(rnd(dt, (3, 4)), 1, np.asarray([[0, 3], [1, 1], [2, 0]]))]),
    U("take_along_dim", lambda dt: [S(rnd(dt, (3, 4)), np.asarray([[0], [3], [1]]), 1)]),
    U("take", lambda dt: [S(rnd(dt, (3, 4)), np.asarray([0, 5, 11]))]),
    U("index_select", lambda dt: [S(rnd(dt, (3, 4)), 1, np.asarray([0, 3, 3]))]),
    U("scatter", lambda dt: [S(rnd(dt, (3, 4)), 1, np.asarray([[0, 3], [1, 2], [2, 0]]), rnd(dt, (3, 2), 1))],
      grad=False),
    U("scatter_add", lambda dt: [S(rnd(dt, (3, 4)), 1, np.asarray([[0, 0], [1, 2], [2, 0]]), rnd(dt, (3, 2), 1))]),
    U("scatter_reduce", lambda dt: [S(rnd(dt, (3, 4)), 1, np.asarray([[0, 0], [1, 2], [2, 0]]), rnd(dt, (3, 2), 1),
                                      r) for r in ("sum", "prod", "mean", "amax", "amin")], FLOATS + ("int64",)),
    U("index_add", lambda dt: [S(rnd(dt, (3, 4)), 0, np.asarray([0, 2, 0]), rnd(dt, (3, 4), 1))]),
    U("index_fill", lambda dt: [S(rnd(dt, (3, 4)), 1, np.asarray([0, 2]), -1)]),
    U("index_copy", lambda dt: [S(rnd(dt, (3, 4)), 0, np.asarray([2, 0]), rnd(dt, (2, 4), 1))]),
    U("masked_scatter", lambda dt: [S(rnd(dt, (3, 4)), rnd("bool", (3, 4), 1), rnd(dt, (12,), 2))]),
    U("nonzero", lambda dt: [S(edge(dt)), S(rnd(dt, (3, 4))), S(rnd(dt, ())), S(rnd(dt, (3, 4)), as_tuple=True)],
      grad=False),
    U("argwhere", lambda dt: [S(rnd(dt, (3, 4)))], grad=False),
    U("sort", lambda dt: [S(edge(dt), stable=True), S(distinct(dt, (3, 4)), 0), S(distinct(dt, (3, 4)),
                                                                                  descending=True),
                          S(rnd(dt, (3, 4)), stable=True), S(rnd(dt, ()))], NUM),
    U("argsort", lambda dt: [S(edge(dt), stable=True), S(distinct(dt, (3, 4)), 0),
                             S(distinct(dt, (3, 4)), descending=True)], NUM),
    U("msort", lambda dt: [S(distinct(dt, (3, 4)))], NUM),
    U("topk", lambda dt: [S(distinct(dt, (3, 4)), 2), S(distinct(dt, (3, 4)), 2, 0, False),
                          S(distinct(dt, (3,)), 4, grad=False)], NUM),
    U("kthvalue", lambda dt: [S(distinct(dt, (3, 4)), 2), S(distinct(dt, (3, 4)), 1, 0, True)], NUM),
    U("searchsorted", lambda dt: [S(np.sort(rnd(dt, (5,))), rnd(dt, (3,), 1)),
                                  S(np.sort(rnd(dt, (5,))), rnd(dt, (3,), 1), right=True)], NUM, grad=False),
    U("bucketize", lambda dt: [S(rnd(dt, (3,), 1), np.sort(rnd(dt, (5,))))], NUM, grad=False),
    U("diff", lambda dt: [S(rnd(dt, (3, 4))), S(rnd(dt, (3, 4)), 2, 0)], NUM),
    U("cdist", lambda dt: [S(rnd(dt, (3, 2)), rnd(dt, (4, 2), 1))], FLOATS),
    U("dist", lambda dt: [S(rnd(dt, (3, 2)), rnd(dt, (3, 2), 1)), S(rnd(dt, (3,)), rnd(dt, (3,), 1), 1)], FLOATS),
    U("movedim", lambda dt: [S(rnd(dt, (2, 3, 4)), 0, -1), S(rnd(dt, (2, 3, 4)), (0, 1), (2, 0))]),
    U("moveaxis", lambda dt: [S(rnd(dt, (2, 3, 4)), 0, -1)]),
    # -- casts --
    *[U(f"Tensor.{n}", lambda dt: [S(finite(dt)), S(rnd(dt, (2, 3)))]) for n in (
        "float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte", "bool")],
    U("Tensor.type", lambda dt: [S(finite(dt), D("int32")), S(finite(dt))], grad=False),
    U("Tensor.to", lambda dt: [S(edge(dt), D("float64")), S(finite(dt), dtype=D("int32")), S(edge(dt), "cpu")]),
    U("Tensor.type_as", lambda dt: [S(finite(dt), rnd("int32", (2,)))]),
    U("Tensor.fill_", lambda dt: [S(rnd(dt, (3,)), 2), S(rnd(dt, (3,)), 0.5)], grad=False),
    U("Tensor.zero_", lambda dt: [S(rnd(dt, (3,)))], grad=False),
    U("Tensor.copy_", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (4,), 1)), S(rnd(dt, (3,)), rnd(dt, (4,), 1))],
      grad=False),
    U("Tensor.new_zeros", lambda dt: [S(rnd(dt, (2,)), (2, 3))], grad=False),
    U("Tensor.new_ones", lambda dt: [S(rnd(dt, (2,)), (2, 3))], grad=False),
    U("Tensor.new_full", lambda dt: [S(rnd(dt, (2,)), (2, 3), 7)], grad=False),
    U("Tensor.new_tensor", lambda dt: [S(rnd(dt, (2,)), [1, 2])], grad=False),
    U("Tensor.new_empty", lambda dt: [S(rnd(dt, (2,)), (2, 3))], grad=False, values=False),
    U("Tensor.sum_to_size", lambda dt: [S(rnd(dt, (3, 4)), (1, 4))]),
    U("Tensor.expand_as", lambda dt: [S(rnd(dt, (1, 4)), rnd(dt, (3, 4)))]),
    U("Tensor.numpy", lambda dt: [S(edge(dt))], grad=False,
      call=(lambda t: t.numpy().tolist(), lambda t: t.numpy().tolist())),
    # -- Python operators (the `i` forms must write their left operand) --
    *[U(f"operator.{n}", binary) for n in ("add", "sub", "mul", "truediv", "iadd", "isub", "imul", "itruediv",
                                           "radd", "rsub", "rmul", "rtruediv")],
    *[U(f"operator.{n}", binary_pos, FI) for n in ("floordiv", "mod", "ifloordiv", "imod", "rfloordiv", "rmod")],
    *[U(f"operator.{n}", lambda dt: [S(rnd(dt, (3,)), 2), S(pos(dt, (3,)), rnd(dt, (3,), 1, 0, 3))], NUM)
      for n in ("pow", "ipow", "rpow")],
    *[U(f"operator.{n}", binary_tensors, INTS + ("bool",))
      for n in ("and_", "or_", "xor", "iand", "ior", "ixor", "rand_", "ror_", "rxor")],
    *[U(f"operator.{n}", shift, INTS) for n in ("lshift", "rshift", "ilshift", "irshift")],
    U("operator.matmul", matmul2, FI),  # (PyTorch has no in-place @=: it rebinds, as jgrad's)
    *[U(f"operator.{n}", binary) for n in ("eq", "ne", "lt", "le", "gt", "ge")],
    *[U(f"operator.{n}") for n in ("neg", "pos", "abs")], U("operator.invert", dtypes=INTS + ("bool",)),
    # -- activations --
    U("F.relu", auto=True), U("F.relu6"), U("F.silu", dtypes=FLOATS), U("F.elu", dtypes=FLOATS),
    U("F.leaky_relu", dtypes=FLOATS), U("F.hardtanh"), U("F.mish", dtypes=FLOATS), U("F.hardsigmoid", dtypes=FLOATS),
    U("F.hardswish", dtypes=FLOATS), U("F.softsign", dtypes=FLOATS), U("F.logsigmoid", dtypes=FLOATS),
    U("F.gelu", dtypes=FLOATS), U("F.gelu", act_s(approximate="tanh"), FLOATS), U("F.softplus", dtypes=FLOATS),
    U("F.softplus", act_s(2.0, 1.0), FLOATS), U("F.tanh", dtypes=FLOATS), U("F.sigmoid", dtypes=FLOATS),
    U("F.selu", dtypes=FLOATS), U("F.celu", dtypes=FLOATS), U("F.softshrink", dtypes=FLOATS),
    U("F.hardshrink", dtypes=FLOATS), U("F.tanhshrink", dtypes=FLOATS), U("F.threshold", act_s(0.5, -1.0), NUM),
    U("F.elu", act_s(0.5), FLOATS), U("F.leaky_relu", act_s(0.2), FLOATS), U("F.hardtanh", act_s(-2.0, 0.5), NUM),
    U("F.prelu", lambda dt: [S(rnd(dt, (2, 3, 4)), rnd(dt, (3,), 1)), S(edge(dt), rnd(dt, (1,), 1))], FLOATS),
    U("F.glu", lambda dt: [S(rnd(dt, (3, 4))), S(rnd(dt, (4, 3)), 0), S(rnd(dt, (3, 3)), grad=False)], FLOATS),
    U("F.softmax", softmax_s, FLOATS), U("F.log_softmax", softmax_s, FLOATS), U("F.softmin", softmax_s, FLOATS),
    U("F.relu_", unary, FLOATS),
    U("F.normalize", lambda dt: [S(rnd(dt, (3, 4))), S(rnd(dt, (3, 4)), 1.0, 0), S(np.zeros((2, 3), dt))], FLOATS),
    U("F.cosine_similarity", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (3, 4), 1)), S(rnd(dt, (3, 4)), rnd(dt, (4,), 1),
                                                                                   dim=-1)], FLOATS),
    U("F.pairwise_distance", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (3, 4), 1))], FLOATS),
    U("F.one_hot", lambda dt: [S(np.asarray([0, 2, 1])), S(np.asarray([0, 2, 1]), 4)], ("int64",), grad=False),
    U("F.embedding", lambda dt: [S(np.asarray([[0, 2], [1, 0]]), rnd(dt, (3, 4))),
                                 S(np.asarray([0, 2, 2]), rnd(dt, (3, 4)), padding_idx=0),
                                 S(np.asarray([0, 2, 2, 1]), rnd(dt, (3, 4)), scale_grad_by_freq=True)], FLOATS),
    U("F.embedding_bag", lambda dt: [S(np.asarray([0, 2, 1, 1]), rnd(dt, (3, 4)), np.asarray([0, 2])),
                                     S(np.asarray([[0, 2], [1, 1]]), rnd(dt, (3, 4)), mode="sum"),
                                     S(np.asarray([[0, 2], [1, 1]]), rnd(dt, (3, 4)), mode="max")], FLOATS),
    U("F.layer_norm", lambda dt: [S(rnd(dt, (2, 3, 4)), (4,)), S(rnd(dt, (2, 3, 4)), (3, 4), rnd(dt, (3, 4), 1),
                                                                rnd(dt, (3, 4), 2))], FLOATS),
    U("F.rms_norm", lambda dt: [S(rnd(dt, (2, 3, 4)), (4,)), S(rnd(dt, (2, 4)), (4,), rnd(dt, (4,), 1))], FLOATS),
    U("F.group_norm", lambda dt: [S(rnd(dt, (2, 4, 3)), 2)], FLOATS),
    # -- losses --
    U("F.mse_loss", loss_s, FLOATS), U("F.l1_loss", loss_s, FLOATS), U("F.smooth_l1_loss", loss_s, FLOATS),
    U("F.huber_loss", loss_s, FLOATS), U("F.soft_margin_loss", loss_s, FLOATS),
    U("F.binary_cross_entropy", prob_loss_s, FLOATS),
    U("F.binary_cross_entropy_with_logits", logits_loss_s, FLOATS),
    U("F.cross_entropy", ce_s, FLOATS), U("F.nll_loss", nll_s, FLOATS),
    U("F.kl_div", lambda dt: [S(rnd(dt, (3, 4), 1, -3, 0), rnd(dt, (3, 4), 2, 0, 1), reduction="batchmean"),
                              S(rnd(dt, (3, 4), 1, -3, 0), rnd(dt, (3, 4), 2, -3, 0), reduction="sum",
                                log_target=True)], FLOATS),
    U("F.poisson_nll_loss", lambda dt: [S(rnd(dt, (3, 4)), pos(dt, (3, 4), 1)),
                                        S(pos(dt, (3, 4)), pos(dt, (3, 4), 1), log_input=False, full=True)], FLOATS),
    U("F.gaussian_nll_loss", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (3, 4), 1), pos(dt, (3, 4), 2)),
                                         S(rnd(dt, (3, 4)), rnd(dt, (3, 4), 1), pos(dt, (3, 1), 2), full=True)],
      FLOATS),
    U("F.hinge_embedding_loss", lambda dt: [S(rnd(dt, (3, 4)), np.sign(rnd(dt, (3, 4), 1)) + (
        rnd(dt, (3, 4), 1) == 0))], FLOATS),
    U("F.margin_ranking_loss", lambda dt: [S(rnd(dt, (4,)), rnd(dt, (4,), 1), np.asarray([1, -1, 1, -1], dt))],
      FLOATS),
    U("F.cosine_embedding_loss", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (3, 4), 1), np.asarray([1, -1, 1], dt))],
      FLOATS),
    U("F.triplet_margin_loss", lambda dt: [S(rnd(dt, (3, 4)), rnd(dt, (3, 4), 1), rnd(dt, (3, 4), 2))], FLOATS),
    U("F.multilabel_soft_margin_loss", lambda dt: [S(rnd(dt, (3, 4)), rnd("int64", (3, 4), 1, 0, 1).astype(dt))],
      FLOATS),
    U("F.multi_margin_loss", lambda dt: [S(rnd(dt, (3, 4)), np.asarray([0, 3, 1]))], FLOATS),
    U("F.multilabel_margin_loss", lambda dt: [S(rnd(dt, (2, 4)), np.asarray([[3, 0, -1, 1], [1, 2, 3, -1]]))],
      FLOATS),
    # -- nn layers --
    U("F.dropout", lambda dt: [S(rnd(dt, (3, 4)), 0.0), S(rnd(dt, (3, 4)), 0.5, False), S(rnd(dt, (3, 4)), 1.5)],
      FLOATS),
    U("F.pad", lambda dt: [S(rnd(dt, (2, 3)), (1, 2)), S(rnd(dt, (2, 3)), (1, 1, 0, 1), value=2.0),
                           S(rnd(dt, (1, 2, 3)), (1, 1), mode="reflect"), S(rnd(dt, (1, 2, 3)), (2, 1),
                                                                           mode="replicate")], FLOATS),
    U("F.adaptive_avg_pool1d", lambda dt: [S(rnd(dt, (1, 2, 6)), 3), S(rnd(dt, (1, 2, 5)), 3)], FLOATS),
    U("F.adaptive_avg_pool2d", lambda dt: [S(rnd(dt, (1, 2, 4, 6)), (2, 3)), S(rnd(dt, (1, 2, 4, 6)), (None, 3))],
      FLOATS),
    U("F.adaptive_max_pool1d", lambda dt: [S(rnd(dt, (1, 2, 6)), 3), S(np.ones((1, 1, 4), dt), 2)], FLOATS),
    U("F.adaptive_max_pool2d", lambda dt: [S(rnd(dt, (1, 2, 4, 6)), (2, 3)), S(np.ones((1, 1, 2, 2), dt), 1)],
      FLOATS),
    U("F.max_pool1d", lambda dt: [S(rnd(dt, (1, 2, 6)), 2), S(np.ones((1, 1, 4), dt), 2)], FLOATS),
    U("F.max_pool2d", lambda dt: [S(rnd(dt, (1, 2, 4, 6)), 2), S(rnd(dt, (1, 2, 5, 5)), 3, 2, 1)], FLOATS),
    U("F.avg_pool1d", lambda dt: [S(rnd(dt, (1, 2, 6)), 2)], FLOATS),
    U("F.avg_pool2d", lambda dt: [S(rnd(dt, (1, 2, 4, 6)), 2), S(rnd(dt, (1, 2, 5, 5)), 3, 2, 1)], FLOATS),
    U("F.conv1d", lambda dt: [S(rnd(dt, (1, 2, 6)), rnd(dt, (3, 2, 3), 1), rnd(dt, (3,), 2))], FLOATS),
    U("F.conv2d", lambda dt: [S(rnd(dt, (1, 2, 5, 5)), rnd(dt, (3, 2, 3, 3), 1), padding=1)], FLOATS),
    U("F.batch_norm", lambda dt: [S(rnd(dt, (4, 3)), rnd(dt, (3,), 1), pos(dt, (3,), 2), training=False),
                                  S(rnd(dt, (4, 3, 2)), None, None, training=True)], FLOATS),
    U("F.instance_norm", lambda dt: [S(rnd(dt, (2, 3, 4)))], FLOATS),
    U("F.scaled_dot_product_attention", lambda dt: [S(rnd(dt, (2, 3, 4)), rnd(dt, (2, 3, 4), 1), rnd(dt, (2, 3, 4), 2)),
                                                    S(rnd(dt, (2, 3, 4)), rnd(dt, (2, 3, 4), 1), rnd(dt, (2, 3, 4), 2),
                                                      is_causal=True)], FLOATS),
    # -- creation --
    U("zeros", lambda dt: [S(2, 3, dtype=D(dt)), S((0, 2), dtype=D(dt))], grad=False),
    U("ones", lambda dt: [S(2, 3, dtype=D(dt)), S([2], dtype=D(dt))], grad=False),
    U("full", lambda dt: [S((2, 3), 7), S((2,), 1.5), S((2,), True), S((2,), 2, dtype=D(dt))], ("float32",),
      grad=False),
    U("empty", lambda dt: [S(2, 3, dtype=D(dt))], grad=False, values=False),
    U("eye", lambda dt: [S(3), S(2, 4), S(3, dtype=D(dt))], grad=False),
    U("arange", lambda dt: [S(5), S(1, 4), S(0, 1, 0.25), S(5, dtype=D(dt)), S(1, 4, 0, grad=False), S(2.5)],
      ("float32",), grad=False),
    U("linspace", lambda dt: [S(0, 1, 5), S(0, 10, 1), S(-1, 1, 4, dtype=D(dt))], FLOATS, grad=False),
    U("tensor", lambda dt: [S([1, 2]), S([1.5]), S([True]), S(3), S([]), S([[1, 2], [3, 4]], dtype=D(dt))],
      ("float32",), grad=False),
    U("as_tensor", lambda dt: [S([1, 2]), S(rnd(dt, (2,)))], grad=False),
    U("zeros_like", lambda dt: [S(rnd(dt, (2, 3))), S(rnd(dt, (2,)), dtype=D("int32"))], grad=False),
    U("ones_like", lambda dt: [S(rnd(dt, (2, 3)))], grad=False),
    U("full_like", lambda dt: [S(rnd(dt, (2, 3)), 7), S(rnd(dt, (2,)), 2.5)], grad=False),
    U("empty_like", lambda dt: [S(rnd(dt, (2, 3)))], grad=False, values=False),
    # -- random (shapes, dtypes and errors only) --
    U("rand", lambda dt: [S(2, 3), S((2,), dtype=D(dt))], FLOATS, values=False, grad=False),
    U("randn", lambda dt: [S(2, 3), S((2,), dtype=D(dt))], FLOATS, values=False, grad=False),
    U("randint", lambda dt: [S(0, 5, (2, 3)), S(5, (3,)), S(3, 2, (2,))], ("int64",), values=False, grad=False),
    U("randperm", lambda dt: [S(5), S(0)], ("int64",), values=False, grad=False),
    U("rand_like", lambda dt: [S(rnd(dt, (2, 3)))], FLOATS, values=False, grad=False),
    U("randn_like", lambda dt: [S(rnd(dt, (2, 3)))], FLOATS, values=False, grad=False),
    U("randint_like", lambda dt: [S(rnd(dt, (2, 3)), 5)], NUM, values=False, grad=False),
    U("bernoulli", lambda dt: [S(rnd(dt, (2, 3), 0, 0, 1)), S(rnd(dt, (2, 3), 0, 0, 1), 0.5)], FLOATS,
      values=False, grad=False),
    U("multinomial", lambda dt: [S(pos(dt, (2, 3)), 2), S(pos(dt, (4,)), 6, True)], FLOATS, values=False,
      grad=False),
    U("normal", lambda dt: [S(rnd(dt, (2, 3)), pos(dt, (2, 3))), S(0.0, 1.0, (2,))], FLOATS, values=False,
      grad=False),
    U("F.dropout1d", lambda dt: [S(rnd(dt, (2, 3, 4)), 0.5)], FLOATS, values=False, grad=False),
    U("F.dropout2d", lambda dt: [S(rnd(dt, (2, 3, 4, 4)), 0.5)], FLOATS, values=False, grad=False),
    U("F.dropout3d", lambda dt: [S(rnd(dt, (2, 3, 2, 2, 2)), 0.5)], FLOATS, values=False, grad=False),
    U("dropout", lambda dt: [S(rnd(dt, (3, 4)), 0.0, True), S(rnd(dt, (3, 4)), 0.5, False)], FLOATS),
    U("poisson", lambda dt: [S(pos(dt, (2, 3))), S(rnd("int64", (2,), 0, 1, 3), grad=False)], FLOATS, values=False),
    *[U(n, lambda dt: [S(rnd(dt, (2, 3, 4)), 0.5, True), S(rnd(dt, (2, 3)), 0.0, True), S(rnd(dt, (3,)), 0.5)],
        FLOATS, values=False, grad=False)
      for n in ("F.alpha_dropout", "F.feature_alpha_dropout", "alpha_dropout", "feature_alpha_dropout")],
    U("F.alpha_dropout", lambda dt: [S(rnd(dt, (2, 3)), 0.5, True, True), S(rnd(dt, (2, 3)), 1.5, True)], FLOATS,
      values=False, grad=False),
    U("F.local_response_norm", lambda dt: [S(rnd(dt, (2, 5, 3, 3)), 3), S(rnd(dt, (2, 4, 3)), 2, 0.1, 0.5, 2.0),
                                           S(rnd(dt, (2, 3, 2, 2, 2)), 4), S(rnd(dt, (3, 4)), 2, grad=False)], FLOATS),
    U("logspace", lambda dt: [S(0, 2, 3), S(0, 3, 4, 2), S(-1, 1, 5, dtype=D(dt)), S(0, 1, -1, grad=False)], FLOATS,
      grad=False),
    *[U(n, lambda dt: [S(3, 4), S(4, 3, -1), S(3, 3, 1, dtype=D(dt)), S(0, 2), S(2, 3, 5), S(-1, 2, grad=False)],
        ("int64", "int32"), grad=False) for n in ("tril_indices", "triu_indices")],
    U("unique_consecutive", lambda dt: [S(np.asarray([1, 1, 2, 2, 0, 1, 1], dtype=dt)),
                                        S(np.asarray([1, 1, 2, 0], dtype=dt), return_inverse=True, return_counts=True),
                                        S(np.asarray([[1, 2], [1, 2], [3, 0]], dtype=dt), dim=0, return_counts=True),
                                        S(np.asarray([], dtype=dt))], NUM, grad=False),
    # -- jgrad's top-level names for what PyTorch has in nn.functional or as methods --
    *[alias(n, f"F.{n}") for n in ("elu", "gelu", "silu", "softplus", "leaky_relu", "hardtanh", "logsigmoid")],
    *[U(n, dtypes=FLOATS) for n in ("celu", "selu", "hardshrink")],
    U("threshold", act_s(0.5, -1.0), NUM), alias("softshrink", "F.softshrink"),
    U("prelu", lambda dt: [S(rnd(dt, (2, 3, 4)), rnd(dt, (3,), 1))], FLOATS),
    alias("mse_loss", "F.mse_loss", loss_s), alias("cross_entropy", "F.cross_entropy", ce_s),
    alias("layer_norm", "F.layer_norm", lambda dt: [S(rnd(dt, (2, 3, 4)), (4,))]),
    alias("pad", "F.pad", lambda dt: [S(rnd(dt, (2, 3)), (1, 2))]),
    alias("embedding", "F.embedding", lambda dt: [S(np.asarray([[0, 2], [1, 0]]), rnd(dt, (3, 4)))]),
    alias("repeat", "Tensor.repeat", lambda dt: [S(rnd(dt, (2, 3)), 2, 1), S(rnd(dt, (3,)), 1, 2, 2)], ALL),
    U("Tensor.repeat", lambda dt: [S(rnd(dt, (2, 3)), 2, 1), S(rnd(dt, (3,)), 1, 2, 2)]),
    alias("Tensor.bucketize", "torch.bucketize", lambda dt: [S(rnd(dt, (3,), 1), np.sort(rnd(dt, (5,))))], NUM,
          grad=False),
    U("from_numpy", lambda dt: [S([1.5, 2.0]), S([[1, 2]])], ("float64",), grad=False,
      call=(lambda x: jg.from_numpy(np.asarray(x)), lambda x: torch.from_numpy(np.asarray(x)))),
    U("F.conv3d", lambda dt: [S(rnd(dt, (1, 2, 3, 3, 3)), rnd(dt, (2, 2, 2, 2, 2), 1))], FLOATS),
    U("F.conv_transpose1d", lambda dt: [S(rnd(dt, (1, 2, 4)), rnd(dt, (2, 3, 3), 1), stride=2)], FLOATS),
    U("F.conv_transpose2d", lambda dt: [S(rnd(dt, (1, 2, 3, 3)), rnd(dt, (2, 3, 2, 2), 1))], FLOATS),
    U("F.conv_transpose3d", lambda dt: [S(rnd(dt, (1, 2, 2, 2, 2)), rnd(dt, (2, 1, 2, 2, 2), 1))], FLOATS),
    U("F.max_pool3d", lambda dt: [S(rnd(dt, (1, 1, 4, 4, 4)), 2)], FLOATS),
    U("F.avg_pool3d", lambda dt: [S(rnd(dt, (1, 1, 4, 4, 4)), 2)], FLOATS),
    *[U(f"operator.{n}", shift, INTS) for n in ("rlshift", "rrshift")],
    U("operator.rmatmul", lambda dt: [S(b, a, grad=s.grad) for s in matmul2(dt)[:4] for a, b in [s.args]], FI),
    # issue 30: resampling, patches, pixel shuffles, bilinear, gumbel_softmax (more cases: test_nn_surface.py)
    U("F.interpolate", lambda dt: [S(rnd(dt, (1, 2, 3, 4)), size=(5, 3), mode="bilinear"),
                                   S(rnd(dt, (1, 2, 5)), scale_factor=2)], FLOATS),
    *[U(f"F.{n}", lambda dt: [S(rnd(dt, (1, 1, 2, 3)), size=(3, 2))], ("float32",), grad=False)
      for n in ("upsample", "upsample_nearest", "upsample_bilinear")],
    U("F.grid_sample", lambda dt: [S(rnd(dt, (1, 2, 3, 4)), rnd(dt, (1, 2, 3, 2), 1, -1.2, 1.2), align_corners=False)],
      FLOATS),
    U("F.affine_grid", lambda dt: [S(rnd(dt, (2, 2, 3)), (2, 1, 3, 4), align_corners=False)], FLOATS),
    U("F.unfold", lambda dt: [S(rnd(dt, (1, 2, 4, 5)), (2, 3), padding=1, stride=(1, 2))], FLOATS),
    U("F.fold", lambda dt: [S(rnd(dt, (1, 12, 6)), (3, 4), 2)], FLOATS),
    U("F.pixel_shuffle", lambda dt: [S(rnd(dt, (1, 8, 2, 3)), 2)]),
    U("F.pixel_unshuffle", lambda dt: [S(rnd(dt, (1, 2, 4, 6)), 2)]),
    U("F.bilinear", lambda dt: [S(rnd(dt, (3, 2)), rnd(dt, (3, 4), 1), rnd(dt, (5, 2, 4), 2), rnd(dt, (5,), 3))], FLOATS),
    U("F.gumbel_softmax", lambda dt: [S(rnd(dt, (3, 4)), hard=True)], ("float32",), values=False,
      grad=False),
]

# Entries written as compositions of other entries' ops: CI checks their values, JGRAD_TEST_THOROUGH=1 their
# gradients too (each op they are made of has its gradient checked in its own entry).
COMPOSITE = {"F.mse_loss", "F.l1_loss", "F.smooth_l1_loss", "F.huber_loss", "F.soft_margin_loss", "F.kl_div",
             "F.poisson_nll_loss", "F.gaussian_nll_loss", "F.hinge_embedding_loss", "F.margin_ranking_loss",
             "F.cosine_embedding_loss", "F.triplet_margin_loss", "F.multilabel_soft_margin_loss",
             "F.multi_margin_loss", "F.cosine_similarity", "F.pairwise_distance", "F.normalize", "F.instance_norm",
             "F.group_norm", "F.batch_norm", "F.glu", "F.mish", "F.tanhshrink", "F.softmin", "var_mean",
             "std_mean", "nanmean", "addmm", "addmv", "addbmm", "baddbmm", "addr", "cdist", "dist", "meshgrid",
             "cartesian_prod", "hstack", "vstack", "dstack", "column_stack", "row_stack", "tile", "diff",
             "mse_loss", "F.scaled_dot_product_attention", "F.embedding_bag", "F.rms_norm", "F.layer_norm",
             "layer_norm", "F.conv3d", "F.conv_transpose3d", "F.max_pool3d", "F.avg_pool3d", "nansum",
             "diagflat", "atleast_3d", "movedim", "moveaxis"}
for _info in TABLE:
    _info.composite = _info.name in COMPOSITE

# Public names whose entries come with work in progress elsewhere (they fail nothing meanwhile). Each group says
# whose work it is; move a name into TABLE when its entry is written.
PENDING = []

# Public names compared against PyTorch by a test file of their own rather than a table entry: the views (their
# aliasing is what those tests check: every view op, read and written, against torch), the linear algebra,
# complex numbers and statistics of the math namespaces. tests/test_opinfo.py checks that the file names each.
_VIEWS = """reshape view view_as reshape_as flatten unflatten squeeze unsqueeze permute transpose swapaxes swapdims t
expand broadcast_to contiguous split chunk unbind narrow select as_strided diagonal unfold Tensor.reshape Tensor.view
Tensor.view_as Tensor.reshape_as Tensor.flatten Tensor.unflatten Tensor.squeeze Tensor.unsqueeze Tensor.permute
Tensor.transpose Tensor.swapaxes Tensor.swapdims Tensor.t Tensor.expand Tensor.contiguous Tensor.split Tensor.chunk
Tensor.unbind Tensor.narrow Tensor.select Tensor.__getitem__ Tensor.__setitem__ Tensor.as_strided Tensor.diagonal
Tensor.unfold Tensor.squeeze_ Tensor.unsqueeze_ Tensor.t_ Tensor.transpose_""".split()
_LINALG = """cholesky cholesky_solve cholesky_inverse det inverse logdet matrix_exp matrix_power pinverse qr slogdet svd
""".split()
_STATS = "histc quantile nanquantile mvlgamma unique bincount".split()
_COMPLEX = "view_as_real view_as_complex complex polar real imag".split()
TESTED_ELSEWHERE = {
    **{n: "tests/_view_scenarios.py" for n in _VIEWS},
    **{n: "tests/test_ops_shape.py" for n in ("unflatten", "Tensor.unflatten", "broadcast_to")},
    "swapaxes": "tests/test_views.py", "Tensor.swapaxes": "tests/test_views.py",
    **{n: "tests/test_stft.py" for n in ("stft", "istft", "Tensor.stft", "Tensor.istft")},
    **{n: "tests/test_linalg.py" for n in _LINALG + ["Tensor." + n for n in _LINALG if n != "cholesky_solve"]
       + ["Tensor.cholesky_solve"]},
    **{n: "tests/test_special_stats.py" for n in _STATS + ["Tensor." + n for n in _STATS]},
    **{n: "tests/test_fft_complex.py" for n in _COMPLEX + ["Tensor.view_as_real", "Tensor.view_as_complex"]},
}
# Public names that are not ops: modes, devices, streams, serialization, random state, hooks into JAX.
NOT_OPS = ["from_jax", "get_float32_matmul_precision", "set_float32_matmul_precision", "Tensor.cpu", "Tensor.cuda",
           "Tensor.uniform_", "Tensor.normal_",
           # metadata and predicates (tests/test_surface_first_names.py, tests/test_views.py check them)
           "Tensor.stride", "Tensor.storage_offset", "Tensor.is_contiguous", "memory_format", "broadcast_shapes",
           "broadcast_tensors", "is_complex", "is_floating_point", "is_conj", "Tensor.is_conj",
           *["Tensor.is_" + k for k in "cpu meta mkldnn mps nested quantized sparse sparse_csr xpu".split()],
           # in-place aliases of transpose_ (one function: Tensor.transpose_'s tests hold for them)
           "Tensor.swapaxes_", "Tensor.swapdims_"]
# COO sparse tensors (BCOO-backed; their results are sparse, which the sweep does not compare): checked in
# tests/test_nn_surface_sparse.py.
NOT_OPS += ["sparse_coo_tensor", "layout", "Tensor.to_sparse", "Tensor.to_dense", "Tensor.layout", "Tensor.coalesce",
            "Tensor.indices", "Tensor.values", "Tensor.is_coalesced", "Tensor.sparse_dim", "Tensor.dense_dim",
            "Tensor.to_sparse_coo"]
# CSR tensors (BCSR-backed, sparse results too): checked in tests/test_sparse_csr.py.
NOT_OPS += ["sparse_csr_tensor", "Tensor.to_sparse_csr", "Tensor.crow_indices", "Tensor.col_indices"]

# Differences from PyTorch that stay, each a deliberate choice listed in docs/differences.md:
# (entry name, regex over the case's repr, reason).
_CMP = ("eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal",
        "logical_and", "logical_or", "logical_xor", "logical_not")
_NO_TORCH_DERIVATIVE = ("asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh")
_WHY_CMP = "in-place comparison of a tensor that requires grad: jgrad's result has no gradient, PyTorch keeps the old history"
_WHY_ASINH = "PyTorch has no derivative for the in-place inverse hyperbolics; jgrad differentiates them"
KNOWN = [
    *[(n, r"\[inplace/grad", _WHY_CMP) for n in _CMP],
    *[(n, r"\[inplace/grad", _WHY_ASINH) for n in _NO_TORCH_DERIVATIVE],
    ("cumprod", r"/grad, float64\] \(float64\[12\]", "cumprod's gradient with a zero and NaN/inf in one slice"),
    ("scatter_reduce", r"'prod'\): grad", "scatter_reduce(prod)'s gradient with repeated indices is not implemented"),
    *[(n, r"\[fn, float32\] \(float32\[12\]\): value: output: signed zero differs",
       "gelu(-0.0): JAX's formula gives -0.0, PyTorch's +0.0") for n in ("gelu", "F.gelu")],
    *[(n, r"signed zero differs", "softshrink of small negatives: PyTorch's vector and scalar kernels disagree on "
       "the sign of zero") for n in ("softshrink", "F.softshrink")],
    ("norm", r"inf, 0\): grad: gradient of input 0: signed zero differs", "signs of the zero gradients of the "
     "inf-norm's non-maximal elements (PyTorch multiplies the gradient by 0, XLA selects a zero)"),
    ("ldexp", r"int64\[3\]\): grad", "PyTorch's gradient computes 2 ** other in integers (0 for negative exponents)"),
    ("scatter_reduce", r"'amin'\): grad: gradient of input 0: signed zero", "signs of scatter_reduce(amin)'s zero "
     "gradients"),
    *[(n, r"/grad, float64\] \(float64\[12\]\): grad", "the gradients of lgamma/digamma/i0 at the edge values "
       "(0, inf, NaN): JAX's special functions give NaN or another limit where PyTorch's kernels special-case them")
      for n in ("lgamma", "digamma", "i0")],
]

# PyTorch's own results at edge values differ between its releases, and between its vectorized CPU kernels,
# which torch picks by the processor (AVX2 or AVX-512: torch 2.13 on an AVX-512 Xeon gives what 2.11 gives on an
# AVX2 EPYC). jgrad computes what the pinned release computes on AVX2; where torch's answer at these edge values is
# the other one, it is not jgrad's failure. The sweep's reference is the release the test extra pins, on AVX2.
REFERENCE_TORCH = "2.13."
_AT_NAN = r"/grad, float64\] \(float64\[12\](, 0\.5)?\)\: grad: gradient of input 0: NaN mismatch at \(np.int64\(7\),\)"
OTHER_RELEASE = [
    *[(n, r"/grad, float64\] \(float64\[12\]\): grad: gradient of input 0: NaN mismatch at \(np.int64\(3\),\)",
       "the derivative of acosh at -1: torch 2.11 gives -inf * grad, 2.13 NaN") for n in ("acosh", "arccosh")],
    *[(n, _AT_NAN, "the derivative at a NaN input: torch 2.11's vectorized kernel passes the gradient through, "
       "2.13's on AVX2 gives NaN") for n in ("elu", "F.elu", "celu", "F.celu", "selu", "F.selu", "F.hardswish")],
    *[(n, r"\[fn, float32\] \(float32\[12\]\): value: output: NaN mismatch at \(np.int64\(8\),\)",
       "gelu(inf): torch 2.11's vectorized float32 kernel gives NaN, 2.13's inf") for n in ("gelu", "F.gelu")],
    ("logit", r"/grad, float64\] \(float64\[12\]\): grad: gradient of input 0: inf mismatch",
     "the sign of logit's infinite derivative at -0.0 differs between torch releases' vectorized kernels"),
    *[(n, r"int32\[3\]\): error message: .*expected scalar type Long but found Int",
       "torch 2.11 words the int32-target error 'expected scalar type Long but found Int'")
      for n in ("cross_entropy", "F.cross_entropy", "F.nll_loss")],
]

