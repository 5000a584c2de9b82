"""Issue 30: COO sparse tensors on ``jax.experimental.sparse`` (BCOO) as pytorch/examples' GAT uses them and as
PyTorch defines them: storage, accessors, printing, sparse @ dense and sparse @ sparse with gradients (against
PyTorch and jax.grad), the ops PyTorch keeps sparse and PyTorch's errors for the others."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.experimental import sparse as jsparse

import jgrad as jg
from _op_helpers import SETTINGS

torch = pytest.importorskip("torch")


def _load_like_gat(lib, feats, edges):
    """The GAT example's ``load_cora`` steps on a small graph, with only the framework changed."""
    features = lib.tensor(feats)
    scale_vector = 1 / lib.sum(features, dim=1)
    scale_vector[scale_vector == float('inf')] = 0
    scale_vector = lib.diag(scale_vector).to_sparse()
    features = scale_vector @ features
    V, E = feats.shape[0], edges.shape[0]
    adj_mat = lib.sparse_coo_tensor(edges.T, lib.ones(E), (V, V), dtype=lib.int64)
    adj_mat = lib.eye(V) + adj_mat
    return scale_vector, features, adj_mat, adj_mat > 0


@pytest.mark.one_execution_mode
def test_sparse_coo_as_the_gat_example_uses_it():
    rng = np.random.default_rng(0)
    feats = (rng.random((5, 4)) > 0.5).astype(np.float32)
    feats[2] = 0  # a node without features: its scale is inf, set to 0
    edges = np.array([[0, 1], [1, 2], [3, 4], [1, 2], [4, 0]], np.int32)
    theirs, ours = _load_like_gat(torch, feats, edges), _load_like_gat(jg, feats, edges)
    assert ours[0].is_sparse and ours[0].layout == jg.sparse_coo and repr(jg.sparse_coo) == "jgrad.sparse_coo"
    assert ours[0]._nnz() == theirs[0]._nnz() and ours[0].is_coalesced()
    np.testing.assert_array_equal(ours[0].indices().numpy(), theirs[0].indices().numpy())
    np.testing.assert_array_equal(ours[0].values().numpy(), theirs[0].values().numpy())
    for a, b in zip(ours[1:], theirs[1:]):
        assert not a.is_sparse and a.layout == jg.strided and str(a.dtype)[6:] == str(b.dtype)[6:]
        np.testing.assert_allclose(a.numpy(), b.numpy())


def _dense_equivalent(idx, vals, dense, wide, w1):
    """The sparse program below on a dense matrix, for jax.grad."""
    S = jnp.zeros((2, 3)).at[tuple(np.asarray(idx))].add(vals)
    return ((S @ dense + S @ dense) * w1).sum() + ((wide @ S) * wide[:, :1]).sum()


def _sparse_program(lib, idx, vals, base, wide, w1):
    v, b = lib.tensor(vals, requires_grad=True), lib.tensor(base, requires_grad=True)
    d = b[:, :4]  # a view: its gradient reaches the base
    sp = lib.sparse_coo_tensor(lib.tensor(idx), v, (2, 3))
    assert sp.requires_grad and sp.grad_fn.name() == "SparseCooTensorWithDimsAndTensorsBackward0"
    mm, prod = lib.sparse.mm(sp, d), sp @ d
    out = ((mm + prod) * lib.tensor(w1)).sum() + ((lib.tensor(wide) @ sp) * lib.tensor(wide[:, :1])).sum()
    out.backward()
    return [out.item(), v.grad.numpy(), b.grad.numpy()], (mm.grad_fn.name(), prod.grad_fn.name())


