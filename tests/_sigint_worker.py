"""A real SIGINT at an "auto"-mode barrier and during a background compile (run by tests/test_failsafe.py in a
subprocess of its own: the signal goes to this process). Prints one JSON line of what it found."""
import json
import os
import signal
import time

import numpy as np

import jgrad as jg
from jgrad.runtime import _segment, _segment_run
from jgrad import nn

F = nn.functional
REAL_RUNNER, REAL_COMPILE = _segment_run.runner, _segment_run.compile_segment
arm = {"op_by_op": False, "compiled": False, "compile": False}


def _sigint():
    os.kill(os.getpid(), signal.SIGINT)  # Python's handler raises KeyboardInterrupt in the main thread


def runner(steps, n, device=None):
    def run(ins, state=None):
        if not arm["op_by_op"]:
            return REAL_RUNNER(steps, n, device)(ins, state)
        arm["op_by_op"] = False
        k = len(steps) // 2
        fn = steps[k][0]

        def signalled(*a):
            _sigint()  # the signal lands while this op runs: KeyboardInterrupt at the next bytecode
            return fn(*a)
        return REAL_RUNNER(steps[:k] + [(signalled,) + steps[k][1:]] + steps[k + 1:], n, device)(ins, state)
    return run


def compile_segment(*a, **k):
    if arm["compile"]:
        arm["compile"] = False
        _sigint()           # Ctrl-C while a background compile runs
        time.sleep(0.05)
    exe = REAL_COMPILE(*a, **k)

    def call(*args):
        if arm["compiled"]:
            arm["compiled"] = False
            _sigint()       # Ctrl-C while the executable runs
        return exe(*args)
    return call


_segment_run.runner, _segment_run.compile_segment = runner, compile_segment


def snapshot(model, opt):
    state = [p.detach().numpy() for p in model.parameters()]
    state += [np.asarray(s["momentum_buffer"].numpy()) for s in opt.state.values()]
    key = np.asarray(jg.random.default_generator()._key, np.float64)
    return np.concatenate([a.ravel() for a in state] + [key]).tolist()


def train(mode, steps, arm_at=(), skip=(), until_interrupted=False):
    """(per step: "ok", "interrupted" or "skipped"; per step: the state after it). With `until_interrupted`,
    `steps` more steps follow the first interrupted one (up to 60 steps in all): a signal sent from a background
    compile lands while the loop still runs, whenever the compile starts (CI's machines vary in speed)."""
    jg.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = jg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    what, states = [], []
    i, left = 0, (60 if until_interrupted else steps)
    with jg.execution_mode(mode):
        while left > 0:
            xv = rng.standard_normal((4, 3), dtype=np.float32)
            try:
                if i in arm_at:
                    arm[arm_at[i]] = True
                if i in skip:
                    what.append("skipped")
                else:
                    opt.zero_grad()
                    x = jg.tensor(xv) + 0.1 * jg.randn(4, 3)  # draws from the generator
                    (model(x) ** 2).mean().backward()
                    opt.step()
                    jg.synchronize()
                    what.append("ok")
            except KeyboardInterrupt:
                what.append("interrupted")
            while True:  # (a signal still on its way must not cost the snapshot)
                try:
                    states.append(snapshot(model, opt))
                    break
                except KeyboardInterrupt:
                    what[-1] += " (late)"
            i, left = i + 1, left - 1
            if until_interrupted and left > steps and any(w.startswith("interrupted") or "(late)" in w
                                                          for w in what):
                left = steps
    return what, states


def main():
    _segment.background_compile = False
    out = {}
    # step 1 (its structure is new: op by op) is interrupted half way; step 3 while its executable runs
    out["at_barrier"] = train("auto", 5, {1: "op_by_op", 3: "compiled"})
    out["eager"] = train("eager", 5, skip={1})
    _segment.background_compile = True
    _segment.compile_payback = 0  # compile at the second barrier, without waiting for the runs to pay for it
    jg.graphs.segment_cache_clear()
    out["during_compile"] = train("auto", 3, {2: "compile"}, until_interrupted=True)
    _segment.wait_compiles()
    out["compiles"] = jg.graphs.segment_cache_info().compiles
    print(json.dumps(out))


if __name__ == "__main__":
    main()
