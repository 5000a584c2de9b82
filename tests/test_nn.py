"""jgrad.nn against torch.nn: Parameter, Module bookkeeping, state_dict, containers, layers, losses,
init, and a small model that trains. Scenarios ported from PyTorch's test/test_nn.py name the
upstream test in a comment; values are compared with torch (CPU) on identical data, never jgrad
with itself. Module hooks are in test_nn_hooks.py."""
import copy
import math
from collections import OrderedDict

import numpy as np
import pytest
import torch

import jgrad as jg
from jgrad import nn
from jgrad.nn import functional as F

F64 = jg.float64


from _torch_pairs import npy, pair  # noqa: E402


def copy_params(jmod, tmod):
    """Give the jgrad module the torch module's parameter values (same names)."""
    tstate = tmod.state_dict()
    jmod.load_state_dict({k: jg.tensor(v.detach().numpy()) for k, v in tstate.items()})


def close(a, b, tol=1e-10):
    np.testing.assert_allclose(npy(a), npy(b), rtol=tol, atol=tol)


# ---- Parameter ---------------------------------------------------------------------------
@pytest.mark.cpu_only("PyTorch's reprs of CPU tensors")
def test_parameter_basics_and_repr_match_torch():
    p = nn.Parameter(jg.tensor([1.0, 2.0]))
    tp = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    assert isinstance(p, jg.Tensor) and p.requires_grad and p.is_leaf
    assert repr(p) == repr(tp) == "Parameter containing:\ntensor([1., 2.], requires_grad=True)"
    q = nn.Parameter(jg.tensor([1.0]), requires_grad=False)
    assert not q.requires_grad
    assert repr(q) == repr(torch.nn.Parameter(torch.tensor([1.0]), requires_grad=False))
    assert nn.Parameter().shape == (0,)
    (p * 3).sum().backward()
    np.testing.assert_array_equal(npy(p.grad), [3.0, 3.0])
    assert type(p * 2) is jg.Tensor  # ops on a Parameter give plain tensors, as in PyTorch


def test_parameter_deepcopy_is_independent():
    p = nn.Parameter(jg.tensor([1.0, 2.0]))
    q = copy.deepcopy(p)
    assert isinstance(q, nn.Parameter) and q.requires_grad and q is not p
    with jg.no_grad():
        q.add_(1.0)
    np.testing.assert_array_equal(npy(p), [1.0, 2.0])
    np.testing.assert_array_equal(npy(q), [2.0, 3.0])


