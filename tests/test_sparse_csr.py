"""Issue 30: CSR sparse tensors on ``jax.experimental.sparse.BCSR`` as PyTorch defines them: construction and its
invariants, accessors, conversions to and from strided and COO tensors, printing, CSR @ dense with gradients to the
values and the dense side (against PyTorch and jax.grad), the ops PyTorch runs on CSR and its errors for the rest.
Tests that need PyTorch skip without it; the NumPy/jax.grad checks always run."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental import sparse as jsparse

import jgrad as jg
from _op_helpers import SETTINGS

CROW, COL, VALS = [0, 2, 2, 4], [0, 2, 1, 2], [1.0, 2.0, 3.0, 4.0]
DENSE = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0], [0.0, 3.0, 4.0]], np.float32)


def _torch():
    torch = pytest.importorskip("torch")
    import warnings
    warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta state", UserWarning)
    return torch


@pytest.mark.one_execution_mode  # storage and host-side structure: the execution mode changes nothing here
def test_csr_storage_is_a_bcsr_and_converts_as_numpy_says():
    s = jg.sparse_csr_tensor(CROW, COL, VALS, (3, 3))
    b = s._bcsr
    assert isinstance(b, jsparse.BCSR) and s._data is None and b.shape == (3, 3)
    np.testing.assert_array_equal(np.asarray(b.todense()), DENSE)
    assert s.layout == jg.sparse_csr and repr(jg.sparse_csr) == "jgrad.sparse_csr"
    assert s.is_sparse_csr and not s.is_sparse and s._nnz() == 4 and s.sparse_dim() == 2 and s.dense_dim() == 0
    assert not jg.ones(2).is_sparse_csr
    np.testing.assert_array_equal(s.to_dense().numpy(), DENSE)
    np.testing.assert_array_equal(s.crow_indices().numpy(), CROW)
    np.testing.assert_array_equal(s.col_indices().numpy(), COL)
    small = jg.sparse_csr_tensor(jg.tensor(CROW, dtype=jg.int32), jg.tensor(COL, dtype=jg.int32), VALS)
    assert small.crow_indices().dtype == jg.int32 and small.shape == (3, 3)  # size inferred, index dtype kept
    for t in (jg.tensor(DENSE).to_sparse_csr(), jg.tensor(DENSE).to_sparse(layout=jg.sparse_csr),
              jg.tensor(DENSE).to_sparse().to_sparse(layout=jg.sparse_csr),
              jg.sparse_coo_tensor([[2, 0, 2, 0, 2], [2, 0, 1, 2, 2]], [1.0, 1.0, 3.0, 2.0, 3.0], (3, 3))
              .to_sparse_csr()):  # an uncoalesced COO tensor: coalesced first
        assert t.layout == jg.sparse_csr
        np.testing.assert_array_equal(t.crow_indices().numpy(), CROW)
        np.testing.assert_array_equal(t.col_indices().numpy(), COL)
        np.testing.assert_array_equal(t.values().numpy(), VALS)
    coo = s.to_sparse()
    assert coo.layout == jg.sparse_coo and coo.is_coalesced()
    np.testing.assert_array_equal(coo.indices().numpy(), np.stack(np.nonzero(DENSE)))
    assert s.to_sparse_coo().layout == jg.sparse_coo and s.to_sparse_csr() is s
    sub = s[2]  # a row: 1-D COO, as PyTorch's
    assert sub.layout == jg.sparse_coo
    np.testing.assert_array_equal(sub.to_dense().numpy(), DENSE[2])


def _dense_program(vals, base, vec, w):
    """The CSR program below on a dense matrix, for jax.grad."""
    rows = np.repeat(np.arange(3), np.diff(CROW))
    S = jnp.zeros((3, 3)).at[rows, np.asarray(COL)].set(vals)
    d = base[:, :2]
    out = ((S @ d) * w).sum() + ((S @ d) * w * 2).sum()
    return out + (S @ vec).sum() * 3 + (vec @ S * jnp.arange(3.0)).sum()


def _csr_program(lib, vals, base, vec, w):
    v, b = lib.tensor(vals, requires_grad=True), lib.tensor(base, requires_grad=True)
    s = lib.sparse_csr_tensor(CROW, COL, v, (3, 3))
    d, x, W = b[:, :2], lib.tensor(vec), lib.tensor(w)  # d: a view, whose gradient reaches the base
    mm, smm = s @ d, lib.sparse.mm(s, d)
    out = (mm * W).sum() + (smm * W * 2).sum() + (s @ x).sum() * 3
    out = out + (x @ s * lib.arange(3.0)).sum()
    out.backward()
    return [out.item(), v.grad.numpy(), b.grad.numpy()], (mm.grad_fn.name(), smm.grad_fn.name(),
                                                          (s @ x).grad_fn.name())


@pytest.mark.one_execution_mode  # runs the jgrad side in both modes itself, sharing their kernels
def test_csr_matmul_gradients_against_jax_grad_and_torch():
    """CSR @ dense (mm, sparse.mm, mv) is bcsr_dot_general, dense @ CSR the pairs' kernel; gradients reach
    the values and the dense side (through a view too)."""
    vals = np.array(VALS, np.float32)
    base = np.arange(12.0, dtype=np.float32).reshape(3, 4) / 10
    vec, w = np.linspace(-1, 1, 3, dtype=np.float32), np.linspace(0.5, 2, 6, dtype=np.float32).reshape(3, 2)
    value, *expected = jax.jit(jax.value_and_grad(lambda v, b: _dense_program(v, b, vec, w), (0, 1)))(vals, base)
    expected = expected[0]
    runs = []
    for mode in ("eager", "auto"):
        with jg.execution_mode(mode):
            runs.append(_csr_program(jg, vals, base, vec, w))
    for ours, names in runs:
        np.testing.assert_allclose(ours[0], value, rtol=1e-5)
        for a, b in zip(ours[1:], expected):
            np.testing.assert_allclose(a, b, rtol=1e-5)
    torch = _torch()
    theirs, their_names = _csr_program(torch, vals, base, vec, w)
    assert runs[0][1] == their_names == ("MmBackward0", "SparseAddmmBackward0", "MvBackward0")
    for a, b in zip(runs[0][0], theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    # a CSR leaf's gradient: CSR on its pattern (PyTorch's after sparse.mm)
    leaf_t = torch.sparse_csr_tensor(CROW, COL, VALS, (3, 3), requires_grad=True)
    leaf = jg.sparse_csr_tensor(CROW, COL, VALS, (3, 3), requires_grad=True)
    for lib, s in ((torch, leaf_t), (jg, leaf)):
        (lib.sparse.mm(s, lib.tensor(base[:, :2])) * lib.tensor(w)).sum().backward()
    assert repr(leaf.grad) == repr(leaf_t.grad).replace("torch.", "jgrad.")


@pytest.mark.one_execution_mode
def test_csr_prints_as_pytorchs():
    torch = _torch()
    x = np.array([[0.0, 2.0], [3.0, 0.0], [0.0, 0.0]], np.float32)
    big = np.arange(1.0, 31.0, dtype=np.float32).reshape(3, 10)
    for make in (lambda lib: lib.sparse_csr_tensor(CROW, COL, VALS, (3, 3)),
                 lambda lib: lib.sparse_csr_tensor(CROW, COL, lib.tensor(VALS, dtype=lib.float64), (3, 3)),
                 lambda lib: lib.sparse_csr_tensor(CROW, COL, VALS, (3, 3), requires_grad=True),
                 lambda lib: lib.sparse_csr_tensor(lib.tensor(CROW, dtype=lib.int32),
                                                   lib.tensor(COL, dtype=lib.int32), [1, 2, 3, 4], (3, 3)),
                 lambda lib: lib.zeros(2, 3).to_sparse_csr(), lambda lib: lib.tensor(big).to_sparse_csr(),
                 lambda lib: lib.tensor(x, requires_grad=True).to_sparse_csr(),
                 lambda lib: lib.tensor(x).to_sparse().to_sparse_csr().to_sparse(),
                 lambda lib: lib.sparse_csr_tensor(CROW, COL, lib.tensor(VALS, requires_grad=True), (3, 3)) * 2):
        ours, theirs = repr(make(jg)), repr(make(torch))
        assert ours.replace(", device='gpu:0'", "") == theirs.replace("torch.", "jgrad."), theirs


_OPS = {  # what PyTorch runs on a CSR tensor (s), with a dense one (d) and a vector (x); lib: torch or jgrad
    "mul2": lambda lib, s, d, x: s * 2,
    "mul_dense": lambda lib, s, d, x: s * d, "add_s": lambda lib, s, d, x: s + s, "add_dense": lambda lib, s, d, x: s + d,
    "dense_add": lambda lib, s, d, x: d + s, "sum": lambda lib, s, d, x: s.sum(), "mul_": lambda lib, s, d, x: s.detach().mul_(3),
    "csr@csr": lambda lib, s, d, x: s @ s.sin(), "addmm": lambda lib, s, d, x: (d * 0).addmm(s.detach(), d, alpha=2),
    "add_other_pattern": lambda lib, s, d, x: s + lib.sparse_csr_tensor([0, 1, 1, 2], [1, 0], [5.0, 6.0], (3, 3)),
    # refused, as PyTorch refuses them
    "exp": lambda lib, s, d, x: s.exp(), "sub_dense": lambda lib, s, d, x: s - d, "add1": lambda lib, s, d, x: s + 1,
    "add_row": lambda lib, s, d, x: s + x, "softmax": lambda lib, s, d, x: s.softmax(1), "mean": lambda lib, s, d, x: s.mean(),
    "sum1": lambda lib, s, d, x: s.sum(1), "view": lambda lib, s, d, x: s.view(9), "reshape": lambda lib, s, d, x: s.reshape(9),
    "expand": lambda lib, s, d, x: s.expand(2, 3, 3), "numpy": lambda lib, s, d, x: s.numpy(),
    "tolist": lambda lib, s, d, x: s.tolist(), "item": lambda lib, s, d, x: s.item(), "indices": lambda lib, s, d, x: s.indices(),
    "coalesce": lambda lib, s, d, x: s.coalesce(), "shape_mm": lambda lib, s, d, x: s @ d[:2],
    "mv_shape": lambda lib, s, d, x: s @ x[:2], "csr@coo": lambda lib, s, d, x: s @ s.to_sparse(),
    "coo@csr": lambda lib, s, d, x: s.to_sparse() @ s, "to_sparse1": lambda lib, s, d, x: s.to_sparse(1),
    "sparse.sum": lambda lib, s, d, x: lib.sparse.sum(s),
    "strided_crow": lambda lib, s, d, x: d.crow_indices(), "strided_col": lambda lib, s, d, x: d.col_indices(),
    "hybrid_to_csr": lambda lib, s, d, x: d.to_sparse(1).to_sparse_csr(),
}
_BAD = {  # sparse_csr_tensor's invariants: (crow, col, values, size)
    "crow_step": ([0, 2, 1, 4], COL, VALS, (3, 3)), "crow0": ([1, 2, 2, 4], COL, VALS, (3, 3)),
    "crow_len": ([0, 2, 4], COL, VALS, (3, 3)), "col_range": (CROW, [0, 2, 1, 5], VALS, (3, 3)),
    "crow_last": ([0, 2, 2, 3], COL, VALS, (3, 3)), "nnz": (CROW, COL, VALS[:3], (3, 3)),
    "dims": (CROW, COL, VALS, (9,)), "unsorted": (CROW, [2, 0, 1, 2], VALS, (3, 3)),
    "repeated": (CROW, [0, 0, 1, 2], VALS, (3, 3)),
}


def _outcome(lib, fn):
    s = lib.sparse_csr_tensor(CROW, COL, lib.tensor(VALS, requires_grad=True), (3, 3))
    try:
        r = fn(lib, s, lib.tensor(DENSE) + 1, lib.ones(3))
    except Exception as e:  # noqa: BLE001
        # PyTorch names the overload (aten::_softmax.out) and the backend by device: compare up to those
        text = str(e).split("\n")[0].replace("SparseCsrCUDA", "SparseCsrCPU")
        return type(e), text.split("with arguments")[-1][:60] if "Could not run" in text else text
    if not isinstance(r, lib.Tensor):
        return r
    return str(r.layout).split(".")[-1], r.grad_fn and r.grad_fn.name(), np.asarray(r.to_dense().tolist())


@pytest.mark.one_execution_mode  # the sparse door is the dispatcher's, shared by both modes
def test_csr_ops_are_pytorchs_or_raise_its_errors():
    torch = _torch()
    for name, fn in _OPS.items():
        ours, theirs = _outcome(jg, fn), _outcome(torch, fn)
        if isinstance(theirs, tuple) and isinstance(theirs[0], type):
            assert ours == theirs, name
        elif isinstance(theirs, tuple):
            assert ours[:2] == theirs[:2], name
            np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-6, err_msg=name)
        else:
            assert ours == theirs, name
    for name, (crow, col, vals, size) in _BAD.items():
        with pytest.raises(RuntimeError) as theirs:
            torch.sparse_csr_tensor(crow, col, vals, size, check_invariants=True)
        with pytest.raises(RuntimeError) as ours:
            jg.sparse_csr_tensor(crow, col, vals, size)  # always checked: BCSR would read out of bounds
        assert str(ours.value) == str(theirs.value), name
    with pytest.raises(RuntimeError, match="must have the same dtype, bot got Int and Long"):
        jg.sparse_csr_tensor(jg.tensor(CROW, dtype=jg.int32), jg.tensor(COL), VALS)


@pytest.mark.one_execution_mode  # host-side patterns and one kernel family; the mode changes nothing
@SETTINGS
@given(st.integers(0, 2 ** 16), st.floats(0.0, 0.9))
def test_random_patterns_round_trip_and_multiply_as_numpy(seed, density):
    """For any sparsity pattern: dense -> CSR has NumPy's non-zeros in row-major order, COO -> CSR -> COO is the
    coalesced COO tensor, and CSR @ dense is the dense product."""
    rng = np.random.default_rng(seed)
    a = np.where(rng.random((4, 5)) < density, rng.standard_normal((4, 5)), 0).astype(np.float32)
    d = rng.standard_normal((5, 3)).astype(np.float32)
    s = jg.tensor(a).to_sparse_csr()
    rows, cols = np.nonzero(a)
    np.testing.assert_array_equal(s.crow_indices().numpy(), np.searchsorted(rows, np.arange(5)))
    np.testing.assert_array_equal(s.col_indices().numpy(), cols)
    np.testing.assert_array_equal(s.values().numpy(), a[rows, cols])
    np.testing.assert_array_equal(s.to_dense().numpy(), a)
    np.testing.assert_allclose((s @ jg.tensor(d)).numpy(), a @ d, rtol=1e-5, atol=1e-6)
    back = jg.tensor(a).to_sparse().to_sparse_csr().to_sparse()
    np.testing.assert_array_equal(back.indices().numpy(), np.stack([rows, cols]).reshape(2, -1))
    np.testing.assert_array_equal(back.values().numpy(), a[rows, cols])
