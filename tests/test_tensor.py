"""Tensor basics: factories and *_like, dtypes, devices, repr, host access, to/clone/detach,
indexing (basic, advanced, boolean masks) with gradients against jax, and PyTorch's type
promotion (PyTorch itself is the reference where it is installed)."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from _op_helpers import check_op, gradcheck, rand


# ---- dtypes ---------------------------------------------------------------------------------
def test_dtype_objects():
    for name in ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
                 "complex64", "complex128"):
        dt = getattr(jg, name)
        assert isinstance(dt, jg.dtype) and dt.name == name and repr(dt) == f"jgrad.{name}"
    assert jg.float is jg.float32 and jg.double is jg.float64 and jg.half is jg.float16
    assert jg.long is jg.int64
    assert jg.float32.is_floating_point and not jg.int64.is_floating_point and jg.complex64.is_complex
    assert jg.float64.itemsize == 8 and jg.bfloat16.itemsize == 2


def test_default_dtype():
    assert jg.get_default_dtype() is jg.float32
    try:
        jg.set_default_dtype(jg.float64)
        assert jg.get_default_dtype() is jg.float64
        assert jg.tensor([1.5]).dtype is jg.float64 and jg.zeros(2).dtype is jg.float64
        assert (jg.tensor([1, 2]) * 0.5).dtype is jg.float64
        assert jg.rand(2).dtype is jg.float64 and jg.arange(0.0, 1.0, 0.5).dtype is jg.float64
    finally:
        jg.set_default_dtype(jg.float32)
    assert jg.tensor([1.5]).dtype is jg.float32
    with pytest.raises(TypeError):
        jg.set_default_dtype(jg.int64)


# ---- factories ----------------------------------------------------------------------------
def test_tensor_dtype_inference():
    assert jg.tensor([1.0, 2.0]).dtype is jg.float32
    assert jg.tensor([1, 2]).dtype is jg.int64
    assert jg.tensor([True, False]).dtype is jg.bool
    assert jg.tensor([1, 2.5]).dtype is jg.float32
    assert jg.tensor([True, 1]).dtype is jg.int64
    assert jg.tensor([[1], [2.5]]).dtype is jg.float32
    assert jg.tensor([]).dtype is jg.float32 and jg.tensor([]).shape == (0,)
    assert jg.tensor(3).dtype is jg.int64 and jg.tensor(3).shape == ()
    assert jg.tensor(1 + 2j).dtype is jg.complex64
    assert jg.tensor(np.arange(3, dtype=np.int32)).dtype is jg.int32
    assert jg.tensor(np.ones(2)).dtype is jg.float64  # NumPy arrays keep their dtype
    assert jg.tensor(jnp.ones(2, jnp.float16)).dtype is jg.float16
    assert jg.tensor([1, 2], dtype=jg.float64).dtype is jg.float64
    assert jg.tensor([jg.tensor(1.0), jg.tensor(2.0)]).tolist() == [1.0, 2.0]
    assert jg.from_numpy(np.array([1, 2], np.int16)).dtype is jg.int16


@pytest.mark.x64  # jnp.asarray(2.0) is float64 only in JAX's 64-bit mode
def test_weak_jax_scalar_becomes_a_real_tensor():
    # jnp.asarray(2.0) is weakly typed; as a tensor it must promote like a float64 0-d tensor
    t = jg.tensor(jnp.asarray(2.0))
    assert t.dtype is jg.float64
    assert (t + jg.tensor([1, 2], dtype=jg.int32)).dtype is jg.float64


@pytest.mark.parametrize("size", [(2, 3), ((2, 3),), ([2, 3],)])
def test_filled_factories(size):
    for fn, val in ((jg.zeros, 0.0), (jg.ones, 1.0), (jg.empty, None)):
        t = fn(*size)
        assert t.shape == (2, 3) and t.dtype is jg.float32 and not t.requires_grad
        if val is not None:
            assert np.all(t.numpy() == val)
    assert jg.zeros(*size, dtype=jg.int32).dtype is jg.int32
    assert jg.ones(*size, requires_grad=True).requires_grad


def test_full_arange_linspace_eye():
    assert jg.full((2,), 3).dtype is jg.int64 and jg.full((2,), True).dtype is jg.bool
    assert jg.full((2, 2), 1.5).tolist() == [[1.5, 1.5], [1.5, 1.5]]
    assert jg.full((2,), 7, dtype=jg.float64).dtype is jg.float64
    assert jg.arange(5).tolist() == [0, 1, 2, 3, 4] and jg.arange(5).dtype is jg.int64
    assert jg.arange(1, 4).tolist() == [1, 2, 3]
    assert jg.arange(0, 1, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75] and jg.arange(0, 1, 0.25).dtype is jg.float32
    assert jg.arange(5, dtype=jg.float64).dtype is jg.float64
    assert jg.arange(10, 0, -3).tolist() == [10, 7, 4, 1]
    np.testing.assert_allclose(jg.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5))
    assert jg.linspace(0, 1, 5).dtype is jg.float32
    assert jg.eye(2).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert jg.eye(2, 3).shape == (2, 3)
    x = jg.arange(3.0, requires_grad=True)
    assert x.requires_grad and x.is_leaf


def test_like_factories():
    x = jg.tensor([[1, 2], [3, 4]], dtype=jg.int32)
    for fn in (jg.zeros_like, jg.ones_like, jg.empty_like):
        y = fn(x)
        assert y.shape == (2, 2) and y.dtype is jg.int32 and y.device is x.device
    assert jg.full_like(x, 7).tolist() == [[7, 7], [7, 7]]
    assert jg.zeros_like(x, dtype=jg.float64).dtype is jg.float64
    assert jg.ones_like(jg.ones(2), requires_grad=True).requires_grad
    assert jg.rand_like(jg.ones(2, 3)).shape == (2, 3) and jg.randn_like(jg.ones(3, dtype=jg.float64)).dtype is jg.float64
    d = jg.ones(2, device="cpu:1")
    assert str(jg.zeros_like(d).device) == "cpu:1"
    assert x.new_zeros(3).dtype is jg.int32 and x.new_ones((1, 2)).shape == (1, 2)
    assert x.new_full((2,), 5).tolist() == [5, 5] and x.new_tensor([1.5]).dtype is jg.int32


# ---- devices -------------------------------------------------------------------------------
@pytest.mark.cpu_only("expects the CPU as the default device")
def test_devices():
    cpu = jg.device("cpu")
    assert cpu.type == "cpu" and cpu.index == 0 and str(cpu) == "cpu" and jg.device("cpu:0") is cpu
    d1 = jg.device("cpu:1")
    assert d1.index == 1 and str(d1) == "cpu:1" and d1 is jg.device("cpu", 1)
    assert jg.device("cuda:0") is jg.device("gpu:0")
    t = jg.tensor([1.0, 2.0], device="cpu:1")
    assert t.device is d1 and next(iter(t._value.devices())) == jax.devices("cpu")[1]
    u = t * 2 + 1
    assert u.device is d1 and next(iter(u._value.devices())) == jax.devices("cpu")[1]
    assert jg.ones(2).device is cpu
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        jg.ones(2) + jg.ones(2, device="cpu:1")


@pytest.mark.cpu_only("expects the CPU as the default device")
def test_a_0d_tensor_of_another_device_comes_along_with_its_gradient():
    """As PyTorch's CPU scalars: the op runs where its tensors of one or more dimensions are, whichever argument
    comes first, and the 0-d tensor's gradient comes back to its own device (values against NumPy)."""
    a = jg.tensor([1.0, 2.0, 4.0], requires_grad=True)
    s = jg.tensor(2.0, device="cpu:1", requires_grad=True)
    for out in (a * s, s * a, jg.where(a > 1.5, s, a)):
        assert out.device is a.device and next(iter(out._value.devices())) == jax.devices("cpu")[0]
        out.sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [2.0 + 2.0 + 1.0, 2.0 + 2.0, 2.0 + 2.0])
    assert s.grad.device is s.device and s.grad.item() == 7.0 + 7.0 + 2.0
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        s * a * jg.ones(3, device="cpu:1")


