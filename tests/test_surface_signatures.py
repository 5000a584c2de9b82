"""Issues 30 and 32: the names they list have PyTorch's signatures (parameter names, kinds and defaults, read
with ``inspect.signature`` from both libraries); the determinism settings read back as PyTorch's;
``set_printoptions`` prints as PyTorch's and ``testing.assert_close`` passes, fails and words its failures as
PyTorch's."""
import importlib
import inspect

import numpy as np

import pytest

torch = pytest.importorskip("torch")

import jgrad as jg  # noqa: E402

NAMES = """
cuda.is_available cuda.device_count cuda.current_device cuda.synchronize cuda.memory_stats cuda.manual_seed_all
cuda.graph
linalg.norm linalg.vector_norm linalg.matrix_norm linalg.svd linalg.inv linalg.solve linalg.cholesky linalg.eigh
linalg.qr linalg.det linalg.slogdet linalg.pinv linalg.lstsq fft.fft fft.rfft fft.irfft fft.fftn fft.rfftfreq
fft.fftshift special.erfinv special.polygamma special.logit special.xlog1py special.zeta
distributions.Normal distributions.Categorical distributions.Bernoulli distributions.MultivariateNormal
distributions.Independent distributions.kl_divergence autocast amp.GradScaler optim.LBFGS optim.RMSprop
optim.Adagrad optim.Adadelta optim.Adamax optim.NAdam optim.RAdam optim.swa_utils.AveragedModel
optim.swa_utils.SWALR nn.functional.interpolate nn.functional.grid_sample nn.functional.unfold nn.functional.fold
nn.functional.pixel_shuffle nn.Upsample nn.PixelShuffle nn.Bilinear nn.Unflatten nn.utils.weight_norm
nn.utils.spectral_norm nn.utils.rnn.pack_padded_sequence nn.utils.rnn.pad_packed_sequence nn.utils.rnn.pack_sequence
histc quantile nanquantile polygamma view_as_real sparse_coo_tensor sparse.mm sparse.sum Tensor.to_sparse
nn.parallel.DistributedDataParallel utils.data.RandomSampler utils.data.DataLoader accelerator.current_accelerator
empty is_complex broadcast_tensors use_deterministic_algorithms set_deterministic_debug_mode set_printoptions
testing.assert_close
""".split()


def _get(root, path):
    obj = root
    for part in path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(f"{obj.__name__}.{part}")
    return obj


def _params(fn):
    sig = inspect.signature(fn.__init__ if inspect.isclass(fn) else fn)
    return [(p.name, p.kind, p.default if not callable(p.default) else "<callable>")
            for p in sig.parameters.values() if p.name != "self" and p.kind is not p.VAR_KEYWORD]


@pytest.mark.one_execution_mode  # reads signatures only
def test_issue_30_and_32_names_have_pytorchs_signatures():
    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"the signatures are torch 2.13's (the test extra's pin); this is torch {torch.__version__}")
    differ = []
    for name in NAMES:
        try:
            theirs = _params(_get(torch, name))
        except (ValueError, TypeError):  # a builtin without a signature: nothing to compare
            continue
        if _params(_get(jg, name)) != theirs:
            differ.append(name)
    assert differ == []


@pytest.mark.one_execution_mode
def test_load_takes_pickle_module_third_and_determinism_settings_read_back():
    assert list(inspect.signature(jg.load).parameters)[:3] == ["f", "map_location", "pickle_module"]
    try:
        for mode in ("warn", 2, 0, "error", "default"):
            torch.set_deterministic_debug_mode(mode)
            jg.set_deterministic_debug_mode(mode)
            assert jg.get_deterministic_debug_mode() == torch.get_deterministic_debug_mode()
            assert jg.are_deterministic_algorithms_enabled() == torch.are_deterministic_algorithms_enabled()
            assert jg.is_deterministic_algorithms_warn_only_enabled() == \
                torch.is_deterministic_algorithms_warn_only_enabled()
        for bad in (3, "x", 1.5):
            with pytest.raises(Exception) as theirs:
                torch.set_deterministic_debug_mode(bad)
            with pytest.raises(theirs.type, match=str(theirs.value)[:30]):
                jg.set_deterministic_debug_mode(bad)
        with pytest.raises(TypeError, match="must be bool, not int"):
            jg.use_deterministic_algorithms(1)
    finally:  # (not torch.use_deterministic_algorithms: it imports torch's compiler stack, seconds of CPU)
        torch.set_deterministic_debug_mode(0)
        jg.use_deterministic_algorithms(False)


