"""jg.save / jg.load: round trips of nested structures and state_dicts, no pickle on load, tied tensors,
devices, and PyTorch checkpoints loaded into jgrad models."""
import argparse
import json
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
    jg.save({"x": Boom(), "t": jg.ones(2)}, tmp_path / "a.pt")    # pickled, as torch.save does
    with pytest.raises(pickle.UnpicklingError, match="Unsupported global: GLOBAL builtins.exec was not an allowed"):
        jg.load(tmp_path / "a.pt")                                 # refused by default: nothing runs
    # a zip file with a manifest naming something unknown is refused, not executed
    bad = io.BytesIO()
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("jgrad/manifest.json", '{"format": "jgrad-checkpoint", "version": 1, "root": {"exec": "x"}}')
    bad.seek(0)
    with pytest.raises(RuntimeError, match="^the checkpoint file is damaged: an unknown entry kind 'exec'$"):
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
    with pytest.raises(RuntimeError, match="^the checkpoint file is damaged: the entry jgrad/data/0 holds 8 bytes "
                                           "where the manifest declares 12$"):
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


# ---- whole objects pickled as PyTorch pickles them ------------------------------------------------------
class _Net(jg.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = jg.nn.Linear(3, 2)
        self.b = self.a  # tied: one module, stored once


class _TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 2)


def _weights_only_lines(load, buf):
    with pytest.raises(pickle.UnpicklingError) as info:
        load(buf)
    lines = str(info.value).replace("\x1b[1m", "").replace("\x1b[0m", "").splitlines()
    return lines[0], next(line for line in lines if "WeightsUnpickler error" in line)


@pytest.mark.one_execution_mode
def test_whole_modules_pickle_inside_the_archive_and_load_only_when_allowed(tmp_path):
    net = _Net()
    jg.save({"model": net, "args": argparse.Namespace(lr=0.5), "step": 3}, tmp_path / "m.pt")
    # PyTorch's refusal, word for word where it names the global (torch says torch.serialization, we jgrad's)
    tbuf = io.BytesIO()
    torch.save({"args": argparse.Namespace(lr=0.5)}, tbuf)
    jbuf = io.BytesIO()
    jg.save({"args": argparse.Namespace(lr=0.5)}, jbuf)
    t_first, t_err = _weights_only_lines(torch.load, io.BytesIO(tbuf.getvalue()))
    j_first, j_err = _weights_only_lines(jg.load, io.BytesIO(jbuf.getvalue()))
    assert j_first == t_first and j_err == t_err.replace("torch.serialization", "jgrad.serialization")
    assert jg.serialization.get_unsafe_globals_in_checkpoint(tmp_path / "m.pt") == [
        f"{__name__}._Net", "jgrad.nn.modules.Linear", "argparse.Namespace"]
    out = jg.load(tmp_path / "m.pt", weights_only=False)
    assert out["step"] == 3 and out["args"].lr == 0.5 and out["model"].b is out["model"].a
    np.testing.assert_array_equal(out["model"].a.weight.detach().numpy(), net.a.weight.detach().numpy())
    assert isinstance(out["model"].a.weight, jg.nn.Parameter)
    with jg.serialization.safe_globals([_Net, jg.nn.Linear, argparse.Namespace]):
        again = jg.load(tmp_path / "m.pt")
    assert again["model"].a(jg.ones(1, 3)).shape == (1, 2)
    assert jg.serialization.get_safe_globals() == []
    jg.serialization.add_safe_globals([(argparse.Namespace, "argparse.Namespace")])
    try:
        assert jg.load(io.BytesIO(jbuf.getvalue()))["args"].lr == 0.5
    finally:
        jg.serialization.clear_safe_globals()


# ---- atomic saves -------------------------------------------------------------------------------------
class _Interrupts:
    def __reduce__(self):
        raise KeyboardInterrupt