# ---- Module bookkeeping -------------------------------------------------------------------
def _net(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = lib.nn.Linear(3, 4)
            self.act = lib.nn.ReLU()
            self.block = lib.nn.Sequential(lib.nn.Linear(4, 4), lib.nn.Tanh(), lib.nn.LayerNorm(4))
            self.register_buffer("running", lib.zeros(4))
            self.register_buffer("scratch", lib.ones(2), persistent=False)
            self.scale = lib.nn.Parameter(lib.ones(1))

        def forward(self, x):
            return self.block(self.act(self.l1(x))) * self.scale + self.running

    return Net()


def test_named_members_match_torch():
    # test_nn.py: test_named_parameters / test_buffers_and_named_buffers / test_named_modules
    j, t = _net(jg), _net(torch)
    assert [n for n, _ in j.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in j.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in j.named_modules()] == [n for n, _ in t.named_modules()]
    assert [n for n, _ in j.named_children()] == [n for n, _ in t.named_children()]
    assert [type(m).__name__ for m in j.modules()] == [type(m).__name__ for m in t.modules()]
    assert [n for n, _ in j.named_parameters(recurse=False)] == ["scale"]
    assert [n for n, _ in j.named_parameters(prefix="net")][0] == "net.scale"
    assert list(j.state_dict()) == list(t.state_dict())
    assert all(isinstance(p, nn.Parameter) for p in j.parameters())


def test_shared_modules_and_parameters_are_listed_once():
    # test_nn.py: test_named_modules (shared submodule) / test_parameters_and_named_parameters (tied)
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert [n for n, _ in seq.named_modules()] == ["", "0", "1"]
    assert [n for n, _ in seq.named_modules(remove_duplicate=False)] == ["", "0", "1", "2"]
    assert len(list(seq.parameters())) == 2
    assert [n for n, _ in seq.named_parameters(remove_duplicate=False)] == ["0.weight", "0.bias", "2.weight",
                                                                             "2.bias"]


def test_setattr_registration_and_errors_match_torch():
    # test_nn.py: test_register_buffer_raises_error_if_*, test_assignment, test_add_module_raises_error_*
    for lib in (jg, torch):
        m = lib.nn.Module()
        m.w = lib.nn.Parameter(lib.ones(2))
        m.sub = lib.nn.Linear(1, 1)
        m.register_buffer("b", lib.zeros(1))
        assert list(m._parameters) == ["w"] and list(m._modules) == ["sub"] and list(m._buffers) == ["b"]
        m.w = None
        assert m.w is None and "w" in m._parameters
        m.sub = None
        assert m.sub is None
        with pytest.raises(AttributeError, match="'Module' object has no attribute 'missing'"):
            m.missing
        with pytest.raises(KeyError, match="contain"):
            m.register_buffer("a.b", lib.zeros(1))
        with pytest.raises(KeyError, match="empty string"):
            m.register_buffer("", lib.zeros(1))
        m.attr = 5
        with pytest.raises(KeyError, match="attribute 'attr' already exists"):
            m.register_buffer("attr", lib.zeros(1))
        with pytest.raises(TypeError, match="cannot assign 'int' object to buffer 'c'"):
            m.register_buffer("c", 3)
        with pytest.raises(TypeError, match="cannot assign 'int' as parameter 'w'"):
            m.w = 3
        with pytest.raises(TypeError, match="int is not a Module subclass"):
            m.add_module("x", 3)
        with pytest.raises(TypeError, match="module name should be a string. Got int"):
            m.add_module(3, lib.nn.ReLU())
        with pytest.raises(ValueError, match="Cannot assign non-leaf Tensor to parameter 'nl'"):
            x = lib.ones(1, requires_grad=True)
            p = lib.nn.Parameter(lib.ones(1))
            p2 = p * 2  # a non-leaf
            p2.__class__ = lib.nn.Parameter
            m.register_parameter("nl", p2)
        del m.b
        assert "b" not in m._buffers and x is not None


def test_forward_not_implemented_and_init_errors():
    with pytest.raises(NotImplementedError, match='missing the required "forward" function'):
        nn.Module()(jg.ones(1))

    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(jg.ones(1))

    with pytest.raises(AttributeError, match="cannot assign parameters before Module.__init__\\(\\) call"):
        Bad()


def test_train_eval_propagates_and_dropout_respects_it():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Sequential(nn.Dropout(0.9))).double()
    assert all(m.training for m in model.modules())
    assert model.eval() is model and not any(m.training for m in model.modules())
    x = jg.ones(4, 8, dtype=F64)
    lin = F.linear(x, model[0].weight, model[0].bias)
    close(model(x), lin)                       # dropout is the identity in eval mode
    model.train()
    y = npy(nn.Dropout(0.5)(jg.ones(1000, dtype=F64)))
    assert set(np.unique(y)) <= {0.0, 2.0} and 350 < (y == 0).sum() < 650
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        model.train("yes")
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        nn.Dropout(1.5)


def test_zero_grad_set_to_none_and_zeros():
    lin = nn.Linear(2, 2).double()
    lin(jg.ones(1, 2, dtype=F64)).sum().backward()
    assert lin.weight.grad is not None
    lin.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(npy(lin.weight.grad), np.zeros((2, 2)))
    lin.zero_grad()
    assert lin.weight.grad is None and lin.bias.grad is None


