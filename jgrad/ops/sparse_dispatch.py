"""Ops on COO sparse tensors: what ``jgrad.runtime._dispatch`` does when an op's input is a ``SparseCooTensor``.

The dispatcher sends an op whose input has no dense storage to ``SparseCooTensor._sparse_call``, which lands
here (``sparse_call``). What PyTorch computes on sparse tensors runs on the BCOO's parts:

- ``sparse @ dense``, ``dense @ sparse``, ``mm``, ``mv``, ``matmul``: ``bcoo_dot_general`` (a dense result;
  gradients to the dense side and to the values, ``jax.vjp`` of it), under PyTorch's node names;
- ``sparse @ sparse`` (2-D COO): a coalesced COO result on the structural pattern, found on the host
  (``spgemm_plan``: the pairs of entries that meet); the values are the pairs' products summed per entry;
- ``dense + sparse`` / ``dense - sparse``: a dense result (the sparse side's ``to_dense``, as PyTorch's);
  ``sparse + dense`` is PyTorch's error; ``sparse + sparse``: sparse, indices concatenated (uncoalesced);
- ``sparse * dense`` of one shape: sparse (the dense side gathered at the indices);
- an op of the values alone that keeps zeros zero (``s * 2``, ``-s``, ``s.sin()``, ``s.relu()``,
  ``s.double()``, ``s.clone()``): sparse, on the same indices. It is tested by running the op on a 0-d zero;
  an op that maps 0 elsewhere (``exp``, ``s + 1``) or is not elementwise (``softmax``) is refused;
- ``sum()``: the values' sum (dense 0-d); ``sum(dim)``: sparse over the remaining sparse dims.

Everything else raises PyTorch's ``NotImplementedError``: "Could not run 'aten::exp' with arguments from the
'SparseCPU' backend. ...". Nothing is densified behind the user's back.

Imports ``_dispatch``, ``_dtype``, ``_tensor``, ``ops.sparse_coo``, ``ops.creation``, ``ops.conversion``, ``ops.linalg``, ``ops.pointwise``, ``ops.reduction``
and ``ops.shape``.
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

from ..core import _dtype
from ..runtime._dispatch import Op, _x64, call
from ..core._tensor import Tensor
from .conversion import CAST, TRANSFER, _transfer
from .linalg import BMM, LINEAR, LINEAR_NOBIAS, MATMUL_ND, MATMUL_OPS
from .pointwise import ADD, ADD_ALPHA, MUL, SUB
from .reduction import SUM, SUM_DIM
from .creation import tensor
from .sparse_coo import _sparse_ops, _GATHER, SparseCooTensor, _bcoo, _coalesced, _from_parts, _not_implemented

__all__ = ["sparse_call", "sparse_mm", "spgemm_plan"]

_MATMULS = set(MATMUL_OPS.values()) | {MATMUL_ND, BMM, LINEAR, LINEAR_NOBIAS}


def _sp_dense(v, i, d, *, shape):
    return jsparse.bcoo_dot_general(_bcoo(v, i, shape), d, dimension_numbers=(([1], [0]), ([], [])),
                                    precision=jax.lax.Precision.HIGHEST)


def _dense_sp(d, v, i, *, shape):
    return jsparse.bcoo_dot_general(d, _bcoo(v, i, shape), dimension_numbers=(([d.ndim - 1], [0]), ([], [])),
                                    precision=jax.lax.Precision.HIGHEST)


def _sp_dense_bwd(ctx, g):
    """d(S @ D): to D, S^T @ g (``bcoo_dot_general`` over S's rows); to the values, (g @ D^T) at the indices."""
    v, i, d = ctx.saved
    need_v, _, need_d = ctx.needs_input_grad
    gd = jsparse.bcoo_dot_general(_bcoo(v, i, ctx.attrs["shape"]), g, dimension_numbers=(([0], [0]), ([], [])),
                                  precision=jax.lax.Precision.HIGHEST) if need_d else None
    gv = None
    if need_v:
        gv = g[i[0]] * d[i[1]]
        gv = gv.sum(-1) if d.ndim == 2 else gv
    return gv, None, gd


def _dense_sp_bwd(ctx, g):
    """d(D @ S): to D, g @ S^T; to the values, (D^T @ g) at the indices."""
    d, v, i = ctx.saved
    need_d, need_v, _ = ctx.needs_input_grad
    gd = jsparse.bcoo_dot_general(g, _bcoo(v, i, ctx.attrs["shape"]),
                                  dimension_numbers=(([g.ndim - 1], [1]), ([], [])),
                                  precision=jax.lax.Precision.HIGHEST) if need_d else None
    gv = None
    if need_v:
        gv = d[..., i[0]] * g[..., i[1]]
        gv = gv.sum(0) if d.ndim == 2 else gv
    return gd, gv, None


# Gradient formulas rather than jax.vjp of the BCOO functions: the same numbers, a fraction of the compile time
_SP_DENSE = {n: Op(n, _sp_dense, _sp_dense_bwd, save=(0, 1, 2), edge_args=(0, 2))
             for n in ("MmBackward0", "MvBackward0", "SparseAddmmBackward0")}
_DENSE_SP = Op("MmBackward0", _dense_sp, _dense_sp_bwd, save=(0, 1, 2), edge_args=(0, 1))
for _op in _SP_DENSE.values():  # one function under three node names: one set of compiled kernels
    _op._kernels, _op._bwd_kernels = _SP_DENSE["MmBackward0"]._kernels, _SP_DENSE["MmBackward0"]._bwd_kernels


def _aten(op):
    """PyTorch's operator name for a jgrad op (its backward-node name without ``Backward<n>``)."""
    base = re.sub(r"Backward\d*$", "", op.name)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()


def sparse_call(op, args, attrs, inplace):
    """Run ``op`` on ``args``, some of them sparse (see the module docstring)."""
    first = next(a for a in args if isinstance(a, SparseCooTensor))
    if inplace is not None:
        return _inplace(op, args, attrs, inplace, first)
    if op in _MATMULS:
        return _matmul(op, args)
    if op in (ADD, SUB, ADD_ALPHA):
        return _add(op, args, attrs)
    if op is MUL and all(isinstance(a, Tensor) and a.ndim > 0 for a in args):
        return _mul_dense(args, first)
    if op is SUM or op is SUM_DIM:
        return _sum(op, first, attrs)
    if op is TRANSFER:  # to another device: both parts move
        dev = attrs["device"]
        return _from_parts(_transfer(first._sp_values, dev), first._sp_idx, first.shape, first._sp_coalesced,
                           _transfer(first._sp_idx_t, dev))
    if op is CAST:  # a cast keeps zeros zero (bool included)
        vals = call(op, first._sp_values, *args[1:], **attrs)
        return _from_parts(vals, first._sp_idx, first.shape, first._sp_coalesced, first._sp_idx_t)
    out = _on_values(op, args, attrs, first)
    if out is None:
        raise NotImplementedError(_not_implemented(_aten(op), first))
    return out


def _matmul(op, args):
    a, b = args[0], args[1]
    sa, sb = isinstance(a, SparseCooTensor), isinstance(b, SparseCooTensor)
    if sa and sb and a.ndim == 2 and b.ndim == 2 and op in (MATMUL_OPS[(2, 2)], MATMUL_ND):
        return _sparse_sparse(_SP_SP["MmBackward0"], a, b)
    other = b if sa else a
    if not isinstance(other, SparseCooTensor) and getattr(other, "_sparse_call", None) is not None:
        raise RuntimeError(_mixed_layouts(a, b))  # COO with another sparse layout (CSR: ops.sparse_csr)
    if sa and not sb and a.ndim == 2 and a.dense_dim() == 0 and b.ndim in (1, 2) and op is not LINEAR_NOBIAS:
        return call(_SP_DENSE["MvBackward0" if b.ndim == 1 else "MmBackward0"], a._sp_values, a._sp_idx_t, b,
                    shape=tuple(a.shape))
    if sb and not sa and b.ndim == 2 and b.dense_dim() == 0 and a.ndim in (1, 2) and op is not LINEAR_NOBIAS:
        return call(_DENSE_SP, a, b._sp_values, b._sp_idx_t, shape=tuple(b.shape))
    raise NotImplementedError(_not_implemented(_aten(op), a if sa else b))


def sparse_mm(mat1, mat2):
    """``torch.sparse.mm`` of a sparse ``mat1`` and a dense ``mat2``: ``SparseAddmmBackward0``; of two COO
    matrices: ``SparseSparseMatmulBackward0`` (a COO result)."""
    if isinstance(mat1, SparseCooTensor) and isinstance(mat2, SparseCooTensor) and mat1.ndim == mat2.ndim == 2:
        return _sparse_sparse(_SP_SP["SparseSparseMatmulBackward0"], mat1, mat2)
    if isinstance(mat1, SparseCooTensor) and not isinstance(mat2, SparseCooTensor) and mat1.dense_dim() == 0 \
            and mat2.ndim == 2:
        if mat1.shape[1] != mat2.shape[0]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
                               f"{mat2.shape[0]}x{mat2.shape[1]})")
        if mat1.dtype is not mat2.dtype:
            raise RuntimeError(f"expected scalar type {_scalar_name(mat1.dtype)} but found {_scalar_name(mat2.dtype)}")
        return call(_SP_DENSE["SparseAddmmBackward0"], mat1._sp_values, mat1._sp_idx_t, mat2, shape=tuple(mat1.shape))
    return mat1 @ mat2