@pytest.mark.cpu_only("expects the CPU as the default device")
def test_to_device_and_back_with_grad():
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    y = x.to("cpu:1")
    assert str(y.device) == "cpu:1" and next(iter(y._value.devices())) == jax.devices("cpu")[1]
    assert y.grad_fn.name() == "ToCopyBackward0"
    z = (y * y).sum()
    assert z.device is y.device
    z.backward()
    assert x.grad.device is x.device and x.grad.tolist() == [2.0, 4.0]
    assert next(iter(x.grad._value.devices())) == jax.devices("cpu")[0]
    assert x.to("cpu") is x
    w = y.to(jg.device("cpu"), jg.float64)
    assert w.device is x.device and w.dtype is jg.float64


def test_copy_across_devices():
    dst = jg.zeros(2, device="cpu:1")
    dst.copy_(jg.tensor([1.0, 2.0]))
    assert dst.tolist() == [1.0, 2.0] and str(dst.device) == "cpu:1" and dst._version == 1
    assert next(iter(dst._value.devices())) == jax.devices("cpu")[1]


# ---- repr ---------------------------------------------------------------------------------
REPRS = [
    (lambda: jg.tensor([1.0, 2.0]), "tensor([1., 2.])"),
    (lambda: jg.tensor([1.0, 2.0], requires_grad=True), "tensor([1., 2.], requires_grad=True)"),
    (lambda: jg.tensor([1.0, 2.0], requires_grad=True) * 2, "tensor([2., 4.], grad_fn=<MulBackward0>)"),
    (lambda: jg.tensor([1.0, 2.0], requires_grad=True).sum(), "tensor(3., grad_fn=<SumBackward0>)"),
    (lambda: jg.tensor(3.0), "tensor(3.)"),
    (lambda: jg.tensor([1, 2]), "tensor([1, 2])"),
    (lambda: jg.tensor([1, 2], dtype=jg.int32), "tensor([1, 2], dtype=jgrad.int32)"),
    (lambda: jg.tensor([1.5, 2.25], dtype=jg.float64), "tensor([1.5000, 2.2500], dtype=jgrad.float64)"),
    (lambda: jg.tensor([[1.0, 2.0], [3.0, 4.0]]), "tensor([[1., 2.],\n        [3., 4.]])"),
    (lambda: jg.tensor([1e10, 1e-5]), "tensor([1.0000e+10, 1.0000e-05])"),
    (lambda: jg.ones(2, device="cpu:1"), "tensor([1., 1.], device='cpu:1')"),
]


