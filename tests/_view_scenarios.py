"""Scenarios of PyTorch's view semantics, each written ONCE against a library module (``torch`` or
``jgrad``) and returning what it observes, so that tests/test_views.py runs it on both and compares.

An observation is a dict of plain values: NumPy arrays (copies), tuples, bools, ints, grad_fn names
and ``Raised`` records. Exceptions are compared by class name and by whether the message holds the key
phrase PyTorch uses (the phrase is checked on PyTorch's message too, so a wrong phrase fails the test).
Where jgrad documents a difference (data_ptr values, strides of pointwise results), only relations are
observed: ``data_ptr`` differences and equalities, never raw values.

Sources are PyTorch's test/test_view_ops.py (TestViewOps, TestOldViewOps) and the view/in-place parts
of test/test_autograd.py (TestAutograd, TestAutogradDeviceType); each scenario names its upstream test.
The scenarios are ported (rewritten), not copied. The autograd scenarios are in
tests/_view_autograd_scenarios.py; this module has the helpers, the view-op family and issue 25's table.
"""
from __future__ import annotations

import math

import numpy as np

SCENARIOS: dict = {}   # name -> (function(lib) -> dict, upstream source, why it is CPU-only or None)
TABLE: dict = {}       # issue 25's table: name -> function(lib) -> dict


def scenario(source, cpu_only=None):
    """Register ``fn(lib)`` under its name with its upstream test name(s)."""
    def deco(fn):
        SCENARIOS[fn.__name__] = (fn, source, cpu_only)
        return fn
    return deco


class Raised:
    """An exception seen by a scenario: equal when the class name and the key-phrase match are."""
    __slots__ = ("kind", "found", "message")

    def __init__(self, kind, found, message):
        self.kind, self.found, self.message = kind, found, message

    def __eq__(self, other):
        return isinstance(other, Raised) and (self.kind, self.found) == (other.kind, other.found)

    def __repr__(self):
        return f"Raised({self.kind}, key phrase {'found' if self.found else 'MISSING'}: {self.message[:300]!r})"


OK = "ok"


def attempt(fn, phrase=None):
    """Run an action: ``OK`` or the ``Raised`` record (``phrase``: PyTorch's key phrase)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the scenario records whatever was raised
        return Raised(type(e).__name__, phrase is not None and phrase in str(e), str(e))
    return OK


def get(fn):
    """Read a value (converted by ``plain``), or the ``Raised`` record of the read."""
    try:
        return plain(fn())
    except Exception as e:  # noqa: BLE001
        return Raised(type(e).__name__, False, str(e))


def arr(t):
    """A tensor's values as a NumPy copy (torch's ``numpy()`` aliases the storage)."""
    return np.array(t.detach().numpy(), copy=True)


def plain(v):
    if hasattr(v, "detach") and hasattr(v, "numpy"):
        return arr(v)
    if isinstance(v, (tuple, list)):
        return type(v)(plain(x) for x in v)
    if type(v).__name__ == "Size":
        return tuple(v)
    return v


def gname(t):
    """The name of ``t.grad_fn`` without PyTorch's C++ namespace (``torch::autograd::CopySlices``)."""
    g = t.grad_fn
    return None if g is None else g.name().split("::")[-1]


def tens(lib, data, requires_grad=False):
    return lib.tensor(np.asarray(data, dtype=np.float64), dtype=lib.float64, requires_grad=requires_grad)


def grid(lib, *shape, requires_grad=False):
    """A fresh (non-view) float64 tensor holding 0, 1, 2, ... in row-major order."""
    return tens(lib, np.arange(math.prod(shape), dtype=np.float64).reshape(shape), requires_grad)


def grads(lib, loss, inputs):
    """Gradients of ``loss`` with respect to ``inputs`` (None where unused), or the ``Raised`` record."""
    try:
        gs = lib.autograd.grad(loss, inputs, allow_unused=True)
    except Exception as e:  # noqa: BLE001 - recorded, so the rest of the scenario still runs
        return Raised(type(e).__name__, False, str(e))
    return tuple(None if g is None else arr(g) for g in gs)