def _spsp(va, vb, pa, pb, slot, *, n):
    return jax.ops.segment_sum(va[pa] * vb[pb], slot, num_segments=n)


def _spsp_bwd(ctx, g):
    """d(A @ B) to A's values: each product's g times its B value, summed into its A entry (and the same to B)."""
    va, vb, pa, pb, slot = ctx.saved
    need_a, need_b = ctx.needs_input_grad[:2]
    gs = g[slot]
    return (jnp.zeros_like(va).at[pa].add(gs * vb[pb]) if need_a else None,
            jnp.zeros_like(vb).at[pb].add(gs * va[pa]) if need_b else None, None, None, None)


_SP_SP = {n: Op(n, _spsp, _spsp_bwd, save=(0, 1, 2, 3, 4), edge_args=(0, 1))
          for n in ("MmBackward0", "SparseSparseMatmulBackward0")}
_SP_SP["SparseSparseMatmulBackward0"]._kernels = _SP_SP["MmBackward0"]._kernels
_SP_SP["SparseSparseMatmulBackward0"]._bwd_kernels = _SP_SP["MmBackward0"]._bwd_kernels


def spgemm_plan(ia, ib, n):
    """Which entries of A (indices ``ia``, 2 x nnz_a) meet which of B (``ib``) in A @ B (B with ``n`` columns):
    the pairs (``pa``, ``pb``), each pair's output entry ``slot``, and the output's sorted indices (2 x nnz).
    The output's pattern is structural (a sum that cancels stays an entry), as PyTorch's."""
    order = np.argsort(ib[0], kind="stable")
    rows_b = ib[0][order]
    start, end = np.searchsorted(rows_b, ia[1], "left"), np.searchsorted(rows_b, ia[1], "right")
    cnt = end - start
    pa = np.repeat(np.arange(ia.shape[1]), cnt)
    offsets = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    pb = order[np.repeat(start, cnt) + offsets]
    lin = ia[0][pa] * n + ib[1][pb]
    uniq, slot = np.unique(lin, return_inverse=True)
    return pa, pb, slot.reshape(-1), np.stack([uniq // n, uniq % n]).astype(np.int64).reshape(2, -1)


def _sparse_sparse(op, a, b):
    """COO @ COO: a coalesced COO result. The pattern is found on the host (nnz is data); the values are one
    gather, product and segment sum over the pairs that meet (``bcoo_spdot_general`` would materialize all
    nnz_a * nnz_b pairs)."""
    if a.dense_dim() or b.dense_dim():
        raise RuntimeError(f"sparse_sparse_matmul_cpu: scalar values expected, got {max(a.dense_dim(), b.dense_dim())}"
                           f"D values")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
                           f"{b.shape[0]}x{b.shape[1]})")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"mat1 dtype {_scalar_name(a.dtype)} does not match mat2 dtype {_scalar_name(b.dtype)}")
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        raise NotImplementedError(f'"sparse_matmul" not implemented for \'{_scalar_name(a.dtype)}\'')
    pa, pb, slot, idx = spgemm_plan(a._sp_idx, b._sp_idx, int(b.shape[1]))
    dev = a._sp_values.device
    vals = call(op, a._sp_values, b._sp_values, tensor(pa, device=dev), tensor(pb, device=dev),
                tensor(slot, device=dev), n=int(idx.shape[1]))
    return _from_parts(vals, idx, (a.shape[0], b.shape[1]), True)


