"""Test setup: float64 on (gradcheck needs it) and 4 virtual CPU devices, so the engine's
device-thread paths run on a CPU-only machine. Both must be set before JAX starts.

CI budget: hypothesis draws few examples (tests/_op_helpers.py; JGRAD_TEST_THOROUGH=1 draws more)."""
import os

os.environ.setdefault("JAX_ENABLE_X64", "1")
flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    flags = os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=4").strip()
# The suite compiles thousands of tiny kernels: LLVM's -O0 compiles them ~1.5x faster on the CPU (numerics
# are unchanged: XLA's CPU fast-math stays off). JGRAD_TEST_XLA_OPT=1 keeps XLA's default optimisation.
if "xla_backend_optimization_level" not in flags and os.environ.get("JGRAD_TEST_XLA_OPT") != "1":
    os.environ["XLA_FLAGS"] = flags + " --xla_backend_optimization_level=0"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)


@pytest.fixture(autouse=True)
def _seed():
    import jgrad as jg
    jg.manual_seed(0)
    yield
