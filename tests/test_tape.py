"""The tape (jgrad/runtime/_tape.py): what a recorded node keeps.

A graph that lives across many ops keeps its nodes through Python's young collections into the oldest generation,
where each object costs every full collection a visit (Note [Objects a live graph keeps]). Nodes share the tuples
they can share; these tests hold that, and check the gradients of such a kept graph against NumPy. (They do not
count objects: what a process has run before, saved-tensor hooks for one, changes the count.)
"""
import numpy as np
import pytest

import jgrad as jg


def _kept_steps(x, w, n):
    """``n`` steps of a small graph, each kept (as REINFORCE keeps an episode's log-probabilities) and read."""
    kept = []
    for _ in range(n):
        kept.append((x * w).tanh().unsqueeze(0).sum())
        kept[-1].item()
    return kept


def _inputs():
    w = jg.tensor(np.linspace(0.1, 0.9, 8, dtype=np.float32), requires_grad=True)
    x = jg.tensor(np.linspace(-1.0, 1.0, 8, dtype=np.float32))
    return x, w


def _want_grad(x, w, n):
    xv, wv = x.numpy().astype(np.float64), w.detach().numpy().astype(np.float64)
    return n * xv * (1 - np.tanh(xv * wv) ** 2)


def test_nodes_of_one_signature_share_in_avals_and_input_metadata():
    x, w = _inputs()
    a, b = x * w, x * w
    assert a.grad_fn is not b.grad_fn
    assert a.grad_fn.in_avals is b.grad_fn.in_avals
    assert a.grad_fn.input_metadata is b.grad_fn.input_metadata
    (a + b).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.numpy(), rtol=1e-6)


def test_a_graph_kept_across_steps_shares_its_nodes_tuples_and_its_gradient_is_right():
    x, w = _inputs()
    kept = _kept_steps(x, w, 30)
    nodes = [k.grad_fn.next_functions[0][0].next_functions[0][0] for k in kept]  # each step's TanhBackward0
    assert len({id(n) for n in nodes}) == 30
    assert len({id(n.in_avals) for n in nodes}) == 1 and len({id(n.input_metadata) for n in nodes}) == 1
    jg.stack(kept).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), _want_grad(x, w, 30), rtol=1e-5)


@pytest.mark.one_execution_mode
def test_a_bound_segment_buffer_keeps_no_holders_list():
    """A buffer a saved tensor keeps after its segment ran holds the one shared empty holders object."""
    from jgrad.core._recorder import NO_HOLDERS, Buffer

    x, w = _inputs()
    with jg.execution_mode("auto"):
        y = (x * w).tanh()
        saved = y.grad_fn.saved_out[0].data  # tanh saves its output: a pending buffer of the segment
        assert type(saved) is Buffer and saved._val is None
        y.sum().item()  # a barrier: the segment runs and binds its buffers
        assert saved._val is not None and saved.holders is NO_HOLDERS
        y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), _want_grad(x, w, 1), rtol=1e-5)