@pytest.mark.cpu_only("PyTorch's reprs of CPU tensors (no device suffix)")
@pytest.mark.parametrize("make,expect", REPRS)
def test_repr_like_pytorch(make, expect):
    assert repr(make()) == expect


_R = np.random.default_rng(0)
REPR_DATA = [
    [1.0, 100.0], [1.5, -2.25], [True, False], [float("inf"), -1.5], [float("nan"), 2.0], [0.0, float("inf")],
    [0.0, 0.0], [1e-5, 1.0], [1e9, 1.0], [1, 2, 300], 3.5, [[1.0, 2.0], [3.0, 4.5]], [1 + 2j, -3.5j],
    _R.standard_normal((2, 3, 4)).tolist(), _R.standard_normal(30).tolist(),  # line wrapping
    (_R.standard_normal((40, 50)) * 100).tolist(), _R.integers(-1000, 1000, (20, 70)).tolist(),  # summarized
    _R.standard_normal((12, 12, 12)).tolist(),
]


@pytest.mark.cpu_only("PyTorch's reprs of CPU tensors (no device suffix)")
@pytest.mark.parametrize("data", REPR_DATA, ids=range(len(REPR_DATA)))
@pytest.mark.parametrize("dtype", [None, "float16", "float64"])
@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # 1e9 in float16 is inf, as in torch
def test_repr_column_padding_like_pytorch(data, dtype):
    # precision 4, one right-justified width per tensor, sci mode, "..." summaries, line wrapping
    torch = pytest.importorskip("torch")
    if dtype and np.iscomplexobj(np.asarray(data)):
        pytest.skip("complex data takes no real dtype")
    expect = repr(torch.tensor(data, dtype=getattr(torch, dtype) if dtype else None))
    assert repr(jg.tensor(data, dtype=getattr(jg, dtype) if dtype else None)) == expect.replace("torch.", "jgrad.")


