"""jgrad's x64 rule: 64-bit types work without the user touching JAX's config, which jgrad leaves alone.

The suite runs as users do, with JAX's 64-bit mode off (unless JAX_ENABLE_X64 is set). The rule is also checked
in a fresh interpreter with 64-bit types off, in both execution modes; gradcheck, gradgradcheck and
``interop.jax.compare_grad`` of float64 functions in this process; and ``test_x64_marked_tests`` runs the tests
marked ``x64`` (their references need JAX's global 64-bit mode) in a subprocess with JAX_ENABLE_X64=1: the one
CI job with it on.
"""
import glob
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import jgrad as jg

pytestmark = pytest.mark.one_execution_mode
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    import jgrad as jg
    assert not jax.config.jax_enable_x64
    for mode in ("eager", "auto"):
        with jg.execution_mode(mode):
            a = jg.tensor([2 ** 40, 3])
            assert a.dtype is jg.int64 and a.tolist() == [2 ** 40, 3], (mode, a.dtype, a.tolist())
            assert jg.arange(2 ** 33, 2 ** 33 + 2).tolist() == [2 ** 33, 2 ** 33 + 1]
            assert (jg.zeros(2, dtype=jg.long) + 2 ** 35).tolist() == [2 ** 35] * 2
            assert jg.tensor([1, 2]).dtype is jg.int64 and jg.tensor([1.0]).dtype is jg.float32
            d = jg.ones(2, dtype=jg.float64) / 3
            assert d.dtype is jg.float64 and abs(d[0].item() - 1 / 3) < 1e-15
            logits = jg.tensor(np.random.default_rng(0).standard_normal((4, 5)), dtype=jg.float32,
                               requires_grad=True)
            target = jg.tensor([0, 1, 4, 2], dtype=jg.long)
            loss = jg.nn.functional.cross_entropy(logits, target)
            loss.backward()
            ref = jax.grad(lambda l: -jnp.mean(jax.nn.log_softmax(l)[jnp.arange(4), jnp.array([0, 1, 4, 2])]))(
                logits.detach().numpy())
            np.testing.assert_allclose(logits.grad.numpy(), ref, rtol=1e-5, atol=1e-7)
            assert logits.argmax(1).dtype is jg.int64 and jg.ones(3, dtype=jg.int32).sum().dtype is jg.int64
            emb = jg.nn.Embedding(10, 3)
            assert emb(jg.tensor([[1, 9]])).shape == (1, 2, 3)
    # the user's own jax code keeps JAX's defaults
    assert jnp.arange(3).dtype == jnp.int32 and not jax.config.jax_enable_x64
    print("ok")
""")


def test_64_bit_types_without_jax_enable_x64():
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_ENABLE_X64", "JGRAD_EXECUTION")}
    env["JAX_ENABLE_X64"] = "0"
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
                                        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr


def _env(x64):
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_ENABLE_X64", "JGRAD_EXECUTION")}
    env["JAX_ENABLE_X64"] = "1" if x64 else "0"
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="checks the default configuration (JAX_ENABLE_X64 unset)")
def test_gradcheck_and_compare_grad_of_float64_without_jax_enable_x64():
    from interop.jax import compare_grad
    import jax.numpy as jnp
    v = jg.tensor(np.random.default_rng(0).standard_normal(4), dtype=jg.float64, requires_grad=True)
    f = lambda t: (t.sin() * t).sum()  # noqa: E731
    assert jg.autograd.gradcheck(f, (v,))  # its finite differences stay float64 (they lost precision in float32)
    assert jg.autograd.gradgradcheck(f, (v,))
    from jgrad.autograd.gradcheck import GradcheckError
    with pytest.raises(GradcheckError):  # and a wrong gradient is still caught
        jg.autograd.gradcheck(lambda t: _WrongSin.apply(t).sum(), (v,))
    report = compare_grad(f, np.random.default_rng(1).standard_normal(4), jax_fn=lambda a: (jnp.sin(a) * a).sum())
    assert report.ok and report.rows[0].dtype == "float64" and report.fd_dtype == "float64", report
    assert not jax.config.jax_enable_x64  # nothing flipped JAX's global setting


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="checks the default configuration (JAX_ENABLE_X64 unset)")
def test_an_op_failing_inside_its_kernel_leaves_64_bit_types_off():
    # The eager door turns 64-bit types on around each kernel call, inline; an error in the kernel puts them back.
    import jax.numpy as jnp
    with jg.execution_mode("eager"):
        for _ in range(2):
            with pytest.raises(RuntimeError, match="must match the size of tensor b"):
                jg.ones(3) + jg.ones(4)
            assert jnp.arange(3).dtype == jnp.int32 and not jax.config.jax_enable_x64


class _WrongSin(jg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.cos() * 1.01


@pytest.mark.skipif(jax.config.jax_enable_x64, reason="this run has JAX_ENABLE_X64 on: the marked tests ran in it")
def test_x64_marked_tests():
    """The one job with JAX's 64-bit mode on: the tests marked ``x64``, in eager mode."""
    # only the files with marked tests: collecting the whole suite would cost more than running them
    files = [f for f in sorted(glob.glob(os.path.join(ROOT, "tests", "test_*.py")))
             if "mark.x64" in open(f).read()]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "x64", "-x",
                          "--execution-mode", "eager", *files], env=_env(True), cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 5), out.stdout[-4000:] + out.stderr[-2000:]  # 5: none marked
