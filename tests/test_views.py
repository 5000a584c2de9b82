"""Views alias their base (issue 25): PyTorch's storage model, version counter, CopySlices and
view+inplace errors, tested against PyTorch, NumPy and ``jax.grad``. Never jgrad against itself.

- The scenarios of tests/_view_scenarios.py and tests/_view_autograd_scenarios.py (ported from
  PyTorch's test/test_view_ops.py and test/test_autograd.py) run on ``torch`` and on ``jgrad``; what
  they observe must be the same (exceptions: class and PyTorch's key phrase).
- Issue 25's table, row by row, against torch.
- Random chains of basic-slicing views and in-place writes on NumPy arrays (whose basic-slicing
  views alias exactly as PyTorch's do), on jgrad and on torch: every live array after every write.
- Gradients through in-place writes on views against ``jax.grad`` of the functional equivalent.
"""
import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import jgrad as jg
from jgrad.core._dtype import x64_scope
import _view_autograd_scenarios  # noqa: F401  (registers the autograd scenarios)
from _op_helpers import SETTINGS
from _view_scenarios import SCENARIOS, TABLE, VIEW_CASES, Raised, arr, observe_view, plain

try:
    import torch
except ImportError:  # the NumPy and jax.grad tests still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="compares with PyTorch")


def differences(got, want, path="obs"):
    """Every place where jgrad's observation differs from PyTorch's (empty when they agree)."""
    got, want = plain(got), plain(want)
    if isinstance(want, Raised):
        if not want.found:
            return [f"{path}: the scenario's key phrase is not in PyTorch's message {want!r}"]
        return [] if got == want else [f"{path}: jgrad {got!r}, torch {want!r}"]
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: jgrad {got!r}, torch {want!r}"]
        extra = [f"{path}.{k}: jgrad {got[k]!r}, torch has no such entry" for k in got if k not in want]
        missing = [f"{path}.{k}: jgrad has no such entry, torch {want[k]!r}" for k in want if k not in got]
        return extra + missing + [d for k in want if k in got for d in differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            return [f"{path}: jgrad {got!r}, torch {want!r}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in differences(g, w, f"{path}[{i}]")]
    if isinstance(want, np.ndarray):
        g = np.asarray(got) if not isinstance(got, Raised) else None
        if g is None or g.shape != want.shape or not np.allclose(g, want, rtol=1e-9, atol=1e-12, equal_nan=True):
            return [f"{path}: jgrad {got!r}, torch {want!r}"]
        return []
    if isinstance(want, numbers.Real) and not isinstance(want, bool):  # ints by value, floats within rounding
        same = isinstance(got, numbers.Real) and not isinstance(got, bool) and (
            got == want if isinstance(want, numbers.Integral) else math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12))
    else:
        same = type(got) is type(want) and got == want
    return [] if same else [f"{path}: jgrad {got!r}, torch {want!r}"]


def assert_same_as_torch(run):
    want = run(torch)
    got = run(jg)
    diffs = differences(got, want)
    assert not diffs, "\n".join(diffs)


@needs_torch
@pytest.mark.parametrize("case", VIEW_CASES, ids=[c[0] for c in VIEW_CASES])
def test_view_ops_alias_like_torch(case):
    """test_view_ops.py: each view op's _is_view/_base/storage/strides, and writes through it and its base."""
    _, _, shape, make = case
    assert_same_as_torch(lambda lib: observe_view(lib, shape, make))


@needs_torch
@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.cpu_only(why)] if why else [])
                                  for n, (_, _, why) in sorted(SCENARIOS.items())])
def test_scenario_like_torch(name):
    assert_same_as_torch(SCENARIOS[name][0])


@needs_torch
@pytest.mark.parametrize("name", sorted(TABLE))
def test_issue25_table_row(name):
    assert_same_as_torch(TABLE[name])


# --- Random chains of views and writes, against NumPy (and torch) -----------------------------------
# A program is plain data (kinds and raw integers); ``run_program`` maps the integers onto valid view
# specs and writes for the shapes at hand, so that explicit examples and shrinking stay simple.
VIEW_KINDS = ("index", "transpose", "permute", "reshape")
WRITE_KINDS = ("iadd", "imul", "setitem", "fill", "copy")
raw = st.lists(st.integers(0, 2 ** 16), min_size=6, max_size=6)
steps = st.lists(st.tuples(st.sampled_from(VIEW_KINDS + WRITE_KINDS), st.integers(0, 2 ** 16), raw),
                 min_size=1, max_size=10)
base_shapes = st.integers(1, 3).flatmap(lambda n: st.tuples(*[st.integers(1, s) for s in (4, 4, 3)[:n]]))