def test_to_dtype_and_device_keep_parameter_identity():
    lin = nn.Linear(3, 2)
    lin.register_buffer("buf", jg.zeros(2))
    w = lin.weight
    assert lin.to(jg.float64) is lin
    assert lin.weight is w and w.dtype is jg.float64 and lin.buf.dtype is jg.float64
    assert isinstance(lin.weight, nn.Parameter) and lin.weight.requires_grad
    lin.to("cpu:1")
    assert w.device == jg.device("cpu:1") and lin.bias.device == jg.device("cpu:1")
    assert lin.buf.device == jg.device("cpu:1")
    out = lin(jg.ones(1, 3, dtype=F64, device="cpu:1"))
    assert out.device == jg.device("cpu:1")
    lin.float().cpu()
    assert w.dtype is jg.float32 and w.device == jg.device("cpu")
    with pytest.raises(TypeError, match="nn.Module.to only accepts floating point or complex dtypes"):
        lin.to(jg.int64)


def test_apply_visits_children_first_like_torch():
    order = {}
    for lib in (jg, torch):
        names = []
        net = _net(lib)
        net.apply(lambda m: names.append(type(m).__name__))
        order[lib.__name__] = names
    assert order["jgrad"] == order["torch"]


def test_repr_matches_torch():
    def build(lib):
        n = lib.nn
        return n.Sequential(n.Linear(3, 4), n.ReLU(), n.GELU(), n.GELU(approximate="tanh"), n.Tanh(), n.Sigmoid(),
                            n.SiLU(), n.Dropout(0.25), n.LayerNorm(4), n.Embedding(10, 3, padding_idx=0),
                            n.Softmax(dim=-1), n.LogSoftmax(dim=1), n.Identity(), n.Flatten(), n.MSELoss(),
                            n.CrossEntropyLoss(), n.L1Loss(), n.NLLLoss(), n.Linear(2, 2, bias=False),
                            n.ModuleList([n.Linear(2, 2), n.Linear(2, 2), n.ReLU()]),
                            n.ModuleDict({"a": n.ReLU()}))
    expected, ours = repr(build(torch)), repr(build(jg))
    if "elementwise_affine=True, bias=" not in expected:  # torch < 2.13 left LayerNorm's bias out
        ours = ours.replace("elementwise_affine=True, bias=True)", "elementwise_affine=True)")
    assert ours == expected


# ---- containers ---------------------------------------------------------------------------
def test_sequential_indexing_len_iteration():
    # test_nn.py: test_Sequential_getitem / _setitem / _delitem / test_Sequential_append
    l1, l2, l3, l4 = nn.Linear(1, 2), nn.Linear(2, 3), nn.Linear(3, 4), nn.Linear(4, 5)
    n = nn.Sequential(l1, l2, l3, l4)
    assert n[0] is l1 and n[-1] is l4 and n[-3] is l2 and len(n) == 4 and list(n) == [l1, l2, l3, l4]
    assert isinstance(n[1:], nn.Sequential) and list(n[1:]) == [l2, l3, l4] and list(n[::2]) == [l1, l3]
    with pytest.raises(IndexError, match="index 4 is out of range"):
        n[4]
    n[1] = l4
    assert n[1] is l4
    del n[1]
    assert list(n) == [l1, l3, l4] and list(n._modules) == ["0", "1", "2"]
    n.append(l2)
    assert n[3] is l2 and len(n) == 4
    named = nn.Sequential(OrderedDict([("first", l1), ("second", l2)]))
    assert list(named._modules) == ["first", "second"] and named.first is l1
    x = jg.ones(2, 1, dtype=F64)
    model = nn.Sequential(nn.Linear(1, 2), nn.ReLU(), nn.Linear(2, 1)).double()
    close(model(x), model[2](model[1](model[0](x))))


