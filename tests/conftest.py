"""Test setup: float64 on (gradcheck needs it) and 4 virtual CPU devices, so the engine's
device-thread paths run on a CPU-only machine. Both must be set before JAX starts."""
import os

os.environ.setdefault("JAX_ENABLE_X64", "1")
flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=4").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)


@pytest.fixture(autouse=True)
def _seed():
    import jgrad as jg
    jg.manual_seed(0)
    yield