@pytest.mark.one_execution_mode
def test_a_failed_or_interrupted_save_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    jg.save({"w": jg.arange(5.0)}, path)
    old = path.read_bytes()
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        jg.save({"w": jg.ones(5), "fn": lambda x: x}, path)           # unpicklable, half way through
    with pytest.raises(KeyboardInterrupt):
        jg.save({"w": jg.ones(5), "x": _Interrupts()}, path)         # Ctrl-C while writing
    monkeypatch.setattr("os.fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    with pytest.raises(OSError, match="No space left"):
        jg.save({"w": jg.ones(5)}, path)                              # the disk fills before the rename
    monkeypatch.undo()
    assert path.read_bytes() == old and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    np.testing.assert_array_equal(jg.load(path)["w"].numpy(), np.arange(5.0))
    jg.save({"w": jg.ones(2)}, path)                                  # a save that succeeds replaces it
    assert jg.load(path)["w"].tolist() == [1.0, 1.0] and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


# ---- damaged checkpoints --------------------------------------------------------------------------------
_DAMAGED = "the checkpoint file is damaged: "


def _checkpoint():
    buf = io.BytesIO()
    jg.save({"w": jg.arange(6.0).reshape(2, 3), "tied": [jg.ones(2, dtype=jg.int32)] * 2,
             "meta": {"lr": 0.1, "name": "x"}, "obj": argparse.Namespace(k=jg.zeros(1))}, buf)
    return buf.getvalue()


def _same(a, b):
    if isinstance(a, jg.Tensor):
        return isinstance(b, jg.Tensor) and a.dtype is b.dtype and np.array_equal(a.numpy(), b.numpy())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, argparse.Namespace):
        return isinstance(b, argparse.Namespace) and _same(vars(a), vars(b))
    return a == b


@pytest.mark.one_execution_mode
def test_every_damaged_checkpoint_is_refused_with_one_error(monkeypatch):
    monkeypatch.setattr(jg.serialization, "_load_torch", lambda *a, **k: pytest.fail("handed to torch.load"))
    raw = _checkpoint()
    want = jg.load(io.BytesIO(raw), weights_only=False)
    outcomes = collections.Counter()
    rng = np.random.default_rng(0)
    cases = [raw[:n] for n in sorted(set(rng.integers(0, len(raw), 60)) | {0, 10, len(raw) - 1})]  # truncated
    for at in sorted(set(rng.integers(0, len(raw), 200))):                                            # flipped
        cases.append(raw[:at] + bytes([raw[at] ^ (1 << int(rng.integers(8)))]) + raw[at + 1:])
    for data in cases:
        try:
            got = jg.load(io.BytesIO(data), weights_only=False)
        except RuntimeError as e:
            assert str(e).startswith(_DAMAGED), str(e)
            outcomes["refused"] += 1
            continue
        except pickle.UnpicklingError:
            pytest.fail("a damaged file reached the unpickler")  # every entry's CRC is checked first
        assert _same(want, got)  # a byte no reader looks at (a timestamp, the local header's copy of the CRC)
        outcomes["same"] += 1
    assert outcomes["refused"] > len(cases) // 2


def _zip(entries, manifest=None, compression=zipfile.ZIP_STORED):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as z:
        for name, data in entries.items():
            z.writestr(name, data)
        if manifest is not None:
            z.writestr("jgrad/manifest.json", manifest if isinstance(manifest, str) else json.dumps(manifest))
    return buf.getvalue()


def _m(root, version=1):
    return {"format": "jgrad-checkpoint", "version": version, "root": root}


