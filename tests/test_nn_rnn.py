"""Recurrent layers' gradients against jax (jgrad/nn/rnn.py): jax.vjp of the same forward, and jax.grad of a
plain-jax LSTM.

An LSTM without projection or packing, and a GRU without packing, keep their gates and differentiate with one
reverse scan over them (``_lstm_bwd``, ``_gru_bwd``); first and second derivatives must equal jax's of the same
equations.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from jgrad import nn
from jgrad.runtime import _dispatch


def _ref(mode, P, x, h0, c0, layers, dirs, bias):
    """PyTorch's LSTM / GRU equations in jax: (output, h_n, c_n or None) of a time-major ``x``."""
    hs, cs = [], []
    for layer in range(layers):
        outs = []
        for d in range(dirs):
            suf = f"_l{layer}" + ("_reverse" if d else "")
            w_ih, w_hh = P["weight_ih" + suf], P["weight_hh" + suf]
            b_ih, b_hh = (P["bias_ih" + suf], P["bias_hh" + suf]) if bias else (0.0, 0.0)

            def lstm(carry, xt, w_ih=w_ih, w_hh=w_hh, b=b_ih + b_hh):
                h, c = carry
                i, f, g, o = jnp.split(xt @ w_ih.T + h @ w_hh.T + b, 4, -1)
                c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
                h = jax.nn.sigmoid(o) * jnp.tanh(c)
                return (h, c), h

            def gru(h, xt, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh):
                xr, xz, xn = jnp.split(xt @ w_ih.T + b_ih, 3, -1)
                hr, hz, hn = jnp.split(h @ w_hh.T + b_hh, 3, -1)
                r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
                h = (1 - z) * jnp.tanh(xn + r * hn) + z * h
                return h, h
            k = layer * dirs + d
            if mode == "LSTM":
                (h, c), ys = jax.lax.scan(lstm, (h0[k], c0[k]), x, reverse=bool(d))
                cs.append(c)
            else:
                h, ys = jax.lax.scan(gru, h0[k], x, reverse=bool(d))
            outs.append(ys)
            hs.append(h)
        x = jnp.concatenate(outs, -1)
    return x, jnp.stack(hs), jnp.stack(cs) if cs else None


@pytest.mark.parametrize("mode,bias", [("LSTM", True), ("GRU", False)])  # (the LSTM without bias: below)
def test_the_gates_backward_is_the_vjp_of_the_forward(mode, bias):
    """``_lstm_bwd`` / ``_gru_bwd`` against ``jax.vjp`` of the same forward, with a cotangent on every output (the
    kept gates' too, as a double backward sends), in both directions."""
    from jgrad.nn import rnn
    from jgrad.runtime._dispatch import BackwardContext
    rng = np.random.RandomState(1)
    T, B, I, H = 4, 2, 3, 5
    G = 4 if mode == "LSTM" else 3
    f32 = lambda *shape: rng.randn(*shape).astype(np.float32)  # noqa: E731
    args = [f32(T, B, I), f32(B, H)] + ([f32(B, H)] if mode == "LSTM" else [])
    args += [f32(G * H, I), f32(G * H, H)] + ([f32(G * H), f32(G * H)] if bias else [None, None])
    fwd, bwd = (rnn._lstm_fwd, rnn._lstm_bwd) if mode == "LSTM" else (rnn._gru_fwd, rnn._gru_bwd)
    for reverse in (False, True):
        outs = fwd(*args, reverse=reverse)
        cts = tuple(rng.randn(*o.shape).astype(np.float32) for o in outs)
        want = jax.jit(lambda a, c: jax.vjp(lambda *x: fwd(*x, reverse=reverse), *a)[1](c))(args, cts)
        got = jax.jit(lambda a, o, c: bwd(BackwardContext(a, o, [True] * len(a), {"reverse": reverse}, None), *c))(
            args, outs, cts)
        for g, w in zip(got, want):
            if w is None:
                assert g is None
            else:
                np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.x64  # its jax reference is float64