# --- The view-op family (test_view_ops.py): metadata, then a write through the view, then one through
# the base. (name, upstream test, base shape, make(lib, t) -> the view or copy)
VIEW_CASES = [
    ("slice", "test_basic_indexing_slice_view", (3, 4), lambda lib, t: t[:2, :3]),
    ("ellipsis", "test_basic_indexing_ellipses_view", (3, 4), lambda lib, t: t[..., :2]),
    ("newaxis", "test_basic_indexing_newaxis_view", (3, 4), lambda lib, t: t[None, :2, 3]),
    ("stepped_slice", "test_basic_indexing_slice_view", (3, 4), lambda lib, t: t[::2, 1::2]),
    ("int_index", "test_select_view", (3, 4), lambda lib, t: t[1]),
    ("select", "test_select_view", (3, 4), lambda lib, t: t.select(1, 2)),
    ("narrow", "test_narrow_view", (3, 4), lambda lib, t: t.narrow(1, 1, 2)),
    ("view", "test_view_view", (3, 4), lambda lib, t: t.view(12)),
    ("view_split_dim", "test_view (only contiguous dims touched)", (3, 4), lambda lib, t: t.t().view(2, 2, 3)),
    ("view_as", "test_view_as_view", (3, 4), lambda lib, t: t.view_as(lib.zeros(2, 6))),
    ("reshape", "test_reshape_view", (3, 4), lambda lib, t: t.reshape(6, 2)),
    ("reshape_as", "test_reshape_as_view", (3, 4), lambda lib, t: t.reshape_as(lib.zeros(12))),
    ("flatten", "test_flatten_view", (2, 3, 2), lambda lib, t: t.flatten()),
    ("flatten_0d", "test_flatten_view (zero-dim)", (), lambda lib, t: t.flatten()),
    ("flatten_same_base", "test_flatten_view (transposed)", (2, 3, 2), lambda lib, t: t.transpose(1, 2).flatten(0, 1)),
    ("t", "test_t_view", (3, 4), lambda lib, t: t.t()),
    ("transpose", "test_transpose_view", (3, 4), lambda lib, t: t.transpose(0, 1)),
    ("swapdims", "test_transpose_view", (2, 3, 2), lambda lib, t: t.swapdims(0, 2)),
    ("permute", "test_permute_view", (2, 3, 2), lambda lib, t: t.permute(2, 0, 1)),
    ("T", "test_T_view", (3, 4), lambda lib, t: t.T),
    ("mT", "test_T_view", (2, 3, 2), lambda lib, t: t.mT),
    ("movedim", "test_movedim_view", (2, 3, 2), lambda lib, t: t.movedim(0, 2)),
    ("squeeze", "test_squeeze_view", (3, 1, 4), lambda lib, t: t.squeeze()),
    ("squeeze_dim", "test_squeeze_view", (3, 1, 4), lambda lib, t: t.squeeze(1)),
    ("unsqueeze", "test_unsqueeze_view", (3, 4), lambda lib, t: t.unsqueeze(1)),
    ("expand", "test_expand_view", (3, 1), lambda lib, t: t.expand(3, 4)),
    ("expand_as", "test_expand_as_view", (3, 1), lambda lib, t: t.expand_as(lib.zeros(2, 3, 4))),
    ("diagonal", "test_diagonal_view", (3, 4), lambda lib, t: t.diagonal()),
    ("diagonal_offset", "test_diagonal_view", (2, 3, 3), lambda lib, t: t.diagonal(1, 1, 2)),
    ("unfold", "test_unfold_view", (10,), lambda lib, t: t.unfold(0, 3, 2)),
    ("as_strided", "test_as_strided_view", (3, 4), lambda lib, t: t.as_strided((2, 3), (1, 4), 1)),
    ("unbind", "test_unbind_view", (3, 4), lambda lib, t: t.unbind()[1]),
    ("split", "test_split_view", (3, 4), lambda lib, t: t.split(1)[1]),
    ("split_sizes", "test_split_view", (3, 4), lambda lib, t: t.split([1, 3], 1)[1]),
    ("chunk", "test_chunk_view", (3, 4), lambda lib, t: t.chunk(3)[2]),
    ("view_of_view", "test_flatten_view (is_view_of_same_base)", (3, 4), lambda lib, t: t[1:].t()[::2]),
    ("t_", "test_t_inplace_view", (3, 4), lambda lib, t: t.view_as(t).t_()),
    ("transpose_", "test_transpose_inplace_view", (3, 4), lambda lib, t: t.view_as(t).transpose_(0, 1)),
    ("squeeze_", "test_squeeze_inplace_view", (3, 1, 4), lambda lib, t: t.view_as(t).squeeze_()),
    ("unsqueeze_", "test_unsqueeze_inplace_view", (3, 4), lambda lib, t: t.view_as(t).unsqueeze_(1)),
    ("detach", "test_detach (shares storage and version)", (3, 4), lambda lib, t: t.detach()),
    ("data", ".data (shares storage, not the version)", (3, 4), lambda lib, t: t.data),
    # copies: not views, other storage, writes do not propagate
    ("contiguous_of_t", "test_contiguous_nonview", (3, 4), lambda lib, t: t.t().contiguous()),
    ("reshape_of_t", "test_reshape_nonview", (3, 4), lambda lib, t: t.t().reshape(12)),
    ("flatten_of_t", "test_flatten_nonview", (3, 4), lambda lib, t: t.t().flatten()),
    ("advanced_index", "test_advanced_indexing_nonview", (3, 4), lambda lib, t: t[[0, 2]]),
]