_scalar_name = _dtype.scalar_name  # PyTorch's scalar-type names ("Float", "Long")


def _mixed_layouts(a, b):
    name = {"sparse_coo": "Sparse", "sparse_csr": "SparseCsr"}
    la, lb = (name.get(t.layout.name, "Strided") for t in (a, b))
    return f"addmm: computation on CPU is not implemented for {la} + {la} @ {lb}"


def _add(op, args, attrs):
    a, b = args[0], args[1]
    sa, sb = isinstance(a, SparseCooTensor), isinstance(b, SparseCooTensor)
    if sb and not sa:  # dense + sparse: dense, as PyTorch's
        return call(op, a, b.to_dense(), *args[2:], **attrs)
    if sa and not sb:
        raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")
    if tuple(a.shape) != tuple(b.shape):
        raise RuntimeError(f"add: expected 'self' and 'other' to have same size, but self has size {list(a.shape)} "
                           f"while other has size {list(b.shape)} (FYI: dense-sparse addition does not currently "
                           f"support broadcasting)")
    if a.sparse_dim() != b.sparse_dim():
        raise RuntimeError(f"add: expected 'self' and 'other' to have same sparse dimensions, but got "
                           f"{a.sparse_dim()} and {b.sparse_dim()}")
    from .shape import cat
    vb = b._sp_values if op is ADD else (-b._sp_values if op is SUB else b._sp_values * args[2])
    va = a._sp_values
    if va.dtype is not vb.dtype:  # PyTorch's promotion of the two operands (an empty sum gives the dtype)
        dt = (va[:0].sum() + vb[:0].sum()).dtype
        va, vb = va.to(dt), vb.to(dt)
    idx = np.concatenate([a._sp_idx, b._sp_idx], axis=1)
    return _from_parts(cat([va, vb]), idx, a.shape, False)


