"""Elementwise ops: forward values and gradients against jax (``jax.vjp``), broadcasting drawn
by hypothesis, gradcheck in float64, comparisons, casts and in-place variants."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

import jgrad as jg
from _op_helpers import FEW, SETTINGS, away_from, broadcast_pair, check_op, gradcheck, rand, seeds, shapes

# name -> (jgrad fn, jax fn, domain transform of uniform(-2, 2) data)
UNARY = {
    "neg": (jg.neg, jnp.negative, None),
    "abs": (jg.abs, jnp.abs, lambda x: away_from(x, [0])),
    "exp": (jg.exp, jnp.exp, None),
    "log": (jg.log, jnp.log, lambda x: np.abs(x) + 0.1),
    "log1p": (jg.log1p, jnp.log1p, lambda x: np.abs(x) - 0.5),
    "expm1": (jg.expm1, jnp.expm1, None),
    "sqrt": (jg.sqrt, jnp.sqrt, lambda x: np.abs(x) + 0.1),
    "rsqrt": (jg.rsqrt, jax.lax.rsqrt, lambda x: np.abs(x) + 0.1),
    "sin": (jg.sin, jnp.sin, None),
    "cos": (jg.cos, jnp.cos, None),
    "tanh": (jg.tanh, jnp.tanh, None),
    "sigmoid": (jg.sigmoid, lambda x: 1 / (1 + jnp.exp(-x)), None),
    "relu": (jg.relu, lambda x: jnp.maximum(x, 0), lambda x: away_from(x, [0])),
    "gelu": (jg.gelu, lambda x: x * 0.5 * (1 + jax.scipy.special.erf(x / jnp.sqrt(2.0))), None),
    "gelu_tanh": (lambda x: jg.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + jnp.tanh(jnp.sqrt(2 / jnp.pi) * (x + 0.044715 * x ** 3))), None),
    "silu": (jg.silu, lambda x: x / (1 + jnp.exp(-x)), None),
    "softplus": (jg.softplus, lambda x: jnp.log1p(jnp.exp(x)), None),
    "log2": (jg.log2, jnp.log2, lambda x: np.abs(x) + 0.1),
    "log10": (jg.log10, jnp.log10, lambda x: np.abs(x) + 0.1),
    "tan": (jg.tan, jnp.tan, lambda x: x / 2),
    "asin": (jg.asin, jnp.arcsin, lambda x: x / 2.5),
    "acos": (jg.acos, jnp.arccos, lambda x: x / 2.5),
    "atan": (jg.atan, jnp.arctan, None),
    "sinh": (jg.sinh, jnp.sinh, None),
    "cosh": (jg.cosh, jnp.cosh, None),
    "erf": (jg.erf, jax.scipy.special.erf, None),
    "reciprocal": (jg.reciprocal, lambda x: 1 / x, lambda x: away_from(x, [0], 0.3)),
    "square": (jg.square, lambda x: x * x, None),
    "logsigmoid": (jg.logsigmoid, lambda x: -jnp.log1p(jnp.exp(-x)), None),
    "leaky_relu": (jg.leaky_relu, lambda x: jnp.where(x > 0, x, 0.01 * x), lambda x: away_from(x, [0])),
    "elu": (jg.elu, lambda x: jnp.where(x > 0, x, jnp.expm1(x)), lambda x: away_from(x, [0])),
    "hardtanh": (jg.hardtanh, lambda x: jnp.clip(x, -1, 1), lambda x: away_from(x, [-1, 1])),
    "sign": (jg.sign, jnp.sign, lambda x: away_from(x, [0])),
    "floor": (jg.floor, jnp.floor, None),
    "ceil": (jg.ceil, jnp.ceil, None),
    "round": (jg.round, jnp.round, None),
    "trunc": (jg.trunc, jnp.trunc, None),
}


def _data(name, shape, seed, dtype=np.float64):
    x = rand(shape, seed)
    dom = UNARY[name][2]
    # np.asarray: a domain fix-up may turn 0-d data into a NumPy scalar, which check_op would pass as it is, and
    # jg.acos(np.float64(...)) is a TypeError (as in PyTorch: a function of tensors needs a tensor).
    return np.asarray((dom(x) if dom else x).astype(dtype))


@pytest.mark.parametrize("name", sorted(UNARY))
@FEW
@given(shape=shapes(max_dims=3), seed=seeds)
def test_unary_value_and_grad(name, shape, seed):
    fn, ref, _ = UNARY[name]
    check_op(fn, ref, [_data(name, shape, seed)], seed=seed)


ISSUE_UNARY = ["neg", "abs", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
               "relu", "gelu", "gelu_tanh", "silu", "softplus"]


@pytest.mark.parametrize("name", ISSUE_UNARY)
def test_unary_float32_and_method(name):
    fn, ref, _ = UNARY[name]
    x = _data(name, (3, 2), 7, np.float32)
    check_op(fn, ref, [x], rtol=2e-5, atol=1e-6)
    method = getattr(jg.Tensor, name, None)
    if method is not None:
        np.testing.assert_allclose(method(jg.tensor(x)).numpy(), np.asarray(ref(x)), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("name", ISSUE_UNARY)
def test_unary_gradcheck(name):
    fn = UNARY[name][0]
    gradcheck(fn, _data(name, (2, 3), 3))


def test_unary_names_and_int_promotion():
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    assert jg.exp(x).grad_fn.name() == "ExpBackward0"
    assert jg.relu(x).grad_fn.name() == "ReluBackward0"
    assert jg.exp(jg.tensor([0, 1])).dtype is jg.float32  # integer inputs compute in the default dtype
    assert jg.sqrt(jg.tensor([4])).tolist() == [2.0]
    assert jg.relu(jg.tensor([-1, 2])).dtype is jg.int64
    assert jg.abs(jg.tensor([-3])).tolist() == [3]
    assert jg.neg(jg.tensor([3])).dtype is jg.int64


def test_softplus_beta_threshold_and_gelu_arg():
    x = rand((5,), 1) * 10

    def ref(a):
        return jnp.where(2.0 * a > 5.0, a, jnp.log1p(jnp.exp(2.0 * a)) / 2.0)

    check_op(lambda t: jg.softplus(t, beta=2.0, threshold=5.0), ref, [away_from(x, [2.5])])
    with pytest.raises(ValueError):
        jg.gelu(jg.ones(2), approximate="bogus")


def test_round_decimals():
    np.testing.assert_allclose(jg.round(jg.tensor([1.2345, -2.5]), decimals=2).numpy(), [1.23, -2.5], rtol=1e-6)
    assert jg.tensor([0.5, 1.5, 2.5]).round().tolist() == [0.0, 2.0, 2.0]  # half to even, as PyTorch
    assert jg.floor(jg.tensor([1, 2])).dtype is jg.int64


def test_bool_subtraction_and_negation_are_errors():
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors is not supported"):
        jg.tensor([True]) - jg.tensor([False])  # PyTorch's wording for two bools
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor is not supported"):
        1 - jg.tensor([True])
    with pytest.raises(RuntimeError, match="Negation, the `-` operator, on a bool tensor is not supported"):
        -jg.tensor([True])


def test_relu_gradient_at_zero_is_zero():
    x = jg.tensor([0.0, 1.0, -1.0], requires_grad=True)
    jg.relu(x).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0]


def test_abs_gradient_at_zero_is_zero():
    x = jg.tensor([0.0, 2.0, -2.0], requires_grad=True)
    jg.abs(x).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, -1.0]


# ---- binary -----------------------------------------------------------------------
BINARY = {
    "add": (jg.add, jnp.add, None),
    "sub": (jg.sub, jnp.subtract, None),
    "mul": (jg.mul, jnp.multiply, None),
    "div": (jg.div, jnp.divide, lambda a, b: (a, away_from(b, [0], 0.3))),
    "pow": (jg.pow, jnp.power, lambda a, b: (np.abs(a) + 0.2, b)),
    "maximum": (jg.maximum, jnp.maximum, None),
    "minimum": (jg.minimum, jnp.minimum, None),
    "atan2": (jg.atan2, jnp.arctan2, None),
    "add_alpha": (lambda a, b: jg.add(a, b, alpha=2.5), lambda a, b: a + 2.5 * b, None),
    "sub_alpha": (lambda a, b: jg.sub(a, b, alpha=0.5), lambda a, b: a - 0.5 * b, None),
    "op_add": (lambda a, b: a + b, jnp.add, None),
    "op_sub": (lambda a, b: a - b, jnp.subtract, None),
    "op_mul": (lambda a, b: a * b, jnp.multiply, None),
    "op_div": (lambda a, b: a / b, jnp.divide, lambda a, b: (a, away_from(b, [0], 0.3))),
    "op_pow": (lambda a, b: a ** b, jnp.power, lambda a, b: (np.abs(a) + 0.2, b)),
}


@pytest.mark.parametrize("name", [n for n in sorted(BINARY) if not n.startswith("op_")])
@SETTINGS
@given(shp=broadcast_pair(), seed=seeds)
def test_binary_broadcast_value_and_grad(name, shp, seed):
    _check_binary(name, shp, seed)


@pytest.mark.parametrize("name", [n for n in sorted(BINARY) if n.startswith("op_")])
@FEW
@given(shp=broadcast_pair(), seed=seeds)
def test_binary_operators_broadcast(name, shp, seed):
    _check_binary(name, shp, seed)


def _check_binary(name, shp, seed):
    fn, ref, dom = BINARY[name]
    a, b = rand(shp[0], seed), rand(shp[1], seed + 7)
    if dom:
        a, b = dom(a, b)
    check_op(fn, ref, [a, b], seed=seed)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow", "maximum", "minimum"])
def test_binary_gradcheck(name):
    fn, _, dom = BINARY[name]
    a, b = rand((2, 3), 1), rand((3,), 2)
    if dom:
        a, b = dom(a, b)
    gradcheck(fn, a, b)


@pytest.mark.parametrize("op,ref", [
    (lambda x: x + 2.5, lambda x: x + 2.5), (lambda x: 2.5 + x, lambda x: 2.5 + x),
    (lambda x: x - 3, lambda x: x - 3), (lambda x: 3 - x, lambda x: 3 - x),
    (lambda x: x * -1.5, lambda x: x * -1.5), (lambda x: 2 * x, lambda x: 2 * x),
    (lambda x: x / 4, lambda x: x / 4), (lambda x: 1.0 / x, lambda x: 1.0 / x),
    (lambda x: x ** 3, lambda x: x ** 3), (lambda x: x ** 0.5, lambda x: x ** 0.5),
    (lambda x: x ** -2, lambda x: x ** -2.0), (lambda x: 2.0 ** x, lambda x: 2.0 ** x),
    (lambda x: jg.pow(3, x), lambda x: 3.0 ** x), (lambda x: -x, lambda x: -x),
    (lambda x: x ** 0, lambda x: x ** 0.0),
])
def test_python_scalar_operands(op, ref):
    x = np.abs(rand((2, 3), 4)) + 0.5
    check_op(op, ref, [x])
    check_op(op, ref, [x.astype(np.float32)], rtol=1e-5, atol=1e-6)


def test_pow_gradients_at_zero():
    # d/dx x**0 = 0 everywhere (also at 0); d/dx x**2 at 0 = 0; d/db 0**b = 0 for b > 0
    x = jg.tensor([0.0, 2.0], requires_grad=True)
    (x ** 0).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0]
    x.grad = None
    (x ** 2).sum().backward()
    assert x.grad.tolist() == [0.0, 4.0]
    b = jg.tensor([2.0, 2.0], requires_grad=True)
    (jg.tensor([0.0, 2.0]) ** b).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), [0.0, 4 * np.log(2)])


def test_maximum_minimum_ties_split_gradient():
    a = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = jg.tensor([1.0, 0.0, 5.0], requires_grad=True)
    jg.maximum(a, b).sum().backward()
    assert a.grad.tolist() == [0.5, 1.0, 0.0] and b.grad.tolist() == [0.5, 0.0, 1.0]
    a.grad = b.grad = None
    jg.minimum(a, b).sum().backward()
    assert a.grad.tolist() == [0.5, 0.0, 1.0] and b.grad.tolist() == [0.5, 1.0, 0.0]


def test_remainder_fmod_floor_divide_values():
    a = np.array([5.0, -5.0, 7.5, -7.5])
    b = np.array([3.0, 3.0, -2.0, -2.0])
    np.testing.assert_allclose(jg.remainder(jg.tensor(a), jg.tensor(b)).numpy(), np.remainder(a, b))
    np.testing.assert_allclose(jg.fmod(jg.tensor(a), jg.tensor(b)).numpy(), np.fmod(a, b))
    np.testing.assert_allclose((jg.tensor(a) // jg.tensor(b)).numpy(), np.floor_divide(a, b))
    np.testing.assert_allclose(jg.div(jg.tensor(a), jg.tensor(b), rounding_mode="trunc").numpy(), np.trunc(a / b))
    assert jg.div(jg.tensor([7, -7]), 2, rounding_mode="trunc").tolist() == [3, -3]
    assert jg.div(jg.tensor([7, -7]), 2, rounding_mode="floor").tolist() == [3, -4]
    assert (jg.tensor([7, -7]) % 3).tolist() == [1, 2]
    check_op(jg.remainder, jnp.remainder, [np.array([5.3, -2.2]), np.array([2.0, 1.5])])
    with pytest.raises(RuntimeError, match="div expected rounding_mode"):  # PyTorch's class
        jg.div(jg.ones(2), 2, rounding_mode="nearest")


def test_integer_true_division_is_float():
    out = jg.tensor([1, 2]) / jg.tensor([2, 4])
    assert out.dtype is jg.float32 and out.tolist() == [0.5, 0.5]
    assert (jg.tensor([3]) / 2).tolist() == [1.5]


def test_bad_operand_type():
    # PyTorch's wording (its "(position 2)" is left out: jgrad's add serves jg.add and Tensor.add alike)
    with pytest.raises(TypeError, match=r"^add\(\): argument 'other' must be Tensor, not str$"):
        jg.add(jg.ones(2), "x")
    with pytest.raises(TypeError):
        jg.ones(2) + "x"


def test_broadcast_shape_error():
    with pytest.raises(Exception, match=r"size of tensor a \(3\) must match the size of tensor b \(4\)"):
        jg.ones(2, 3) + jg.ones(4)


# ---- clamp / where ---------------------------------------------------------------------
@SETTINGS
@given(shape=shapes(), seed=seeds)
def test_clamp_scalar_bounds(shape, seed):
    x = away_from(rand(shape, seed), [-0.5, 0.7])
    check_op(lambda t: jg.clamp(t, -0.5, 0.7), lambda t: jnp.clip(t, -0.5, 0.7), [x])
    check_op(lambda t: jg.clamp(t, min=-0.5), lambda t: jnp.maximum(t, -0.5), [x])
    check_op(lambda t: t.clamp(max=0.7), lambda t: jnp.minimum(t, 0.7), [x])
    check_op(lambda t: jg.clip(t, -0.5, 0.7), lambda t: jnp.clip(t, -0.5, 0.7), [x])


@SETTINGS
@given(shp=broadcast_pair(max_dims=2), seed=seeds)
def test_clamp_tensor_bounds(shp, seed):
    x = rand(shp[0], seed)
    lo = rand(shp[1], seed + 1) - 1.0
    hi = lo + 1.5
    check_op(lambda a, l, h: jg.clamp(a, l, h), lambda a, l, h: jnp.minimum(jnp.maximum(a, l), h), [x, lo, hi])


def test_clamp_gradcheck_and_errors():
    gradcheck(lambda t: jg.clamp(t, -0.5, 0.5), np.array([-1.0, -0.2, 0.3, 0.9]))
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        jg.clamp(jg.ones(2))


def test_clamp_integer_with_float_bound_promotes():
    out = jg.clamp(jg.tensor([1, 2, 3]), min=1.5)
    assert out.dtype is jg.float32 and out.tolist() == [1.5, 2.0, 3.0]
    assert jg.clamp(jg.tensor([1, 5]), 2, 4).tolist() == [2, 4]


@SETTINGS
@given(shp=broadcast_pair(), seed=seeds)
def test_where_broadcast(shp, seed):
    cond = rand(shp[0], seed) > 0
    a, b = rand(shp[1], seed + 1), rand(shp[0], seed + 2)
    tensors = [jg.tensor(cond)]

    check_op(lambda x, y: jg.where(tensors[0], x, y), lambda x, y: jnp.where(cond, x, y), [a, b])
    check_op(lambda x: jg.where(tensors[0], x, 0.5), lambda x: jnp.where(cond, x, 0.5), [a])
    check_op(lambda x: x.where(tensors[0], -1.0), lambda x: jnp.where(cond, x, -1.0), [a])


def test_where_gradcheck_and_single_arg():
    cond = jg.tensor([True, False, True])
    gradcheck(lambda a, b: jg.where(cond, a, b), rand((3,), 1), rand((2, 1), 2))
    idx = jg.where(jg.tensor([[True, False], [False, True]]))
    assert [i.tolist() for i in idx] == [[0, 1], [0, 1]]


def test_where_promotes():
    c = jg.tensor([True, False])
    assert jg.where(c, jg.tensor([1, 2]), 0.5).dtype is jg.float32
    assert jg.where(c, 1.0, 0.0).dtype is jg.float32


# ---- comparisons and logic -----------------------------------------------------------------
@pytest.mark.parametrize("op,ref", [
    (jg.eq, np.equal), (jg.ne, np.not_equal), (jg.lt, np.less), (jg.le, np.less_equal),
    (jg.gt, np.greater), (jg.ge, np.greater_equal),
    (lambda a, b: a == b, np.equal), (lambda a, b: a != b, np.not_equal), (lambda a, b: a < b, np.less),
    (lambda a, b: a <= b, np.less_equal), (lambda a, b: a > b, np.greater), (lambda a, b: a >= b, np.greater_equal),
])
def test_comparisons_have_no_grad(op, ref):
    a = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    b = np.array([2.0, 2.0, 2.0])
    x = jg.tensor(a, requires_grad=True)
    out = op(x, jg.tensor(b))
    assert out.dtype is jg.bool and not out.requires_grad and out.grad_fn is None
    np.testing.assert_array_equal(out.numpy(), ref(a, b))
    np.testing.assert_array_equal(op(x, 2).numpy(), ref(a, 2))
    np.testing.assert_array_equal(op(jg.tensor([1, 2, 3]), 2.5).numpy(), ref(np.array([1, 2, 3]), 2.5))


def test_logical_bitwise_and_predicates():
    a, b = jg.tensor([True, False, True]), jg.tensor([True, True, False])
    assert (a & b).tolist() == [True, False, False]
    assert (a | b).tolist() == [True, True, True]
    assert (a ^ b).tolist() == [False, True, True]
    assert (~a).tolist() == [False, True, False]
    assert jg.logical_and(a, b).tolist() == [True, False, False]
    assert jg.logical_not(jg.tensor([0, 3])).tolist() == [True, False]
    assert (jg.tensor([6]) & jg.tensor([3])).tolist() == [2]
    x = jg.tensor([1.0, float("nan"), float("inf")])
    assert jg.isnan(x).tolist() == [False, True, False]
    assert jg.isinf(x).tolist() == [False, False, True]
    assert jg.isfinite(x).tolist() == [True, False, False]
    assert jg.allclose(jg.tensor([1.0, 2.0]), jg.tensor([1.0, 2.0 + 1e-9]))
    assert not jg.allclose(jg.tensor([1.0]), jg.tensor([1.1]))
    assert jg.isclose(jg.tensor([1.0, 2.0]), jg.tensor([1.0, 3.0])).tolist() == [True, False]
    assert jg.equal(jg.tensor([1, 2]), jg.tensor([1, 2])) and not jg.equal(jg.tensor([1, 2]), jg.tensor([1, 3]))
    assert not jg.equal(jg.tensor([1, 2]), jg.tensor([1, 2, 3]))


# ---- casts ---------------------------------------------------------------------------------
def test_cast_value_and_grad():
    x = rand((2, 3), 1).astype(np.float32)
    check_op(lambda t: t.to(jg.float64) * 2, lambda t: t.astype(jnp.float64) * 2, [x])
    check_op(lambda t: t.double().sin(), lambda t: jnp.sin(t.astype(jnp.float64)), [x])
    check_op(lambda t: t.to(jg.float32), lambda t: t.astype(jnp.float32), [x.astype(np.float64)], rtol=1e-6)
    check_op(lambda t: t.half().float(), lambda t: t.astype(jnp.float16).astype(jnp.float32), [x], rtol=1e-3)
    t = jg.tensor(x, requires_grad=True)
    y = t.to(jg.float64)
    assert y.grad_fn.name() == "ToCopyBackward0" and y.dtype is jg.float64
    y.sum().backward()
    assert t.grad.dtype is jg.float32


@pytest.mark.cpu_only("checks the CPU type strings (torch.FloatTensor)")
def test_cast_to_integer_is_not_differentiable():
    t = jg.tensor([1.7, -2.2], requires_grad=True)
    i = t.long()
    assert i.dtype is jg.int64 and i.tolist() == [1, -2] and not i.requires_grad
    assert t.int().dtype is jg.int32 and t.bool().tolist() == [True, True]
    assert t.to(jg.bool).dtype is jg.bool
    assert jg.tensor([0, 2]).float().tolist() == [0.0, 2.0]
    assert t.type() == "torch.FloatTensor" and t.type(jg.float64).dtype is jg.float64
    assert t.type_as(jg.tensor([1])).dtype is jg.int64


def test_cast_same_dtype_is_noop():
    t = jg.tensor([1.0])
    assert t.to(jg.float32) is t and t.float() is t


# ---- in-place ------------------------------------------------------------------------------
INPLACE = {
    "add_": (lambda y, z: y.add_(z), lambda y, z: y + z),
    "add_alpha": (lambda y, z: y.add_(z, alpha=3.0), lambda y, z: y + 3.0 * z),
    "sub_": (lambda y, z: y.sub_(z), lambda y, z: y - z),
    "mul_": (lambda y, z: y.mul_(z), lambda y, z: y * z),
    "div_": (lambda y, z: y.div_(z), lambda y, z: y / z),
    "pow_": (lambda y, z: y.abs_().pow_(z), lambda y, z: jnp.abs(y) ** z),
    "iadd": (lambda y, z: y.__iadd__(z), lambda y, z: y + z),
    "isub": (lambda y, z: y.__isub__(z), lambda y, z: y - z),
    "imul": (lambda y, z: y.__imul__(z), lambda y, z: y * z),
    "itruediv": (lambda y, z: y.__itruediv__(z), lambda y, z: y / z),
    "copy_": (lambda y, z: y.copy_(z), lambda y, z: jnp.broadcast_to(z, y.shape) + 0 * y),
    "clamp_": (lambda y, z: y.clamp_(-0.5, 0.5) * z, lambda y, z: jnp.clip(y, -0.5, 0.5) * z),
    "fill_": (lambda y, z: y.fill_(2.0) * z, lambda y, z: jnp.full(y.shape, 2.0) * z + 0 * y),
    "zero_": (lambda y, z: y.zero_() + z, lambda y, z: jnp.zeros(y.shape) + z + 0 * y),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_on_non_leaf_values_grads_version(name):
    fn, ref = INPLACE[name]
    x = away_from(rand((2, 3), 1), [-0.5, 0.5, 0]) + 0.0
    z = away_from(rand((3,), 2), [0], 0.3)

    def jg_fn(xt, zt):
        y = xt * 1.5  # a non-leaf: in-place ops on it rebase its history
        v = y._version
        out = fn(y, zt)
        assert y._version > v
        return out

    check_op(jg_fn, lambda xt, zt: ref(xt * 1.5, zt), [x, z])


def test_inplace_returns_self_and_rebases_grad_fn():
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert y.grad_fn.name() == "MulBackward0"
    out = y.add_(1)
    assert out is y and y.grad_fn.name() == "AddBackward0" and y._version == 1
    y.mul_(y)  # self-referencing in-place: d/dx (2x+1)^2 = 4(2x+1)
    y.sum().backward()
    assert x.grad.tolist() == [12.0, 20.0]


def test_inplace_unary_methods():
    for name, ref in [("exp_", np.exp), ("sin_", np.sin), ("tanh_", np.tanh), ("neg_", np.negative),
                      ("sigmoid_", lambda v: 1 / (1 + np.exp(-v))), ("relu_", lambda v: np.maximum(v, 0))]:
        x = jg.tensor([0.5, -1.0], requires_grad=True)
        y = x * 1
        getattr(y, name)()
        assert y._version == 1
        np.testing.assert_allclose(y.detach().numpy(), ref(np.array([0.5, -1.0])), rtol=1e-6)
        gx = jax.grad(lambda v: jnp.sum(jnp.asarray(ref(np.zeros(2))) * 0 + _jnp_ref(name)(v)))(jnp.array([0.5, -1.0]))
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6)


def _jnp_ref(name):
    return {"exp_": jnp.exp, "sin_": jnp.sin, "tanh_": jnp.tanh, "neg_": jnp.negative,
            "sigmoid_": jax.nn.sigmoid, "relu_": jax.nn.relu}[name]


def test_inplace_on_leaf_requiring_grad_raises():
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    for f in (lambda: x.add_(1), lambda: x.mul_(2), lambda: x.zero_(), lambda: x.fill_(1.0),
              lambda: x.copy_(jg.ones(2)), lambda: x.clamp_(0, 1), lambda: x.__setitem__(0, 5.0)):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
            f()
    with jg.no_grad():
        x.add_(1)  # allowed without grad mode (an optimizer step)
    assert x.tolist() == [2.0, 3.0] and x._version == 1


def test_inplace_on_plain_tensor_bumps_version():
    t = jg.zeros(3)
    for i, f in enumerate([lambda: t.add_(1), lambda: t.mul_(3), lambda: t.sub_(jg.ones(3)), lambda: t.div_(2),
                           lambda: t.clamp_(max=0.5), lambda: t.fill_(7), lambda: t.zero_(),
                           lambda: t.copy_(jg.tensor([1, 2, 3]))], start=1):
        f()
        assert t._version == i
    assert t.tolist() == [1.0, 2.0, 3.0] and t.dtype is jg.float32


def test_inplace_result_type_rules():
    t = jg.tensor([1, 2])
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        t.add_(1.5)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        jg.zeros(3).add_(jg.ones(2, 3))
    f = jg.zeros(2)
    f.add_(jg.tensor([1, 2]))  # int into float is fine
    assert f.tolist() == [1.0, 2.0] and f.dtype is jg.float32


def test_modified_saved_tensor_raises():
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    z = y.sin()  # saves y
    y.add_(1)
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation has been modified "
                                           "by an inplace operation"):
        z.sum().backward()


def test_clone_is_differentiable_and_independent():
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    c = x.clone()
    assert c.grad_fn.name() == "CloneBackward0"
    c.mul_(3)
    assert x.tolist() == [1.0, 2.0] and x._version == 0
    c.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


# ---- from_jax ------------------------------------------------------------------------------
def test_from_jax_value_grad_and_static_kwargs():
    softclip = jg.ops.from_jax(lambda x, *, c: c * jnp.tanh(x / c))
    x = rand((2, 3), 1) * 4
    check_op(lambda t: softclip(t, c=2.0), lambda a: 2.0 * jnp.tanh(a / 2.0), [x])
    check_op(lambda t: softclip(t, c=3.0), lambda a: 3.0 * jnp.tanh(a / 3.0), [x])
    assert len(softclip.op._kernels) == 2  # one compiled kernel per static kwargs
    gradcheck(lambda t: softclip(t, c=2.0), x)
    assert jg.from_jax is jg.ops.from_jax


@pytest.mark.x64  # its jax reference is float64
def test_from_jax_decorator_multi_input_multi_output_and_name():
    @jg.ops.from_jax(name="PolarBackward0")
    def polar(r, theta):
        return r * jnp.cos(theta), r * jnp.sin(theta)

    r, th = np.abs(rand((3,), 1)) + 0.5, rand((3,), 2)
    tr, tt = jg.tensor(r, requires_grad=True), jg.tensor(th, requires_grad=True)
    x, y = polar(tr, tt)
    assert x.grad_fn is y.grad_fn and x.grad_fn.name() == "PolarBackward0"
    (x * 2 + y * 3).sum().backward()
    ref = jax.grad(lambda a, b: jnp.sum(2 * a * jnp.cos(b) + 3 * a * jnp.sin(b)), (0, 1))(r, th)
    np.testing.assert_allclose(tr.grad.numpy(), ref[0], rtol=1e-12)
    np.testing.assert_allclose(tt.grad.numpy(), ref[1], rtol=1e-12)
    # only one output used: the other's gradient is zero
    tr.grad = tt.grad = None
    polar(tr, tt)[1].sum().backward()
    np.testing.assert_allclose(tr.grad.numpy(), np.sin(th), rtol=1e-12)


def test_from_jax_second_order_and_scalars():
    cube = jg.ops.from_jax(lambda x, s: s * x ** 3)
    x = jg.tensor([1.0, 2.0], dtype=jg.float64, requires_grad=True)
    (g,) = jg.autograd.grad(cube(x, 2.0).sum(), [x], create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [6.0, 24.0])
    (gg,) = jg.autograd.grad(g.sum(), [x])
    np.testing.assert_allclose(gg.numpy(), [12.0, 24.0])


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "rsqrt", "sin", "tanh", "sigmoid", "gelu", "silu", "softplus",
                                  "relu", "neg", "reciprocal"])
@pytest.mark.x64  # its jax reference is float64
def test_unary_second_order_matches_jax(name):
    fn, ref, _ = UNARY[name]
    x = _data(name, (2, 3), 1)
    t = jg.tensor(x, requires_grad=True)
    (g,) = jg.autograd.grad(fn(t).sum(), [t], create_graph=True)
    expect = jax.grad(lambda a: jnp.sum(jax.grad(lambda b: jnp.sum(ref(b)))(a) ** 2))(x)
    if g.grad_fn is None:  # a linear op: its gradient is constant
        np.testing.assert_allclose(expect, 0.0)
        return
    (gg,) = jg.autograd.grad((g * g).sum(), [t])
    np.testing.assert_allclose(gg.numpy(), expect, rtol=1e-6, atol=1e-8)


@pytest.mark.x64  # its jax reference is float64
@pytest.mark.parametrize("name", ["mul", "div", "pow", "maximum", "atan2", "op_pow"])
def test_binary_second_order_matches_jax(name):
    fn, ref, dom = BINARY[name]
    a, b = rand((2, 3), 1), rand((3,), 2)
    if dom:
        a, b = dom(a, b)
    ta, tb = jg.tensor(a, requires_grad=True), jg.tensor(b, requires_grad=True)
    ga, gb = jg.autograd.grad(fn(ta, tb).sum(), [ta, tb], create_graph=True)
    gga, ggb = jg.autograd.grad((ga * ga).sum() + (gb * gb).sum(), [ta, tb])
    first = jax.grad(lambda p, q: jnp.sum(ref(p, q)), (0, 1))
    expect = jax.grad(lambda p, q: sum(jnp.sum(v ** 2) for v in first(p, q)), (0, 1))(a, b)
    np.testing.assert_allclose(gga.numpy(), expect[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ggb.numpy(), expect[1], rtol=1e-6, atol=1e-8)