_T12 = {"tensor": {"key": "jgrad/data/0", "dtype": "float32", "shape": [3], "device": "cpu"}, "id": 0}
_MANIFESTS = [  # (root or raw manifest text, what the error says)
    ({"tensor_ref": 5}, "a reference to tensor 5, which comes nowhere before it"),
    ({"list": [_T12, {"tensor_ref": 1}]}, "a reference to tensor 1, which comes nowhere before it"),
    ({"tensor": dict(_T12["tensor"], shape=[-1, -1]), "id": 0}, "a shape [-1, -1] that is not a list of sizes"),
    ({"tensor": dict(_T12["tensor"], shape="3"), "id": 0}, "a shape '3' that is not a list of sizes"),
    ({"tensor": dict(_T12["tensor"], dtype="float128"), "id": 0}, "an unknown dtype 'float128'"),
    ({"tensor": dict(_T12["tensor"], key="../../etc/passwd"), "id": 0},
     "an entry name '../../etc/passwd' that jg.save never writes"),
    ({"tensor": dict(_T12["tensor"], key="jgrad/data/7"), "id": 0}, "the entry jgrad/data/7 the manifest names is missing"),
    ({"tensor": dict(_T12["tensor"], shape=[2 ** 40]), "id": 0},
     f"the entry jgrad/data/0 holds 12 bytes where the manifest declares {2 ** 42}"),
    ({"tensor": _T12["tensor"], "id": "0"}, "a tensor's id"),
    ({"dict": [[1]]}, "a dict item that is not a pair"),
    ({"dict": [[{"list": []}, 1]]}, "a dict key that is not hashable"),
    ({"dict": {"a": 1}}, "a dict that is not a list"),
    ([1, 2], "a list where an entry belongs"),
    ({}, "a dict where an entry belongs"),
    ({"float": "1e999"}, "a float '1e999'"),
    ({"complex": [1]}, "a complex number without two parts"),
    ({"pickle": {"key": "jgrad/pickle/0"}}, "a pickle entry without its size or references"),
    ({"dtype": "int99"}, "an unknown dtype 'int99'"),
    ({"nope": 1}, "an unknown entry kind 'nope'"),
    ('{"format": "jgrad-checkpoint", "version": "1", "root": 1}', "a format version '1'"),
    ('{"format": "jgrad-checkpoint", "version": 1}', "jgrad/manifest.json is not a jgrad checkpoint manifest"),
    ('{"format": "jgrad-checkpoint", "version": 1, "root": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "the manifest nests too deeply"),
    ('{"format": "jgrad-chec', "JSONDecodeError: Unterminated string starting at: line 1 column 12 (char 11)"),
]


@pytest.mark.one_execution_mode
@pytest.mark.parametrize("case", range(len(_MANIFESTS)))
def test_malformed_manifests_are_refused_with_what_is_wrong(case):
    root, what = _MANIFESTS[case]
    data = _zip({"jgrad/data/0": np.ones(3, np.float32).tobytes()}, root if isinstance(root, str) else _m(root))
    with pytest.raises(RuntimeError) as info:
        jg.load(io.BytesIO(data))
    assert str(info.value) == _DAMAGED + what


@pytest.mark.one_execution_mode
def test_zip_bombs_are_refused_before_inflating(monkeypatch):
    opened = []
    real_open = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, name, *a, **k: (
        opened.append(getattr(name, "filename", name)), real_open(self, name, *a, **k))[1])
    bomb = bytes(64 << 20)  # 64 MiB of zeros: ~64 KiB deflated
    data = _zip({"jgrad/data/0": bomb}, _m(_T12), zipfile.ZIP_DEFLATED)
    assert len(data) < 1 << 20
    opened.clear()
    with pytest.raises(RuntimeError, match=f"^{_DAMAGED}the entry jgrad/data/0 holds {64 << 20} bytes where the "
                                           "manifest declares 12$"):
        jg.load(io.BytesIO(data))
    assert "jgrad/data/0" not in opened  # refused from the sizes alone
    # the archive's own size lies (12 bytes declared, 64 MiB inside): inflating stops at 13 bytes
    lie = bytearray(data)
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        p = lie.find(sig)
        lie[p + at:p + at + 4] = (12).to_bytes(4, "little")
    with pytest.raises(RuntimeError, match=f"^{_DAMAGED}"):
        jg.load(io.BytesIO(bytes(lie)))
    # a manifest that would inflate past what deflate can: refused before reading it
    text = json.dumps(_m(None)).encode()
    data = bytearray(_zip({}, text.decode(), zipfile.ZIP_DEFLATED))
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        p = data.find(sig)
        data[p + at:p + at + 4] = (1 << 29).to_bytes(4, "little")
    opened.clear()
    with pytest.raises(RuntimeError, match=f"^{_DAMAGED}its manifest would inflate .* to {1 << 29} bytes \\(a zip bomb\\)$"):
        jg.load(io.BytesIO(bytes(data)))
    assert opened == []


@pytest.mark.one_execution_mode
def test_pickles_naming_the_private_modules_before_they_moved_still_load(tmp_path):
    """A checkpoint written before jgrad's private modules moved into packages names a dtype as
    ``jgrad._dtype._from_name``: it loads, by default and with ``weights_only=False``."""
    path = tmp_path / "old.pt"
    jg.save({"args": argparse.Namespace(dt=jg.float32)}, path)
    with zipfile.ZipFile(path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    manifest = json.loads(entries["jgrad/manifest.json"])
    (_, value), = manifest["root"]["dict"]
    pickled = value["pickle"]
    old = b"cargparse\nNamespace\n)\x81}(Vdt\ncjgrad._dtype\n_from_name\n(Vfloat16\ntRub."
    entries[pickled["key"]], pickled["size"] = old, len(old)
    entries["jgrad/manifest.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, b in entries.items():
            z.writestr(n, b)
    assert jg.load(path, weights_only=False)["args"].dt is jg.float16
    with jg.serialization.safe_globals([argparse.Namespace]):
        assert jg.load(path)["args"].dt is jg.float16