def test_module_list_and_dict():
    # test_nn.py: test_ModuleList / test_ModuleDict
    mods = [nn.ReLU(), nn.Linear(5, 5), nn.Tanh()]
    ml = nn.ModuleList(mods)
    assert list(ml) == mods and len(ml) == 3 and ml[-1] is mods[2]
    ml.append(nn.Sigmoid())
    ml.extend([nn.Identity()])
    ml.insert(1, nn.GELU())
    assert [type(m).__name__ for m in ml] == ["ReLU", "GELU", "Linear", "Tanh", "Sigmoid", "Identity"]
    assert isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    del ml[0]
    assert list(ml._modules) == [str(i) for i in range(5)]
    assert len(list(ml.parameters())) == 2
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable, but got Linear"):
        ml.extend(nn.Linear(1, 1))
    md = nn.ModuleDict({"relu": nn.ReLU(), "lin": nn.Linear(2, 2)})
    md["tanh"] = nn.Tanh()
    assert list(md.keys()) == ["relu", "lin", "tanh"] and "lin" in md and len(md) == 3
    assert isinstance(md.pop("relu"), nn.ReLU) and list(md) == ["lin", "tanh"]
    md.update([("conv", nn.Identity())])
    assert [n for n, _ in md.named_parameters()] == ["lin.weight", "lin.bias"]
    pl = nn.ParameterList([jg.ones(2), nn.Parameter(jg.zeros(1))])
    assert len(pl) == 2 and all(isinstance(p, nn.Parameter) for p in pl)
    assert [n for n, _ in pl.named_parameters()] == ["0", "1"]


# ---- state_dict ---------------------------------------------------------------------------
def test_state_dict_round_trip_gives_identical_outputs():
    a, b = _net(jg).double(), _net(jg).double()
    x = jg.randn(5, 3, dtype=F64)
    assert not np.allclose(npy(a(x)), npy(b(x)))
    sd = a.state_dict()
    assert all(not v.requires_grad and v.grad_fn is None for v in sd.values())
    assert "scratch" not in sd and "running" in sd   # non-persistent buffers are left out
    res = b.load_state_dict(sd)
    assert res.missing_keys == [] and res.unexpected_keys == [] and repr(res) == "<All keys matched successfully>"
    close(a(x), b(x), 0)
    w = b.l1.weight
    with jg.no_grad():
        a.l1.weight.add_(1.0)  # the loaded values are copies
    assert not np.allclose(npy(a.l1.weight), npy(w))
    assert b.state_dict(keep_vars=True)["l1.weight"] is b.l1.weight


def test_state_dict_matches_torch_values():
    t = _net(torch).double()
    j = _net(jg).double()
    copy_params(j, t)
    x = np.random.default_rng(0).standard_normal((5, 3))
    close(j(jg.tensor(x)), t(torch.tensor(x)))


def test_load_state_dict_errors_match_torch():
    msgs = {}
    for lib in (jg, torch):
        m = lib.nn.Linear(2, 2)
        sd = OrderedDict(m.state_dict())
        sd["extra"] = lib.zeros(1)
        del sd["bias"]
        with pytest.raises(RuntimeError) as e:
            m.load_state_dict(sd)
        msgs[lib.__name__] = str(e.value)
        res = m.load_state_dict(sd, strict=False)
        assert res.missing_keys == ["bias"] and res.unexpected_keys == ["extra"]
    assert msgs["jgrad"] == msgs["torch"] == ('Error(s) in loading state_dict for Linear:\n\tMissing key(s) in '
                                              'state_dict: "bias". \n\tUnexpected key(s) in state_dict: "extra". ')
    m = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match="size mismatch for weight: copying a param with shape \\[3, 2\\] from "
                                           "checkpoint, the shape in current model is \\[2, 2\\]"):
        m.load_state_dict({"weight": jg.zeros(3, 2), "bias": jg.zeros(2)})
    with pytest.raises(TypeError, match="Expected state_dict to be dict-like"):
        m.load_state_dict([1, 2])


def test_load_state_dict_assign_replaces_parameters():
    m = nn.Linear(2, 2)
    w = jg.ones(2, 2)
    m.load_state_dict({"weight": w, "bias": jg.zeros(2)}, assign=True)
    assert isinstance(m.weight, nn.Parameter) and m.weight.requires_grad
    np.testing.assert_array_equal(npy(m.weight), np.ones((2, 2)))


