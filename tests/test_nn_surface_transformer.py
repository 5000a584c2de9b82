"""Issue 30: ``nn.Transformer``, ``TransformerDecoder(Layer)`` and a subclass as pytorch/examples'
word_language_model writes it, against PyTorch with the same weights (state dicts copied)."""
import math
import os

import numpy as np
import pytest

import jgrad as jg

torch = pytest.importorskip("torch")
# CI: values; JGRAD_TEST_THOROUGH=1 also gradients and two training steps (each compiles a transformer's backward,
# op by op, which costs more than CI's time for this file).
THOROUGH = os.environ.get("JGRAD_TEST_THOROUGH") == "1"


def _load_into_torch(jm, tm):
    sd = jm.state_dict()
    assert list(sd) == list(tm.state_dict())
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in sd.items()})


def _grads_agree(jm, tm, tol):
    for (n, p), (_, q) in zip(jm.named_parameters(), tm.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=tol, atol=tol, err_msg=n)


@pytest.mark.one_execution_mode
def test_transformer_matches_torch_with_masks():
    rng = np.random.default_rng(0)
    kw = dict(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=16, dropout=0.0)
    jm, tm = jg.nn.Transformer(**kw), torch.nn.Transformer(**kw)
    _load_into_torch(jm, tm)
    src = rng.standard_normal((6, 3, 8)).astype(np.float32)  # the word_language_model test's shapes: kernels shared
    tgt = rng.standard_normal((4, 3, 8)).astype(np.float32)
    pad = np.array([[False] * 6, [False] * 4 + [True] * 2, [False] * 5 + [True]])
    jmask, tmask = jg.nn.Transformer.generate_square_subsequent_mask(4), torch.nn.Transformer.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(jmask.numpy(), tmask.numpy())
    jo = jm(jg.tensor(src), jg.tensor(tgt), tgt_mask=jmask, src_key_padding_mask=jg.tensor(pad),
            memory_key_padding_mask=jg.tensor(pad), tgt_is_causal=True)
    to = tm(torch.tensor(src), torch.tensor(tgt), tgt_mask=tmask, src_key_padding_mask=torch.tensor(pad),
            memory_key_padding_mask=torch.tensor(pad), tgt_is_causal=True)
    np.testing.assert_allclose(jo.detach().numpy(), to.detach().numpy(), rtol=1e-4, atol=1e-5)
    if THOROUGH:
        jo.sum().backward()
        to.sum().backward()
        _grads_agree(jm, tm, 1e-4)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        jm(jg.tensor(src), jg.tensor(tgt[:, :1]))


@pytest.mark.one_execution_mode
def test_decoder_norm_first_and_init():
    # Transformer's init: every matrix xavier-uniform (bound sqrt(6 / (fan_in + fan_out)))
    t = jg.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16)
    w = t.decoder.layers[0].linear1.weight
    assert float(w.abs().max()) <= math.sqrt(6 / (8 + 16)) and float(w.abs().max()) > 0.5 * math.sqrt(6 / 24)
    if os.environ.get("JGRAD_TEST_THOROUGH") != "1":  # CI: the decoder's values are test_transformer_matches_torch's
        return
    rng = np.random.default_rng(1)
    layer = jg.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=True, activation="gelu")
    jm = jg.nn.TransformerDecoder(layer, 2, norm=jg.nn.LayerNorm(8))
    tm = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=True,
                                                                      activation="gelu"), 2, norm=torch.nn.LayerNorm(8))
    _load_into_torch(jm, tm)
    tgt, mem = rng.standard_normal((4, 3, 8)).astype(np.float32), rng.standard_normal((6, 3, 8)).astype(np.float32)
    mm = np.triu(np.ones((4, 6), bool), 3)  # a bool memory mask: True is not attended
    jo = jm(jg.tensor(tgt), jg.tensor(mem), memory_mask=jg.tensor(mm))
    to = tm(torch.tensor(tgt), torch.tensor(mem), memory_mask=torch.tensor(mm))
    np.testing.assert_allclose(jo.detach().numpy(), to.detach().numpy(), rtol=1e-4, atol=1e-5)


def _word_language_model(nn, F, torch_like):
    """pytorch/examples word_language_model's TransformerModel, with only the framework module changed."""
    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, dropout=0.1, max_len=5000):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            pe = torch_like.zeros(max_len, d_model)
            position = torch_like.arange(0, max_len, dtype=torch_like.float).unsqueeze(1)
            div_term = torch_like.exp(torch_like.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
            pe[:, 0::2] = torch_like.sin(position * div_term)
            pe[:, 1::2] = torch_like.cos(position * div_term)
            pe = pe.unsqueeze(0).transpose(0, 1)
            self.register_buffer('pe', pe)

        def forward(self, x):
            x = x + self.pe[:x.size(0), :]
            return self.dropout(x)

    class TransformerModel(nn.Transformer):
        def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
            super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers)
            self.model_type = 'Transformer'
            self.src_mask = None
            self.pos_encoder = PositionalEncoding(ninp, dropout)
            self.input_emb = nn.Embedding(ntoken, ninp)
            self.ninp = ninp
            self.decoder = nn.Linear(ninp, ntoken)
            self.init_weights()

        def _generate_square_subsequent_mask(self, sz):
            return torch_like.log(torch_like.tril(torch_like.ones(sz, sz)))

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, src, has_mask=True):
            if has_mask:
                if self.src_mask is None or self.src_mask.size(0) != len(src):
                    self.src_mask = self._generate_square_subsequent_mask(len(src))
            else:
                self.src_mask = None
            src = self.input_emb(src) * math.sqrt(self.ninp)
            src = self.pos_encoder(src)
            output = self.encoder(src, mask=self.src_mask)
            output = self.decoder(output)
            return F.log_softmax(output, dim=-1)

    return TransformerModel(ntoken=11, ninp=8, nhead=2, nhid=16, nlayers=2, dropout=0.0)


@pytest.mark.one_execution_mode
def test_word_language_model_transformer_subclass_trains_like_torch():
    jm = _word_language_model(jg.nn, jg.nn.functional, jg)
    tm = _word_language_model(torch.nn, torch.nn.functional, torch)
    _load_into_torch(jm, tm)
    jm.eval(), tm.eval()  # nn.Transformer's own dropout (0.1) is random: compare without it
    data = np.random.default_rng(2).integers(0, 11, (7, 3))
    jopt, topt = jg.optim.SGD(jm.parameters(), lr=0.5), torch.optim.SGD(tm.parameters(), lr=0.5)
    for _ in range(2 if THOROUGH else 1):
        jl = jg.nn.functional.nll_loss(jm(jg.tensor(data[:-1])).view(-1, 11), jg.tensor(data[1:]).reshape(-1))
        tl = torch.nn.functional.nll_loss(tm(torch.tensor(data[:-1])).view(-1, 11), torch.tensor(data[1:]).reshape(-1))
        np.testing.assert_allclose(float(jl), tl.item(), rtol=1e-5)
        if not THOROUGH:  # CI: the forward (the backward compiles a transformer's gradient op by op)
            return
        for m, loss, opt in ((jm, jl, jopt), (tm, tl, topt)):
            opt.zero_grad()
            loss.backward()
            opt.step()
    _grads_agree(jm, tm, 1e-4)
