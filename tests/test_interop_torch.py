"""interop.torch: zero copy both ways by data pointer, every dtype, 0-d/empty, errors, mutation semantics,
and wrap(): jgrad functions inside torch autograd, checked against torch's own autograd of the same math."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jgrad as jg  # noqa: E402
from interop.numpy import to_numpy  # noqa: E402
from interop.torch import from_torch, to_torch, wrap  # noqa: E402

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64, "complex64": torch.complex64, "complex128": torch.complex128,
                "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                "int64": torch.int64, "bool": torch.bool}


def jptr(t):
    return t._data.unsafe_buffer_pointer()


def sample(shape, dt):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 10
    if dt.is_complex:
        return torch.complex(x, x * 0.5).to(dt)
    if dt == torch.bool:
        return x > 0
    return x.to(dt)


@pytest.mark.parametrize("name", list(TORCH_DTYPES))
def test_torch_to_jgrad_zero_copy(name):
    x = sample((3, 4), TORCH_DTYPES[name])
    t = from_torch(x)
    assert t.dtype is getattr(jg, name) and t.device == jg.device("cpu")
    assert jptr(t) == x.data_ptr()
    back = to_torch(t)
    assert back.dtype == x.dtype and back.data_ptr() == x.data_ptr()
    assert torch.equal(back, x)
    assert jg.from_dlpack(x).dtype is getattr(jg, name)


@pytest.mark.parametrize("name", list(TORCH_DTYPES))
def test_jgrad_to_torch_zero_copy(name):
    x = sample((2, 5), TORCH_DTYPES[name])
    t = jg.from_dlpack(x, copy=True)
    assert jptr(t) != x.data_ptr()
    y = to_torch(t)
    assert y.data_ptr() == jptr(t) and y.dtype == x.dtype and torch.equal(y, x)
    z = torch.from_dlpack(t)                    # torch as the consumer of the protocol
    assert z.data_ptr() == jptr(t)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0)])
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_zero_d_and_empty(shape, dt):
    x = sample(shape, dt)
    t = from_torch(x)
    assert t.shape == shape and t.dtype.name == str(dt).split(".")[1]
    if shape == ():
        assert jptr(t) == x.data_ptr()
    y = to_torch(t)
    assert y.shape == x.shape and torch.equal(y, x)


def test_transposed_shared_other_views_copied_or_refused():
    base = torch.arange(24.0).reshape(4, 6)
    t = from_torch(base.t())                                      # a permutation of a compact layout
    assert jptr(t) == base.data_ptr()
    np.testing.assert_array_equal(to_numpy(t), base.t().numpy())
    for view in (base[:, ::2], base.expand(2, 4, 6), base[1:], torch.ones(3).expand(4, 3)):
        u = from_torch(view)
        np.testing.assert_array_equal(to_numpy(u), view.numpy())
        with pytest.raises(BufferError, match="contiguous|aligned"):
            from_torch(view, copy=False)
    c = torch.randn(3, dtype=torch.complex64).conj()
    np.testing.assert_array_equal(to_numpy(from_torch(c)), c.resolve_conj().numpy())
    with pytest.raises(BufferError, match="conjugate"):
        from_torch(c, copy=False)
    assert jptr(from_torch(base, copy=True)) != base.data_ptr()


def test_requires_grad_rules():
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="require"):
        jg.from_dlpack(x)                          # torch's own refusal, as in PyTorch
    t = from_torch(x)                              # the helper detaches
    assert jptr(t) == x.data_ptr() and not t.requires_grad
    p = jg.ones(3, requires_grad=True)
    with pytest.raises(BufferError, match="require"):
        torch.from_dlpack(p)
    y = to_torch(p)
    assert y.data_ptr() == jptr(p) and not y.requires_grad


def test_bad_inputs():
    with pytest.raises(TypeError, match="torch.Tensor"):
        from_torch(np.ones(2))
    with pytest.raises(TypeError):
        to_torch(np.ones(2))


# ---- mutation semantics ------------------------------------------------------------------------------------
@pytest.mark.cpu_only("torch's CPU tensors; on a GPU torch's writes are not ordered with jgrad's stream")
def test_jgrad_inplace_leaves_torch_alias_unchanged():
    t = jg.arange(4.0)
    x = to_torch(t)
    t.add_(1)
    t[2] = 9.0
    t.zero_()
    assert torch.equal(x, torch.arange(4.0))
    assert to_numpy(t).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_jgrad_inplace_on_imported_tensor_leaves_torch_source_unchanged():
    x = torch.arange(4.0)
    t = from_torch(x)
    t.mul_(10)
    t.copy_(jg.ones(4))
    assert torch.equal(x, torch.arange(4.0))


@pytest.mark.cpu_only("torch's CPU tensors; on a GPU torch's writes are not ordered with jgrad's stream")
def test_torch_mutation_is_seen_by_jgrad_unless_copied():
    x = torch.zeros(4)
    shared, private = from_torch(x), from_torch(x, copy=True)
    x.add_(1)                                          # documented as unsafe; defined as "visible"
    assert to_numpy(shared).tolist() == [1.0] * 4
    assert to_numpy(private).tolist() == [0.0] * 4
    t = jg.zeros(3)
    y, y_private = to_torch(t), to_torch(t, copy=True)
    assert y.data_ptr() == jptr(t) and y_private.data_ptr() != jptr(t)
    y_private.add_(5)
    assert to_numpy(t).tolist() == [0.0] * 3
    y.add_(2)                                          # unsafe, documented: jgrad sees torch's write
    assert to_numpy(t).tolist() == [2.0] * 3


# ---- wrap -------------------------------------------------------------------------------------------------
def mlp_jg(x, w1, b1, w2):
    h = jg.tanh(x @ w1 + b1)
    return jg.relu(h) @ w2


def mlp_torch(x, w1, b1, w2):
    h = torch.tanh(x @ w1 + b1)
    return torch.relu(h) @ w2


def params(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g, dtype=dtype).mul_(sc).requires_grad_() for s, sc in
            (((6, 4), 1.0), ((4, 8), 0.5), ((8,), 0.1), ((8, 3), 0.5))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_wrap_gradients_match_torch_autograd(dtype):
    f = wrap(mlp_jg)
    ps = params(dtype)
    out = f(*ps)
    assert out.dtype == dtype and out.requires_grad and out.grad_fn is not None
    loss = (out.sin() * torch.arange(3, dtype=dtype)).sum()      # torch ops after the jgrad part
    loss.backward()
    got = [p.grad.clone() for p in ps]
    ref_ps = [p.detach().clone().requires_grad_() for p in ps]
    ref_out = mlp_torch(*ref_ps)
    torch.testing.assert_close(out.detach(), ref_out.detach())
    (ref_out.sin() * torch.arange(3, dtype=dtype)).sum().backward()
    for g, p in zip(got, ref_ps):
        torch.testing.assert_close(g, p.grad)


def test_wrap_passes_torch_gradcheck():
    f = wrap(lambda x, w: jg.tanh(x @ w) * jg.exp(-x.sum()))
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(f, (x, w))


def test_wrap_multiple_outputs_non_tensor_args_and_partial_requires_grad():
    def fn(x, w, scale, mode):
        y = x @ w * scale
        return (jg.relu(y) if mode == "relu" else y), (y * y).sum(), (y > 0).sum()

    f = wrap(fn)
    x = torch.randn(5, 3, dtype=torch.float64)                          # no grad
    w = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    a, b, n = f(x, w, 2.0, "relu")
    assert not n.requires_grad and n.dtype == torch.int64
    (a.sum() + b).backward()
    got = w.grad.clone()
    w2 = w.detach().clone().requires_grad_()
    y = x @ w2 * 2.0
    (torch.relu(y).sum() + (y * y).sum()).backward()
    torch.testing.assert_close(got, w2.grad)
    assert int(n) == int((y > 0).sum())


def test_wrap_only_some_outputs_used():
    f = wrap(lambda x: (x * 2, x * 3))
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    a, b = f(x)
    b.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 3.0, dtype=torch.float64))


def test_wrap_retain_graph_and_accumulation():
    f = wrap(lambda x: (x * x).sum())
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    y = f(x)
    y.backward(retain_graph=True)
    y.backward()
    torch.testing.assert_close(x.grad, 4 * x.detach())


def test_wrap_runs_jgrad_hooks():
    def fn(x):
        y = x * 3
        y.register_hook(lambda g: g * 2)
        return y.sum()

    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    wrap(fn)(x).backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 6.0, dtype=torch.float64))


def test_wrap_identity_does_not_alias_torch_tensors():
    f = wrap(lambda x: x)
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    y = f(x)
    assert y.data_ptr() != x.data_ptr()
    y2 = y * 1
    g = torch.randn(4, dtype=torch.float64)
    y2.backward(g)
    torch.testing.assert_close(x.grad, g)
    assert x.grad.data_ptr() != g.data_ptr()
    g.add_(1)                                           # torch's gradient is not an alias of g
    torch.testing.assert_close(x.grad, g - 1)


def test_wrap_detects_inplace_change_of_saved_input():
    f = wrap(lambda x: (x * x).sum())
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    a = x * 1
    y = f(a)
    with torch.no_grad():
        a.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_wrap_is_once_differentiable():
    f = wrap(lambda x: (x * x * x).sum())
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(f(x), x, create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()


# ---- GPU (skipped on CPU-only machines) --------------------------------------------------------------------
def _gpu():
    return torch.cuda.is_available() and jg.is_available("gpu")


@pytest.mark.parametrize("where", ["cpu", pytest.param("gpu", marks=pytest.mark.skipif(
    not _gpu(), reason="needs a CUDA GPU visible to both torch and JAX"))])
def test_copy_into_memory_shared_with_torch_leaves_the_other_side_unchanged(where):
    # copy_ must never write into memory shared with torch through DLPack, imported or exported (an
    # experiment that donated the tensor's buffer to the copy did, on the GPU: RESULTS.md, 2026-11-25).
    tdev = "cuda" if where == "gpu" else "cpu"
    x = torch.arange(4.0, device=tdev)
    t = from_torch(x)
    for v in (1.0, 2.0):
        t.copy_(jg.full((4,), v, device=where))
    assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0] and to_numpy(t).tolist() == [2.0] * 4
    u = jg.zeros(4, device=where)
    for v in (1.0, 2.0):
        u.copy_(jg.full((4,), v, device=where))
    y = to_torch(u)
    u.copy_(jg.full((4,), 7.0, device=where))
    if where == "gpu":
        torch.cuda.synchronize()
    assert y.cpu().tolist() == [2.0] * 4 and to_numpy(u).tolist() == [7.0] * 4


@pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU visible to both torch and JAX")
def test_cuda_zero_copy_both_ways():
    x = torch.arange(12.0, device="cuda").reshape(3, 4)
    t = from_torch(x)
    assert t.device.type == "gpu" and jptr(t) == x.data_ptr()
    y = to_torch(jg.ones(5, device="gpu") * 2)
    assert y.is_cuda and y.data_ptr() != 0 and torch.equal(y.cpu(), torch.full((5,), 2.0))
    u = jg.tensor(np.arange(6.0), device="gpu")
    z = to_torch(u)
    assert z.data_ptr() == jptr(u)
    for name, dt in TORCH_DTYPES.items():
        a = sample((2, 3), dt).cuda()
        assert jptr(from_torch(a)) == a.data_ptr()


@pytest.mark.skipif(not _gpu(), reason="needs a CUDA GPU visible to both torch and JAX")
def test_cuda_stream_handshake_with_a_torch_side_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        big = torch.randn(4096, 4096, device="cuda")
        for _ in range(5):
            big = big @ big / 64.0            # queue real work on the side stream
        t = jg.from_dlpack(big)               # import: torch makes JAX's stream wait for s (no host sync)
    got = to_numpy(t)                         # jgrad reads after the producer's work, not before
    s.synchronize()
    np.testing.assert_allclose(got, big.cpu().numpy(), rtol=1e-5, atol=1e-5)
    u = jg.ones(1024, 1024, device="gpu") * 3
    with torch.cuda.stream(s):
        x = torch.from_dlpack(u)              # export: the side stream waits for jgrad's buffer
        r = (x * 2).sum()
    s.synchronize()
    assert float(r) == 6.0 * 1024 * 1024