def test_module_deepcopy():
    a = _net(jg).double()
    b = copy.deepcopy(a)
    assert b.l1.weight is not a.l1.weight and isinstance(b.l1.weight, nn.Parameter)
    x = jg.randn(2, 3, dtype=F64)
    close(a(x), b(x), 0)


# ---- layers against torch -----------------------------------------------------------------
def test_linear_default_init_statistics():
    # torch.nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)) => U(-1/sqrt(in), 1/sqrt(in))
    fan_in, fan_out = 256, 512
    lin = nn.Linear(fan_in, fan_out)
    w, b = npy(lin.weight), npy(lin.bias)
    bound = 1 / math.sqrt(fan_in)
    assert w.shape == (fan_out, fan_in) and b.shape == (fan_out,) and w.dtype == np.float32
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert np.abs(w).max() > 0.99 * bound
    assert abs(w.mean()) < 0.01 * bound
    np.testing.assert_allclose(w.std(), bound / math.sqrt(3), rtol=0.01)  # the std of U(-a, a) is a/sqrt(3)
    hist, _ = np.histogram(w, bins=10, range=(-bound, bound))
    np.testing.assert_allclose(hist / w.size, 0.1, atol=0.005)           # uniform, not normal
    assert abs(b.mean()) < 0.1 * bound
    assert lin.bias is not None and nn.Linear(3, 4, bias=False).bias is None
    jg.manual_seed(7)
    a = npy(nn.Linear(4, 4).weight)
    jg.manual_seed(7)
    np.testing.assert_array_equal(a, npy(nn.Linear(4, 4).weight))        # seeded like any draw


@pytest.mark.parametrize("name", ["ReLU", "GELU", "Tanh", "Sigmoid", "SiLU", "Identity", "Softplus", "LeakyReLU",
                                  "ELU"])
def test_activation_modules_match_torch(name):
    x = np.random.default_rng(1).standard_normal((4, 5)) * 3
    jx, tx = pair(x, requires_grad=True)
    jy, ty = getattr(nn, name)()(jx), getattr(torch.nn, name)()(tx)
    close(jy, ty)
    g = np.random.default_rng(2).standard_normal((4, 5))
    jy.backward(jg.tensor(g))
    ty.backward(torch.tensor(g))
    close(jx.grad, tx.grad)


def test_gelu_tanh_softmax_logsoftmax_flatten_match_torch():
    x = np.random.default_rng(3).standard_normal((2, 3, 4))
    jx, tx = pair(x, requires_grad=True)
    for jm, tm in ((nn.GELU("tanh"), torch.nn.GELU("tanh")), (nn.Softmax(dim=1), torch.nn.Softmax(dim=1)),
                   (nn.LogSoftmax(dim=-1), torch.nn.LogSoftmax(dim=-1)), (nn.Flatten(), torch.nn.Flatten()),
                   (nn.Flatten(0, 1), torch.nn.Flatten(0, 1))):
        jy, ty = jm(jx), tm(tx)
        assert jy.shape == tuple(ty.shape)
        close(jy, ty)
        (jy * jy).sum().backward()
        (ty * ty).sum().backward()
        close(jx.grad, tx.grad)
        jx.grad, tx.grad = None, None


def test_layer_norm_matches_torch():
    t = torch.nn.LayerNorm(6).double()
    with torch.no_grad():
        t.weight.copy_(torch.linspace(0.5, 1.5, 6))
        t.bias.copy_(torch.linspace(-1, 1, 6))
    j = nn.LayerNorm(6).double()
    copy_params(j, t)
    x = np.random.default_rng(4).standard_normal((3, 6))
    jx, tx = pair(x, requires_grad=True)
    jy, ty = j(jx), t(tx)
    close(jy, ty)
    (jy ** 3).sum().backward()
    (ty ** 3).sum().backward()
    close(jx.grad, tx.grad)
    close(j.weight.grad, t.weight.grad)
    close(j.bias.grad, t.bias.grad)
    assert nn.LayerNorm(4, elementwise_affine=False).weight is None