def observe_view(lib, shape, make):
    """Metadata of ``make(t)``, then what a write through it and one through ``t`` change."""
    t = grid(lib, *shape)
    v = make(lib, t)
    o = {"shape": tuple(v.shape), "values": arr(v)}
    o["is_view"] = get(lambda: v._is_view())
    o["base_is_t"] = get(lambda: v._base is t)
    o["same_storage"] = same = get(lambda: v.untyped_storage().data_ptr() == t.untyped_storage().data_ptr())
    if same is True:  # data_ptr is the storage's plus the offset in bytes (values differ across libraries)
        o["offset_bytes"] = get(lambda: v.data_ptr() - t.data_ptr())
    o["storage_offset"] = get(lambda: v.storage_offset())
    o["stride"] = get(lambda: tuple(v.stride()))
    o["stride_dims"] = get(lambda: tuple(v.stride(d) for d in range(v.dim())))
    o["is_contiguous"] = get(lambda: v.is_contiguous())
    last = tuple(s - 1 for s in v.shape)
    o["write_view"] = attempt(lambda: v.__setitem__(last, -1.0))
    o["base_after_view_write"] = arr(t)
    o["view_after_view_write"] = arr(v)
    o["versions_after_view_write"] = (t._version, v._version)
    o["write_base"] = attempt(lambda: t.add_(100.0))
    o["view_after_base_write"] = arr(v)
    o["versions_after_base_write"] = (t._version, v._version)
    return o


@scenario("test_contiguous_self, test_contiguous, test_flatten_nonview (flatten returns self), test_ravel")
def contiguity_and_identity(lib):
    t = grid(lib, 3, 4)
    o = {"contiguous_is_self": t.contiguous() is t, "flatten_same_dim_is_self": t.flatten(1, 1) is t}
    o["flatten_1d_is_self"] = (lambda x: x.flatten() is x)(grid(lib, 5))
    o["view_is_new_object"] = t.view(3, 4) is not t
    cases = {"row": t[1], "col": t[:, 1], "rows": t[:1], "col_block": t[:, :1], "t": t.t(), "t_row": t.t()[:1],
             "unsqueeze_t": t.t().unsqueeze(0), "expand": t[:, :1].expand(3, 5), "size1_dims": grid(lib, 1, 4, 1)}
    o["is_contiguous"] = {k: get(lambda v=v: v.is_contiguous()) for k, v in cases.items()}
    o["stride"] = {k: get(lambda v=v: tuple(v.stride())) for k, v in cases.items()}
    c = t.t().contiguous()
    o["contiguous_of_t"] = (get(lambda: c.is_contiguous()), get(lambda: tuple(c.stride())), get(lambda: c._is_view()))
    return o


@scenario("test_view (invalid views), test_reshape_nonview, test_reshape_view_semantics, test_reshape (data_ptr)")
def view_of_noncontiguous_raises_reshape_copies(lib):
    t = grid(lib, 3, 4)
    phrase = "view size is not compatible with input tensor's size and stride"
    o = {"t_view_flat": attempt(lambda: t.t().view(-1), phrase),
         "col_block_view_flat": attempt(lambda: t[:, :2].view(6), phrase),
         "t_view_split": attempt(lambda: t.t().view(2, 2, 3), phrase),
         "t_view_add_unit_dim": attempt(lambda: t.t().view(4, 3, 1), phrase)}
    r = t.t().reshape(-1)
    o["reshape_of_t"] = (arr(r), get(lambda: r._is_view()), get(lambda: r._base is None))
    y = grid(lib, 4, 4, 4)[:, 0, :]
    o["reshape_copies_ptr_differs"] = get(lambda: y.data_ptr() != y.reshape(-1).data_ptr())
    o["reshape_views_ptr_same"] = get(lambda: y.reshape(2, 2, 4).data_ptr() == y.data_ptr())
    o["reshape_views_base"] = get(lambda: y.reshape(2, 2, 4)._base is y._base)
    x = grid(lib, 3, 3)
    o["reshape_ptrs"] = get(lambda: [x.data_ptr() == r.data_ptr()
                                     for r in (x.reshape(-1), x.reshape(1, 9, 1), x.reshape_as(lib.zeros(9)))])
    s = tens(lib, 2.5)
    o["scalar_reshape_ptr"] = get(lambda: s.data_ptr() == s.reshape(()).data_ptr())
    r.fill_(0.0)  # the copy is not the base
    o["base_after_copy_write"] = arr(t)
    return o


