"""Out-of-range indices raise PyTorch's error (Note [Deferred checks] in jgrad/runtime/_checks.py).

Indices already in host memory are checked at the op. Indices that are pending work ("auto" mode) or on
a GPU are checked beside the kernel and reported at the next host synchronization.
"""
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jgrad as jg
from jgrad.runtime import _checks

torch = pytest.importorskip("torch")
F = jg.nn.functional


def _x():
    return jg.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4))


CASES = {
    "gather": (lambda x, i: jg.gather(x, 0, i.reshape(1, 1)), lambda x, i: torch.gather(x, 0, i.reshape(1, 1))),
    "scatter": (lambda x, i: x.clone().scatter_(0, i.reshape(1, 1), jg.ones(1, 1)),
                lambda x, i: x.clone().scatter_(0, i.reshape(1, 1), torch.ones(1, 1))),
    "scatter_add": (lambda x, i: jg.scatter_add(x, 0, i.reshape(1, 1), jg.ones(1, 1)),
                    lambda x, i: torch.scatter_add(x, 0, i.reshape(1, 1), torch.ones(1, 1))),
    "index_select": (lambda x, i: x.index_select(0, i), lambda x, i: x.index_select(0, i)),
    "getitem": (lambda x, i: x[i], lambda x, i: x[i]),
    "setitem": (lambda x, i: x.clone().__setitem__(i, 1.0), lambda x, i: x.clone().__setitem__(i, 1.0)),
    "index_add": (lambda x, i: x.index_add(0, i, jg.ones(1, 4)), lambda x, i: x.index_add(0, i, torch.ones(1, 4))),
    "embedding": (lambda x, i: F.embedding(i, x), lambda x, i: torch.nn.functional.embedding(i, x)),
    "cross_entropy": (lambda x, i: F.cross_entropy(x[:1], i), lambda x, i: torch.nn.functional.cross_entropy(x[:1], i)),
    "nll_loss": (lambda x, i: F.nll_loss(x[:1], i), lambda x, i: torch.nn.functional.nll_loss(x[:1], i)),
    "one_hot": (lambda x, i: F.one_hot(i, 3), lambda x, i: torch.nn.functional.one_hot(i, 3)),
}


def _torch_error(name, bad):
    x = torch.arange(12.0).reshape(3, 4)
    try:
        CASES[name][1](x, torch.tensor([bad]))
    except Exception as e:  # noqa: BLE001
        return type(e), str(e).splitlines()[0]
    raise AssertionError(f"torch raised nothing for {name}[{bad}]")


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("bad", [7, -9])
def test_out_of_range_indices_raise_pytorch_s_error(name, bad):
    # At the op (host indices), or at the next host sync when the index is pending work ("auto" mode
    # records the reshape some cases make of it): PyTorch's type, PyTorch's message first.
    want_type, want_msg = _torch_error(name, bad)
    x = _x()
    with pytest.raises(want_type) as info:
        CASES[name][0](x, jg.tensor([bad]))
        jg.synchronize()
    assert str(info.value) == want_msg or str(info.value).startswith(want_msg + " (")
    assert _checks.pending_count() == 0
    np.testing.assert_array_equal(x.numpy(), np.arange(12.0).reshape(3, 4))  # nothing lost


@pytest.mark.parametrize("name", sorted(CASES))
def test_valid_indices_compute_and_leave_nothing_pending(name):
    x = _x()
    ok = 0 if name not in ("getitem", "setitem") else -1  # negative indices are valid where PyTorch wraps them
    out = CASES[name][0](x, jg.tensor([ok]))
    jg.synchronize()
    assert _checks.pending_count() == 0
    if out is not None:
        want = CASES[name][1](torch.arange(12.0).reshape(3, 4), torch.tensor([ok]))
        np.testing.assert_allclose(np.asarray(out.detach().numpy(), np.float64), want.detach().numpy(), rtol=1e-6)