def _mul_dense(args, first):
    a, b = args
    if isinstance(a, SparseCooTensor) and isinstance(b, SparseCooTensor):
        raise NotImplementedError(_not_implemented("mul", first))
    sp, dense = (a, b) if isinstance(a, SparseCooTensor) else (b, a)
    if tuple(dense.shape) != tuple(sp.shape):
        raise RuntimeError(f"mul(sparse, dense) needs operands of one shape in jgrad, got {list(sp.shape)} and "
                           f"{list(dense.shape)}")
    picked = call(_GATHER, dense, sp._sp_idx_t)
    vals = sp._sp_values * picked if sp is a else picked * sp._sp_values
    return _from_parts(vals, sp._sp_idx, sp.shape, sp._sp_coalesced, sp._sp_idx_t)


def _sum(op, s, attrs):
    """``s.sum()``: dense 0-d; ``s.sum(dim)``: the named dims summed (sparse while sparse dims remain)."""
    from .reduction import sum as dense_sum
    dt = attrs.get("dtype")
    v = s._sp_values if dt is None else s._sp_values.to(_dtype.from_np(jnp.dtype(dt)))
    dims = attrs.get("dim")
    if op is SUM or dims is None or len(dims) == s.ndim:
        return dense_sum(v)
    if attrs.get("keepdim"):
        raise RuntimeError("sum: keepdim=True is not supported for sparse tensors")
    sdim = s.sparse_dim()
    dense_dims = tuple(1 + d - sdim for d in dims if d >= sdim)
    if dense_dims:
        v = dense_sum(v, dense_dims)
    keep = [d for d in range(sdim) if d not in dims]
    shape = tuple(n for d, n in enumerate(s.shape) if d not in dims)
    if not keep:
        return dense_sum(v, 0)
    return _coalesced(v, s._sp_idx[keep], shape)