@pytest.mark.one_execution_mode  # prints host values only
def test_set_printoptions_prints_as_pytorch():
    data = [np.array([1.12345, 2.5, 1e-5]), np.arange(30.0), np.array([[1.5, 2.25], [3.125, 4.0]]),
            np.array([123456.789, 0.5])]
    try:
        for opts in (dict(precision=2), dict(threshold=5), dict(edgeitems=1, threshold=5), dict(linewidth=20),
                     dict(profile="short"), dict(profile="full"), dict(sci_mode=True), dict(sci_mode=False)):
            torch.set_printoptions(**opts)
            jg.set_printoptions(**opts)
            for d in data:
                mine = jg.tensor(d, dtype=jg.float32, device="cpu")  # a CPU tensor's repr names no device
                assert repr(mine) == repr(torch.tensor(d, dtype=torch.float32)), opts
            assert jg.core._format.get_printoptions() == torch._tensor_str.get_printoptions()
    finally:
        torch.set_printoptions(profile="default")
        jg.set_printoptions(profile="default")


def _close_cases(lib):
    t = lib.tensor
    return [((t([1.0, 2.0, 3.0]), t([1.0, 2.1, 3.0])), {}), ((t([1.0, 2.0]), t([1.0, 2.0], dtype=lib.float64)), {}),
            ((t([1, 2]), t([1, 3])), {}), ((t([1.0, float("nan")]), t([1.0, float("nan")])), {}),
            ((t([1.0, float("nan")]), t([1.0, float("nan")])), {"equal_nan": True}), ((t(1.0), t(1.5)), {}),
            ((1.0, 1.5), {}), (({"a": [t(1.0)]}, {"a": [t(3.0)]}), {}), ((t([1.0]), t([1.0])), {"rtol": 1e-3}),
            ((t([[1.0, 2.0], [3, 4]]), t([[1.0, 2.0], [3, 5]])), {"msg": "custom"}),
            ((t([[1.0, 2.0], [3, 4]]), t([[1.0, 2.0], [3, 4.00001]])), {}),
            ((t([[1.0, 2.0], [3, 4]]), t([[1.0, 2.0], [3, 4.5]])), {"rtol": 0.1, "atol": 0.0}),
            ((t([True, False]), t([True, True])), {}), (([1, 2], [1, 2, 3]), {}),
            ((t([1.0, 2.5], dtype=lib.float16), t([1.0, 2.502], dtype=lib.float16)), {}), ((t([1.0]), [1.0]), {})]


@pytest.mark.one_execution_mode  # compares host values only
def test_assert_close_is_pytorchs():
    for (ours, kw), (theirs, _) in zip(_close_cases(jg), _close_cases(torch)):
        with pytest.raises(Exception) if _raises(torch.testing.assert_close, theirs, kw) else _nothing() as got:
            jg.testing.assert_close(*ours, **kw)
        if got is not None:
            with pytest.raises(Exception) as expected:
                torch.testing.assert_close(*theirs, **kw)
            assert got.type is expected.type
            text = str(expected.value).replace("torch.Size([", "(").replace("])", ",)").replace("torch.", "jgrad.")
            assert str(got.value).replace("<class 'jgrad.core._tensor.Tensor'>", "<class 'jgrad.Tensor'>") == text


def _raises(fn, args, kw):
    try:
        fn(*args, **kw)
    except Exception:  # noqa: BLE001
        return True
    return False


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