@scenario("test_expand_view, test_expand (writes through expand: PyTorch's overlap check)")
def expand_reads_and_writes(lib):
    x = grid(lib, 3, 1)
    v = x.expand(3, 4)
    phrase = "more than one element of the written-to tensor refers to a single memory location"
    o = {"values": arr(v), "stride": get(lambda: tuple(v.stride()))}
    o["add_"] = attempt(lambda: v.add_(1), phrase)
    o["row_setitem"] = attempt(lambda: v.__setitem__(1, 5.0), phrase)
    o["after_errors"] = arr(x)
    o["element_setitem"] = attempt(lambda: v.__setitem__((1, 2), 7.0))
    o["fill_"] = attempt(lambda: v[2].fill_(9.0))
    o["base"] = arr(x)
    x.mul_(2)
    o["view_after_base_write"] = arr(v)
    return o


@scenario("test_unbind_view, test_split_view, test_chunk_view, test_view_tensor_vsplit (outputs alias each other)")
def multi_output_views_alias(lib):
    t = lib.zeros(3, 4, dtype=lib.float64)
    outs = {"unbind": t.unbind(), "unbind1": t.unbind(1), "split": t.split(2), "chunk": t.chunk(2, 1)}
    o = {}
    for i, v in enumerate(outs["unbind"]):
        v[0] = i + 1.0
    o["after_unbind_writes"] = arr(t)
    for i, v in enumerate(outs["split"]):
        v.add_(10.0 * (i + 1))
    o["after_split_writes"] = arr(t)
    outs["chunk"][1].mul_(-1)
    o["after_chunk_write"] = arr(t)
    o["unbind1_sees_all"] = [arr(v) for v in outs["unbind1"]]
    o["bases"] = {k: get(lambda vs=vs: [v._base is t for v in vs]) for k, vs in outs.items()}
    o["offsets"] = {k: get(lambda vs=vs: [v.storage_offset() for v in vs]) for k, vs in outs.items()}
    return o


@scenario("test_saved_variable_version_counter, test_detach: one version counter per storage, .data keeps its own")
def version_counter_sharing(lib):
    t = grid(lib, 3, 4)
    a, b, d = t[0], t.view(-1), t.detach()
    o = {}
    a.add_(1)
    o["after_view_write"] = (t._version, a._version, b._version, d._version)
    d.mul_(2)
    o["after_detach_write"] = (t._version, a._version, b._version, d._version)
    t.data.sub_(1)
    o["after_data_write"] = (t._version, a._version, b._version, d._version, arr(b))
    c = b[2:5]  # a view of a view shares the same counter
    c.zero_()
    o["after_view_of_view_write"] = (t._version, a._version, c._version, arr(t))
    o["new_tensor_starts_at_zero"] = (t + 0)._version
    return o


@scenario("TestViewOps.is_view_of (storage data_ptr), test_reshape_view_semantics: storage identity, nbytes, data_ptr")
def storage_identity(lib):
    t = grid(lib, 3, 4)
    v = t[1:, 2:]
    s, sv = t.untyped_storage(), v.untyped_storage()
    o = {"same_ptr": get(lambda: s.data_ptr() == sv.data_ptr()), "nbytes": get(lambda: (s.nbytes(), sv.nbytes()))}
    o["view_ptr_is_storage_plus_offset"] = get(lambda: v.data_ptr() == sv.data_ptr() + v.storage_offset() * 8)
    o["base_ptr_is_storage"] = get(lambda: t.data_ptr() == s.data_ptr())
    o["clone_other_storage"] = get(lambda: t.clone().untyped_storage().data_ptr() != s.data_ptr())
    o["ptr_stable_across_writes"] = get(lambda: (lambda p: (t.add_(1), t.data_ptr() == p)[1])(t.data_ptr()))
    o["ptr_stable_view_write"] = get(lambda: (lambda p: (v.mul_(2), v.data_ptr() == p)[1])(v.data_ptr()))
    o["values"] = arr(t)
    return o