@pytest.mark.one_execution_mode  # runs the jgrad side in both modes itself, sharing their kernels
def test_sparse_matmul_gradients_against_torch_and_jax_grad():
    """sparse.mm, sparse @ dense and dense @ sparse run bcoo_dot_general; the gradients reach the dense side
    (through a view of it too) and the values."""
    idx = [[0, 1, 1, 0], [2, 0, 2, 2]]  # (0, 2) twice: uncoalesced
    vals = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    base = np.arange(15.0, dtype=np.float32).reshape(3, 5) / 10
    wide = np.linspace(-1, 1, 10, dtype=np.float32).reshape(5, 2)
    w1 = np.linspace(0.5, 2, 8, dtype=np.float32).reshape(2, 4)
    theirs, names = _sparse_program(torch, idx, vals, base, wide, w1)
    assert names == ("SparseAddmmBackward0", "MmBackward0")
    expected = jax.jit(jax.grad(lambda v, b: _dense_equivalent(idx, v, b[:, :4], wide, w1), (0, 1)))(vals, base)
    for mode in ("eager", "auto"):
        with jg.execution_mode(mode):
            ours, our_names = _sparse_program(jg, idx, vals, base, wide, w1)
        assert our_names == names
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-5)
        for a, b in zip(ours[1:], expected):
            np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.one_execution_mode
def test_sparse_storage_is_a_bcoo_and_prints_as_pytorchs():
    idx, vals = [[0, 1, 1, 0], [2, 0, 2, 2]], [1.0, 2.0, 3.0, 4.0]
    sp = jg.sparse_coo_tensor(idx, vals, (2, 3))
    b = sp._bcoo
    assert isinstance(b, jsparse.BCOO) and sp._data is None and b.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(b.indices), np.asarray(idx).T)
    np.testing.assert_array_equal(np.asarray(b.todense()), torch.sparse_coo_tensor(idx, vals, (2, 3)).to_dense())
    assert not sp.is_coalesced() and sp._nnz() == 4 and sp.sparse_dim() == 2 and sp.dense_dim() == 0
    with pytest.raises(RuntimeError, match="uncoalesced"):
        sp.indices()
    hybrid = jg.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]).to_sparse(1)  # one sparse dim, one dense
    assert hybrid.sparse_dim() == 1 and hybrid.dense_dim() == 1 and hybrid.values().shape == (1, 2)
    leaf_t = torch.sparse_coo_tensor(idx, vals, (2, 3), requires_grad=True)
    leaf = jg.sparse_coo_tensor(idx, vals, (2, 3), requires_grad=True)
    for lib, s in ((torch, leaf_t), (jg, leaf)):
        lib.sparse.mm(s, lib.ones(3, 2)).sum().backward()  # a sparse leaf's gradient: sparse, coalesced
    x = np.array([[0.0, 2.0], [3.0, 0.0]], np.float32)
    t_sp = torch.sparse_coo_tensor(idx, vals, (2, 3))
    pairs = [(sp, t_sp), (sp.coalesce(), t_sp.coalesce()), (sp.double(), t_sp.double()), (sp.bool(), t_sp.bool()),
             (leaf, leaf_t), (leaf.grad, leaf_t.grad),
             (jg.sparse_coo_tensor(jg.zeros(2, 0, dtype=jg.int64), jg.zeros(0), (2, 3)),
              torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.int64), torch.zeros(0), (2, 3))),
             (hybrid, torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]).to_sparse(1)),
             (jg.tensor(x, requires_grad=True).to_sparse(), torch.tensor(x, requires_grad=True).to_sparse())]
    for ours, theirs in pairs:
        # torch's are CPU tensors; in the GPU test mode jgrad's repr also names its device
        assert repr(ours).replace(", device='gpu:0'", "") == repr(theirs).replace("torch.", "jgrad.")
    with pytest.raises(RuntimeError, match="size is inconsistent with indices"):
        jg.sparse_coo_tensor([[0, 3]], [1.0, 2.0], (3,))
    for name in ("coalesce", "indices", "values", "_nnz", "is_coalesced", "_indices", "sparse_dim", "dense_dim"):
        ours, theirs = _outcome_of(lambda: getattr(jg.ones(2, 3), name)()), \
            _outcome_of(lambda: getattr(torch.ones(2, 3), name)())  # a strided tensor's answers
        assert ours == theirs, name