@pytest.mark.cpu_only("PyTorch's reprs of CPU tensors (no device suffix)")
def test_repr_empty_like_pytorch():
    assert repr(jg.tensor([])) == "tensor([])"
    assert repr(jg.zeros(0, 3)) == "tensor([], size=(0, 3))"
    assert repr(jg.zeros(0, dtype=jg.int64)) == "tensor([], dtype=jgrad.int64)"  # no element shows the dtype
    assert repr(jg.zeros(0, 3, dtype=jg.bool)) == "tensor([], size=(0, 3), dtype=jgrad.bool)"


# ---- host access ---------------------------------------------------------------------------
def test_item_tolist_numpy():
    assert jg.tensor([2.5]).item() == 2.5 and isinstance(jg.tensor(3).item(), int)
    assert jg.tensor([[True]]).item() is True
    assert jg.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert jg.tensor(1.5).tolist() == 1.5
    a = jg.tensor([1.0, 2.0]).numpy()
    assert isinstance(a, np.ndarray) and a.dtype == np.float32 and a.tolist() == [1.0, 2.0]
    assert float(jg.tensor(2.5)) == 2.5 and int(jg.tensor(7)) == 7 and bool(jg.tensor([1.0]))
    assert [v.item() for v in jg.tensor([1, 2])] == [1, 2] and len(jg.ones(4, 2)) == 4
    assert np.asarray(jg.tensor([1, 2])).tolist() == [1, 2]
    assert jg.tensor([1.0, 2.0], requires_grad=True).detach().numpy().tolist() == [1.0, 2.0]


@pytest.mark.parametrize("aligned", [True, False])
def test_tensor_from_numpy_copies_like_torch_tensor(aligned):
    # torch.tensor(ndarray) always copies: writing into the array afterwards leaves the tensor alone.
    # jax aliases 64-byte-aligned host buffers on the CPU, so the aligned case is the one that matters.
    torch = pytest.importorskip("torch")
    from interop.numpy import empty_aligned
    src = empty_aligned((16,), np.float64) if aligned else np.empty(17)[1:]
    src[...] = np.arange(16.0)
    tt, jt, jt2 = torch.tensor(src), jg.tensor(src), jg.Tensor(src)
    src[...] = -1.0
    np.testing.assert_array_equal(jt.numpy(), tt.numpy())
    np.testing.assert_array_equal(jt2.numpy(), tt.numpy())
    np.testing.assert_array_equal(jt.numpy(), np.arange(16.0))


@pytest.mark.one_execution_mode
def test_host_arrays_reach_the_device_as_jax_device_put_puts_them(monkeypatch):
    """``jg.tensor(ndarray)`` goes through JAX's C++ transfer (core._device.put_host): same dtype, placement and
    values as jax.device_put, for any dtype and layout; a transfer call that disagrees makes it use jax.device_put."""
    import ml_dtypes
    from jgrad.core import _device, _dtype

    dev = jax.devices()[0]
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False]), np.arange(4, dtype=np.int8),
              np.arange(3, dtype=np.int64) - 2**40, np.float64(2.5) * np.ones(()), np.ones(3, ml_dtypes.bfloat16),
              np.arange(10.0).reshape(2, 5)[:, ::2], np.array([1 + 2j], np.complex64), np.zeros((0, 3), np.float16)]
    for a in arrays:
        with _dtype.x64_scope():
            got, want = _device.put_host(a, dev), jax.device_put(a, dev)
        assert (got.dtype, got.shape, got.committed, got.sharding) == (want.dtype, want.shape, want.committed,
                                                                      want.sharding)
        np.testing.assert_array_equal(np.asarray(got), a)
        np.testing.assert_array_equal(jg.tensor(a).numpy(), a)
    monkeypatch.setattr(_device, "_batched_put", [lambda *a, **k: jax.numpy.zeros(3), False])
    np.testing.assert_array_equal(jg.tensor(np.arange(3.0)).numpy(), [0.0, 1.0, 2.0])
    assert _device._batched_put == [None, True]  # checked once, then the public path
    np.testing.assert_array_equal(jg.tensor(np.arange(2.0)).numpy(), [0.0, 1.0])


