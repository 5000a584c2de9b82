"""``scaled_dot_product_attention``, backed by ``jax.nn.dot_product_attention``.

On a GPU, float16/bfloat16 attention without an ``attn_mask`` asks JAX for cuDNN's fused (flash)
kernel (``implementation="cudnn"``, forward and backward); where cuDNN refuses the call (head size,
cuDNN version: JAX checks while tracing) it uses XLA's attention, as every other call does
(``use_cudnn = False`` turns the cuDNN attempt off). Attention dropout (``dropout_p > 0``), a value
head size other than the query's and float64 use the explicit formula, in one XLA kernel too.
The layout is PyTorch's: ``(N, ..., L, E)`` for the query, ``(N, ..., S, E)`` for the key and
``(N, ..., S, Ev)`` for the value; the heads are dim -3. The gradient comes from ``jax.vjp``.

Imports ``_dispatch``, ``_tensor``, ``ops.linalg`` and ``ops.random_ops``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from . import linalg
from .random_ops import _key, _key_tensor

# jgrad's float32 matmul precision -> jax's name for it (the attention's dots are traced under it)
_JAX_PRECISION = {"highest": "highest", "high": "high", "medium": "default"}
#: Ask JAX for cuDNN's fused attention on GPUs (half precision); False: XLA's attention everywhere.
use_cudnn = True


def _jax_attention(q, k, v, bias, keep, causal, scale, fused):
    """``jax.nn.dot_product_attention`` in (B, T, N, H) layout: cuDNN when ``fused`` (no mask but the causal
    flag) and cuDNN accepts the call, else XLA."""
    if fused and bias is None and keep is None:
        try:
            return jax.nn.dot_product_attention(q, k, v, bias, keep, scale=scale, is_causal=causal,
                                                implementation="cudnn")
        except (NotImplementedError, ValueError, RuntimeError, TypeError):
            pass  # cuDNN refused this call (JAX checks at trace time): XLA's attention
    return jax.nn.dot_product_attention(q, k, v, bias, keep, scale=scale, is_causal=causal)


def _lead_shape(q, k, v, gqa):
    """The broadcast leading (batch) shape; with ``gqa`` the heads (dim -3) are left out of it."""
    skip = 3 if gqa else 2
    return jnp.broadcast_shapes(q.shape[:-skip], k.shape[:-skip], v.shape[:-skip])


def _to_bhld(x, lead, heads):
    """``x`` (..., [H,] L, D) as (B, H, L, D), its leading dims broadcast to ``lead`` and flattened into B."""
    if heads is None:  # no separate heads dim: the whole leading shape is the batch
        x = jnp.broadcast_to(x, lead + x.shape[-2:])
        return x.reshape((-1, 1) + x.shape[-2:])
    x = jnp.broadcast_to(x, lead + x.shape[-3:])
    return x.reshape((-1,) + x.shape[-3:])


def _sdpa_fwd(q, k, v, mask, key, *, dropout_p, is_causal, scale, gqa, precision, fused=False):
    L, S, E, Ev = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    lead = _lead_shape(q, k, v, gqa)
    heads = q.shape[-3] if gqa else None
    out_lead = lead + ((heads,) if gqa else ())
    kv_heads = k.shape[-3] if gqa else None
    qb, kb, vb = _to_bhld(q, lead, heads), _to_bhld(k, lead, kv_heads), _to_bhld(v, lead, kv_heads)
    B, Hq = qb.shape[0], qb.shape[1]
    bias = keep = None
    if mask is not None:
        m = jnp.broadcast_to(mask, out_lead + (L, S)).reshape((B, -1, L, S))
        if m.dtype == jnp.bool_:
            keep = m
        else:  # an additive float mask: its -inf entries are masked out (no NaN from exp(-inf - -inf))
            keep = m > -jnp.inf
            bias = jnp.where(keep, m, 0).astype(q.dtype)
    user_keep = keep
    # PyTorch's causal mask is top-left aligned (query i sees keys j <= i), which jax's is_causal
    # gives for L == S; other shapes get the mask spelled out.
    causal_flag = is_causal and L == S
    if is_causal and not causal_flag:
        causal = jnp.tril(jnp.ones((L, S), jnp.bool_))
        keep = causal[None, None] if keep is None else keep & causal
    with jax.default_matmul_precision(precision):
        # jax's attention computes the softmax in float32: float64 takes the explicit formula
        if dropout_p == 0.0 and E == Ev and q.dtype != jnp.float64:
            out = _jax_attention(jnp.swapaxes(qb, 1, 2), jnp.swapaxes(kb, 1, 2), jnp.swapaxes(vb, 1, 2), bias,
                                 keep, causal_flag, scale, fused)
            out = jnp.swapaxes(out, 1, 2)
        else:
            if causal_flag:
                causal = jnp.tril(jnp.ones((L, S), jnp.bool_))
                keep = causal[None, None] if keep is None else keep & causal
            group = Hq // kb.shape[1]
            kb, vb = jnp.repeat(kb, group, axis=1), jnp.repeat(vb, group, axis=1)
            logits = jnp.einsum("bhle,bhse->bhls", qb, kb) * jnp.asarray(scale, q.dtype)
            if bias is not None:
                logits = logits + bias
            if keep is not None:
                logits = jnp.where(keep, logits, jnp.finfo(logits.dtype).min)
            weights = jax.nn.softmax(logits, axis=-1)
            if dropout_p > 0.0:
                kept = jax.random.bernoulli(_key(key), 1.0 - dropout_p, weights.shape)
                rescale = 1.0 / (1.0 - dropout_p) if dropout_p < 1.0 else 0.0
                weights = jnp.where(kept, weights * rescale, 0).astype(weights.dtype)
            out = jnp.einsum("bhls,bhse->bhle", weights, vb)
    if user_keep is not None:  # a row that may attend to nothing gives zeros, as PyTorch's
        if is_causal:
            user_keep = user_keep & jnp.tril(jnp.ones((L, S), jnp.bool_))
        out = jnp.where(jnp.any(user_keep, axis=-1, keepdims=True), out, 0)
    return out.reshape(out_lead + (L, Ev)).astype(q.dtype)


SDPA = Op("ScaledDotProductAttentionBackward0", _sdpa_fwd)


def _check(query, key, value, attn_mask, enable_gqa):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise TypeError(f"scaled_dot_product_attention(): argument '{name}' must be Tensor, not "
                            f"{type(t).__name__}")
        if t.ndim < 2:
            raise RuntimeError(f"scaled_dot_product_attention(): {name} must have at least 2 dimensions, "
                               f"got a tensor of shape {list(t.shape)}.")
    if not (query.dtype == key.dtype == value.dtype):
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead.")
    if not query.dtype.is_floating_point:
        raise RuntimeError(f"scaled_dot_product_attention(): expected floating-point query, key and value, "
                           f"got {query.dtype}.")
    if query.shape[-1] != key.shape[-1]:
        raise RuntimeError(f"scaled_dot_product_attention(): query and key must have the same embedding size, "
                           f"got query {list(query.shape)} and key {list(key.shape)}.")
    if key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"scaled_dot_product_attention(): key and value must have the same sequence length, "
                           f"got key {list(key.shape)} and value {list(value.shape)}.")
    if enable_gqa:
        if min(query.ndim, key.ndim, value.ndim) < 3:
            raise RuntimeError("scaled_dot_product_attention(enable_gqa=True) needs a heads dimension (dim -3) in "
                               "query, key and value.")
        hq, hk, hv = query.shape[-3], key.shape[-3], value.shape[-3]
        if hk != hv:
            raise RuntimeError(f"Expected key and value to have the same number of heads, but got {hk} and {hv}.")
        if hq % hk:
            raise RuntimeError(f"Number of heads in key and value must divide the number of heads in query, got "
                               f"{hq} query heads and {hk} key/value heads.")
    skip = 3 if enable_gqa else 2
    try:
        lead = np.broadcast_shapes(query.shape[:-skip], key.shape[:-skip], value.shape[:-skip])
    except ValueError:
        raise RuntimeError(f"scaled_dot_product_attention(): the batch dimensions of query {list(query.shape)}, "
                           f"key {list(key.shape)} and value {list(value.shape)} do not broadcast; for grouped "
                           "query attention (fewer key/value heads) pass enable_gqa=True.") from None
    if attn_mask is not None:
        full = tuple(lead) + ((query.shape[-3],) if enable_gqa else ()) + (query.shape[-2], key.shape[-2])
        try:
            ok = np.broadcast_shapes(tuple(attn_mask.shape), full) == full
        except ValueError:
            ok = False
        if not ok:
            raise RuntimeError(f"scaled_dot_product_attention(): attn_mask of shape {list(attn_mask.shape)} does "
                               f"not broadcast to the attention weights' shape {list(full)}.")
        if not (attn_mask.dtype.name == "bool" or attn_mask.dtype == query.dtype):
            raise RuntimeError(f"Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                               f"attn_mask.dtype: {attn_mask.dtype} and  query.dtype: {query.dtype} instead.")


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, generator=None):
    """``softmax(query @ key.T * scale + mask) @ value``, PyTorch's signature and semantics.

    ``attn_mask``: bool (True takes part in attention) or float (added to the scores), broadcast to
    (N, ..., L, S). ``is_causal``: a lower-triangular (top-left aligned) mask, combined with
    ``attn_mask`` when both are given. ``scale`` defaults to ``1 / sqrt(E)``. ``dropout_p`` drops
    attention weights (draws from ``generator``, default: the device's default generator); pass 0
    in evaluation, as PyTorch's callers do. ``enable_gqa``: key/value may have fewer heads (dim -3)
    than the query, each shared by ``Hq / Hkv`` consecutive query heads. Rows that may attend to
    nothing give zeros.
    """
    _check(query, key, value, attn_mask, enable_gqa)
    dropout_p = float(dropout_p)
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    rng = _key_tensor(generator, query.device) if dropout_p > 0.0 else None
    fused = use_cudnn and query.device.type == "gpu" and query.dtype.name in ("float16", "bfloat16")
    return call(SDPA, query, key, value, attn_mask, rng, dropout_p=dropout_p, is_causal=bool(is_causal),
                scale=scale, gqa=bool(enable_gqa), precision=_JAX_PRECISION[linalg.get_float32_matmul_precision()],
                fused=fused)