@scenario("issue 25: nn.init functions, zero_/fill_/copy_ through views")
def other_writers(lib):
    w = grid(lib, 3, 4)
    init = lib.nn.init
    with lib.no_grad():
        init.constant_(w[0], 3.0)
        init.zeros_(w[:, 1])
        init.ones_(w.t()[3])
        init.eye_(w[1:, :2])
    o = {"after_init": arr(w)}
    w.narrow(1, 2, 1).zero_()
    w[2:].fill_(-2.0)
    w.view(-1)[::5].copy_(tens(lib, [7.0, 8.0, 9.0]))
    o["after_writes"] = arr(w)
    return o


@scenario("issue 25: DLPack export of a view holds the values written through its base",
          cpu_only="NumPy imports CPU DLPack capsules only")
def dlpack_export_of_views(lib):
    w = grid(lib, 3, 4)
    v, row = w.t()[1:], w[1]
    w.mul_(10)
    row.add_(1)
    return {"view": get(lambda: np.array(np.from_dlpack(v), copy=True)),
            "row": get(lambda: np.array(np.from_dlpack(row), copy=True)),
            "base": get(lambda: np.array(np.from_dlpack(w), copy=True))}


# --- Issue 25's table: 13 rows, each a plain PyTorch program, observed on both libraries.
def _row(fn):
    TABLE[fn.__name__] = fn
    return fn


@_row
def row01_select_fill(lib):
    x = lib.zeros(3, 4, dtype=lib.float64)
    x[0].fill_(1)
    return {"sum": x.sum().item(), "x": arr(x)}


@_row
def row02_view_setitem(lib):
    x = lib.zeros(3, 4, dtype=lib.float64)
    x.view(-1)[5] = 2
    return {"sum": x.sum().item(), "x": arr(x)}


@_row
def row03_t_add_(lib):
    x = lib.zeros(3, 4, dtype=lib.float64)
    x.t().add_(1)
    return {"sum": x.sum().item()}


@_row
def row04_narrow_copy_(lib):
    x = lib.zeros(3, 4, dtype=lib.float64)
    x.narrow(1, 1, 2).copy_(lib.ones(3, 2, dtype=lib.float64))
    return {"sum": x.sum().item(), "x": arr(x)}


@_row
def row05_detach_add_(lib):
    x = lib.zeros(4, dtype=lib.float64)
    d = x.detach()
    d.add_(3)
    return {"sum": x.sum().item()}


@_row
def row06_select_mul_backward(lib):
    x = lib.ones(3, dtype=lib.float64, requires_grad=True)
    y = x * 1
    y[0].mul_(5)
    y.sum().backward()
    return {"grad": arr(x.grad), "y": arr(y)}


@_row
def row07_view_mul_backward(lib):
    x = lib.ones(2, 3, dtype=lib.float64, requires_grad=True)
    y = x * 2
    y.view(-1).mul_(3)
    y.sum().backward()
    return {"grad": arr(x.grad), "y": arr(y)}


@_row
def row08_leaf_view_inplace(lib):
    x = lib.ones(3, dtype=lib.float64, requires_grad=True)
    return {"mul_": attempt(lambda: x[:2].mul_(2), "a view of a leaf Variable that requires grad is being used in an "
                                                   "in-place operation"), "x": arr(x)}


@_row
def row09_iterate_rows(lib):
    x = lib.zeros(3, 4, dtype=lib.float64)
    for i, r in enumerate(x):
        r.add_(i)
    return {"x": arr(x)}


@_row
def row10_base_write_seen_by_view(lib):
    x = tens(lib, np.arange(6.0))
    y = x.view(3, 2)
    x.mul_(10)
    return {"y": arr(y)}


@_row
def row11_setitem_on_slice(lib):
    a = tens(lib, np.arange(6.0))
    b = a[1:4]
    b[1] = 7
    return {"a": arr(a)}


@_row
def row12_diagonal_fill_(lib):
    x = lib.zeros(3, 3, dtype=lib.float64)
    x.diagonal().fill_(1)
    return {"x": arr(x)}


@_row
def row13_data_write_seen_by_backward(lib):
    x = tens(lib, [1.0, 2.0, 3.0], requires_grad=True)
    h = x * 1
    y = h * h  # saves h twice
    h.data.mul_(2)
    y.sum().backward()
    return {"grad": arr(x.grad), "h": arr(h)}