@pytest.mark.cpu_only("zero-copy NumPy views need host memory")
def test_array_protocol_copy_keyword_numpy2():
    # NumPy 2's __array__(dtype, copy): True always copies, False raises ValueError where a copy is needed
    t = jg.tensor([1.0, 2.0], dtype=jg.float64)
    a = np.array(t, copy=True)
    assert a.flags.writeable and not np.shares_memory(a, np.asarray(t))
    a[0] = 5.0
    assert t.tolist() == [1.0, 2.0]
    b = np.asarray(t, copy=False)  # a CPU tensor converts without a copy
    np.testing.assert_array_equal(b, [1.0, 2.0])
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        np.asarray(t, dtype=np.float32, copy=False)
    c = np.asarray(t, dtype=np.float32, copy=True)
    assert c.dtype == np.float32 and c.flags.writeable and c.tolist() == [1.0, 2.0]
    assert np.asarray(t, dtype=np.float32).dtype == np.float32


def test_host_access_errors():
    with pytest.raises(RuntimeError, match="a Tensor with 6 elements cannot be converted to Scalar"):
        jg.ones(2, 3).item()
    with pytest.raises(RuntimeError, match="Can't call numpy\\(\\) on Tensor that requires grad. Use "
                                           "tensor.detach\\(\\).numpy\\(\\) instead."):
        jg.ones(2, requires_grad=True).numpy()
    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        bool(jg.ones(2))
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        jg.ones(2, dtype=jg.int64).requires_grad_()
    with pytest.raises(TypeError):
        len(jg.tensor(1.0))


# ---- to / clone / detach ---------------------------------------------------------------------
def test_to_dtype():
    x = jg.tensor([1.5, -2.5])
    assert x.to(jg.float64).dtype is jg.float64
    assert x.to(dtype=jg.int32).tolist() == [1, -2]
    assert x.to(jg.tensor([1], dtype=jg.int64)).dtype is jg.int64
    assert x.to(jg.float32) is x
    c = x.to(jg.float32, copy=True)
    assert c is not x and c.tolist() == x.tolist()


def test_clone_and_detach():
    x = jg.tensor([1.0, 2.0], requires_grad=True)
    c = x.clone()
    assert c is not x and c.tolist() == [1.0, 2.0] and c.requires_grad and not c.is_leaf
    d = x.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None and d.tolist() == [1.0, 2.0]
    # detach shares the version counter (PyTorch): in-place through the detached tensor is seen
    d.add_(1.0)
    assert d._version == 1 and x._version == 1
    y = x * 2
    y.detach_()
    assert y.is_leaf and not y.requires_grad and y.grad_fn is None
    z = jg.tensor([1.0])
    z.requires_grad_()
    assert z.requires_grad and z.is_leaf
    with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
        (x * 2).requires_grad_(False)


def test_shape_metadata():
    t = jg.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.dim() == 3 and t.numel() == 24 and t.size(1) == 3
    assert t.size() == (2, 3, 4) and jg.numel(t) == 24 and jg.is_tensor(t) and not jg.is_tensor(1)