def _on_values(op, args, attrs, first):
    """``op`` on the values when it is elementwise and keeps zero zero (else None)."""
    if sum(isinstance(a, SparseCooTensor) for a in args) != 1 or any(
            isinstance(a, Tensor) and not isinstance(a, SparseCooTensor) and a.ndim > 0 for a in args):
        return None
    if not _keeps_zero(op, args, attrs, first):
        return None
    vals = call(op, *(first._sp_values if a is first else a for a in args), **attrs)
    if tuple(vals.shape) != tuple(first._sp_values.shape):
        return None
    same = vals._device is first._sp_values._device
    return _from_parts(vals, first._sp_idx, first.shape, first._sp_coalesced, first._sp_idx_t if same else None)


_KEEPS_ZERO: dict = {}  # (op, attrs, dtype, the other arguments) -> bool, when those are Python scalars


def _keeps_zero(op, args, attrs, first):
    """Whether ``op`` maps a zero of ``first``'s dtype to zero (run on a 0-d zero; a host read, cached)."""
    key = tuple(attrs.items())
    others = tuple((type(a), a) for a in args if a is not first)
    cache_key = (op, key, first.dtype, others) if not any(isinstance(a, Tensor) for _, a in others) else None
    try:
        known = _KEEPS_ZERO.get(cache_key) if cache_key is not None else None
    except TypeError:  # an unhashable argument: decided afresh each time
        known = cache_key = None
    if known is not None:
        return known
    kernel = op._kernels.get(key) or op.kernel(key, attrs)
    probe = [jnp.zeros((), first.dtype.np) if a is first else (a._value if isinstance(a, Tensor) else a)
             for a in args]
    try:
        with _x64():
            at_zero = kernel(*probe)
        keeps = not (isinstance(at_zero, tuple) or at_zero.shape != () or at_zero.dtype == jnp.bool_
                     or bool(at_zero != 0))
    except Exception:  # noqa: BLE001  (an op that needs dims a 0-d zero lacks: not elementwise)
        keeps = False
    if cache_key is not None:
        _KEEPS_ZERO[cache_key] = keeps
    return keeps


def _inplace(op, args, attrs, target, first, on_values=None, not_implemented=None):
    """``s.mul_(2)``, ``s.neg_()``...: an op of the values that keeps zeros zero, written into ``s`` (a layout
    passes its own ``on_values`` and ``not_implemented``; COO's by default)."""
    out = (on_values or _on_values)(op, args, attrs, first) if target is first else None
    if out is None:
        raise NotImplementedError((not_implemented or _not_implemented)(_aten(op) + "_", first))
    v = out._sp_values
    if v.dtype is not target.dtype:
        raise RuntimeError(f"result type {v.dtype} can't be cast to the desired output type {target.dtype}")
    target._sp_values = v
    target._grad_fn, target._output_nr, target._req = v._grad_fn, v._output_nr, v._req
    target._vc[0] += 1
    return target


_sparse_ops.update(call=sparse_call, aten=_aten)  # the tensor class's door reaches this module