def _outcome_of(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e).replace("'CUDA' backend", "'CPU' backend")[:70]  # torch here runs on the CPU


_OPS = {
    "sin": lambda s, d, m: s.sin(), "mul2": lambda s, d, m: s * 2, "mul_dense": lambda s, d, m: s * d,
    "add_s": lambda s, d, m: s + s, "dense_sub": lambda s, d, m: d - s, "t": lambda s, d, m: s.t(),
    "unsqueeze": lambda s, d, m: s.unsqueeze(0), "mul_": lambda s, d, m: s.clone().mul_(3),
    "sum": lambda s, d, m: s.sum(), "sum1": lambda s, d, m: s.sum(1), "matvec": lambda s, d, m: s @ m[:, 0],
    "select": lambda s, d, m: s[1], "to_sparse_coo": lambda s, d, m: d.to_sparse_coo(),
    "vecmat": lambda s, d, m: d[:, 0] @ s,
    # refused, as PyTorch refuses them
    "exp": lambda s, d, m: s.exp(), "view": lambda s, d, m: s.view(6), "flatten": lambda s, d, m: s.flatten(),
    "add_dense": lambda s, d, m: s + d, "softmax": lambda s, d, m: s.softmax(1), "numpy": lambda s, d, m: s.numpy(),
    "tolist": lambda s, d, m: s.tolist(), "item": lambda s, d, m: s.item(), "expand": lambda s, d, m: s.expand(2, 2, 3),
}


def _outcome(lib, fn):
    s = lib.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [1.0, 2.0, 3.0], (2, 3))
    try:
        r = fn(s, lib.ones(2, 3) * 2, lib.ones(3, 4))
    except Exception as e:  # noqa: BLE001
        # PyTorch's dispatcher names the overload (aten::mean.dim, aten::_softmax): compare up to the name
        # PyTorch names the backend by device ('SparseCUDA' on a GPU); the reference here is torch on the CPU
        return type(e), str(e).split("\n")[0].split("with arguments")[-1].replace("SparseCUDA", "SparseCPU")[:60]
    return r.layout == (torch.sparse_coo if lib is torch else jg.sparse_coo), np.asarray(r.to_dense().tolist())


@pytest.mark.one_execution_mode  # the sparse door is the dispatcher's, shared by both modes
def test_sparse_ops_are_pytorchs_or_raise_its_errors():
    for name, fn in _OPS.items():
        ours, theirs = _outcome(jg, fn), _outcome(torch, fn)
        if isinstance(theirs[0], type):
            assert ours[0] is theirs[0] and ours[1] == theirs[1], name
        else:
            assert ours[0] == theirs[0], name
            np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6, err_msg=name)


def _spsp_program(lib, va, vb, w):
    """sparse @ sparse four ways (PyTorch's node names), the values' gradients through the sparse result."""
    va, vb = lib.tensor(va, requires_grad=True), lib.tensor(vb, requires_grad=True)
    a = lib.sparse_coo_tensor([[0, 1, 1, 0], [2, 0, 2, 2]], va, (2, 3))  # (0, 2) twice: uncoalesced
    b = lib.sparse_coo_tensor([[0, 2, 2, 1], [1, 0, 1, 1]], vb, (3, 2))
    outs = [lib.sparse.mm(a, b), lib.mm(a, b), lib.matmul(a, b), a @ b]
    (outs[0].to_dense() * lib.tensor(w)).sum().backward()
    return ([(r.grad_fn.name(), r.is_coalesced(), r._nnz(), r.indices().tolist(), r.values().tolist()) for r in outs],
            va.grad.numpy(), vb.grad.numpy())


