"""examples/gallery: three public-style programs (a CNN classifier, an LSTM language model, a VAE) run unchanged on
PyTorch and on jgrad (their one import line switched); from the same weights and batches, 20 training steps give
the same losses."""
import os
import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jgrad as jg  # noqa: E402

GALLERY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "gallery")
IMPORT_LINE = "import jgrad as torch  # the one line to switch: `import torch` runs this file on PyTorch\n"
STEPS = 20


def load(name, backend):
    """``examples/gallery/<name>.py`` as a module, on jgrad or (its import line switched) on PyTorch."""
    with open(os.path.join(GALLERY, f"{name}.py")) as f:
        source = f.read()
    assert source.count(IMPORT_LINE) == 1 and "import torch\n" not in source
    if backend == "torch":
        source = source.replace(IMPORT_LINE, "import torch\n")
    module = types.ModuleType(f"gallery_{name}_{backend}")
    sys.modules[module.__name__] = module
    exec(compile(source, f"{name}.py ({backend})", "exec"), module.__dict__)
    assert module.torch is (jg if backend == "jgrad" else torch)
    return module


def _same_weights(jmodel, tmodel):
    jmodel.load_state_dict({k: jg.tensor(v.numpy()) for k, v in tmodel.state_dict().items()})


def _cnn(m, model):
    args = m.parse_args(["--dropout", "0", "--log-interval", "0"])
    loader = m.torch.utils.data.DataLoader(m.make_dataset(STEPS * 8, 0), batch_size=8)
    optimizer = m.torch.optim.Adadelta(model.parameters(), lr=1.0)
    return m.train(args, model, m.torch.device("cpu"), loader, optimizer, 1)


def _lstm(m, model, corpus):
    args = m.parse_args(["--dropout", "0", "--batch-size", "4", "--bptt", "8"])
    data = m.batchify(corpus.train, args.batch_size, m.torch.device("cpu"))
    losses = []
    while len(losses) < STEPS:
        losses += m.train_epoch(args, model, data, args.lr, len(corpus.dictionary))
    return losses[:STEPS]


def _vae(m, model):
    noise = np.random.default_rng(0).standard_normal((STEPS, 8, m.Z)).astype(np.float32)
    draws = iter(noise)
    # The program draws its noise with randn_like; the two libraries' generators differ, so both get the same
    # draws here (an instance attribute: the program's source is unchanged).
    model.reparameterize = lambda mu, logvar: mu + m.torch.tensor(next(draws)) * m.torch.exp(0.5 * logvar)
    args = m.parse_args([])
    loader = m.torch.utils.data.DataLoader(m.make_dataset(STEPS * 8, 0), batch_size=8)
    optimizer = m.torch.optim.Adam(model.parameters(), lr=args.lr)
    return m.train(args, model, m.torch.device("cpu"), loader, optimizer, 1)


@pytest.mark.cpu_only("compares with the same programs on PyTorch's CPU")
@pytest.mark.one_execution_mode  # each program runs in one mode (compiles dominate the cost): both modes covered
@pytest.mark.parametrize("name, mode", [("cnn_classifier", "eager"), ("lstm_language_model", "eager"),
                                        ("vae", "auto")])
def test_gallery_program_losses_equal_pytorch(name, mode):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: PyTorch's thread pool only costs CPU time here
    try:
        with jg.execution_mode(mode):
            _compare(name)
    finally:
        torch.set_num_threads(threads)


def _compare(name):
    jm, tm = load(name, "jgrad"), load(name, "torch")
    torch.manual_seed(0)
    if name == "cnn_classifier":
        tmodel, jmodel = tm.Net(dropout=0.0), jm.Net(dropout=0.0)
        run = _cnn
    elif name == "lstm_language_model":
        corpus = {"jgrad": jm.Corpus(), "torch": tm.Corpus()}
        ntokens = len(corpus["torch"].dictionary)
        tmodel, jmodel = tm.RNNModel(ntokens, 16, 16, 2, 0.0), jm.RNNModel(ntokens, 16, 16, 2, 0.0)
        run = lambda m, model: _lstm(m, model, corpus["jgrad" if m is jm else "torch"])  # noqa: E731
    else:
        tmodel, jmodel = tm.VAE(), jm.VAE()
        run = _vae
    _same_weights(jmodel, tmodel)
    jl = jg.stack(run(jm, jmodel)).tolist()
    tl = torch.stack(run(tm, tmodel)).tolist()
    assert len(jl) == len(tl) == STEPS
    np.testing.assert_allclose(jl, tl, rtol=2e-4, atol=1e-5)
    assert tl[-1] < tl[0]  # the programs learn
