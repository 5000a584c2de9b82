"""jg.save / jg.load: round trips of nested structures and state_dicts, no pickle on load, tied tensors,
devices, and PyTorch checkpoints loaded into jgrad models."""
import argparse
import collections
import io
import pickle
import zipfile

import numpy as np
import pytest
import torch

import jgrad as jg
from interop.torch import to_torch_state_dict


def _roundtrip(obj, **kw):
    buf = io.BytesIO()
    jg.save(obj, buf)
    buf.seek(0)
    return jg.load(buf, **kw)


def test_nested_structures_round_trip():
    t = jg.tensor(np.arange(6.0).reshape(2, 3))
    obj = {"a": t, "b": [1, 2.5, float("inf"), None, True, "x", (jg.ones(2, dtype=jg.int32), 3)],
           7: {"nested": jg.zeros(0, 4, dtype=jg.bfloat16)}, "c": collections.Counter({2: 1, 5: 2}),
           "np": np.array([[1, 2]], dtype=np.int16), "dt": jg.float16, "dev": jg.device("cpu"), (1, 2): -3 + 2j,
           "scalar": jg.tensor(3.5), "bool": jg.tensor([True, False])}
    out = _roundtrip(obj)
    assert list(out) == list(obj)
    np.testing.assert_array_equal(out["a"].numpy(), t.numpy())
    assert out["b"][:6] == [1, 2.5, float("inf"), None, True, "x"] and isinstance(out["b"][6], tuple)
    assert out["b"][6][0].dtype is jg.int32 and out["b"][6][1] == 3
    assert out[7]["nested"].shape == (0, 4) and out[7]["nested"].dtype is jg.bfloat16
    assert out["c"] == collections.Counter({2: 1, 5: 2}) and isinstance(out["c"], collections.Counter)
    assert out["np"].dtype == np.int16 and out["np"].tolist() == [[1, 2]]
    assert out["dt"] is jg.float16 and out["dev"] == jg.device("cpu") and out[(1, 2)] == -3 + 2j
    assert out["scalar"].shape == () and out["scalar"].item() == 3.5 and out["bool"].tolist() == [True, False]


def test_tied_tensors_parameters_and_requires_grad():
    w = jg.nn.Parameter(jg.randn(3, 3))
    g = jg.ones(2, requires_grad=True)
    out = _roundtrip({"w": w, "again": w, "g": g})
    assert out["w"] is out["again"]                      # stored once, one tensor after loading
    assert isinstance(out["w"], jg.nn.Parameter) and out["w"].requires_grad
    assert out["g"].requires_grad and out["g"].is_leaf
    np.testing.assert_array_equal(out["w"].detach().numpy(), w.detach().numpy())


def test_model_optimizer_and_scheduler_checkpoint(tmp_path):
    model = jg.nn.Sequential(jg.nn.Linear(3, 4), jg.nn.BatchNorm1d(4), jg.nn.Linear(4, 2))
    opt = jg.optim.AdamW(model.parameters(), lr=0.01)
    sched = jg.optim.lr_scheduler.MultiStepLR(opt, [2, 4])
    x = jg.randn(5, 3)
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()
        sched.step()
    path = tmp_path / "ckpt.pt"
    jg.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "step": 2}, path)
    ck = jg.load(path)
    assert ck["model"]._metadata == model.state_dict()._metadata
    model2 = jg.nn.Sequential(jg.nn.Linear(3, 4), jg.nn.BatchNorm1d(4), jg.nn.Linear(4, 2))
    opt2 = jg.optim.AdamW(model2.parameters(), lr=0.01)
    sched2 = jg.optim.lr_scheduler.MultiStepLR(opt2, [2, 4])
    model2.load_state_dict(ck["model"])
    opt2.load_state_dict(ck["opt"])
    sched2.load_state_dict(ck["sched"])
    for m, o, s in ((model, opt, sched), (model2, opt2, sched2)):  # the next step is the same
        o.zero_grad()
        m(x).pow(2).sum().backward()
        o.step()
        s.step()
    for (n, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=n)
    assert sched2.get_last_lr() == sched.get_last_lr()


