"""The PyTorch names training programs meet first, against PyTorch: torch.accelerator / cuda / backends / onnx,
the StableHLO export, legacy tensor types, Tensor.__format__, memory formats, broadcast_tensors, the
torch.nn.modules class paths, LSTM.flatten_parameters and nn.parallel.data_parallel."""
import importlib
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jax  # noqa: E402

import jgrad as jg  # noqa: E402
from jgrad.core import _accelerators  # noqa: E402


def _same_error(fn_jg, fn_torch):
    with pytest.raises(Exception) as expected:
        fn_torch()
    with pytest.raises(expected.type) as got:
        fn_jg()
    assert str(got.value) == str(expected.value)


@pytest.mark.one_execution_mode  # no kernel runs here
def test_accelerator_cuda_and_backends(monkeypatch):
    has_gpu = any(d.platform == "gpu" for d in jax.devices())
    assert jg.cuda.is_available() is has_gpu and jg.accelerator.is_available() is has_gpu
    if not has_gpu:  # this machine's PyTorch is a CPU build, as this JAX: the same answers
        assert jg.accelerator.current_accelerator() is None is torch.accelerator.current_accelerator()
        assert jg.accelerator.device_count() == torch.accelerator.device_count() == 0
        for name in ("current_device_index", "synchronize", "memory_allocated", "empty_cache"):
            _same_error(getattr(jg.accelerator, name), getattr(torch.accelerator, name))
        with jg.accelerator.device_index(None):
            pass
        assert jg.cuda.memory_allocated() == torch.cuda.memory_allocated() == 0
        assert jg.cuda.memory_stats() == dict(torch.cuda.memory_stats()) == {}
        jg.cuda.manual_seed(3)
        jg.cuda.manual_seed_all(3)  # nothing to seed, as PyTorch's without CUDA
        for fn in (jg.cuda.current_device, jg.cuda.synchronize, lambda: jg.cuda.set_device(0)):
            with pytest.raises(RuntimeError, match="No CUDA GPUs are available"):
                fn()
        with pytest.raises(RuntimeError, match="torch.cuda.Stream requires CUDA support"):
            jg.cuda.Stream()
    else:
        assert jg.accelerator.current_accelerator() == jg.device("gpu")
        s = jg.cuda.Stream()
        assert isinstance(s, jg.Stream) and s.device == jg.device("cuda") and jg.cuda.current_device() == 0
        jg.cuda.manual_seed_all(3)
        jg.cuda.synchronize()
    assert jg.cuda.Event is jg.Event and jg.cuda.graph is jg.graph and jg.cuda.CUDAGraph is jg.Graph
    # backends: the module path, the flags, and allow_tf32 as PyTorch maps it onto the matmul precision
    cudnn = importlib.import_module("jgrad.backends.cudnn")
    assert (cudnn.enabled, cudnn.benchmark, cudnn.deterministic) == (True, False, False)
    cudnn.benchmark, cudnn.deterministic = True, True
    assert jg.backends.cudnn.benchmark and jg.backends.cudnn.deterministic
    cudnn.benchmark, cudnn.deterministic = False, False
    # The precision as a plain value: a real change would drop every compiled kernel of this process.
    from jgrad.ops import linalg
    setting = ["highest"]
    monkeypatch.setattr(linalg, "get_float32_matmul_precision", lambda: setting[0])
    monkeypatch.setattr(linalg, "set_float32_matmul_precision", lambda p: setting.__setitem__(0, p))
    try:
        for value in (True, False):
            jg.backends.cuda.matmul.allow_tf32 = value
            torch.backends.cuda.matmul.allow_tf32 = value
            assert setting[0] == torch.get_float32_matmul_precision()
        for p in ("medium", "high", "highest"):
            setting[0] = p
            torch.set_float32_matmul_precision(p)
            assert jg.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32 == cudnn.allow_tf32
        with cudnn.flags(enabled=False, allow_tf32=True):
            assert not cudnn.enabled and setting[0] == "high"
        assert cudnn.enabled and setting[0] == "highest"
    finally:
        torch.set_float32_matmul_precision("highest")
    _same_error(lambda: jg.backends.cuda.matmul.no_such_flag, lambda: torch.backends.cuda.matmul.no_such_flag)
    assert jg.backends.mps.is_available() is torch.backends.mps.is_available() is False


