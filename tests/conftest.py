"""Test setup: 4 virtual CPU devices, so the engine's device-thread paths run on a CPU-only machine (set before JAX
starts), and JAX's 64-bit mode left as users have it: off unless JAX_ENABLE_X64 is set. jgrad's float64 and int64
work without it (its own x64 scope, docs/porting.md); a test whose *reference* needs JAX's global 64-bit mode says
so with ``@pytest.mark.x64``: skipped in a run without it, and run by ``tests/test_x64.py``'s
``test_x64_marked_tests`` in a subprocess with JAX_ENABLE_X64=1 (so the one command of README.md runs both).

CI budget: hypothesis draws few examples (tests/_op_helpers.py; JGRAD_TEST_THOROUGH=1 draws more).

Execution modes: a test runs in "eager" and in "auto" (tiered) execution mode (ids end in ``[eager]``/``[auto]``).
By default ("ci") the files about how ops run (the engine, execution, views, capture, hooks, checks, the
programs: ``BOTH_MODES_IN_CI`` below) run in both, and the op-library files (each op's values, dtypes, errors and
gradients: the mode does not change the kernel) in eager mode only, which keeps the suite inside CI's budget;
``--execution-mode both`` (or JGRAD_TEST_EXECUTION=both, or JGRAD_TEST_THOROUGH=1) runs every test in both,
``eager|auto`` one of them. A test marked ``@pytest.mark.one_execution_mode`` runs once, in the mode it sets
up itself.

GPU test mode: ``JGRAD_TEST_DEVICE=gpu python -m pytest tests`` runs the suite with the first GPU as jgrad's
default device (the 4 virtual CPU devices stay, so multi-device tests still run). Tests that are
CPU-only by nature say so with ``@pytest.mark.cpu_only("why")`` and are skipped there. So that the
many NumPy comparisons work unchanged, ``Tensor.numpy()`` of a GPU tensor copies it with ``.cpu()``
first in that mode (a harness convenience; PyTorch's TypeError stays what users get)."""
import os

flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in flags:
    flags = os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=4").strip()
# The suite compiles thousands of tiny kernels: LLVM's -O0 compiles them ~1.5x faster on the CPU (numerics
# are unchanged: XLA's CPU fast-math stays off). JGRAD_TEST_XLA_OPT=1 keeps XLA's default optimisation.
if "xla_backend_optimization_level" not in flags and os.environ.get("JGRAD_TEST_XLA_OPT") != "1":
    os.environ["XLA_FLAGS"] = flags + " --xla_backend_optimization_level=0"
TEST_DEVICE = os.environ.get("JGRAD_TEST_DEVICE", "cpu").strip().lower()
if TEST_DEVICE not in ("cpu", "gpu"):
    raise ValueError(f"JGRAD_TEST_DEVICE must be 'cpu' or 'gpu', got {TEST_DEVICE!r}")
if TEST_DEVICE == "cpu":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402


from jgrad.runtime import _kernel_cache  # noqa: E402

# The suite is one process running thousands of distinct kernels, far more than a program does: keep every
# compiled kernel, or later tests would compile again what earlier ones dropped (tests/test_failsafe.py
# checks the bound with one of its own).
_kernel_cache.max_executables = 1 << 40


MODES = ("eager", "auto")
# The test files that run in both execution modes by default: those about how an op runs, records, compiles,
# captures, aliases or fails, and whole programs. The others test the op library itself.
BOTH_MODES_IN_CI = {
    "test_anomaly.py", "test_bounds.py", "test_checks.py", "test_compile_api.py", "test_distributed.py", "test_engine.py",
    "test_errors.py", "test_execution.py", "test_failsafe.py", "test_function.py", "test_gpt_example.py",
    "test_graphs.py", "test_hooks.py", "test_inplace.py", "test_interop_dlpack.py", "test_nn_hooks.py",
    "test_opinfo.py", "test_programs.py", "test_streams.py", "test_structure_stability.py", "test_tape.py",
    "test_views.py", "test_views_runtime.py",
}
_ALL_MODES = os.environ.get("JGRAD_TEST_THOROUGH") == "1"


def pytest_addoption(parser):
    parser.addoption("--execution-mode", choices=("ci", "both") + MODES,
                     default=os.environ.get("JGRAD_TEST_EXECUTION", "both" if _ALL_MODES else "ci"),
                     help="jgrad execution mode(s) the tests run in (default ci: both for the files in "
                          "conftest.BOTH_MODES_IN_CI, eager for the op library)")


def pytest_configure(config):
    config.addinivalue_line("markers", "one_execution_mode: run this test once, not once per execution mode")
    config.addinivalue_line("markers", "cpu_only(reason): skipped in the GPU test mode (JGRAD_TEST_DEVICE=gpu)")
    config.addinivalue_line("markers", "x64: needs JAX's global 64-bit mode for its reference (run with "
                            "JAX_ENABLE_X64=1 by tests/test_x64.py)")
    if TEST_DEVICE == "gpu":
        _gpu_harness()


def _gpu_harness():
    if not [d for d in jax.devices() if d.platform == "gpu"]:
        raise pytest.UsageError("JGRAD_TEST_DEVICE=gpu, but JAX sees no GPU")
    import jgrad as jg
    from jgrad.core._tensor import Tensor
    jg.set_default_device("gpu")
    real_numpy = Tensor.numpy

    def numpy(self, *, force=False):
        t = self.cpu() if self._device.type == "gpu" and not force else self  # .cpu() keeps requires_grad
        return real_numpy(t, force=force)

    Tensor.numpy = numpy


def pytest_collection_modifyitems(config, items):
    if not jax.config.jax_enable_x64:
        skip = pytest.mark.skip(reason="needs JAX_ENABLE_X64=1 (tests/test_x64.py::test_x64_marked_tests runs it)")
        for item in items:
            if item.get_closest_marker("x64") is not None:
                item.add_marker(skip)
    if TEST_DEVICE != "gpu":
        return
    for item in items:
        m = item.get_closest_marker("cpu_only")
        if m is not None:
            item.add_marker(pytest.mark.skip(reason=f"CPU-only: {m.args[0] if m.args else 'by nature'}"))


def pytest_generate_tests(metafunc):
    if "_execution_mode" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("one_execution_mode") is not None:
        return  # the fixture's default: eager mode, which the test changes itself
    chosen = metafunc.config.getoption("--execution-mode")
    if chosen == "ci":
        chosen = "both" if os.path.basename(str(metafunc.definition.fspath)) in BOTH_MODES_IN_CI else "eager"
    modes = MODES if chosen == "both" else (chosen,)
    metafunc.parametrize("_execution_mode", modes, indirect=True)


@pytest.fixture(autouse=True)
def _execution_mode(request):
    """Run the test in the parametrized execution mode (the environment too, for subprocesses), then flush."""
    import jgrad as jg
    mode = getattr(request, "param", "eager")
    before = os.environ.get("JGRAD_EXECUTION")
    os.environ["JGRAD_EXECUTION"] = mode
    jg.set_execution_mode(mode)
    try:
        yield mode
    finally:
        jg.set_execution_mode("eager")  # a barrier: nothing pending leaks into the next test
        if before is None:
            os.environ.pop("JGRAD_EXECUTION", None)
        else:
            os.environ["JGRAD_EXECUTION"] = before


@pytest.fixture(autouse=True)
def _seed():
    import jgrad as jg
    jg.manual_seed(0)
    yield
