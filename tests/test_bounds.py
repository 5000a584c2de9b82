"""Known bounds (Note [Known bounds] in jgrad/runtime/_bounds.py): an index a jgrad op made in range skips the
range checks of the ops that read it; any write to it makes it checked again."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import jgrad as jg
from jgrad.distributions import utils as dist_utils
from jgrad.runtime import _bounds, _checks

P = np.array([[0.2, 0.5, 0.3]], dtype=np.float32)


def _probs():
    return jg.tensor(P) * 1.0  # pending work in "auto" mode


@pytest.fixture
def host_reads(monkeypatch):
    """The tensors whose values a check read (each check of a CPU index reads it once)."""
    seen = []
    real = _checks.host_values

    def spy(t):
        seen.append(t)
        return real(t)

    monkeypatch.setattr(_checks, "host_values", spy)
    monkeypatch.setattr(dist_utils, "host_values", spy)
    return seen


def test_a_sampled_action_is_not_checked_again(host_reads):
    m = jg.distributions.Categorical(_probs())  # (in "auto" mode its simplex check of the probs is pending)
    host_reads.clear()
    pending = _checks.pending_count()
    a = m.sample()
    lp = m.log_prob(a)  # the support check and gather's range check: both skipped
    assert not any(t is a or t._base is a for t in host_reads if isinstance(t, jg.Tensor))
    assert _checks.pending_count() == pending
    want = np.log(P[0] / P[0].sum())[a.item()]
    np.testing.assert_allclose(lp.item(), want, rtol=1e-6)


def test_an_index_of_unknown_values_is_still_checked():
    idx = jg.tensor([0]) + 1  # in range, but nothing says so
    assert _bounds.known(idx) is None
    out = jg.gather(jg.tensor([[1.0, 2.0, 3.0]]), 1, idx.unsqueeze(0))
    if jg.get_execution_mode() == "auto":
        assert _checks.pending_count() == 1  # a device-side check of the pending index
    assert out.item() == 2.0


WRITES = {
    "fill_": lambda a: a.fill_(7),
    "through a view": lambda a: a.view(-1).__setitem__(0, 7),
    "add_": lambda a: a.add_(7),
    "data assignment": lambda a: setattr(a, "data", jg.full_like(a, 7)),
    "copy_": lambda a: a.copy_(jg.full_like(a, 7)),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_makes_the_index_checked_again(write):
    # (Each check on its own sample: in "auto" mode a failed check also undoes the write, Note [Deferred checks].)
    m = jg.distributions.Categorical(_probs())
    a = m.sample()
    WRITES[write](a)
    assert _bounds.known(a) is None
    with pytest.raises(ValueError, match="within the support"):
        m.log_prob(a)
        jg.synchronize()
    a = m.sample()
    v = a.unsqueeze(-1)
    WRITES[write](a)
    index = v if write != "data assignment" else a.unsqueeze(-1)  # (``.data =``: ``a``'s old view keeps old values)
    assert _bounds.known(index) is None
    with pytest.raises(RuntimeError, match=r"index \d+ is out of bounds"):
        jg.gather(jg.tensor(P), 1, index)
        jg.synchronize()
    assert _checks.pending_count() == 0


def test_views_and_widening_casts_keep_the_bounds_and_other_ops_drop_them():
    a = jg.randint(2, 9, (4, 3), dtype=jg.int32)
    assert _bounds.known(a) == (2, 9)
    assert _bounds.known(a[1:, 0]) == (2, 9)
    assert _bounds.known(a.t().unsqueeze(0)) == (2, 9)
    assert _bounds.known(a.to(jg.int64)) == (2, 9)
    assert _bounds.known(a.to(jg.int8)) == (2, 9)  # int8 holds [2, 9)
    assert _bounds.known(a.to(jg.float32)) is None
    assert _bounds.known(a + 0) is None
    assert _bounds.known(a.clone()) is None
    assert _bounds.known(jg.randint(0, 300, (3,), dtype=jg.int16).to(jg.int8)) is None  # int8 cannot hold 299
    jg.synchronize()  # ("auto" mode: the pending results get their values and keep their bounds)
    assert _bounds.known(a) == (2, 9)


_FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32)


@settings(max_examples=40, deadline=None)
@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), elements=_FLOATS),
       data=st.data())
def test_marked_results_lie_within_their_bounds(x, data):
    # The claim the skipped checks rest on: whatever the inputs' values (NaN, infinities, zeros), every value of a
    # marked result lies in its bounds.
    t = jg.tensor(x)
    dim = data.draw(st.sampled_from([None] + list(range(x.ndim))))
    w = np.abs(np.nan_to_num(x.reshape(-1, x.shape[-1]), nan=0.0, posinf=1.0, neginf=1.0))
    w[:, 0] += 1.0  # multinomial: non-negative weights, at least one non-zero per row
    draws = data.draw(st.integers(1, w.shape[1]))
    makers = [lambda: t.argmax(dim), lambda: t.argmin(dim),
              lambda: jg.distributions.Categorical(logits=t, validate_args=False).sample((2,)),
              lambda: jg.multinomial(jg.tensor(w), draws, replacement=False),
              lambda: jg.multinomial(jg.tensor(w), 3, replacement=True)]
    for make in makers:
        r = make()
        low, high = _bounds.known(r)
        values = np.asarray(r.detach().numpy())
        assert ((values >= low) & (values < high)).all(), (low, high, values)


def test_integer_host_data_is_marked_with_its_range():
    tokens = np.array([[3, 7, 1], [4, 4, 9]])
    assert _bounds.known(jg.tensor(tokens)) == (1, 10)
    assert _bounds.known(jg.tensor([5, -2, 0])) == (-2, 6)
    assert _bounds.known(jg.tensor(7)) == (7, 8)
    assert _bounds.known(jg.tensor([300, 5], dtype=jg.int8)) == (5, 45)  # the values stored: 300 wraps to 44
    assert _bounds.known(jg.tensor(tokens, dtype=jg.float32)) is None
    assert _bounds.known(jg.tensor([True, False])) is None
    assert _bounds.known(jg.tensor(np.zeros((0, 3), np.int64))) is None
    assert _bounds.known(jg.from_numpy(tokens)) == (1, 10)  # a copy in jgrad (docs/differences.md)
    assert _bounds.known(jg.as_tensor(tokens)) is None  # may share the array's memory: a write there goes unseen


def test_cat_and_stack_keep_the_range_that_covers_their_inputs():
    data = jg.tensor(np.arange(2, 20))
    x = jg.stack([data[i:i + 4] for i in (0, 5, 9)])
    assert _bounds.known(x) == (2, 20)
    assert _bounds.known(jg.cat([data[:3], jg.tensor([40, 41])])) == (2, 42)
    assert _bounds.known(jg.cat([data[:3], data[:3] + 1])) is None  # one input of unknown values
    np.testing.assert_array_equal(x.numpy(), np.stack([np.arange(2, 20)[i:i + 4] for i in (0, 5, 9)]))


def test_a_language_models_batches_need_no_device_side_check():
    """Batches sliced from a token tensor made from host data: the embedding's and the loss's index checks are
    done on the host (no pending check, so "auto" mode gates no write); the values are NumPy's."""
    rng = np.random.RandomState(0)
    tokens = rng.randint(0, 11, size=60)
    data = jg.tensor(tokens)
    emb = jg.nn.Embedding(11, 4)
    starts = (0, 17, 33)
    x = jg.stack([data[i:i + 8] for i in starts])
    y = jg.stack([data[i + 1:i + 9] for i in starts])
    out = emb(x)
    loss = jg.nn.functional.cross_entropy((out @ emb.weight.t()).view(-1, 11), y.view(-1))
    assert _checks.pending_count() == 0
    w = emb.weight.detach().numpy()
    xv = np.stack([tokens[i:i + 8] for i in starts])
    yv = np.stack([tokens[i + 1:i + 9] for i in starts])
    np.testing.assert_allclose(out.detach().numpy(), w[xv], rtol=1e-6)
    logits = (w[xv] @ w.T).astype(np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    want = -np.take_along_axis(logp, yv[..., None], -1).mean()
    np.testing.assert_allclose(loss.item(), want, rtol=1e-5)


def test_host_data_out_of_range_or_written_is_still_checked():
    emb = jg.nn.Embedding(5, 2)
    with pytest.raises(IndexError, match="index out of range in self"):
        emb(jg.tensor([1, 7]))  # its range, [1, 8), is not within [0, 5)
        jg.synchronize()
    data = jg.tensor([0, 1, 2, 3])
    data[0] = 9  # a write: the mark no longer counts
    assert _bounds.known(data) is None and _bounds.known(jg.stack([data[:2], data[2:]])) is None
    with pytest.raises(IndexError, match="index out of range in self"):
        emb(data[:2])
        jg.synchronize()
    assert _checks.pending_count() == 0