@pytest.mark.one_execution_mode
def test_memory_statistics_from_xla(monkeypatch):
    """PyTorch's names over XLA's allocator statistics, and reset_peak_memory_stats over peaks XLA cannot reset
    (a pretend GPU whose statistics the test sets)."""
    stats = {"bytes_in_use": 40, "peak_bytes_in_use": 100, "pool_bytes": 200, "peak_pool_bytes": 300,
             "bytes_limit": 1000, "num_allocs": 7}
    monkeypatch.setattr(_accelerators, "count", lambda kind: 1 if kind == "gpu" else 0)
    monkeypatch.setattr(_accelerators, "_raw_stats", lambda dev: dict(stats))
    monkeypatch.setattr(_accelerators, "_resets", {})
    assert (jg.cuda.memory_allocated(), jg.cuda.max_memory_allocated(), jg.cuda.memory_reserved(),
            jg.cuda.max_memory_reserved()) == (40, 100, 200, 300)
    assert jg.cuda.memory_stats()["allocation.all.allocated"] == 7 and jg.cuda.mem_get_info() == (960, 1000)
    assert jg.accelerator.memory_allocated() == 40 and jg.accelerator.current_device_index() == 0
    jg.cuda.reset_peak_memory_stats()
    stats["bytes_in_use"] = 30
    assert jg.cuda.max_memory_allocated() == 40      # the old peak is gone: in use at the reset
    stats.update(bytes_in_use=50)
    assert jg.cuda.max_memory_allocated() == 50
    stats.update(peak_bytes_in_use=150)              # a new peak above the old one is XLA's own
    assert jg.cuda.max_memory_allocated() == 150


@pytest.mark.one_execution_mode
def test_onnx_points_to_stablehlo_export():
    """The export traces in eager mode even when "auto" execution is on."""
    with jg.execution_mode("auto"):
        _export_checks()


def _export_checks():
    import jgrad.onnx
    assert jgrad.onnx.is_in_onnx_export() is False
    with pytest.raises(RuntimeError, match=r"jgrad.export_stablehlo\(model, args, f\)"):
        jgrad.onnx.export(jg.nn.Linear(2, 2), (jg.zeros(1, 2),), "model.onnx")
    jg.manual_seed(0)
    model = jg.nn.Sequential(jg.nn.Linear(3, 4), jg.nn.ReLU(), jg.nn.Dropout(0.5), jg.nn.Linear(4, 2))
    x = jg.randn(5, 3)
    exported = jg.export_stablehlo(model, (x,))
    assert model.training                            # exported in eval mode, given back in train mode
    expected = model.eval()(x).detach().numpy()
    np.testing.assert_allclose(np.asarray(exported.call(x.numpy())), expected, rtol=1e-6)
    assert "stablehlo" in exported.mlir_module()
    try:
        import flatbuffers  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install flatbuffers"):
            jg.export_stablehlo(model, x, io.BytesIO())
        return
    buf = io.BytesIO()
    jg.export_stablehlo(model, x, buf)
    np.testing.assert_allclose(np.asarray(jax.export.deserialize(buf.getvalue()).call(x.numpy())), expected,
                               rtol=1e-6)


@pytest.mark.cpu_only("checks the CPU legacy types (a GPU tensor is a jgrad.cuda.FloatTensor, as in PyTorch)")
@pytest.mark.one_execution_mode  # nothing here depends on the execution mode
def test_legacy_types_format_and_predicates():
    for args in ((2, 3), ([1, 2],), ([1.7, -2.2],), (), (np.arange(3),), ([[1, 2], [3, 4]],)):
        for name in ("FloatTensor", "LongTensor", "DoubleTensor", "IntTensor", "BoolTensor"):
            j, t = getattr(jg, name)(*args), getattr(torch, name)(*args)
            assert j.shape == tuple(t.shape) and str(j.dtype).split(".")[1] == str(t.dtype).split(".")[1]
            if args and not isinstance(args[0], int):
                assert j.tolist() == t.tolist()
    for name in ("FloatTensor", "LongTensor", "DoubleTensor", "BoolTensor", "HalfTensor"):
        for value in (1.5, 2, True):
            for dt in ("float32", "float64", "int64", "bool"):
                j = jg.tensor([value], device="cpu").to(getattr(jg, dt))   # legacy types are CPU types
                t = torch.tensor([value]).to(getattr(torch, dt))
                assert isinstance(j, getattr(jg, name)) == isinstance(t, getattr(torch, name))
        assert not isinstance(jg.zeros(1), getattr(jg.cuda, name))
    a = jg.tensor([1.0, 2.0], device="cpu")
    assert jg.FloatTensor(a) is a
    for bad in (("a",), (2.5,), (True,)):
        _same_error(lambda: jg.FloatTensor(*bad), lambda: torch.FloatTensor(*bad))
    with pytest.raises(TypeError):
        jg.FloatTensor(jg.tensor([1.0], dtype=jg.float64))
    with pytest.raises(TypeError, match="new\\(\\) received an invalid combination of arguments"):
        jg.FloatTensor(2, dtype=jg.float64)
    for value in (1.23456, -3, 0.5, True):
        for spec in ("+.2f", ".3e", "", "8.1f", "g"):
            if isinstance(value, bool) and spec not in ("", "g"):
                continue
            assert format(jg.tensor(value), spec) == format(torch.tensor(value), spec)
    assert format(jg.tensor([1.0, 2.0]), "") == str(jg.tensor([1.0, 2.0]))
    _same_error(lambda: format(jg.tensor([1.0, 2.0]), "+.2f"), lambda: format(torch.tensor([1.0, 2.0]), "+.2f"))
    # empty(size=...), predicates, memory formats
    assert jg.empty(size=(2, 3)).shape == (2, 3) and jg.empty(size=[4], dtype=jg.int64).dtype == jg.int64
    _same_error(lambda: jg.empty(2, size=(2,)), lambda: torch.empty(2, size=(2,)))
    for j, t in ((jg.zeros(2, device="cpu"), torch.zeros(2)),
                 (jg.zeros(2, dtype=jg.int64, device="cpu"), torch.zeros(2, dtype=torch.int64))):
        assert (jg.is_complex(j), jg.is_floating_point(j)) == (torch.is_complex(t), torch.is_floating_point(t))
        for attr in ("is_sparse", "is_xpu", "is_mps", "is_cpu", "is_meta", "is_quantized", "is_cuda"):
            assert getattr(j, attr) == getattr(t, attr), attr
    assert repr(jg.contiguous_format) == "jgrad.contiguous_format" and isinstance(jg.preserve_format, jg.memory_format)
    assert jg.ones(2, 3).is_contiguous() and jg.ones(2, 3).is_contiguous(memory_format=jg.preserve_format)
    assert jg.empty(1, 2, 3, 4, memory_format=jg.channels_last).shape == (1, 2, 3, 4)


