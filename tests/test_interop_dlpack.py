"""DLPack: Tensor.__dlpack__/__dlpack_device__, jg.from_dlpack, zero copy by buffer pointer, errors,
mutation semantics and the stream handshake (CPU; NumPy and JAX as the other side)."""
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import interop
import jgrad as jg
from interop.numpy import empty_aligned, from_numpy, to_numpy

ALL_DTYPES = ["float16", "bfloat16", "float32", "float64", "complex64", "complex128", "uint8", "int8", "int16",
              "int32", "int64", "bool"]


def np_dtype(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def jptr(t):
    arr = t._value if isinstance(t, jg.Tensor) else t
    return arr.unsafe_buffer_pointer()


def nptr(a):
    return a.__array_interface__["data"][0]


def sample(shape, name):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape) * 10
    if name.startswith("complex"):
        a = a + 1j * rng.standard_normal(shape)
    if name == "bool":
        return a > 0
    return a.astype(np_dtype(name))


def aligned_copy(a):
    out = empty_aligned(a.shape, a.dtype)
    out[...] = a
    return out


def test_public_names():
    assert jg.from_dlpack is interop.from_dlpack
    assert callable(jg.Tensor.__dlpack__) and callable(jg.Tensor.__dlpack_device__)


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_numpy_to_jgrad_zero_copy_every_dtype(name):
    a = aligned_copy(sample((3, 5), name))
    t = jg.from_dlpack(a)
    assert t.dtype is getattr(jg, name)
    assert t.device == jg.device("cpu")
    assert jptr(t) == nptr(a)
    np.testing.assert_array_equal(np.asarray(t._data), a)
    assert not t.requires_grad and t.grad_fn is None


@pytest.mark.x64  # a 64-bit jax array needs JAX's 64-bit mode
@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
@pytest.mark.parametrize("name", ALL_DTYPES)
def test_jgrad_to_jax_and_numpy_zero_copy_every_dtype(name):
    a = sample((4, 3), name)
    t = jg.tensor(a)
    j = jnp.from_dlpack(t)
    assert j.dtype == a.dtype and j.unsafe_buffer_pointer() == jptr(t)
    if name != "bfloat16":                      # NumPy's DLPack reader has no bfloat16
        n = np.from_dlpack(t)
        assert nptr(n) == jptr(t)
        np.testing.assert_array_equal(n, a)
    v = to_numpy(t)                             # every dtype, bfloat16 included
    assert v.dtype == a.dtype and nptr(v) == jptr(t)
    np.testing.assert_array_equal(v, a)


@pytest.mark.x64  # a 64-bit jax array needs JAX's 64-bit mode
@pytest.mark.parametrize("name", ALL_DTYPES)
def test_jax_to_jgrad_zero_copy_every_dtype(name):
    j = jnp.asarray(sample((2, 3), name))
    t = jg.from_dlpack(j)
    assert t.dtype is getattr(jg, name) and jptr(t) == j.unsafe_buffer_pointer()
    back = jg.from_dlpack(t)                    # jgrad -> jgrad: the same buffer, a new tensor
    assert back is not t and jptr(back) == jptr(t) and back._version == 0


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (2, 0, 4)])
@pytest.mark.parametrize("name", ["float32", "int64", "bool", "bfloat16"])
def test_zero_d_and_empty(shape, name):
    a = aligned_copy(sample(shape, name)) if shape == () else np.zeros(shape, np_dtype(name))
    t = jg.from_dlpack(a)
    assert t.shape == shape and t.dtype is getattr(jg, name)
    if shape == ():
        assert jptr(t) == nptr(a)
    j = jnp.from_dlpack(t)
    assert j.shape == shape
    back = to_numpy(t)
    assert back.shape == shape and back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)


@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
def test_dlpack_device():
    t = jg.ones(3)
    dev = t.__dlpack_device__()
    assert (int(dev[0]), dev[1]) == (1, 0)                 # kDLCPU, 0
    t2 = jg.ones(3, device="cpu:2")
    assert (int(t2.__dlpack_device__()[0]), t2.__dlpack_device__()[1]) == (1, 0)   # DLPack has one CPU


def test_other_virtual_cpu_device_round_trip():
    t = jg.arange(6.0, device="cpu:2")
    n = np.from_dlpack(t)
    assert nptr(n) == jptr(t)
    u = jg.from_dlpack(t)
    assert u.device == jg.device("cpu:2") and jptr(u) == jptr(t)
    a = aligned_copy(np.arange(4.0))
    v = jg.from_dlpack(a, device="cpu:3")
    assert v.device == jg.device("cpu:3")
    np.testing.assert_array_equal(to_numpy(v), a)
    w = jg.from_dlpack(t, device="cpu:1")                   # another device: a copy
    assert w.device == jg.device("cpu:1")
    np.testing.assert_array_equal(to_numpy(w), to_numpy(t))
    with pytest.raises(BufferError, match="copy"):
        jg.from_dlpack(t, device="cpu:1", copy=False)


