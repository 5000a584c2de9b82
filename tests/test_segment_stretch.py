"""Eager stretches (Note [Eager stretches] in jgrad/runtime/_segment_stretch.py): while no repeated structure is due to
compile, "auto" mode runs the program as eager mode does between recorded windows, and credits that time to the
structures, which still compile once it pays.

Values are compared with eager mode's (no structure compiles in the first tests, so every kernel is eager mode's
own and the results are equal bit for bit) and with NumPy.
"""
import numpy as np
import pytest

import jgrad as jg
from jgrad import nn
from jgrad.runtime import _segment

pytestmark = pytest.mark.one_execution_mode  # each test sets the mode it needs


def _trainer():
    """One step of an MLP regression with SGD and a host read: one segment a step in "auto" mode."""
    jg.manual_seed(0)
    rng = np.random.RandomState(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = jg.optim.SGD(model.parameters(), lr=0.05)
    x = jg.tensor(rng.normal(size=(16, 3)).astype(np.float32))
    y = jg.tensor(rng.normal(size=(16, 1)).astype(np.float32))

    def step():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()
    return step, model


def _train(steps, seen_modes=None):
    step, model = _trainer()
    losses = []
    for _ in range(steps):
        losses.append(step())
        if seen_modes is not None:
            seen_modes.add(jg.get_execution_mode())
    return losses, [p.detach().numpy() for p in model.parameters()]


def _ten_compiled_steps(run):
    """(info before, info after) ten steps (``run(n)`` runs n) once every structure of the step compiled (a GPU's
    steps alternate between two, with and without the recycled gradients to write into) and none ran op by op.
    (A stretch may run while a structure compiles: it ends at the first step's barrier point after the compile.)"""
    for _ in range(100):
        _segment.wait_compiles()
        if _segment._stretches.active:
            run(1)
        before = jg.graphs.segment_cache_info()
        run(10)
        after = jg.graphs.segment_cache_info()
        if after.interpreted == before.interpreted:
            break
    return before, after


def _hold_compiles(monkeypatch, then):
    """Every segment compile waits until the returned event is set, then returns ``then(real compile, *its
    arguments)``; compiles are due at once (expected to cost nothing) and the structure cache starts empty."""
    import threading

    from jgrad.runtime import _segment_run

    gate = threading.Event()
    real = _segment_run.compile_segment

    def held(*args, **kwargs):
        gate.wait(60)
        return then(real, *args, **kwargs)

    monkeypatch.setattr(_segment_run, "compile_segment", held)
    monkeypatch.setattr(_segment, "compile_prior", (0.0, 0.0))
    monkeypatch.setattr(_segment._compiler, "ops", 0)
    monkeypatch.setattr(_segment._compiler, "seconds", 0.0)
    jg.graphs.segment_cache_clear()
    return gate


def _release(gate):
    """Let the held compiles go; leave eager mode and an empty structure cache behind."""
    gate.set()
    _segment.wait_compiles()
    jg.set_execution_mode("eager")
    jg.graphs.segment_cache_clear()


@pytest.fixture
def far_compiles(monkeypatch):
    """Compiles expected to cost an hour: nothing becomes due in a test, so every run is eager mode's."""
    monkeypatch.setattr(_segment, "compile_prior", (3600.0, 0.0))
    jg.graphs.segment_cache_clear()
    yield
    jg.set_execution_mode("eager")
    jg.graphs.segment_cache_clear()


def test_a_repeating_loop_runs_eagerly_between_windows_with_eager_modes_values(far_compiles):
    want, want_params = _train(60)
    modes = set()
    with jg.execution_mode("auto"):
        got, got_params = _train(60, modes)
        info = jg.graphs.segment_cache_info()
    assert modes == {"auto"}  # the program's mode stays "auto" during a stretch
    assert got == want  # eager kernels in a stretch, eager mode's kernels op by op: the same bits
    for a, b in zip(got_params, want_params):
        np.testing.assert_array_equal(a, b)
    assert info.eager_stretches >= 2 and info.stretch_points > 0
    assert info.segments < 60 - 10  # most steps ran in stretches, not recorded
    assert info.compiles == 0


def test_switching_modes_or_clearing_the_cache_ends_a_stretch(far_compiles):
    jg.set_execution_mode("auto")
    step, _ = _trainer()
    for _ in range(60):
        step()
        if _segment._stretches.active:
            break
    assert _segment._stretches.active and not _segment.auto[0]
    jg.set_execution_mode("eager")
    assert jg.get_execution_mode() == "eager" and not _segment._stretches.active and not _segment.auto[0]
    jg.set_execution_mode("auto")
    assert _segment.auto[0]
    _train(30)
    jg.graphs.segment_cache_clear()
    assert _segment.auto[0] and not _segment._stretches.active
    before = jg.graphs.segment_cache_info().segments
    (jg.ones(2) * 3).sum().item()
    assert jg.graphs.segment_cache_info().segments == before + 1  # recorded again


@pytest.mark.parametrize("knob", ["eager_stretches", "background_compile", "compile_payback"])
def test_no_stretch_when_turned_off_or_when_compiles_come_at_once(far_compiles, monkeypatch, knob):
    monkeypatch.setattr(_segment, knob, 0 if knob == "compile_payback" else False)
    with jg.execution_mode("auto"):
        _train(30)
        info = jg.graphs.segment_cache_info()
    assert info.eager_stretches == 0 and info.segments >= 30  # every step recorded (a GPU adds transfers)


def test_a_stretch_credits_its_time_so_the_structure_still_compiles(monkeypatch):
    """The ski-rental rule holds across stretches: a stretch credits its time to the step's structure without
    recording it, the step compiles once its runs, recorded or not, have cost its expected compile, and from then on
    runs compiled (no stretch over a compiled structure). Expected compiles are set from the rent measured here, so
    the test does not depend on how fast this machine runs a step."""
    monkeypatch.setattr(_segment, "compile_prior", (3600.0, 0.0))  # first nothing is due
    monkeypatch.setattr(_segment._compiler, "ops", 0)  # (compiles measured by earlier tests: not this prior's)
    monkeypatch.setattr(_segment._compiler, "seconds", 0.0)
    jg.graphs.segment_cache_clear()
    step, _ = _trainer()
    losses = []

    def train_until(done, limit):
        for _ in range(limit):
            if done():
                return
            losses.append(step())
    try:
        with jg.execution_mode("auto"):
            train_until(lambda: _segment._stretches.active, 200)
            assert _segment._stretches.active
            entry = max(_segment._listed, key=lambda e: e.seen_total)  # the repeated step's structure
            runs, rent = entry.seen_total, entry.interp_seconds
            train_until(lambda: not _segment._stretches.active, 600)
            assert not _segment._stretches.active
            assert entry.seen_total == runs and entry.interp_seconds > rent  # credited, not recorded

            # Due once some 100 recorded runs' rent more has been paid, recorded or credited: a window is 2 runs, so
            # stretches go on until it is due (a margin of 100 runs, so that one slow window, a full garbage
            # collection in it say, does not pay it all before a stretch begins).
            due = entry.interp_seconds + 100 * rent / runs
            monkeypatch.setattr(_segment, "compile_prior", (due / _segment.compile_payback, 0.0))
            stretches = jg.graphs.segment_cache_info().eager_stretches
            train_until(lambda: entry.status() != "op by op", 5000)
            assert entry.status() != "op by op"
            assert jg.graphs.segment_cache_info().eager_stretches > stretches
            before, after = _ten_compiled_steps(lambda n: train_until(lambda: False, n))
            assert after.interpreted == before.interpreted and after.compiled_runs - before.compiled_runs >= 10
            assert after.eager_stretches == before.eager_stretches
        want, _ = _train(len(losses))  # eager mode
        np.testing.assert_allclose(losses, want, rtol=1e-5)
    finally:
        jg.set_execution_mode("eager")
        jg.graphs.segment_cache_clear()


def test_no_stretch_over_a_compiled_structure_between_uncompiled_ones(monkeypatch):
    """A step that compiled, with one-op segments after it that never compile (``min_steps``) and that stretches
    stood for before the step compiled: a stretch there would run the compiled step eagerly too, so none starts."""
    monkeypatch.setattr(_segment, "compile_prior", (3600.0, 0.0))  # first nothing is due: stretches learn the reads
    monkeypatch.setattr(_segment._compiler, "ops", 0)  # (compiles measured by earlier tests: not this prior's)
    monkeypatch.setattr(_segment._compiler, "seconds", 0.0)
    jg.graphs.segment_cache_clear()
    step, _ = _trainer()
    probe = jg.ones(3)

    def run(n):
        for _ in range(n):
            step()
            probe.sum().item()  # two segments of one op each: never compiled
            probe.sum().item()
    try:
        with jg.execution_mode("auto"):
            run(30)
            assert jg.graphs.segment_cache_info().eager_stretches >= 1
            # Compiles come at once: every structure seen twice compiles at its barrier, until three steps in a row
            # ran compiled (a structure seen only where a stretch ended, with other recycled arrays, may compile
            # first and never run again).
            monkeypatch.setattr(_segment, "background_compile", False)
            in_a_row = 0
            for _ in range(60):
                before = jg.graphs.segment_cache_info().compiled_runs
                run(1)
                in_a_row = in_a_row + 1 if jg.graphs.segment_cache_info().compiled_runs > before else 0
                if in_a_row == 3:
                    break
            assert in_a_row == 3
            monkeypatch.setattr(_segment, "background_compile", True)  # the reads are still far from due
            before = jg.graphs.segment_cache_info()
            run(30)
            after = jg.graphs.segment_cache_info()
        assert after.compiled_runs - before.compiled_runs == 30
        assert after.eager_stretches == before.eager_stretches
    finally:
        jg.set_execution_mode("eager")
        jg.graphs.segment_cache_clear()


def test_stretches_run_while_the_structure_compiles_and_end_when_it_is_done(monkeypatch):
    """A step whose compile is in flight runs op by op until it is done, which costs more than eager mode: stretches
    stand for it meanwhile (it earns no credit), the stretch under way ends at the first barrier point after the
    compile finishes, and the step then runs compiled, with no stretch over it. The compile is held back here until
    the test lets it go."""
    gate = _hold_compiles(monkeypatch, lambda real, *args, **kwargs: real(*args, **kwargs))
    step, _ = _trainer()
    losses = []
    try:
        with jg.execution_mode("auto"):
            for _ in range(40):
                losses.append(step())
            compiling = [e for e in _segment._listed if e.status() == "compiling"]
            info = jg.graphs.segment_cache_info()
            assert compiling and info.compiles == 0
            assert info.eager_stretches >= 1 and _segment._stretches.active  # eager while the compile is held
            assert not any(e in compiling for e, _ in _segment._stretches.credit)  # no credit for what compiles
            gate.set()
            _segment.wait_compiles()
            losses.append(step())  # the first barrier point after the compile: the stretch ends
            assert not _segment._stretches.active
            before, after = _ten_compiled_steps(lambda n: losses.extend(step() for _ in range(n)))
        assert after.interpreted == before.interpreted and after.compiled_runs - before.compiled_runs >= 10
        assert after.eager_stretches == before.eager_stretches
        want, _ = _train(len(losses))  # eager mode
        np.testing.assert_allclose(losses, want, rtol=1e-5)
    finally:
        _release(gate)


def test_a_structure_whose_compile_failed_runs_in_stretches_and_the_failure_ends_the_stretch(monkeypatch):
    """A compile that fails leaves its structure running op by op for good, which costs more than eager mode:
    the failure ends the stretch under way at the next barrier point (as a finished compile does), and stretches go
    on standing for the structure afterwards, crediting it nothing. Values stay eager mode's."""
    def failing(real, *args, **kwargs):
        raise RuntimeError("no executable for this test")

    gate = _hold_compiles(monkeypatch, failing)
    step, _ = _trainer()
    losses = []
    try:
        with jg.execution_mode("auto"):
            for _ in range(100):  # until a stretch stands for the structure while its compile is held
                losses.append(step())
                if len(losses) >= 10 and _segment._stretches.active:
                    break
            assert _segment._stretches.active
            with pytest.warns(RuntimeWarning, match="compiling a segment of .* failed"):
                gate.set()
                _segment.wait_compiles()
            assert jg.graphs.segment_cache_info().compile_failures >= 1
            losses.append(step())  # the first barrier point after the failure: the stretch ends
            assert not _segment._stretches.active
            stretches = jg.graphs.segment_cache_info().eager_stretches
            for _ in range(40):
                losses.append(step())
            info = jg.graphs.segment_cache_info()
        failed = [e for e in _segment._listed if e.status() == "failed"]
        assert failed and info.compiles == 0 and info.compiled_runs == 0
        assert info.eager_stretches > stretches  # stretches go on after the failure
        assert not any(e in failed for e, _ in _segment._stretches.credit)
        want, _ = _train(len(losses))  # eager mode
        np.testing.assert_allclose(losses, want, rtol=1e-6)
    finally:
        _release(gate)