@pytest.mark.one_execution_mode
def test_broadcast_tensors_like_torch():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s) for s in ((2, 1), (3,), (1, 1))]
    j = [jg.tensor(x, requires_grad=True) for x in xs]
    t = [torch.tensor(x, requires_grad=True) for x in xs]
    jo, to = jg.broadcast_tensors(*j), torch.broadcast_tensors(*t)
    for a, b in zip(jo, to):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    (jo[0] * jo[1] * jo[2] * 2).sum().backward()
    (to[0] * to[1] * to[2] * 2).sum().backward()
    for a, b in zip(j, t):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)
    assert jg.broadcast_shapes((2, 1), (3,), 1) == tuple(torch.broadcast_shapes((2, 1), (3,), 1))
    _same_error(lambda: jg.broadcast_tensors(jg.ones(2), jg.ones(3)),
                lambda: torch.broadcast_tensors(torch.ones(2), torch.ones(3)))


@pytest.mark.one_execution_mode
def test_nn_class_paths_flatten_parameters_and_data_parallel():
    for path, name in (("rnn", "LSTM"), ("rnn", "GRU"), ("rnn", "RNNBase"), ("linear", "Linear"),
                       ("linear", "Identity"), ("conv", "Conv2d"), ("pooling", "MaxPool2d"), ("sparse", "Embedding"),
                       ("activation", "ReLU"), ("activation", "MultiheadAttention"), ("batchnorm", "BatchNorm2d"),
                       ("normalization", "LayerNorm"), ("dropout", "Dropout"), ("loss", "CrossEntropyLoss"),
                       ("container", "Sequential"), ("module", "Module"), ("transformer", "TransformerEncoder"),
                       ("flatten", "Flatten"), ("instancenorm", "InstanceNorm1d")):
        assert hasattr(importlib.import_module(f"torch.nn.modules.{path}"), name)
        assert getattr(importlib.import_module(f"jgrad.nn.modules.{path}"), name) is getattr(jg.nn, name)
    assert jg.nn.modules.rnn.LSTM is jg.nn.LSTM and jg.nn.LSTM(2, 3).flatten_parameters() is None
    # data_parallel over two (virtual CPU) devices: the same output and gradients as one device
    jg.manual_seed(0)
    model = jg.nn.Linear(3, 2, device="cpu")
    x = jg.randn(5, 3, device="cpu")
    out = jg.nn.parallel.data_parallel(model, x, device_ids=["cpu:0", "cpu:1"])
    (out * out).sum().backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    ref = model(x)
    (ref * ref).sum().backward()
    assert out.device == jg.device("cpu") and out.shape == (5, 2)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-6)
    for g, p in zip(grads, model.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-7)

    class Pair(jg.nn.Module):
        def forward(self, a, b):
            return {"s": (a * b,)}

    pair = jg.nn.parallel.data_parallel(Pair(), (x, x), device_ids=["cpu:1", "cpu:0"], output_device="cpu:0")
    assert pair["s"][0].device == jg.device("cpu") and pair["s"][0].shape == (5, 3)
    np.testing.assert_allclose(pair["s"][0].numpy(), (x * x).numpy())
    with pytest.raises(RuntimeError, match=r"module must have its parameters and buffers on device cpu:1"):
        jg.nn.parallel.data_parallel(model, x, device_ids=["cpu:1"])
    if not jg.cuda.is_available():
        np.testing.assert_array_equal(jg.nn.DataParallel(model)(x).detach().numpy(), ref.detach().numpy())