@pytest.mark.parametrize("mode", ["LSTM"])
def test_first_and_second_derivatives_equal_jax(mode):
    # a bidirectional layer without bias (the bias terms' gradients: tests/test_nn_layers.py, against PyTorch); the
    # GRU's formula is checked against jax.vjp above, and its module path in test_nn_layers
    layers, dirs, bias = 1, 2, False
    rng = np.random.RandomState(0)
    T, B, I, H = 5, 3, 4, 6
    m = getattr(nn, mode)(I, H, num_layers=layers, bidirectional=dirs == 2, bias=bias).double()
    x, h0, c0 = rng.randn(T, B, I), rng.randn(layers * dirs, B, H), rng.randn(layers * dirs, B, H)
    wy, wh, wc = rng.randn(T, B, dirs * H), rng.randn(layers * dirs, B, H), rng.randn(layers * dirs, B, H)
    P = {n: p.detach().numpy() for n, p in m.named_parameters()}
    lstm = mode == "LSTM"

    def loss(P, x, h0, c0):
        ys, h, c = _ref(mode, P, x, h0, c0, layers, dirs, bias)
        return (ys * wy).sum() + (h * wh).sum() + ((c * wc).sum() if lstm else 0.0)

    def outer(P, x, h0, c0):  # a gradient penalty: the squared input gradient
        return (jax.grad(loss, argnums=1)(P, x, h0, c0) ** 2).sum()

    def run():
        xt, h0t, c0t = (jg.tensor(a, requires_grad=True) for a in (x, h0, c0))
        ys, hidden = m(xt, (h0t, c0t) if lstm else h0t)
        hn, cn = hidden if lstm else (hidden, None)
        got = (ys * jg.tensor(wy)).sum() + (hn * jg.tensor(wh)).sum()
        if lstm:
            got = got + (cn * jg.tensor(wc)).sum()
        return got, (xt, h0t, c0t) if lstm else (xt, h0t)

    got, inputs = run()
    np.testing.assert_allclose(got.item(), loss(P, x, h0, c0), rtol=1e-12)
    gx, = jg.autograd.grad(got, [inputs[0]], create_graph=True)
    np.testing.assert_allclose(gx.detach().numpy(), jax.grad(loss, argnums=1)(P, x, h0, c0), rtol=1e-10)
    (gx ** 2).sum().backward()
    want = jax.jit(jax.grad(outer, argnums=(0, 1, 2, 3)))(P, x, h0, c0)
    for n, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want[0][n], rtol=1e-8, atol=1e-12, err_msg=n)
    for t, w in zip(inputs, want[1:]):
        np.testing.assert_allclose(t.grad.numpy(), w, rtol=1e-8, atol=1e-12)

    # first derivatives of every input and parameter, from a fresh graph
    for p in m.parameters():
        p.grad = None
    got, inputs = run()
    got.backward()
    want = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(P, x, h0, c0)
    for n, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want[0][n], rtol=1e-10, atol=1e-13, err_msg=n)
    for t, w in zip(inputs, want[1:]):
        np.testing.assert_allclose(t.grad.numpy(), w, rtol=1e-10, atol=1e-13)


def test_lstm_and_gru_keep_their_gates_only_where_they_can():
    """The gate-keeping ops run for a plain LSTM or GRU; projections and packed sequences keep the jax.vjp op."""
    from jgrad.nn import rnn
    x = jg.randn(4, 2, 3)
    assert nn.LSTM(3, 5)(x)[0].grad_fn.name() == "LstmBackward0"  # (PyTorch: CudnnRnn or MkldnnRnnLayer)
    seen = []
    call = rnn.call

    def spy(op, *a, **k):
        seen.append(op)
        return call(op, *a, **k)
    rnn.call = spy
    try:
        nn.LSTM(3, 5)(x)
        nn.LSTM(3, 5, proj_size=2)(x)
        nn.GRU(3, 5)(x)
        nn.GRU(3, 5)(nn.utils.rnn.pack_sequence([x[:, 0], x[:3, 1]]))
    finally:
        rnn.call = call
    assert seen == [rnn._LSTM_SAVING, rnn._LAYER_OPS["LSTM"], rnn._GRU_SAVING, rnn._LAYER_OPS["GRU"]]


def test_dead_code_analysis_follows_a_loop_s_carry():
    """An input read only by a scan's carry reaches its outputs through later iterations: it is live (the double
    backward links to it). A call's unused input is still found dead."""
    def f(w, v, x0):
        def body(carry, _):
            return carry @ w, carry.sum()  # w feeds only the carry; the outputs read it from the 2nd step on
        _, ys = jax.lax.scan(body, x0, None, length=3)
        return ys + jax.jit(lambda a, b: a)(0.0, v)  # v: passed to a call that never reads it
    eye = jnp.eye(2)
    jaxpr = jax.make_jaxpr(f)(eye, 1.0, jnp.ones(2)).jaxpr
    assert _dispatch._live_invars(jaxpr) == [True, False, True]
