"""MultiheadAttention, TransformerEncoderLayer and TransformerEncoder against PyTorch's, with PyTorch's weights."""
import contextlib
import warnings

import numpy as np
import pytest
import torch

import jgrad as jg
import jgrad.nn as nn
from interop.torch import from_torch_state_dict
from _vs_torch import rand


def _no_warning():
    return contextlib.nullcontext()


def _twins(make):
    torch.manual_seed(0)
    t = make(torch.nn).double()
    j = make(nn).to(jg.float64)
    assert [(n, tuple(p.shape)) for n, p in j.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in t.named_parameters()]
    assert not j.load_state_dict(from_torch_state_dict(t.state_dict(), copy=True)).missing_keys
    return j, t


def _check(jouts, touts, jins, tins):
    jouts = [o for o in jouts if o is not None]
    touts = [o for o in touts if o is not None]
    for a, b in zip(jouts, touts):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-11)
    sum((o * o).sum() for o in jouts).backward()
    sum((o * o).sum() for o in touts).backward()
    for a, b in zip(jins, tins):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("kw,need_weights,average", [({"kdim": 5, "vdim": 3, "bias": False}, True, False)])
def test_multihead_attention(kw, need_weights, average):
    j, t = _twins(lambda m: m.MultiheadAttention(8, 2, **kw))
    bf = kw.get("batch_first", False)
    q, k, v = rand((4, 3, 8) if not bf else (3, 4, 8), 1), rand((5, 3, kw.get("kdim", 8)) if not bf else (3, 5, 8), 2), \
        rand((5, 3, kw.get("vdim", 8)) if not bf else (3, 5, 8), 3)
    kpm = np.zeros((3, 5), bool)
    kpm[1, 3:] = True
    mask = rand((4, 5), 4) > 1.0 if need_weights else rand((4, 5), 4)   # bool (True: not attended) or float
    jin = [jg.tensor(a, requires_grad=True) for a in (q, k, v)]
    tin = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask") if mask.dtype != bool \
            else _no_warning():
        jo = j(*jin, key_padding_mask=jg.tensor(kpm), attn_mask=jg.tensor(mask), need_weights=need_weights,
               average_attn_weights=average)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        to = t(*tin, key_padding_mask=torch.tensor(kpm), attn_mask=torch.tensor(mask), need_weights=need_weights,
               average_attn_weights=average)
    _check(jo, to, jin, tin)
    assert repr(j) == repr(t)


def test_multihead_attention_causal_hint_and_unbatched():
    j, t = _twins(lambda m: m.MultiheadAttention(8, 4))
    mask = np.triu(np.ones((4, 4), bool), 1)
    x = rand((4, 8), 5)   # unbatched (L, E)
    jx, tx = jg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    jo = j(jx, jx, jx, attn_mask=jg.tensor(mask), is_causal=True, need_weights=False)
    to = t(tx, tx, tx, attn_mask=torch.tensor(mask), is_causal=True, need_weights=False)
    _check(jo, to, [jx], [tx])
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        j(jx, jx, jx, is_causal=True)


@pytest.mark.parametrize("norm_first,activation", [(True, "gelu")])
def test_transformer_encoder(norm_first, activation):
    def make(m):
        layer = m.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation=activation,
                                          batch_first=True, norm_first=norm_first)
        return m.TransformerEncoder(layer, 2, norm=m.LayerNorm(8), enable_nested_tensor=False)
    j, t = _twins(make)
    x = rand((2, 5, 8), 6)
    kpm = np.zeros((2, 5), bool)
    kpm[0, 4] = True
    causal = nn.transformer.generate_square_subsequent_mask(5, dtype=jg.float64)
    np.testing.assert_array_equal(causal.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(5).numpy())
    causal = np.isinf(causal.numpy())   # as a bool mask, the type of the padding mask
    jx, tx = jg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    jo = j(jx, mask=jg.tensor(causal), src_key_padding_mask=jg.tensor(kpm))
    to = t(tx, mask=torch.tensor(causal), src_key_padding_mask=torch.tensor(kpm))
    _check([jo], [to], [jx], [tx])
    assert j.layers[0].linear1.weight is not j.layers[1].linear1.weight
