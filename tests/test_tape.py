"""The tape (jgrad/runtime/_tape.py): what a recorded node keeps.

A graph that lives across many ops keeps its nodes through Python's young collections into the oldest generation,
where each object costs every full collection a visit (Note [Objects a live graph keeps]). Nodes share the tuples
they can share; these tests hold that, and check the gradients of such a kept graph against NumPy.
"""
import gc

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


@pytest.mark.cpu_only("counts the objects the CPU's recording keeps; a GPU's streams and events keep others")
def test_a_kept_graph_keeps_few_objects_per_op_and_its_gradient_is_right():
    x, w = _inputs()
    for _ in range(20):  # kernels and structures settled
        jg.stack(_kept_steps(x, w, 10)).sum().backward()
    w.grad = None
    gc.collect()
    before = len(gc.get_objects())
    kept = _kept_steps(x, w, 50)
    gc.collect()
    per_op = (len(gc.get_objects()) - before) / 50 / 4  # mul, tanh, unsqueeze, sum
    # Measured 4.33 (eager) and 8.86 ("auto": pending buffers and their segment's bookkeeping) with the shared
    # tuples, 5.19 and 9.96 without them.
    assert per_op <= (4.75 if jg.get_execution_mode() == "eager" else 9.4), per_op
    jg.stack(kept).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), _want_grad(x, w, 50), rtol=1e-5)


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