def test_data_setter_takes_the_other_tensors_device_and_stream():
    # torch: after ``a.data = b`` a lives where b lives (a.device == b.device), keeping a's identity
    s = jg.Stream("cpu:1")
    with jg.stream(s):
        b = jg.tensor([1.0, 2.0], device="cpu:1") * 3
    a = jg.zeros(2, requires_grad=True)
    a_id = id(a)
    a.data = b
    assert id(a) == a_id and a.requires_grad and a.is_leaf
    assert a.device == jg.device("cpu:1") == b.device
    assert a._stream is s  # the storage was produced on s: later accesses must be ordered after s
    y = a.detach() * 2
    assert y.device == jg.device("cpu:1")
    np.testing.assert_allclose(y.numpy(), [6.0, 12.0])


# ---- indexing ---------------------------------------------------------------------------------
INDICES = [
    1, -1, slice(None), slice(1, None), slice(None, None, 2), slice(-2, None), (0, 1), (slice(None), 2),
    (Ellipsis, 1), (None, 0), (0, None, slice(1, 3)), (1, Ellipsis, None), ([0, 2, 2],), ([0, 1], [2, 3]),
    (slice(None), [3, 0, 0]), (np.array([2, 0]),), "tensor_idx", "bool_mask", "bool_row_mask", "bool_scalar",
    (slice(1, 3), "tensor_idx"), ("tensor_idx", 1),
]


def _index(spec, jg_side):
    conv = {
        "tensor_idx": (jg.tensor([2, 0, 2]), np.array([2, 0, 2])),
        "bool_mask": (jg.tensor(MASK), MASK),
        "bool_row_mask": (jg.tensor([True, False, True]), np.array([True, False, True])),
        "bool_scalar": (jg.tensor(True), None),
    }
    if not isinstance(spec, tuple):
        spec = (spec,)
    out = []
    for s in spec:
        if isinstance(s, str):
            pair = conv[s]
            out.append(pair[0] if jg_side else pair[1])
        else:
            out.append(np.asarray(s) if isinstance(s, list) and not jg_side else s)
    return tuple(out)


MASK = np.random.default_rng(3).uniform(size=(3, 4)) > 0.5


@pytest.mark.parametrize("spec", INDICES, ids=[str(i) for i in range(len(INDICES))])
def test_getitem_values_and_grad(spec):
    x = rand((3, 4), 1)
    jidx = _index(spec, True)
    if spec == "bool_scalar":
        check_op(lambda t: t[jg.tensor(True)], lambda a: a[None], [x])
        check_op(lambda t: t[1, False], lambda a: a[1][None][:0], [x])
        return
    nidx = _index(spec, False)
    check_op(lambda t: t[jidx if len(jidx) > 1 else jidx[0]], lambda a: a[nidx if len(nidx) > 1 else nidx[0]], [x])


def test_getitem_gradcheck_and_names():
    x = rand((3, 4), 1)
    gradcheck(lambda t: t[[0, 2, 2], 1:], x)  # repeated rows accumulate
    gradcheck(lambda t: t[jg.tensor(MASK)], x)
    t = jg.tensor(x, requires_grad=True)
    assert t[0].grad_fn is not None and not t[0].is_leaf
    assert t[jg.tensor(False)].shape == (0, 3, 4)


@pytest.mark.parametrize("fn,exc,match", [
    (lambda t: t[5], IndexError, "index 5 is out of bounds for dimension 0 with size 3"),
    (lambda t: t[0, 7], IndexError, "index 7 is out of bounds for dimension 1 with size 4"),
    (lambda t: t[0, ..., 5], IndexError, "index 5 is out of bounds for dimension 1 with size 4"),
    (lambda t: t[[0, 5]], IndexError, "index 5 is out of bounds for dimension 0 with size 3"),
    (lambda t: t[0, 0, 0], IndexError, "too many indices for tensor of dimension 2"),
    (lambda t: t[:, :, 0], IndexError, "too many indices for tensor of dimension 2"),
    (lambda t: t[1.5], IndexError, "only integers, slices"),
    (lambda t: t[jg.tensor([1.0])], IndexError, "tensors used as indices must be long, int, byte or bool tensors"),
    (lambda t: t[[True, False]], IndexError,
     r"The shape of the mask \[2\] at index 0 does not match the shape of the indexed tensor \[3, 4\] at index 0"),
])
def test_getitem_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn(jg.zeros(3, 4))


