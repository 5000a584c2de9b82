"""``python -m jgrad`` runs as a user would run it (float32, no JAX_ENABLE_X64): the loss falls and
the gradient agrees with jax.grad."""
import os
import re
import subprocess
import sys


def test_demo_trains_and_matches_jax_grad():
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_ENABLE_X64", "XLA_FLAGS")}
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = "--xla_backend_optimization_level=0"  # compile speed only, as in conftest.py
    proc = subprocess.run([sys.executable, "-m", "jgrad"], capture_output=True, text=True, env=env, timeout=240,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"on cpu \(CPU", out), out
    losses = [float(v) for v in re.findall(r"step +\d+ +loss ([0-9.]+)", out)]
    assert len(losses) >= 5, out
    assert losses[-1] < 0.1 * losses[0], out            # the loss fell by at least 10x
    assert all(b <= a * 1.05 for a, b in zip(losses, losses[1:])), out
    first, last = map(float, re.search(r"loss ([0-9.]+) -> ([0-9.]+)", out).groups())
    assert (first, last) == (losses[0], losses[-1])
    err = float(re.search(r"max \|jgrad grad - jax\.grad\| over 6 parameters: ([0-9.e+-]+)", out).group(1))
    assert err < 1e-5, out