def _basic_index(shape, r, allow_none=True):
    """A basic index (ints, positive-step slices, at most one None, an Ellipsis) valid for ``shape``."""
    items = []
    for d, n in enumerate(shape):
        c, v = r[d % 6] % 4, r[(d + 3) % 6]
        if c == 0:
            items.append(v % (2 * n) - n)            # an int, negative ones too
        elif c == 1 or n == 1:
            items.append(slice(None))
        else:
            start = v % n
            items.append(slice(start, start + 1 + (v // 7) % (n - start), 1 + (v // 3) % 3))
    if allow_none and r[5] % 3 == 0:
        items.insert(r[4] % (len(items) + 1), None)
    cut = r[5] % (len(items) + 1)                      # trailing items become an Ellipsis
    items = items[:cut] if all(i == slice(None) for i in items[cut:]) else items
    return tuple(items) + (Ellipsis,)                 # NumPy: a 0-d view, not a scalar


def _reshape_target(a, r):
    n = a.size
    cands = sorted({(n,), (1, n)} | {(d, n // d) for d in range(1, n + 1) if n % d == 0}
                   | {(d, e, n // (d * e)) for d in range(1, n + 1) for e in range(1, n + 1) if n % (d * e) == 0})
    for k in range(len(cands)):
        new = cands[(r[0] + k) % len(cands)]
        try:
            np.reshape(a, new, copy=False)             # only reshapes that NumPy (and PyTorch) can view
        except ValueError:
            continue
        return new
    return None


def _view_spec(kind, shape, r):
    nd = len(shape)
    if kind == "index":
        return _basic_index(shape, r)
    if nd < 2 and kind in ("transpose", "permute"):
        return None
    if kind == "transpose":
        return (r[0] % nd, r[1] % nd)
    if kind == "permute":
        return tuple(int(i) for i in np.argsort(r[:nd], kind="stable"))
    return "reshape"


def _apply_view(kind, spec, x, r):
    if kind == "index":
        return x[spec]
    if kind == "transpose":
        return np.swapaxes(x, *spec) if isinstance(x, np.ndarray) else x.transpose(*spec)
    if kind == "permute":
        return np.transpose(x, spec) if isinstance(x, np.ndarray) else x.permute(*spec)
    return np.reshape(x, spec, copy=False) if isinstance(x, np.ndarray) else x.reshape(spec)


def _write(kind, x, r, lib):
    c = float(r[0] % 5 - 2)
    if kind == "iadd":
        other = c if r[1] % 2 or x.ndim == 0 else np.arange(x.shape[-1], dtype=np.float64) * c
        x += other if isinstance(x, np.ndarray) or np.ndim(other) == 0 else lib.tensor(other, dtype=lib.float64)
    elif kind == "imul":
        x *= (-1.0, 2.0, 3.0)[r[1] % 3]
    elif kind == "setitem":
        x[_basic_index(x.shape, r, allow_none=False)] = c
    elif kind == "fill":
        x.fill(c) if isinstance(x, np.ndarray) else x.fill_(c)
    else:
        src = np.arange(math.prod(x.shape), dtype=np.float64).reshape(x.shape) * c
        np.copyto(x, src) if isinstance(x, np.ndarray) else x.copy_(lib.tensor(src, dtype=lib.float64))


def run_program(shape, program, libs=None):
    libs = libs or [jg] + ([torch] if torch is not None else [])
    base = np.arange(math.prod(shape), dtype=np.float64).reshape(shape)
    live = [(base, *[lib.tensor(base, dtype=lib.float64) for lib in libs])]
    log = []
    for kind, target, r in program:
        k = target % len(live)
        entry = live[k]
        if kind in VIEW_KINDS:
            spec = _view_spec(kind, entry[0].shape, r)
            spec = _reshape_target(entry[0], r) if spec == "reshape" else spec
            if spec is None:
                continue
            log.append(f"v{len(live)} = v{k}.{kind}{spec}")
            live.append(tuple(_apply_view(kind, spec, x, r) for x in entry))
            continue
        log.append(f"v{k}.{kind}({r[:2]})")
        _write(kind, entry[0], r, np)
        for lib, x in zip(libs, entry[1:]):
            _write(kind, x, r, lib)
        for i, (want, *tensors) in enumerate(live):
            for lib, t in zip(libs, tensors):
                np.testing.assert_array_equal(arr(t), want, err_msg=f"{lib.__name__} v{i} after:\n" + "\n".join(log))


@SETTINGS
@given(shape=base_shapes, program=steps)
@example(shape=(4, 4, 3), program=[("index", 0, [1, 2, 5, 6, 3, 0]), ("transpose", 1, [0, 1, 0, 0, 0, 0]),
                                   ("setitem", 2, [4, 1, 2, 3, 1, 2]), ("reshape", 0, [3, 0, 0, 0, 0, 0]),
                                   ("iadd", 3, [3, 0, 0, 0, 0, 0]), ("permute", 0, [2, 0, 1, 0, 0, 0]),
                                   ("fill", 1, [4, 0, 0, 0, 0, 0]), ("imul", 4, [0, 1, 0, 0, 0, 0]),
                                   ("copy", 2, [1, 0, 0, 0, 0, 0]), ("iadd", 0, [4, 0, 0, 0, 0, 0])])
@example(shape=(3, 4), program=[("index", 0, [2, 1, 0, 5, 4, 3]), ("index", 1, [1, 3, 2, 2, 0, 0]),
                                ("permute", 1, [5, 1, 0, 0, 0, 0]), ("imul", 2, [0, 2, 0, 0, 0, 0]),
                                ("setitem", 3, [1, 1, 2, 1, 1, 1]), ("iadd", 1, [0, 0, 0, 0, 0, 0])])
def test_random_view_chains_alias_like_numpy(shape, program):
    run_program(shape, program)


# --- Gradients through in-place writes on views, against jax.grad of the functional program ----------
def _jg_select_mul(x):
    y = x.sin()
    y.select(0, 1).mul_(x[0])
    return y


def _jg_slice_copy(x):
    y = x * 2
    y[:, 1:3].copy_(x[:, :2].exp())
    return y


def _jg_transpose_add(x):
    y = x.cos()
    y.t()[1:3].add_(x[:, :2].t() ** 2)
    return y


def _jg_flat_view_mul(x):
    y = x.sin()
    y.view(-1)[2:7].mul_(x.view(-1)[:5])
    return y


def _jg_diagonal_fill(x):
    y = x[:, :3] * x[:, 1:]
    y.diagonal().fill_(0.5)
    return y


def _jg_nested_views(x):
    y = x * 3
    y.narrow(1, 1, 3).narrow(0, 1, 2)[:, ::2].mul_(x[:2, :2].tanh())
    return y


def _jg_write_one_read_other(x):
    y = x.sin()
    a, b = y[0], y[:, 1]
    a.mul_(2)
    return b * b + y[2, :3]


def _jg_permute_sub(x):
    y = (x * x).view(3, 2, 2)
    y.permute(2, 0, 1)[1].sub_(x.view(3, 2, 2)[:, :, 0])
    return y


def _jg_unsqueeze_setitem(x):
    y = x.cos()
    y.unsqueeze(0)[0, 2] = x[0] * 5
    y.T[0] *= 2
    return y


GRAD_PATTERNS = {
    "select_mul_": (_jg_select_mul, lambda x: jnp.sin(x).at[1].multiply(x[0])),
    "slice_copy_": (_jg_slice_copy, lambda x: (x * 2).at[:, 1:3].set(jnp.exp(x[:, :2]))),
    "transpose_add_": (_jg_transpose_add, lambda x: jnp.cos(x).at[:, 1:3].add(x[:, :2] ** 2)),
    "view_flat_mul_": (_jg_flat_view_mul,
                       lambda x: jnp.sin(x).reshape(-1).at[2:7].multiply(x.reshape(-1)[:5]).reshape(3, 4)),
    "diagonal_fill_": (_jg_diagonal_fill, lambda x: (x[:, :3] * x[:, 1:]).at[jnp.diag_indices(3)].set(0.5)),
    "nested_views": (_jg_nested_views, lambda x: (x * 3).at[1:3, 1::2].multiply(jnp.tanh(x[:2, :2]))),
    "write_one_read_other": (_jg_write_one_read_other,
                             lambda x: (lambda y: y[:, 1] * y[:, 1] + y[2, :3])(jnp.sin(x).at[0].multiply(2))),
    "permute_sub_": (_jg_permute_sub, lambda x: (lambda y: y.at[:, :, 1].add(-x.reshape(3, 2, 2)[:, :, 0]))(
        (x * x).reshape(3, 2, 2))),
    "unsqueeze_setitem": (_jg_unsqueeze_setitem, lambda x: jnp.cos(x).at[2].set(x[0] * 5).at[:, 0].multiply(2)),
}


@functools.lru_cache(maxsize=None)  # one jitted reference per pattern, shared by both execution modes
def _jax_reference(name):
    with x64_scope():  # the reference in float64 whether or not JAX_ENABLE_X64 is set (as tests/_op_helpers.py)
        return _jax_reference_x64(name)


def _jax_reference_x64(name):
    jax_fn = GRAD_PATTERNS[name][1]
    rng = np.random.default_rng(7)
    x_np = rng.uniform(-1.5, 1.5, (3, 4))
    w_np = rng.standard_normal(jax.eval_shape(jax_fn, jnp.asarray(x_np)).shape)
    out, (value, grad) = jax.jit(lambda x: (jax_fn(x), jax.value_and_grad(lambda x: (jax_fn(x) * w_np).sum())(x)))(
        jnp.asarray(x_np))
    return x_np, w_np, np.asarray(out), float(value), np.asarray(grad)


@pytest.mark.parametrize("name", list(GRAD_PATTERNS))
def test_grad_through_inplace_on_views_matches_jax(name):
    jg_fn = GRAD_PATTERNS[name][0]
    x_np, w_np, ref_out, value, grad = _jax_reference(name)
    x = jg.tensor(x_np, dtype=jg.float64, requires_grad=True)
    out = jg_fn(x)
    loss = (out * jg.tensor(w_np, dtype=jg.float64)).sum()
    (g,) = jg.autograd.grad(loss, [x])
    np.testing.assert_allclose(arr(out), ref_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(loss.item(), value, rtol=1e-10)
    np.testing.assert_allclose(arr(g), grad, rtol=1e-10, atol=1e-12)
