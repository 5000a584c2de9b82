"""Training programs in the styles of public PyTorch examples (tests/_programs.py) in both execution modes: "auto"
mode gives eager mode's losses, and once warmed up every step runs compiled (issue 32).

Each test runs its program three times: jgrad eager, jgrad "auto" (compiles in the foreground, at a structure's
second barrier, so that the counts do not depend on a background thread) and, where the program draws no random
numbers, PyTorch from the same weights. Tiny sizes: the compiles are most of the cost. The warm-up is what the
program needs before every structure it keeps running has been seen twice (each structure compiles at its second
barrier), with its reason in ``WARM``; ``segment_cache_info().per_structure`` says why each structure was new.
"""
import os

import numpy as np
import pytest

import jgrad as jg
from jgrad.runtime import _segment

from tests import _programs

# On a GPU a compiled run's outputs come back packed, and a step reading packed inputs is a structure of its own
# (docs/execution.md): each structure has a packed variant there, which needs its own warm-up.
PACKS = os.environ.get("JGRAD_TEST_DEVICE", "cpu").strip().lower() == "gpu"

# name -> (program arguments, steps, warm-up steps, why that warm-up, compared with PyTorch)
CASES = {
    # 2 batches an epoch: the first (fresh hidden state) and the second are two structures; the learning rate
    # divided at epoch 1's end is seen varying in epoch 2's second step (a dynamic input from then on), so epoch
    # 3's first step is new once more
    "lstm_lm": (dict(vocab=8, emb=4, hidden=4, batch=2, bptt=3, epochs_of=7), 8, 5, True),
    # a step after a read of the loss and one after none (pending index checks are chained), and the sampling
    "gpt": (dict(vocab=8, block=4, n_embd=8, n_head=2, batch=2, log_every=2, sample_every=2, sample_tokens=2),
            6, 4, True),
    # one structure per episode length (horizon 2: lengths 1 and 2) besides the policy's step
    "reinforce": (dict(hidden=4, horizon=2), 8, 5, False),
    # the first step makes Adam's state
    "gan": (dict(nz=2, hidden=4, dim=3, batch=4), 4, 2, True),
    # the first step makes Adadelta's state
    "mnist": (dict(side=6, batch=2, channels=2, batches_per_epoch=2, log_interval=1), 4, 2, False),
}


# CI runs the LSTM language model (~5 s on 2 idle cores, mostly the kernels' first compiles);
# JGRAD_TEST_THOROUGH=1 runs them all (~2 minutes).
RUN = sorted(CASES) if os.environ.get("JGRAD_TEST_THOROUGH") == "1" else ["lstm_lm"]


def _losses(out):
    if isinstance(out, tuple):  # reinforce: (losses, episode lengths)
        return list(out[0]) + list(out[1])
    return list(out)


@pytest.mark.one_execution_mode
@pytest.mark.parametrize("name", RUN)
def test_program_runs_compiled_after_warm_up(name, monkeypatch):
    kwargs, steps, warm, vs_torch = CASES[name]
    if PACKS:
        steps, warm = steps + 8, warm + 8
    program = _programs.PROGRAMS[name]
    with jg.execution_mode("eager"):
        eager = _losses(program(jg, steps, **kwargs))
    if vs_torch:
        torch = pytest.importorskip("torch")
        np.testing.assert_allclose(eager, _losses(program(torch, steps, **kwargs)), rtol=2e-4, atol=1e-5)

    monkeypatch.setattr(_segment, "background_compile", False)
    jg.graphs.segment_cache_clear()
    at = {}

    def on_step(step):
        if step == warm:
            at["warm"] = jg.graphs.segment_cache_info()

    with jg.execution_mode("auto"):
        auto = _losses(program(jg, steps, on_step=on_step, **kwargs))
    info, before = jg.graphs.segment_cache_info(), at["warm"]
    np.testing.assert_allclose(auto, eager, rtol=1e-5, atol=1e-6)
    segments = info.segments - before.segments
    assert segments >= steps - warm
    assert info.compiled_runs - before.compiled_runs == segments, info.report()
    assert info.structures == before.structures, info.report()  # nothing new after the warm-up
    assert all(s.why for s in info.per_structure)


@pytest.mark.one_execution_mode
def test_python_scalars_seen_varying_and_equal_offsets_are_not_new_structures(monkeypatch):
    # a learning rate set by hand each step, slices at random offsets (two of which are sometimes equal), a read
    # every step: after the scalar was seen varying once, every step is one structure, whatever the values
    monkeypatch.setattr(_segment, "background_compile", False)
    jg.graphs.segment_cache_clear()
    rng = np.random.default_rng(0)
    data = rng.standard_normal(12).astype(np.float32)
    w, src = np.ones(3, np.float32), jg.tensor(data)
    with jg.execution_mode("auto"):
        p = jg.ones(3)
        counts = []
        for step in range(8):
            lr = 0.5 / (step + 1)
            i, j = (4, 4) if step in (5, 6) else rng.choice(9, 2, replace=False)
            g = src[i:i + 3] * src[j:j + 3]
            p.add_(g, alpha=-lr)
            w = w - lr * data[i:i + 3] * data[j:j + 3]
            np.testing.assert_allclose(p.numpy(), w, rtol=1e-6)
            counts.append(jg.graphs.segment_cache_info().structures)
    info = jg.graphs.segment_cache_info()
    first = 4 if PACKS else 2  # (on a GPU the packed variant of the steady step is new at the fifth step)
    assert counts[first:] == [counts[first]] * (8 - first), info.report()  # none new from then on
    last = info.per_structure[-1]
    assert last.compiled_runs >= (2 if PACKS else 4) and last.status == "compiled", info.report()
    steady = info.per_structure[-2] if PACKS else last  # (on a GPU the last is the steady step's packed variant)
    assert "Python float" in steady.why, info.report()
    assert info.per_structure[0].why == "the first structure"


@pytest.mark.one_execution_mode
def test_negative_zero_is_not_the_structure_of_zero(monkeypatch):
    # -0.0 == 0.0 in Python: as one key, the executable compiled for 0.0 would run for -0.0
    monkeypatch.setattr(_segment, "background_compile", False)
    t = jg.ones(2)
    with jg.execution_mode("auto"):
        got = [(1 / (t * z)).tolist() for z in (0.0, 0.0, 0.0, -0.0, -0.0)]
    assert got == [[np.inf] * 2] * 3 + [[-np.inf] * 2] * 2