@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
def test_copy_true_copies():
    a = aligned_copy(np.arange(8.0))
    t = jg.from_dlpack(a, copy=True)
    assert jptr(t) != nptr(a)
    a[0] = 100.0
    assert to_numpy(t)[0] == 0.0
    j = jnp.arange(4.0)
    u = jg.from_dlpack(j, copy=True)
    assert jptr(u) != j.unsafe_buffer_pointer()
    src = jg.arange(5.0)
    n = np.from_dlpack(src, copy=True)
    assert nptr(n) != jptr(src)
    np.testing.assert_array_equal(n, np.arange(5.0))


def test_non_contiguous_copied_or_refused():
    base = np.arange(24.0).reshape(4, 6)
    for view in (base[:, ::2], base[::2], np.broadcast_to(np.arange(3.0), (4, 3))):
        t = jg.from_dlpack(view)
        np.testing.assert_array_equal(to_numpy(t), view)
        with pytest.raises(BufferError, match="C-contiguous"):
            jg.from_dlpack(view, copy=False)
    tr = base.T                                              # transposed: values right, copied
    np.testing.assert_array_equal(to_numpy(jg.from_dlpack(tr)), tr)


def test_misaligned_copied_or_refused():
    buf = empty_aligned((65,), np.uint8)
    a = buf[16:16 + 32].view(np.float32)                     # 16-byte aligned, as NumPy allocates
    a[:] = np.arange(8)
    t = jg.from_dlpack(a)
    np.testing.assert_array_equal(to_numpy(t), np.arange(8, dtype=np.float32))
    assert jptr(t) != nptr(a)
    with pytest.raises(BufferError, match="aligned to 64"):
        jg.from_dlpack(a, copy=False)


def test_byte_swapped_copied_or_refused():
    a = np.arange(4, dtype=">f4")
    np.testing.assert_array_equal(to_numpy(from_numpy(a)), np.arange(4, dtype=np.float32))
    with pytest.raises(BufferError, match="byte order"):
        from_numpy(a, copy=False)


def test_unsupported_dtype_is_a_clear_error():
    for bad in (np.arange(3, dtype=np.uint16), np.arange(3, dtype=np.uint32)):
        with pytest.raises(interop.UnsupportedDTypeError, match="no dtype for uint"):
            jg.from_dlpack(bad)
    assert issubclass(interop.UnsupportedDTypeError, BufferError)
    assert issubclass(interop.UnsupportedDTypeError, TypeError)


def test_bad_inputs():
    with pytest.raises(TypeError, match="__dlpack__"):
        jg.from_dlpack([1.0, 2.0])
    with pytest.raises(TypeError, match="capsule"):
        jg.from_dlpack(jnp.ones(2).__dlpack__())
    with pytest.raises(ValueError, match="copy"):
        jg.from_dlpack(np.ones(2), copy="yes")
    with pytest.raises(TypeError):
        from_numpy([1, 2])

    class Alien:                                            # a producer on a device JAX cannot read
        def __dlpack_device__(self):
            return (8, 0)                                   # kDLMetal

        def __dlpack__(self, **kw):
            raise AssertionError("must not be called")

    with pytest.raises(BufferError, match="Metal"):
        jg.from_dlpack(Alien())


def test_sharded_jax_array_refused():
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(np.array(jax.devices("cpu")[:2]), ("x",))
    a = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, PartitionSpec("x")))
    with pytest.raises(BufferError, match="sharded over 2 devices"):
        jg.from_dlpack(a)


@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
def test_export_requires_grad_refused_like_pytorch():
    t = jg.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="require gradient"):
        t.__dlpack__()
    with pytest.raises(BufferError, match="require gradient"):
        np.from_dlpack(t)
    n = np.from_dlpack(t.detach())                            # the documented way
    assert nptr(n) == jptr(t)
    assert nptr(to_numpy(t)) == jptr(t)                       # helpers detach for you


@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
def test_export_arguments():
    t = jg.arange(4.0)
    assert t.__dlpack__(max_version=(1, 0)) is not None
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(0, 1))
    assert t.__dlpack__(dl_device=(1, 0), copy=False) is not None       # its own device: no copy needed
    with pytest.raises(BufferError, match="copy"):
        t.__dlpack__(dl_device=(2, 0), copy=False)
    if not jg.is_available("gpu"):
        with pytest.raises(BufferError):
            t.__dlpack__(dl_device=(2, 0))                                # no CUDA backend here
    with pytest.raises(ValueError):
        t.__dlpack__(copy="no")
    for s in (None, -1, 1, 5):                                            # CPU: DLPack has no streams
        assert t.__dlpack__(stream=s) is not None
    with pytest.raises(TypeError, match="stream"):
        t.__dlpack__(stream="default")


