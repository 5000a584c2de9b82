"""Issue 30: COO sparse tensors as pytorch/examples' GAT uses them (dense-backed in jgrad), against PyTorch."""
import numpy as np
import pytest

import jgrad as jg

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


@pytest.mark.one_execution_mode
def test_sparse_coo_values_gradients_and_coalesce():
    idx = [[0, 1, 1, 0], [2, 0, 2, 2]]  # (0, 2) twice: uncoalesced
    vals = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    dense = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    res = []
    for lib in (jg, torch):
        v = lib.tensor(vals, requires_grad=True)
        d = lib.tensor(dense, requires_grad=True)
        sp = lib.sparse_coo_tensor(lib.tensor(idx), v, (2, 3))
        assert sp.is_sparse and not sp.is_coalesced() and sp._nnz() == 4
        with pytest.raises(RuntimeError, match="uncoalesced"):
            sp.indices()
        c = sp.coalesce()
        out = lib.sparse.mm(sp, d) * 1.5 + (sp @ d)
        out.sum().backward()
        res.append([c.indices().numpy(), c.values().detach().numpy(), sp.to_dense().detach().numpy(),
                    out.detach().numpy(), v.grad.numpy(), d.grad.numpy()])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b)
    hybrid = jg.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]).to_sparse(1)  # one sparse dim, one dense
    assert hybrid.sparse_dim() == 1 and hybrid.dense_dim() == 1 and hybrid.values().shape == (1, 2)
    with pytest.raises(RuntimeError, match="size is inconsistent with indices"):
        jg.sparse_coo_tensor([[0, 3]], [1.0, 2.0], (3,))