def test_embedding_padding_idx_matches_torch():
    j = nn.Embedding(5, 3, padding_idx=1).double()
    np.testing.assert_array_equal(npy(j.weight)[1], 0.0)  # the padding row starts at zero
    t = torch.nn.Embedding(5, 3, padding_idx=1).double()
    copy_params(j, t)
    idx = np.array([[0, 1, 4], [1, 2, 2]])
    jy, ty = j(jg.tensor(idx)), t(torch.tensor(idx))
    close(jy, ty)
    g = np.random.default_rng(5).standard_normal((2, 3, 3))
    jy.backward(jg.tensor(g))
    ty.backward(torch.tensor(g))
    close(j.weight.grad, t.weight.grad)
    np.testing.assert_array_equal(npy(j.weight.grad)[1], 0.0)
    e = nn.Embedding.from_pretrained(jg.ones(2, 2))
    assert not e.weight.requires_grad
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        nn.Embedding(3, 2, padding_idx=3)


def _loss_cases():
    rng = np.random.default_rng(6)
    logits = rng.standard_normal((6, 4))
    target = np.array([0, 3, 1, 1, 2, 0])
    probs = 1 / (1 + np.exp(-rng.standard_normal((6, 4))))
    y01 = (rng.random((6, 4)) > 0.5).astype(np.float64)
    w = np.array([1.0, 2.0, 0.5, 1.5])
    return [
        ("MSELoss", {}, logits, rng.standard_normal((6, 4))),
        ("MSELoss", {"reduction": "sum"}, logits, rng.standard_normal((6, 4))),
        ("L1Loss", {}, logits, rng.standard_normal((6, 4))),
        ("L1Loss", {"reduction": "none"}, logits, rng.standard_normal((6, 4))),
        ("CrossEntropyLoss", {}, logits, target),
        ("CrossEntropyLoss", {"weight": w, "ignore_index": 3}, logits, target),
        ("CrossEntropyLoss", {"label_smoothing": 0.1, "reduction": "sum"}, logits, target),
        ("CrossEntropyLoss", {}, logits, np.eye(4)[target] * 0.8 + 0.05),
        ("NLLLoss", {}, np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True)), target),
        ("NLLLoss", {"weight": w, "reduction": "none"}, logits, target),
        ("BCELoss", {}, probs, y01),
        ("BCEWithLogitsLoss", {"pos_weight": w}, logits, y01),
        ("HuberLoss", {"delta": 0.5}, logits, rng.standard_normal((6, 4))),
        ("SmoothL1Loss", {"beta": 0.5}, logits, rng.standard_normal((6, 4))),
    ]