def test_load_never_unpickles(tmp_path):
    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('pickle ran')",))
    with pytest.raises(TypeError, match="jg.save cannot store an object of type .*Boom"):
        jg.save({"x": Boom()}, tmp_path / "a.pt")
    # a zip file with a manifest naming something unknown is refused, not executed
    bad = io.BytesIO()
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("jgrad/manifest.json", '{"format": "jgrad-checkpoint", "version": 1, "root": {"pickle": "x"}}')
    bad.seek(0)
    with pytest.raises(ValueError, match="unknown entry kind 'pickle'"):
        jg.load(bad)
    # a torch file holding an arbitrary object is refused by torch's weights_only unpickler
    buf = io.BytesIO()
    torch.save({"x": argparse.Namespace(a=1)}, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        jg.load(buf)
    buf = io.BytesIO()
    pickle.dump(Boom(), buf, protocol=2)   # a plain pickle that would run code: refused, not run
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError):
        jg.load(buf)
    with pytest.raises(TypeError, match="map_location must be"):
        jg.load(io.BytesIO(b""), map_location=lambda s, loc: s)


def test_map_location_and_damaged_files():
    out = _roundtrip({"x": jg.ones(2)}, map_location="cpu")
    assert out["x"].device == jg.device("cpu")
    buf = io.BytesIO()
    jg.save({"x": jg.ones(3)}, buf)
    raw = buf.getvalue()
    patched = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as src, zipfile.ZipFile(patched, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, src.read(name)[:-4] if name.startswith("jgrad/data") else src.read(name))
    patched.seek(0)
    with pytest.raises(RuntimeError, match="the file is damaged"):
        jg.load(patched)


def _torch_gpt_like():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(11, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 11))


def test_torch_checkpoint_loads_into_jgrad_with_the_same_loss(tmp_path):
    tmodel = _torch_gpt_like().double()
    path = tmp_path / "torch.pt"
    torch.save({"model": tmodel.state_dict(), "step": 5}, path)
    ck = jg.load(path)
    assert ck["step"] == 5 and isinstance(ck["model"], collections.OrderedDict)
    jmodel = jg.nn.Sequential(jg.nn.Embedding(11, 8), jg.nn.LayerNorm(8), jg.nn.Linear(8, 11)).to(jg.float64)
    res = jmodel.load_state_dict(ck["model"])
    assert not res.missing_keys and not res.unexpected_keys
    idx = np.random.default_rng(0).integers(0, 11, (3, 5))
    tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(idx)).transpose(1, 2), torch.tensor(idx))
    jloss = jg.nn.functional.cross_entropy(jmodel(jg.tensor(idx)).transpose(1, 2), jg.tensor(idx))
    np.testing.assert_allclose(jloss.item(), tloss.item(), rtol=1e-12)


def test_torch_checkpoint_dtypes_parameters_and_back():
    p = torch.nn.Parameter(torch.randn(2, 2))
    buf = io.BytesIO()
    torch.save({"p": p, "bf": torch.ones(3, dtype=torch.bfloat16), "i": torch.arange(3)}, buf)
    buf.seek(0)
    out = jg.load(buf, map_location=jg.device("cpu"))
    assert isinstance(out["p"], jg.nn.Parameter) and out["p"].requires_grad
    np.testing.assert_array_equal(out["p"].detach().numpy(), p.detach().numpy())
    assert out["bf"].dtype is jg.bfloat16 and out["i"].dtype is jg.int64
    # the other way: a jgrad state_dict saved for PyTorch through interop
    model = jg.nn.Linear(3, 2)
    buf = io.BytesIO()
    torch.save(to_torch_state_dict(model.state_dict()), buf)
    buf.seek(0)
    t = torch.nn.Linear(3, 2)
    t.load_state_dict(torch.load(buf, weights_only=True))
    np.testing.assert_array_equal(t.weight.detach().numpy(), model.weight.detach().numpy())