def test_traced_tensor_cannot_be_exported():
    from interop.jax import from_jax

    @jax.jit
    def f(a):
        t = from_jax(a)
        with pytest.raises(BufferError, match="traced"):
            t.__dlpack__()
        with pytest.raises(BufferError, match="tracer"):
            jg.from_dlpack(a)
        return a

    f(jnp.ones(2))


# ---- mutation semantics ------------------------------------------------------------------------------------
@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
def test_jgrad_inplace_never_writes_into_exported_buffer():
    t = jg.arange(4.0)
    n = np.from_dlpack(t)
    j = jnp.from_dlpack(t)
    v = to_numpy(t)
    ptr, ver = jptr(t), t._version
    t.add_(1)
    t.mul_(2)
    t[0] = 42.0
    t.clamp_(max=7.0)
    assert t._version > ver and jptr(t) != ptr
    for other in (n, np.asarray(j), v):
        np.testing.assert_array_equal(other, np.arange(4.0))
    np.testing.assert_array_equal(to_numpy(t), [7.0, 4.0, 6.0, 7.0])


@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
def test_exported_numpy_views_are_read_only():
    t = jg.arange(3.0)
    for v in (to_numpy(t), np.from_dlpack(t)):
        assert not v.flags.writeable
        with pytest.raises(ValueError):
            v[0] = 1.0


@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
def test_jax_does_not_donate_an_exported_buffer():
    t = jg.arange(4.0)
    n = np.from_dlpack(t)
    out = jax.jit(lambda a: a + 1, donate_argnums=0)(interop.jax.to_jax(t))
    np.testing.assert_array_equal(np.asarray(out), np.arange(4.0) + 1)
    np.testing.assert_array_equal(n, np.arange(4.0))


def test_other_side_mutation_is_seen_by_jgrad_unless_copied():
    a = aligned_copy(np.zeros(4))
    shared = jg.from_dlpack(a)
    private = jg.from_dlpack(a, copy=True)
    a[1] = 5.0                                            # documented as unsafe; defined as "visible"
    assert to_numpy(shared)[1] == 5.0
    assert to_numpy(private)[1] == 0.0


def test_import_never_mutates_the_source():
    a = aligned_copy(np.arange(4.0))
    t = jg.from_dlpack(a)
    t.add_(10)
    np.testing.assert_array_equal(a, np.arange(4.0))
    np.testing.assert_array_equal(to_numpy(t), np.arange(4.0) + 10)


# ---- streams -----------------------------------------------------------------------------------------------
@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
def test_export_is_a_read_on_the_current_stream():
    x = jg.randn(4)
    s = jg.Stream()
    with jg.streams.sanitizer():
        with jg.stream(s):
            y = x * 2
        with pytest.raises(jg.StreamRaceError, match="__dlpack__"):
            np.from_dlpack(y)
        with pytest.raises(jg.StreamRaceError):
            jg.from_dlpack(y)
        jg.current_stream().wait_stream(s)
        np.testing.assert_allclose(np.from_dlpack(y), to_numpy(x) * 2)


def test_export_to_a_jgrad_stream_makes_it_wait():
    x = jg.randn(4)
    with jg.streams.sanitizer():
        s2 = jg.Stream()
        z = x * 3
        z.__dlpack__(stream=s2)                       # the handshake: s2 waits for the current stream
        with jg.stream(s2):
            z + 1
        z2 = x * 4
        with jg.stream(s2), pytest.raises(jg.StreamRaceError):
            z2 + 1                                     # no handshake, no order


@pytest.mark.cpu_only("exchanges with NumPy, which reads host memory only")
def test_import_is_written_on_the_current_stream():
    with jg.streams.sanitizer():
        s = jg.Stream()
        with jg.stream(s):
            u = jg.from_dlpack(aligned_copy(np.ones(3)))
        assert u._stream is s
        with jg.stream(s):
            u + 1
        with pytest.raises(jg.StreamRaceError):
            u + 1                                      # default stream never waited for s


# ---- optional libraries ----------------------------------------------------------------------------------
def test_importing_jgrad_and_interop_imports_neither_torch_nor_cupy():
    code = ("import jgrad, interop, interop.torch, interop.cupy, sys; "
            "assert 'torch' not in sys.modules and 'cupy' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_missing_optional_library_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(ImportError, match=r'jgrad\[torch\]'):
        interop.torch.to_torch(jg.ones(2))
    with pytest.raises(ImportError, match=r'jgrad\[torch\]'):
        interop.torch.wrap(lambda x: x)
    with pytest.raises(ImportError, match="cupy-cuda"):
        interop.cupy.to_cupy(jg.ones(2))
    with pytest.raises(ImportError, match="cupy-cuda"):
        interop.cupy.from_cupy(np.ones(2))