SETITEMS = [
    (1, 5.0), ((slice(None), 0), 2.0), ((0, slice(1, 3)), "vec2"), ([0, 2], "row"), ("bool_mask", 0.0),
    ((Ellipsis, 3), "col"), ("tensor_idx", "row"),
]


@pytest.mark.parametrize("spec,value", SETITEMS, ids=[str(i) for i in range(len(SETITEMS))])
def test_setitem_values_grads_version(spec, value):
    x = rand((3, 4), 1)
    vals = {"vec2": rand((2,), 2), "row": rand((4,), 3), "col": rand((3,), 4)}
    jidx, nidx = _index(spec, True), _index(spec, False)
    jidx = jidx if len(jidx) > 1 else jidx[0]
    nidx = nidx if len(nidx) > 1 else nidx[0]

    def jfn(t, *v):
        y = t * 1.0  # non-leaf
        before = y._version
        y[jidx] = v[0] if v else value
        assert y._version == before + 1
        return y * 2

    def ref(a, *v):
        return (a * 1.0).at[nidx].set(v[0] if v else value) * 2

    arrays = [x] + ([vals[value]] if isinstance(value, str) else [])
    check_op(jfn, ref, arrays)


def test_setitem_basics():
    t = jg.zeros(3)
    t[1] = 2
    assert t.tolist() == [0.0, 2.0, 0.0] and t.dtype is jg.float32 and t._version == 1
    t[jg.tensor([True, False, True])] = jg.tensor(7.0)
    assert t.tolist() == [7.0, 2.0, 7.0] and t._version == 2
    t[:] = jg.tensor([1, 2, 3])
    assert t.tolist() == [1.0, 2.0, 3.0]
    leaf = jg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        leaf[0] = 0.0
    with pytest.raises(RuntimeError, match=r"The expanded size of the tensor \(3\) must match the existing size \(2\)"):
        t[:] = jg.ones(2)
    with pytest.raises(RuntimeError, match="shape mismatch: value tensor of shape \\[2, 3\\] cannot be broadcast"):
        t[0] = jg.ones(2, 3)
    # a value that requires grad makes a plain tensor part of the graph
    w = jg.tensor(3.0, requires_grad=True)
    buf = jg.zeros(3)
    buf[1] = w
    assert buf.requires_grad and buf.grad_fn is not None
    (buf * jg.tensor([1.0, 5.0, 1.0])).sum().backward()
    assert w.grad.item() == 5.0


# ---- type promotion (PyTorch's rules; torch is the reference) ----------------------------------
DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def _pair(torch, a_kind, a_dt, b_kind, b_dt):
    def mk(lib, kind, dt):
        data = [1, 0] if kind == "dim" else 1
        return lib.tensor(data, dtype=getattr(lib, dt))
    return (mk(torch, a_kind, a_dt), mk(torch, b_kind, b_dt)), (mk(jg, a_kind, a_dt), mk(jg, b_kind, b_dt))


def _np_operand(kind, dt):
    """A NumPy stand-in (shape and dtype only) for the operand ``_dtype.result_type`` sees at trace time."""
    return np.zeros((2,) if kind == "dim" else (), dtype=getattr(jg, dt).np)


# Every dtype pair goes through the promotion rule every binary kernel applies at trace time
# (jgrad.core._dtype.result_type: no compile), and a covering subset through the compiled ops
# themselves (each pair compiles kernels: the full 100 x 3 matrix end to end took ~30 s).
E2E_PAIRS = [("bool", "bool"), ("bool", "uint8"), ("uint8", "int8"), ("int8", "int16"), ("int16", "int64"),
             ("int32", "float16"), ("float16", "bfloat16"), ("bfloat16", "float32"), ("float32", "float64"),
             ("int64", "bfloat16"), ("float64", "int8"), ("uint8", "bool")]


