"""``MultiheadAttention``, ``TransformerEncoderLayer`` and ``TransformerEncoder`` (``torch.nn``).

PyTorch's parameters (``in_proj_weight``, ``out_proj``, ``linear1`` ...), initialisation and mask
conventions: in these modules a bool ``attn_mask`` / ``key_padding_mask`` marks the positions that may
*not* be attended (the opposite of ``F.scaled_dot_product_attention``), a float one is added to the
scores. Without ``need_weights`` the attention runs through ``F.scaled_dot_product_attention``.
``add_bias_kv`` and ``add_zero_attn`` are not supported.

Imports ``nn.container``, ``nn.functional``, ``nn.init``, ``nn.module``, ``nn.modules``,
``nn.parameter`` and ``ops.creation``.
"""
from __future__ import annotations

import copy
import math
import warnings

from ..ops.creation import empty, full, zeros
from . import functional as F, init
from .container import ModuleList
from .module import Module
from .modules import Dropout, LayerNorm, Linear
from .parameter import Parameter

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "generate_square_subsequent_mask"]


def generate_square_subsequent_mask(sz, device=None, dtype=None):
    """A float (sz, sz) causal mask: 0 on and below the diagonal, -inf above it."""
    return full((sz, sz), float("-inf"), dtype=dtype, device=device).triu(1)


class NonDynamicallyQuantizableLinear(Linear):
    """PyTorch's name for ``MultiheadAttention.out_proj`` (a plain Linear)."""


def _float_mask(mask, name, dtype, other=None, other_name=""):
    """A bool mask (True: not attended) as an additive float mask; float masks pass as they are."""
    if mask is None:
        return None
    if other is not None and other.dtype != mask.dtype:
        warnings.warn(f"Support for mismatched {name} and {other_name} is deprecated. Use same type for both "
                      "instead.", UserWarning, stacklevel=3)
    if mask.dtype.name == "bool":
        return zeros(*mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not mask.dtype.is_floating_point:
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask


class MultiheadAttention(Module):
    """Attention over ``num_heads`` heads of size ``embed_dim / num_heads``, with input and output projections."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention(add_bias_kv=True / add_zero_attn=True) is not supported "
                                      "by jgrad.")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        kw = {"device": device, "dtype": dtype}
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **kw))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **kw))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **kw))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **kw))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, **kw))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **kw)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def _projections(self):
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            ws = (w[:e], w[e:2 * e], w[2 * e:])
        else:
            ws = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        b = self.in_proj_bias
        bs = (b[:e], b[e:2 * e], b[2 * e:]) if b is not None else (None, None, None)
        return ws, bs

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        """``(attn_output, attn_weights or None)``; inputs (L, N, E), (N, L, E) with ``batch_first``, or (L, E)."""
        batched = query.ndim == 3
        if query.ndim not in (2, 3):
            raise AssertionError(f"query should be unbatched 2D or batched 3D tensor but received {query.ndim}-D "
                                 "query tensor")
        if self.batch_first and batched:
            query, key, value = query.transpose(1, 0), key.transpose(1, 0), value.transpose(1, 0)
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        tgt_len, bsz, embed_dim = query.shape
        src_len = key.shape[0]
        if embed_dim != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {embed_dim}")
        heads, head_dim = self.num_heads, self.head_dim
        kpm = _float_mask(key_padding_mask, "key_padding_mask", query.dtype, attn_mask, "attn_mask")
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                               "module method `generate_square_subsequent_mask` to create this mask.")
        if is_causal and kpm is None and not need_weights:
            attn_mask = None  # the hint alone: SDPA's own causal mask
        else:
            attn_mask = _float_mask(attn_mask, "attn_mask", query.dtype)
            if kpm is not None:
                is_causal = False
        if attn_mask is not None:
            if attn_mask.ndim == 2:
                if tuple(attn_mask.shape) != (tgt_len, src_len):
                    raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                       f"{(tgt_len, src_len)}.")
                attn_mask = attn_mask.unsqueeze(0)
            elif tuple(attn_mask.shape) != (bsz * heads, tgt_len, src_len):
                raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                   f"{(bsz * heads, tgt_len, src_len)}.")
        (wq, wk, wv), (bq, bk, bv) = self._projections()
        q = F.linear(query, wq, bq).reshape(tgt_len, bsz * heads, head_dim).transpose(0, 1)
        k = F.linear(key, wk, bk).reshape(src_len, bsz * heads, head_dim).transpose(0, 1)
        v = F.linear(value, wv, bv).reshape(src_len, bsz * heads, head_dim).transpose(0, 1)
        if kpm is not None:
            if tuple(kpm.shape) != (bsz, src_len):
                raise AssertionError(f"expecting key_padding_mask shape of {(bsz, src_len)}, but got "
                                     f"{tuple(kpm.shape)}")
            kpm = kpm.reshape(bsz, 1, 1, src_len).expand(-1, heads, -1, -1).reshape(bsz * heads, 1, src_len)
            attn_mask = kpm if attn_mask is None else attn_mask + kpm
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            scores = (q * math.sqrt(1.0 / head_dim)) @ k.transpose(-2, -1)
            if attn_mask is not None:
                scores = scores + attn_mask
            weights = F.softmax(scores, dim=-1)
            if dropout_p > 0.0:
                weights = F.dropout(weights, dropout_p)
            out = (weights @ v).transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
            out = F.linear(out, self.out_proj.weight, self.out_proj.bias).reshape(tgt_len, bsz, embed_dim)
            weights = weights.reshape(bsz, heads, tgt_len, src_len)
            if average_attn_weights:
                weights = weights.mean(1)
            if not batched:
                out, weights = out.squeeze(1), weights.squeeze(0)
        else:
            if attn_mask is not None:
                attn_mask = attn_mask.unsqueeze(0) if attn_mask.shape[0] == 1 else attn_mask.reshape(
                    bsz, heads, -1, src_len)
            out = F.scaled_dot_product_attention(q.reshape(bsz, heads, tgt_len, head_dim),
                                                 k.reshape(bsz, heads, src_len, head_dim),
                                                 v.reshape(bsz, heads, src_len, head_dim), attn_mask, dropout_p,
                                                 is_causal)
            out = out.permute(2, 0, 1, 3).reshape(tgt_len * bsz, embed_dim)
            out = F.linear(out, self.out_proj.weight, self.out_proj.bias).reshape(tgt_len, bsz, embed_dim)
            weights = None
            if not batched:
                out = out.squeeze(1)
        if self.batch_first and batched:
            out = out.transpose(1, 0)
        return out, weights


def _activation(activation):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if callable(activation):
        return activation
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and LayerNorm (``norm_first``:
    pre-norm)."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (deep copies: independent weights), then ``norm`` if given."""

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(out) if self.norm is not None else out
