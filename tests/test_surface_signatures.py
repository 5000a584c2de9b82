"""Issues 30 and 32: the names they list have PyTorch's signatures (parameter names, kinds and defaults, read
with ``inspect.signature`` from both libraries), and the determinism settings read back as PyTorch's."""
import importlib
import inspect

import pytest

torch = pytest.importorskip("torch")

import jgrad as jg  # noqa: E402

NAMES = """
cuda.is_available cuda.device_count cuda.current_device cuda.synchronize cuda.memory_stats cuda.manual_seed_all
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
empty is_complex broadcast_tensors use_deterministic_algorithms set_deterministic_debug_mode
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
    finally:
        torch.use_deterministic_algorithms(False)
        jg.use_deterministic_algorithms(False)