@pytest.mark.parametrize("kinds", [("dim", "dim"), ("dim", "zerod"), ("zerod", "zerod")])
def test_tensor_tensor_promotion_matches_pytorch(kinds):
    from jgrad.core import _dtype
    torch = pytest.importorskip("torch")
    bad = []
    for a_dt, b_dt in itertools.product(DTYPES, DTYPES):
        (ta, tb), _ = _pair(torch, kinds[0], a_dt, kinds[1], b_dt)
        expect = str(torch.add(ta, tb).dtype).replace("torch.", "")
        got = _dtype.from_np(_dtype.result_type(_np_operand(kinds[0], a_dt), _np_operand(kinds[1], b_dt))).name
        if got != expect:
            bad.append(("rule", a_dt, b_dt, got, expect))
    for a_dt, b_dt in E2E_PAIRS:
        (ta, tb), (ja, jb) = _pair(torch, kinds[0], a_dt, kinds[1], b_dt)
        for op in ("add", "mul"):
            expect = str(getattr(torch, op)(ta, tb).dtype).replace("torch.", "")
            got = getattr(jg, op)(ja, jb).dtype.name
            if got != expect:
                bad.append((op, a_dt, b_dt, got, expect))
    assert not bad


E2E_DTYPES = ["bool", "uint8", "int32", "bfloat16", "float64"]  # one per category edge; the rule sees all


@pytest.mark.parametrize("scalar", [True, 2, -3, 2.5])
def test_tensor_scalar_promotion_matches_pytorch(scalar):
    from jgrad.core import _dtype
    torch = pytest.importorskip("torch")
    bad = []
    for dt, kind in itertools.product(DTYPES, ("dim", "zerod")):
        data = [1, 0] if kind == "dim" else 1
        t, j = torch.tensor(data, dtype=getattr(torch, dt)), jg.tensor(data, dtype=getattr(jg, dt))
        expect = str(torch.add(t, scalar).dtype).replace("torch.", "")
        got = _dtype.from_np(_dtype.result_type(_np_operand(kind, dt), scalar)).name
        if got != expect:
            bad.append((dt, kind, "rule", got, expect))
        if dt not in E2E_DTYPES:
            continue
        for op in ("add", "mul", "sub", "div"):
            if op == "sub" and (dt == "bool" or isinstance(scalar, bool)):
                with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor"):
                    getattr(jg, op)(j, scalar)
                continue
            expect = str(getattr(torch, op)(t, scalar).dtype).replace("torch.", "")
            got = getattr(jg, op)(j, scalar).dtype.name
            if got != expect:
                bad.append((dt, kind, op, got, expect))
        expect = str((scalar + t).dtype).replace("torch.", "")
        if (scalar + j).dtype.name != expect:
            bad.append((dt, kind, "radd", (scalar + j).dtype.name, expect))
    assert not bad


def test_promotion_examples_and_values():
    assert (jg.tensor([1, 2], dtype=jg.int32) + jg.tensor(3)).dtype is jg.int32  # 0-d of the same category
    assert (jg.tensor([1, 2]) + jg.tensor(1.5, dtype=jg.float64)).dtype is jg.float64  # higher category
    assert (jg.tensor([1.0], dtype=jg.float16) + 1e3).dtype is jg.float16
    assert (jg.tensor([1, 2], dtype=jg.uint8) + jg.tensor([1], dtype=jg.int8)).dtype is jg.int16
    assert (jg.tensor([1], dtype=jg.uint8) - 2).tolist() == [255]
    assert (jg.tensor([1, 2]) / 2).tolist() == [0.5, 1.0]
    assert (np.float64(2.0) * jg.tensor([1.0])).dtype is jg.float32  # NumPy scalars act as Python numbers
    assert (jg.tensor([1.0]) * np.float32(2.0)).tolist() == [2.0]
    assert jg.where(jg.tensor([True]), jg.tensor([1]), jg.tensor([2.0], dtype=jg.float64)).dtype is jg.float64


def test_operator_rejects_unknown_types():
    with pytest.raises(TypeError):
        jg.ones(2) + "a"
    with pytest.raises(TypeError):
        jg.ones(2) * [1, 2]
    assert (jg.ones(2) == "a") is False
