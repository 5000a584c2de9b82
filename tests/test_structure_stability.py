"""Issue 28, goal 2: after warm-up, a repeated training step runs compiled every step in "auto" mode.

``segment_cache_info()`` over rounds of steps: each step is one segment run by a compiled executable, none runs
op by op and nothing compiles again (no alternating variants), for a small GPT module, an MLP, and an MLP loop
that reads ``loss.item()`` every step. Compiles run in the foreground here (``background_compile = False``), so
that "warm" is a fixed number of steps; with background compiles the variants are the same, only found later.
"""
import os
import sys

import numpy as np
import pytest

import jgrad as jg
from jgrad.runtime import _segment
from jgrad import nn
from jgrad.nn import functional as F
from conftest import TEST_DEVICE

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "gpt"))


@pytest.fixture
def auto(monkeypatch):
    monkeypatch.setattr(_segment, "background_compile", False)
    with jg.execution_mode("auto"):
        jg.graphs.segment_cache_clear()
        yield
        jg.synchronize()


def _rounds(step, warm, rounds=2, per=3):
    """(segments, run op by op, compiled runs, compiles) added by each round of ``per`` steps after ``warm``."""
    for _ in range(warm):
        step()
    jg.synchronize()
    out = []
    for _ in range(rounds):
        a = jg.graphs.segment_cache_info()
        for _ in range(per):
            step()
        jg.synchronize()
        b = jg.graphs.segment_cache_info()
        out.append((b.segments - a.segments, b.interpreted - a.interpreted, b.compiled_runs - a.compiled_runs,
                    b.compiles - a.compiles))
    return out


def _mlp_step(read):
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))  # tests/test_execution.py's shapes
    opt = jg.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = jg.randn(5, 6), jg.randn(5, 3)
    losses = []

    def step():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if read:
            losses.append(loss.item())
    return step, losses


THOROUGH = os.environ.get("JGRAD_TEST_THOROUGH") == "1"


# On a GPU a step's outputs come back packed, and the step that reads packed inputs is a second structure that
# compiles once more (docs/execution.md): one more round of warm-up there.
PACKS = TEST_DEVICE == "gpu"


@pytest.mark.one_execution_mode
@pytest.mark.parametrize("pack", [None, pytest.param(True, marks=pytest.mark.skipif(
    not THOROUGH, reason="JGRAD_TEST_THOROUGH=1: three more compiles"))], ids=["plain", "packed"])
def test_mlp_step_compiled_every_step(auto, monkeypatch, pack):
    """``packed``: outputs come back packed as on a GPU, where the first compiled run's outputs make the next
    step a new variant (inputs sliced from flats) and a run that can donate less compiles once more: with
    compiles in the foreground that is over after three rounds, then it holds."""
    monkeypatch.setattr(_segment, "pack_outputs", pack)
    step, _ = _mlp_step(read=False)
    assert _rounds(step, warm=3 if pack is None and not PACKS else 9) == [(3, 0, 3, 0)] * 2


@pytest.mark.one_execution_mode
def test_loss_item_every_step_compiled_every_step(auto):
    step, losses = _mlp_step(read=True)
    warm = 9 if PACKS else 3
    assert _rounds(step, warm=warm) == [(3, 0, 3, 0)] * 2
    assert len(losses) == warm + 6 and losses[-1] < losses[0]  # every step's own loss was read


@pytest.mark.skipif(not THOROUGH, reason="JGRAD_TEST_THOROUGH=1 (a GPT's compiles: CI's budget)")
@pytest.mark.one_execution_mode
def test_gpt_step_compiled_every_step(auto):
    import twin

    jmod = twin.load_model("jgrad")
    jg.manual_seed(0)
    # tests/test_gpt_example.py's shapes: the suite compiles their op kernels once for both
    model = jmod.GPT(jmod.GPTConfig(vocab_size=59, block_size=16, n_layer=1, n_head=2, n_embd=32))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95))
    rng = np.random.default_rng(0)
    x, y = (jg.tensor(rng.integers(0, 59, (4, 16))) for _ in range(2))

    def step():
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()

    assert _rounds(step, warm=9 if PACKS else 3) == [(3, 0, 3, 0)] * 2
