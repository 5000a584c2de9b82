"""interop.cupy: zero copy between CuPy and jgrad GPU tensors (skipped without CuPy and a GPU JAX sees)."""
import numpy as np
import pytest

import jgrad as jg
from interop.cupy import from_cupy, to_cupy
from interop.numpy import to_numpy

try:
    import cupy
    _HAVE_GPU = cupy.cuda.runtime.getDeviceCount() > 0 and jg.is_available("gpu")
except Exception:  # noqa: BLE001 - not installed, no driver, no device
    cupy = None
    _HAVE_GPU = False

# collected and skipped (not an empty module) so that running this file alone exits 0
pytestmark = pytest.mark.skipif(not _HAVE_GPU, reason="needs CuPy and a CUDA GPU visible to both CuPy and JAX")

DTYPES = ["float16", "float32", "float64", "complex64", "complex128", "uint8", "int8", "int16", "int32",
          "int64", "bool"]


def jptr(t):
    return t._data.unsafe_buffer_pointer()


@pytest.mark.parametrize("name", DTYPES)
def test_cupy_to_jgrad_and_back_zero_copy(name):
    x = (cupy.arange(12).reshape(3, 4) % 5).astype(name)
    t = from_cupy(x)
    assert t.device.type == "gpu" and t.dtype is getattr(jg, name)
    assert jptr(t) == x.data.ptr
    y = to_cupy(t)
    assert y.data.ptr == x.data.ptr and bool((y == x).all())


def test_bfloat16_through_dlpack():
    t = jg.ones(4, dtype=jg.bfloat16, device="gpu")
    try:
        y = to_cupy(t)
    except (TypeError, BufferError, RuntimeError) as e:   # CuPy builds without bfloat16 refuse it clearly
        pytest.skip(f"this CuPy has no bfloat16: {e}")
    assert y.data.ptr == jptr(t)


def test_zero_d_empty_and_copies():
    for x in (cupy.asarray(3.0), cupy.zeros((0, 3))):
        t = from_cupy(x)
        assert t.shape == x.shape and to_cupy(t).shape == x.shape
    x = cupy.arange(6.0)
    assert jptr(from_cupy(x, copy=True)) != x.data.ptr
    assert to_cupy(from_cupy(x), copy=True).data.ptr != x.data.ptr


def test_non_contiguous_copied_or_refused():
    x = cupy.arange(24.0).reshape(4, 6)[:, ::2]
    np.testing.assert_array_equal(to_numpy(from_cupy(x)), cupy.asnumpy(x))
    with pytest.raises(BufferError, match="contiguous"):
        from_cupy(x, copy=False)


@pytest.mark.cpu_only("needs a CPU tensor as the default")
def test_cpu_tensor_needs_a_copy():
    t = jg.arange(4.0)
    y = to_cupy(t)
    assert bool((y == cupy.arange(4.0, dtype=cupy.float32)).all())
    with pytest.raises(BufferError, match="copy"):
        to_cupy(t, copy=False)


def test_mutation_semantics():
    t = jg.arange(4.0, device="gpu")
    y = to_cupy(t)
    t.add_(1)                                        # rebinds: the CuPy alias keeps its values
    assert cupy.asnumpy(y).tolist() == [0.0, 1.0, 2.0, 3.0]
    x = cupy.zeros(4)
    shared, private = from_cupy(x), from_cupy(x, copy=True)
    x += 1                                           # unsafe, documented: jgrad sees it
    cupy.cuda.Device().synchronize()
    assert to_numpy(shared).tolist() == [1.0] * 4
    assert to_numpy(private).tolist() == [0.0] * 4


def test_bad_inputs():
    with pytest.raises(TypeError, match="cupy.ndarray"):
        from_cupy(np.ones(2))