@pytest.mark.one_execution_mode
@pytest.mark.parametrize("read", ["item", "numpy", "synchronize", "bool"])
def test_device_indices_are_reported_at_the_next_host_sync(read):
    with jg.execution_mode("auto"):
        x = _x()
        idx = jg.tensor([1]) * 5                 # pending work: its values are not on the host
        y = x.index_select(0, idx)               # returns: the check runs beside the kernel
        assert _checks.pending_count() == 1
        with pytest.raises(IndexError, match=re.escape("index out of range in self (index_select issued at ")) as e:
            {"item": lambda: y.sum().item(), "numpy": lambda: y.numpy(), "synchronize": jg.synchronize,
             "bool": lambda: bool(y.sum() > 0)}[read]()
        assert "test_checks.py" in str(e.value) and "noticed at" in str(e.value)
        assert _checks.pending_count() == 0      # reported once, then cleared
        # everything else is usable
        assert x.sum().item() == 66.0
        w = jg.ones(3, requires_grad=True)
        (w * x[:, 0]).sum().backward()
        np.testing.assert_array_equal(w.grad.numpy(), [0.0, 4.0, 8.0])


@pytest.mark.one_execution_mode
def test_captured_checks_are_rearmed_by_every_replay():
    with jg.execution_mode("eager"):
        x = _x()
        idx = jg.zeros(1, dtype=jg.long)
        g = jg.Graph()
        with jg.graph(g):
            y = x.index_select(0, idx * 1)
        g.replay()
        np.testing.assert_array_equal(y.numpy(), [[0.0, 1.0, 2.0, 3.0]])
        idx.copy_(jg.tensor([3]))
        g.replay()
        with pytest.raises(IndexError, match="index out of range in self"):
            y.numpy()
        idx.copy_(jg.tensor([2]))
        g.replay()
        np.testing.assert_array_equal(y.numpy(), [[8.0, 9.0, 10.0, 11.0]])


@pytest.mark.one_execution_mode
def test_ignore_index_and_negative_wrapping():
    with jg.execution_mode("auto"):
        logits = jg.randn(3, 4)
        target = jg.tensor([0, -100, 3]) * 1     # pending; -100 is ignore_index
        loss = F.cross_entropy(logits, target)
        assert np.isfinite(loss.item())
        x = _x()
        np.testing.assert_array_equal(x[jg.tensor([-1]) * 1].numpy(), [[8.0, 9.0, 10.0, 11.0]])


@settings(max_examples=15, deadline=None)
@given(size=st.integers(1, 6), idx=st.lists(st.integers(-10, 10), min_size=1, max_size=5),
       pending=st.booleans())
def test_gather_raises_iff_an_index_is_out_of_range(size, idx, pending):
    x = jg.tensor(np.arange(size, dtype=np.float32))
    index = jg.tensor(idx)
    bad = [i for i in idx if not 0 <= i < size]
    with jg.execution_mode("auto" if pending else jg.get_execution_mode()):
        if pending:
            index = index * 1
        if bad:
            with pytest.raises(RuntimeError, match=f"index {bad[0]} is out of bounds for dimension 0 with size {size}"):
                jg.gather(x, 0, index).numpy()
        else:
            np.testing.assert_array_equal(jg.gather(x, 0, index).numpy(), np.asarray(idx, np.float32))
    assert _checks.pending_count() == 0