@pytest.mark.one_execution_mode  # host-side pattern plus one kernel family: the mode changes nothing here
def test_sparse_sparse_matmul_against_torch_and_jax_grad():
    """COO @ COO is a coalesced COO result on the structural pattern (PyTorch's indices, nnz and values); the
    gradients reach both operands' values."""
    va, vb = np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.array([5.0, 6.0, 7.0, 8.0], np.float32)
    w = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    ours, theirs = _spsp_program(jg, va, vb, w), _spsp_program(torch, va, vb, w)
    assert ours[0] == theirs[0]
    dense = jax.jit(jax.grad(lambda a, b: ((jnp.zeros((2, 3)).at[(0, 1, 1, 0), (2, 0, 2, 2)].add(a)
                                    @ jnp.zeros((3, 2)).at[(0, 2, 2, 1), (1, 0, 1, 1)].add(b)) * w).sum(), (0, 1)))
    for mine, torch_grad, ref in zip(ours[1:], theirs[1:], dense(va, vb)):
        np.testing.assert_allclose(mine, torch_grad, rtol=1e-6)
        np.testing.assert_allclose(mine, ref, rtol=1e-6)
    cancel = [lib.sparse.mm(lib.sparse_coo_tensor([[0, 0], [0, 1]], [1.0, 1.0], (2, 2)),
                            lib.sparse_coo_tensor([[0, 1], [0, 0]], [1.0, -1.0], (2, 2))) for lib in (jg, torch)]
    assert repr(cancel[0]) == repr(cancel[1]).replace("torch.", "jgrad.")  # a sum that cancels stays an entry
    leaf_t = torch.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [1.0, 2.0, 3.0], (2, 3), requires_grad=True)
    leaf = jg.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [1.0, 2.0, 3.0], (2, 3), requires_grad=True)
    for lib, s in ((torch, leaf_t), (jg, leaf)):  # sparse.mm's leaf gradient: its values on its pattern
        other = lib.sparse_coo_tensor([[0, 2], [1, 0]], [5.0, 6.0], (3, 2))
        (lib.sparse.mm(s, other).to_dense() * lib.tensor(w)).sum().backward()
    np.testing.assert_array_equal(leaf.grad.to_dense().numpy(), leaf_t.grad.to_dense().numpy())
    for bad in (lambda lib, s: lib.sparse.mm(s, lib.sparse_coo_tensor([[0], [0]], [1.0], (2, 2))),
                lambda lib, s: s @ lib.sparse_coo_tensor([[0], [0]], [1.0], (3, 2)).double(),
                lambda lib, s: s @ lib.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]).to_sparse(1),
                lambda lib, s: lib.sparse.mm(s.long(), lib.sparse_coo_tensor([[0], [0]], [1], (3, 2)))):
        ours, theirs = (_outcome_of(lambda: bad(lib, lib.sparse_coo_tensor([[0], [0]], [1.0], (2, 3))))
                        for lib in (jg, torch))
        assert ours == theirs


@pytest.mark.one_execution_mode
@SETTINGS
@given(st.integers(0, 2 ** 16), st.floats(0.1, 0.9), st.floats(0.1, 0.9))
def test_sparse_sparse_matmul_on_random_patterns_is_numpys(seed, density_a, density_b):
    """For any two patterns: the product's indices are the structural non-zeros (sorted row-major), its values
    NumPy's product there."""
    rng = np.random.default_rng(seed)
    a = np.where(rng.random((3, 4)) < density_a, rng.standard_normal((3, 4)), 0).astype(np.float32)
    b = np.where(rng.random((4, 3)) < density_b, rng.standard_normal((4, 3)), 0).astype(np.float32)
    r = jg.sparse.mm(jg.tensor(a).to_sparse(), jg.tensor(b).to_sparse())
    pattern = np.stack(np.nonzero((a != 0).astype(int) @ (b != 0).astype(int)))
    assert r.is_coalesced() and r.layout == jg.sparse_coo
    np.testing.assert_array_equal(r.indices().numpy(), pattern.reshape(2, -1))
    np.testing.assert_allclose(r.values().numpy(), (a @ b)[tuple(pattern)], rtol=1e-5, atol=1e-6)