@pytest.mark.parametrize("case", range(len(_loss_cases())))
def test_loss_modules_match_torch(case):
    name, kwargs, x, target = _loss_cases()[case]
    jkw = {k: (jg.tensor(v) if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}
    tkw = {k: (torch.tensor(v) if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()}
    jx, tx = pair(x, requires_grad=True)
    jl, tl = getattr(nn, name)(**jkw)(jx, jg.tensor(target)), getattr(torch.nn, name)(**tkw)(tx, torch.tensor(target))
    close(jl, tl)
    jl.sum().backward()
    tl.sum().backward()
    close(jx.grad, tx.grad)


def test_functional_namespace():
    names = ["relu", "gelu", "silu", "softplus", "tanh", "sigmoid", "softmax", "log_softmax", "dropout", "linear",
             "cross_entropy", "mse_loss", "l1_loss", "nll_loss", "binary_cross_entropy",
             "binary_cross_entropy_with_logits", "layer_norm", "embedding", "one_hot", "pad", "leaky_relu", "elu",
             "normalize", "logsigmoid"]
    assert all(callable(getattr(F, n)) for n in names)
    x = np.random.default_rng(8).standard_normal((3, 4))
    jx, tx = pair(x)
    close(F.normalize(jx, dim=1), torch.nn.functional.normalize(tx, dim=1))
    close(F.pad(jx, (1, 2)), torch.nn.functional.pad(tx, (1, 2)))
    close(F.relu(jx), torch.relu(tx))
    np.testing.assert_array_equal(npy(F.one_hot(jg.tensor([0, 2]), 3)), [[1, 0, 0], [0, 0, 1]])
    with pytest.warns(UserWarning, match="size_average and reduce args will be deprecated"):
        out = F.mse_loss(jx, jx * 0, size_average=False)
    close(out, torch.nn.functional.mse_loss(tx, tx * 0, reduction="sum"))


# ---- init ----------------------------------------------------------------------------------
def test_init_gain_and_fans_match_torch():
    for args in [("linear",), ("sigmoid",), ("tanh",), ("relu",), ("leaky_relu",), ("leaky_relu", 0.2),
                 ("selu",), ("conv2d",)]:
        assert nn.init.calculate_gain(*args) == torch.nn.init.calculate_gain(*args)
    with pytest.raises(ValueError, match="Unsupported nonlinearity foo"):
        nn.init.calculate_gain("foo")
    for shape in [(4, 3), (8, 4, 3, 3), (2, 5, 7)]:
        assert nn.init._calculate_fan_in_and_fan_out(jg.empty(*shape)) == \
            torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init._calculate_fan_in_and_fan_out(jg.empty(3))


def test_init_distributions_and_in_place_semantics():
    p = nn.Parameter(jg.empty(200, 300))
    v = p._version
    nn.init.xavier_uniform_(p, gain=2.0)
    a = 2.0 * math.sqrt(6.0 / 500)
    w = npy(p)
    assert p._version > v and p.requires_grad and p.is_leaf
    assert np.abs(w).max() <= a and np.abs(w).max() > 0.99 * a
    nn.init.xavier_normal_(p)
    np.testing.assert_allclose(npy(p).std(), math.sqrt(2.0 / 500), rtol=0.02)
    nn.init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu")
    np.testing.assert_allclose(npy(p).std(), math.sqrt(2.0) / math.sqrt(200), rtol=0.02)
    nn.init.kaiming_uniform_(p, nonlinearity="relu")
    assert np.abs(npy(p)).max() <= math.sqrt(6.0 / 300)
    nn.init.normal_(p, mean=3.0, std=0.5)
    np.testing.assert_allclose([npy(p).mean(), npy(p).std()], [3.0, 0.5], rtol=0.02)
    nn.init.uniform_(p, -1.0, 2.0)
    assert npy(p).min() >= -1.0 and npy(p).max() < 2.0
    nn.init.constant_(p, 0.25)
    assert (npy(p) == 0.25).all()
    nn.init.zeros_(p)
    nn.init.ones_(p)
    assert (npy(p) == 1).all()
    e = jg.empty(3, 3)
    nn.init.eye_(e)
    np.testing.assert_array_equal(npy(e), np.eye(3))
    g1, g2 = jg.Generator().manual_seed(3), jg.Generator().manual_seed(3)
    x, y = jg.empty(4), jg.empty(4)
    nn.init.uniform_(x, generator=g1)
    nn.init.uniform_(y, generator=g2)
    np.testing.assert_array_equal(npy(x), npy(y))
    with pytest.raises(ValueError, match="Mode fan_avg not supported, please use one of"):
        nn.init.kaiming_uniform_(p, mode="fan_avg")


# ---- training --------------------------------------------------------------------------------
def test_small_classifier_trains_to_low_loss():
    rng = np.random.default_rng(11)
    centers = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.5]])
    labels = rng.integers(0, 3, 192)
    x = centers[labels] + 0.5 * rng.standard_normal((192, 2))
    jx, jy = jg.tensor(x, dtype=jg.float32), jg.tensor(labels)
    jg.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 3))
    opt = jg.optim.Adam(model.parameters(), lr=0.02)
    loss_fn = nn.CrossEntropyLoss()
    first = None
    for _ in range(80):
        opt.zero_grad()
        loss = loss_fn(model(jx), jy)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.1 < first
    model.eval()
    acc = (npy(model(jx)).argmax(1) == labels).mean()
    assert acc > 0.97