@pytest.mark.one_execution_mode
def test_values_on_the_device_are_checked_too():
    # binary_cross_entropy's range and integer division by zero: PyTorch checks the values on the CPU; jgrad
    # checks host values at the op and device or pending values beside the kernel (reported at the next sync).
    with jg.execution_mode("auto"):
        p = jg.tensor([0.25, 1.5]) * 1
        loss = F.binary_cross_entropy(p, jg.tensor([0.0, 1.0]))
        with pytest.raises(RuntimeError, match=re.escape("all elements of input should be between 0 and 1 (")):
            loss.item()
        q = jg.tensor([4, 5]) * 1
        r = q // (jg.tensor([2, 0]) * 1)
        with pytest.raises(RuntimeError, match=re.escape("ZeroDivisionError (integer division issued at")):
            r.tolist()
        assert _checks.pending_count() == 0
        assert ((jg.tensor([4, 6]) * 1) // (jg.tensor([2, 3]) * 1)).tolist() == [2, 2]
        ok = F.binary_cross_entropy(jg.tensor([0.25, 1.0]) * 1, jg.tensor([0.0, 1.0]))
        assert np.isfinite(ok.item())


@pytest.mark.cpu_only("the host forms of the checks run for arrays on a CPU only")
@pytest.mark.one_execution_mode
def test_op_by_op_runs_check_on_the_host_and_still_gate_the_writes(monkeypatch):
    # A structure's first runs go op by op: on the CPU the checks and the gate read the computed values with NumPy
    # (no check kernel runs while they pass); a failing index still raises at the next read and keeps that step's
    # in-place write (and every later one until reported) from happening, as the compiled select does.
    import jax
    from jgrad.runtime import _kernel_cache, _segment
    monkeypatch.setattr(_segment, "compile_payback", 1e9)  # every run op by op
    called = []
    call = _kernel_cache.Kernel.__call__

    def counted(k, *a):  # (a call on tracers is the recording's shape inference, not a run)
        if not any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(a)):
            called.append(k.__name__)
        return call(k, *a)
    monkeypatch.setattr(_kernel_cache.Kernel, "__call__", counted)
    jg.graphs.segment_cache_clear()
    x, want = _x(), np.zeros(4, np.float32)
    with jg.execution_mode("auto"):
        w = jg.zeros(4)
        for i in (1, 2, 9, 0, 2):
            w.add_(x.index_select(0, jg.tensor([i]) * 1)[0], alpha=0.5 * i)  # a pending index; alpha varies
            if i < 3:
                want += 0.5 * i * np.arange(4 * i, 4 * i + 4, dtype=np.float32)
                np.testing.assert_array_equal(w.numpy(), want)
            else:
                with pytest.raises(IndexError, match="index out of range in self"):
                    w.numpy()
                np.testing.assert_array_equal(w.numpy(), want)  # the step's write did not happen
    assert jg.graphs.segment_cache_info().compiled_runs == 0
    # the kernels ran for the failing step only (its flag ANDed into the thread's in one step, the select that kept
    # the write)
    assert [n for n in called if "check" in n or n.startswith("gate")] == [
        "range_check_and_forward", "gate of the in-place writes by the device-side checks"], called


def _trace_new_structures(monkeypatch):
    """The names of the kernels whose shapes a new structure's recording asks through ``shapes_of`` (a trace or a
    trace-cache look-up) from now on; structures start afresh and none compiles."""
    from jgrad.core import _recorder
    from jgrad.runtime import _segment
    traced = []
    shapes_of = _recorder.shapes_of
    monkeypatch.setattr(_recorder, "shapes_of", lambda fn, args: (traced.append(fn.__name__), shapes_of(fn, args))[1])
    monkeypatch.setattr(_segment, "compile_payback", 1e9)
    _recorder._shape_cache.clear()
    jg.graphs.segment_cache_clear()
    return traced


