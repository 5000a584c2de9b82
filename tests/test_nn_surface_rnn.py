"""Issue 30: ``nn.utils.rnn`` packing and ``PackedSequence`` through RNN/LSTM/GRU, against PyTorch (same
weights; values, final states and gradients to the data and the weights)."""
import os

import numpy as np
import pytest

import jgrad as jg
from jgrad.nn.utils import rnn as R

torch = pytest.importorskip("torch")
TR = torch.nn.utils.rnn


@pytest.mark.one_execution_mode
def test_packed_sequence_through_recurrent_layers_matches_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    cases = [([2, 5, 3], False, "GRU", {})]
    if os.environ.get("JGRAD_TEST_THOROUGH") == "1":
        cases += [([5, 3, 2], True, "LSTM", dict(bidirectional=True)), ([5, 3, 2], True, "RNN", {}),
                  ([2, 5, 3], False, "GRU", dict(num_layers=2))]
    for lengths, enforce, cls, kw in cases:
        jp = R.pack_padded_sequence(jg.tensor(x), lengths, enforce_sorted=enforce)
        tp = TR.pack_padded_sequence(torch.tensor(x), torch.tensor(lengths), enforce_sorted=enforce)
        np.testing.assert_array_equal(jp.data.numpy(), tp.data.numpy())
        assert jp.batch_sizes.tolist() == tp.batch_sizes.tolist() and jp.batch_sizes.dtype == jg.int64
        for a, b in ((jp.sorted_indices, tp.sorted_indices), (jp.unsorted_indices, tp.unsorted_indices)):
            assert (a is None and b is None) or a.tolist() == b.tolist()
        tm, jm = getattr(torch.nn, cls)(4, 6, **kw), getattr(jg.nn, cls)(4, 6, **kw)
        jm.load_state_dict({k: jg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
        jd, td = jg.tensor(jp.data.numpy(), requires_grad=True), torch.tensor(tp.data.numpy(), requires_grad=True)
        h0 = rng.standard_normal((jm.num_layers * (2 if jm.bidirectional else 1), 3, 6)).astype(np.float32)
        jh0 = (jg.tensor(h0), jg.tensor(h0)) if cls == "LSTM" else jg.tensor(h0)  # an hx in the batch's order
        th0 = (torch.tensor(h0), torch.tensor(h0)) if cls == "LSTM" else torch.tensor(h0)
        jo, jh = jm(R.PackedSequence(jd, *jp[1:]), jh0)
        to, th = tm(TR.PackedSequence(td, *tp[1:]), th0)
        assert isinstance(jo, R.PackedSequence)
        np.testing.assert_allclose(jo.data.detach().numpy(), to.data.detach().numpy(), atol=1e-5)
        jh, th = (jh, th) if cls == "LSTM" else ((jh,), (th,))
        for a, b in zip(jh, th):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-5)
        jpad, jl = R.pad_packed_sequence(jo, batch_first=True, total_length=6)
        tpad, tl = TR.pad_packed_sequence(to, batch_first=True, total_length=6)
        np.testing.assert_allclose(jpad.detach().numpy(), tpad.detach().numpy(), atol=1e-5)
        assert jl.tolist() == tl.tolist()
        (jpad.sum() + sum(h.sum() for h in jh)).backward()
        (tpad.sum() + sum(h.sum() for h in th)).backward()
        np.testing.assert_allclose(jd.grad.numpy(), td.grad.numpy(), atol=1e-5)
        for (n, p), (_, q) in zip(jm.named_parameters(), tm.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), atol=1e-4, err_msg=n)


@pytest.mark.one_execution_mode
def test_pack_sequence_round_trip_and_errors():
    seqs = [np.arange(6.0, dtype=np.float32).reshape(3, 2), np.ones((1, 2), np.float32), np.zeros((4, 2), np.float32)]
    packed = R.pack_sequence([jg.tensor(s) for s in seqs], enforce_sorted=False)
    tpacked = TR.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted=False)
    np.testing.assert_array_equal(packed.data.numpy(), tpacked.data.numpy())
    for a, b in zip(R.unpack_sequence(packed), seqs):
        np.testing.assert_array_equal(a.numpy(), b)
    for fn in (lambda m, t: m.pack_padded_sequence(t, [1, 2, 3]), lambda m, t: m.pack_padded_sequence(t, [2, 0, 1])):
        with pytest.raises(RuntimeError) as theirs:
            fn(TR, torch.zeros(3, 3))
        with pytest.raises(RuntimeError) as ours:
            fn(R, jg.zeros(3, 3))
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError, match="total_length"):
        R.pad_packed_sequence(packed, total_length=2)