@pytest.mark.one_execution_mode
def test_check_ok_and_shape_form_equals_eval_shape_and_a_failing_check_still_raises(monkeypatch):
    # A new structure's recording reads CHECK_OK_AND's output aval from its shape form, not from a trace of the
    # kernel (eager mode never runs it): the form must give what jax.eval_shape gives, and decline what it cannot.
    import jax
    from jgrad.core import _dtype
    from jgrad.runtime import _segment_run
    kernel = _checks.CHECK_OK_AND.kernel((), {})
    with _dtype.x64_scope():
        for dt in (np.int64, np.int32, np.int16):
            ok, flag = jax.device_put(np.ones((), dt)), jax.device_put(np.array([1, 5], dt))
            want = jax.eval_shape(kernel, ok, flag)
            avals, tree = _checks._ok_and_shapes([ok, flag])
            assert tree == jax.tree_util.tree_structure(want)
            assert (avals[0].shape, avals[0].dtype, avals[0].weak_type) == (want.shape, want.dtype, want.weak_type)
        i64 = jax.device_put(np.ones((), np.int64))
        for leaves in ([i64, jax.device_put(np.array([1, 5], np.int32))],  # mixed dtypes: promoted, traced
                       [i64, jax.device_put(np.array([1, 5, 6], np.int64))], [jax.numpy.asarray(1), i64[None]],
                       [jax.device_put(np.ones((), np.float32)), jax.device_put(np.ones(2, np.float32))], [i64]):
            assert _checks._ok_and_shapes(leaves) is None
    traced = _trace_new_structures(monkeypatch)
    x = _x()
    with jg.execution_mode("auto"):
        w = jg.zeros(4)
        for i in (2, 7, 1):
            w.add_(x.index_select(0, jg.tensor([i]) * 1)[0])
            if i == 7:
                with pytest.raises(IndexError, match="index out of range in self"):
                    w.numpy()
            else:
                w.numpy()
        np.testing.assert_array_equal(w.numpy(), np.arange(8.0, 12.0) + np.arange(4.0, 8.0))
    # (recorded here as one step with the range check, whose form gives both avals; a replay's re-armed checks
    # record CHECK_OK_AND itself)
    fused = list(_checks.RANGE_CHECK_AND._kernels.values())
    assert any(id(k) in _segment_run.shape_forms for k in fused) and not any("check" in n for n in traced), traced


@pytest.mark.one_execution_mode
def test_range_and_value_check_shape_forms_equal_eval_shape_and_a_bad_index_still_raises(monkeypatch):
    # A new structure's recording reads the range and value checks' flag avals from a shape form (eager mode,
    # checking host values at the op, never traces these kernels): the form must give jax.eval_shape's answer.
    import jax
    from jgrad.core import _dtype
    with _dtype.x64_scope():
        cases = [(_checks.RANGE_CHECK, dict(low=0, high=5, ignore=None), np.array([[1, 7], [2, 3]], dt))
                 for dt in (np.int64, np.int32, np.int16)]
        cases += [(_checks.RANGE_CHECK, dict(low=-2, high=5, ignore=-100), np.zeros(0, np.int64)),
                  (_checks.VALUE_CHECK, dict(kind="nonzero"), np.array([1.0, 0.0], np.float32)),
                  (_checks.VALUE_CHECK, dict(kind="unit_interval"), np.zeros((2, 3), np.float64))]
        for op, attrs, a in cases:
            kernel = op.kernel(tuple(attrs.items()), attrs)
            want = jax.eval_shape(kernel, jax.device_put(a))
            avals, tree = _checks._flag_shapes([jax.device_put(a)])
            assert tree == jax.tree_util.tree_structure(want)
            assert (avals[0].shape, avals[0].dtype, avals[0].weak_type) == (want.shape, want.dtype, want.weak_type)
        assert _checks._flag_shapes([jax.device_put(a), jax.device_put(a)]) is None
        # the forms of the checks "auto" mode records, ANDed into the thread's flag in the same step
        ok = jax.device_put(np.ones((), np.int64))
        for op, attrs, a in cases:
            fused = {_checks.RANGE_CHECK: _checks.RANGE_CHECK_AND, _checks.VALUE_CHECK: _checks.VALUE_CHECK_AND}[op]
            kernel = fused.kernel(tuple(attrs.items()), attrs)
            want = jax.eval_shape(kernel, ok, jax.device_put(a))
            avals, tree = _checks._flag_and_ok_shapes([ok, jax.device_put(a)])
            assert tree == jax.tree_util.tree_structure(want)
            assert [(v.shape, v.dtype, v.weak_type) for v in avals] == [
                (w.shape, w.dtype, w.weak_type) for w in jax.tree_util.tree_leaves(want)]
        for leaves in ([jax.device_put(np.ones((), np.int32)), jax.device_put(a)], [ok], [ok[None], jax.device_put(a)]):
            assert _checks._flag_and_ok_shapes(leaves) is None
    traced = _trace_new_structures(monkeypatch)
    emb = jg.nn.Embedding(5, 2)
    with jg.execution_mode("auto"):
        for i in (1, 9, 3):
            out = emb(jg.tensor([i]) * 1)
            if i == 9:
                with pytest.raises(IndexError, match="index out of range in self"):
                    out.sum().item()
            else:
                np.testing.assert_array_equal(out.detach().numpy(), emb.weight.detach().numpy()[[i]])
    assert not any("range" in name for name in traced), traced


@pytest.mark.one_execution_mode
def test_auto_mode_records_a_check_and_its_and_as_one_step():
    # A check's flag and the AND into the thread's flag (the gate of its writes) are one recorded step in "auto"
    # mode; a bad value is reported at the next read and the step's write is kept from happening.
    jg.graphs.segment_cache_clear()
    w = jg.zeros(2)
    with jg.execution_mode("auto"):
        for p in ([0.25, 0.5], [0.25, 1.5], [0.5, 0.5]):
            before = jg.graphs.segment_cache_info().ops
            loss = F.binary_cross_entropy(jg.tensor(p) * 1, jg.tensor([0.0, 1.0]) * 1)
            w.add_(loss.detach())
            assert jg.graphs.segment_cache_info().ops - before == 2 + 2 + 1 + 1  # 2 muls, 2 checks, bce, add_
            if p[1] > 1:
                with pytest.raises(RuntimeError, match=re.escape("all elements of input should be between 0 and 1")):
                    w.numpy()
            else:
                want = w.numpy()
    p = np.array([0.25, 0.5]), np.array([0.5, 0.5])
    bce = [-(np.log(1 - q[0]) + np.log(q[1])) / 2 for q in p]
    np.testing.assert_allclose(want, [sum(bce)] * 2, rtol=1e-6)  # the failing step added nothing
    assert _checks.pending_count() == 0


@pytest.mark.cpu_only("host memory: a GPU tensor's values are checked on the device")
@pytest.mark.one_execution_mode
@pytest.mark.parametrize("mode", ["eager", "auto"])
def test_views_of_host_memory_are_checked_at_the_op(mode):
    """A view of a CPU tensor's storage (a language model's ``source[i:i + n]``, a transposed or reshaped one) is
    checked with NumPy at the op even when "auto" mode records the view: PyTorch's error there, no flag pending
    and so no gate of the step's writes; a view of storage with a write still pending is checked on the device."""
    source = jg.tensor(np.arange(24).reshape(6, 4) % 5)
    w = jg.nn.Embedding(5, 3)
    with jg.execution_mode(mode):
        for idx in (source[1:4], source[2:5].t(), source[::2, 1:].reshape(-1), source[3]):
            before = jg.graphs.segment_cache_info().ops
            out = F.embedding(idx, w.weight)
            assert _checks.pending_count() == 0
            if mode == "auto":
                assert jg.graphs.segment_cache_info().ops - before == 1  # the lookup: no check recorded
            np.testing.assert_array_equal(out.detach().numpy(), w.weight.detach().numpy()[idx.numpy()])
        bad = source * 2  # values up to 8 (pending in "auto" mode)
        with pytest.raises(IndexError, match="index out of range in self"):
            F.embedding(jg.tensor(np.arange(24).reshape(6, 4))[2:4], w.weight)
        assert _checks.pending_count() == 0
        view = bad[1:3]
        if mode == "auto":  # its storage is pending work: a device-side check, reported at the next read
            out = F.embedding(view, w.weight)
            assert _checks.pending_count() == 1
            with pytest.raises(IndexError, match="index out of range in self"):
                out.sum().item()
        else:
            with pytest.raises(IndexError, match="index out of range in self"):
                F.embedding(view, w.weight)
    assert _checks.pending_count() == 0
