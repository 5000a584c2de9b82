"""Autograd through in-place writes on views (PyTorch's CopySlices) and PyTorch's view+inplace errors,
ported as scenarios from the view/in-place parts of PyTorch's test/test_autograd.py (TestAutograd and
TestAutogradDeviceType; each scenario names its upstream test). Each scenario takes the library module
(``torch`` or ``jgrad``) and returns what it observes; tests/test_views.py compares the two.
Helpers and conventions: tests/_view_scenarios.py."""
from __future__ import annotations

import numpy as np

from _view_scenarios import OK, arr, attempt, get, gname, grads, grid, scenario, tens

LEAF_VIEW = "a view of a leaf Variable that requires grad is being used in an in-place operation"
MULTI = "This view is the output of a function that returns multiple views"
MODIFIED = "is a view and is being modified inplace"
BASE_MODIFIED = "is a view and its base or another view of its base has been modified inplace"
NO_GRAD_VIEW = "A view was created in no_grad mode and is being modified inplace with grad mode enabled"
NO_GRAD_BASE = "A view was created in no_grad mode and its base or another view of its base has been modified inplace"
CUSTOM_VIEW = "This view was created inside a custom Function"
SAVED = "one of the variables needed for gradient computation has been modified by an inplace operation"


@scenario("test_inplace_on_view_leaf_errors, test_inplace_on_view_weak_grad_fn, test_no_requires_grad_inplace")
def leaf_view_inplace_errors(lib):
    x = lib.zeros(3, dtype=lib.float64, requires_grad=True)
    o = {"view_as_add_": attempt(lambda: x.view_as(x).add_(1), LEAF_VIEW),
         "slice_mul_": attempt(lambda: x[:2].mul_(2), LEAF_VIEW),
         "setitem": attempt(lambda: x.__setitem__(0, 1.0), LEAF_VIEW),
         "narrow_relu_": attempt(lambda: x.narrow(0, 0, 3).relu_(), LEAF_VIEW),
         "versions": (x._version,), "x": arr(x)}
    with lib.no_grad():  # what optimizers do: allowed without grad mode
        x[1:].add_(5)
    o["no_grad_write"] = (arr(x), x.is_leaf, x.grad_fn is None)
    a = grid(lib, 2, 3)   # views written before the base requires grad: fine
    a[:].add_(5)
    a.requires_grad = True
    a.sum().backward()
    o["written_before_requires_grad"] = arr(a.grad)
    a = grid(lib, 2, 3)   # a view taken before, written after: the leaf error
    b = a[:]
    a.requires_grad = True
    o["written_after_requires_grad"] = (attempt(lambda: a.add_(5), "a leaf Variable that requires grad"),
                                        attempt(lambda: b.add_(5), LEAF_VIEW))
    return o


@scenario("test_inplace_on_view_multiple_outputs, test_inplace_on_view_of_multiple_output_view, "
          "test_inplace_multiple_output_view_of_view, test_inplace_on_view_multi_output_safe")
def multi_output_view_inplace_errors(lib):
    def root(*shape):
        return grid(lib, *shape, requires_grad=True).clone()
    o = {"unbind_mul_": attempt(lambda: root(3, 3).unbind()[0].mul_(2), MULTI),
         "unbind_modified_phrase": attempt(lambda: root(3, 3).unbind()[1].mul_(2), MODIFIED),
         "view_of_unbind_output": attempt(lambda: (lambda b: b[0].view_as(b[0]).mul_(2))(root(4).unbind(0)), MULTI),
         "unbind_of_view": attempt(lambda: (lambda a: a.view_as(a).unbind(0)[0].mul_(2))(root(4)), MULTI)}
    for name, f in (("split", lambda t: t.split(1)), ("split_sizes", lambda t: t.split([1, 1, 1])),
                    ("chunk", lambda t: t.chunk(3))):
        s1, s2, _ = f(root(3, 3) * 2)
        o[name] = attempt(lambda s1=s1, s2=s2: s1.mul_(s2), MULTI)
    a = root(3)   # the base modified after the views were taken: using a view raises
    b = a.unbind(0)
    a.mul_(2)
    o["base_modified_then_used"] = attempt(lambda: b[0] * 2, BASE_MODIFIED)
    o["base_modified_multi_phrase"] = attempt(lambda: b[1].grad_fn, MULTI)
    o["base_values"] = arr(a)
    x = grid(lib, 2, 3)   # no history: writing the outputs is fine
    x.unbind()[1].mul_(2)
    o["no_grad_needed"] = arr(x)
    return o


@scenario("test_autograd_views_codegen (view_as and unbind in each grad mode)")
def views_codegen_table(lib):
    rows = {}
    for grad_mode in (True, False):
        for requires_grad in (True, False):
            inp = grid(lib, 2, requires_grad=requires_grad).clone()
            inp2 = grid(lib, 2, requires_grad=requires_grad).clone()
            with lib.set_grad_enabled(grad_mode):
                out = inp.view_as(inp)
                outs = inp2.unbind()
            row = {"is_view": get(lambda: (out._is_view(), outs[0]._is_view(), outs[1]._is_view()))}
            row["view_as_add_"] = attempt(lambda: out.add_(1), NO_GRAD_VIEW)
            row["unbind0_add_"] = attempt(lambda: outs[0].add_(1), NO_GRAD_VIEW if not grad_mode else MULTI)
            row["unbind1_add_"] = attempt(lambda: outs[1].add_(1), NO_GRAD_VIEW if not grad_mode else MULTI)
            row["requires_grad"] = (out.requires_grad, outs[0].requires_grad)
            rows[f"grad_mode={grad_mode},requires_grad={requires_grad}"] = row
    return rows


@scenario("test_autograd_inplace_views_creation_meta (t_ / unsqueeze_ on views made in each grad mode)")
def inplace_view_ops_creation_meta(lib):
    rows = {}
    for fn_name, fn in (("t_", lambda v: v.t_()), ("unsqueeze_", lambda v: v.unsqueeze_(0))):
        for kind in ("normal", "multi_view"):
            for grad_mode_view in (True, False):
                for grad_mode_iview in (True, False):
                    base = grid(lib, 2, 3, requires_grad=True).clone()
                    with lib.set_grad_enabled(grad_mode_view):
                        inp = base.unbind()[0] if kind == "multi_view" else base.view_as(base)
                    with lib.set_grad_enabled(grad_mode_iview):
                        first = attempt(lambda: fn(inp), NO_GRAD_VIEW if not grad_mode_view else MULTI)
                    second = attempt(lambda: inp.add_(1), NO_GRAD_VIEW if not grad_mode_view else MULTI) \
                        if first == OK else None
                    rows[f"{fn_name},{kind},view_grad={grad_mode_view},iview_grad={grad_mode_iview}"] = \
                        (first, second, tuple(inp.shape))
    return rows


@scenario("test_custom_function_return_view_in_nograd, test_autograd_inplace_view_of_view, "
          "test_inplace_on_view_then_no_grad")
def no_grad_views_modified_in_grad_mode(lib):
    o = {}
    base = grid(lib, 3, requires_grad=True).clone()
    with lib.no_grad():
        v = base[:2]
    o["view_modified"] = attempt(lambda: v.mul_(2), NO_GRAD_VIEW)
    with lib.no_grad():
        w = base[1:]
    base.mul_(2)  # the base written in grad mode: using the no_grad view raises
    o["base_modified_view_used"] = attempt(lambda: w.grad_fn, NO_GRAD_BASE)
    o["base_modified_view_values"] = arr(w)
    with lib.no_grad():  # both inside no_grad: allowed, not tracked
        u = base[:1]
        u.mul_(3)
    o["both_in_no_grad"] = (arr(base), gname(base))

    class Alias(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x[:]

        @staticmethod
        def backward(ctx, gx):
            return gx

    inp = grid(lib, 2, requires_grad=True)
    with lib.no_grad():
        out = Alias.apply(inp)
    o["custom_no_grad_view"] = (out.requires_grad, attempt(lambda: out.zero_(), NO_GRAD_VIEW))
    x = lib.zeros(2, dtype=lib.float64)
    with lib.no_grad():
        y = x.view(2)
    y.requires_grad_(True)
    z = y.view(2)
    o["view_of_no_grad_view"] = attempt(lambda: z.__itruediv__(2), "which was created in no_grad mode and is being "
                                                                     "modified inplace with grad mode enabled")
    a = tens(lib, [[1.0], [1.0], [1.0]], requires_grad=True)  # test_inplace_on_view_then_no_grad
    c = (a * 2).view_as(a)
    c[0][0] = 3
    with lib.no_grad():
        _ = c.grad_fn
    c.sum().backward()
    o["then_no_grad"] = (arr(a.grad), arr(c))
    return o


@scenario("test_inplace_on_view_backprop_base, test_inplace_on_view_backprop_view_of_view, "
          "test_inplace_on_view_of_view, test_inplace_on_view_non_contig")
def copyslices_small(lib):
    o = {}
    root = tens(lib, [[0.5, -1.0], [2.0, 3.0]], requires_grad=True)
    x = root.clone()
    x.narrow(0, 0, 1).mul_(2)
    o["base_grad_fn"] = gname(x)
    x.sum().backward()
    o["backprop_base"] = arr(root.grad)
    root.grad = None
    x = root.clone()
    v1, v2 = x.narrow(0, 0, 1), x.narrow(0, 0, 1)
    v1.mul_(2)
    o["view_grad_fns"] = (v1.grad_fn is not None, v2.grad_fn is not None, gname(x))
    v2.sum().backward()
    o["backprop_view_of_view"] = arr(root.grad)
    root.grad = None
    x = root.clone()
    x.narrow(0, 0, 1).narrow(1, 1, 1).mul_(2)
    x.sum().backward()
    o["view_of_view"] = arr(root.grad)
    nc = lib.ones(2, 3, 2, dtype=lib.float64).select(2, 1).t().requires_grad_(True)
    x = nc.clone()
    x.narrow(0, 0, 1).narrow(1, 1, 1).mul_(2)
    x.sum().backward()
    o["non_contig"] = arr(nc.grad)
    return o


@scenario("test_inplace_on_view_gradcheck, test_inplace_on_view_python (mark_dirty on views), "
          "test_inplace_on_view_makes_base_require_grad")
def copyslices_gradients(lib):
    rng = np.random.default_rng(0)
    a_np, b_np, go = rng.standard_normal((4, 4)), rng.standard_normal((2, 2)), rng.standard_normal((4, 4))

    class PyAdd(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.mark_dirty(x)
            x.add_(y)
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    def builtin(root, b):
        x = root.clone()
        x.narrow(1, 2, 2).narrow(0, 1, 2).mul_(b)
        x.narrow(1, 0, 2).narrow(0, 1, 2).mul_(b)
        return x

    def custom(root, b):
        x = root.clone()
        PyAdd.apply(x.narrow(1, 2, 2).narrow(0, 1, 2), b)
        PyAdd.apply(x.narrow(1, 0, 2).narrow(0, 1, 2), b)
        return x

    o = {}
    for name, fn in (("builtin", builtin), ("mark_dirty", custom)):
        a, b = tens(lib, a_np, True), tens(lib, b_np, True)
        out = fn(a, b)
        o[name] = (arr(out), gname(out), grads(lib, (out * tens(lib, go)).sum(), (a, b)))
    a, b = tens(lib, a_np), tens(lib, go[:, :1], True)
    x = a.clone()
    before = x.requires_grad
    x.narrow(1, 2, 1).mul_(b)
    o["makes_base_require_grad"] = (before, x.requires_grad, gname(x), grads(lib, (x * tens(lib, go)).sum(), (b,)))
    return o


@scenario("test_inplace_on_view_saved_output, test_inplace_on_view_backward (create_graph through CopySlices)")
def inplace_relu_on_view_and_double_backward(lib):
    x_np = np.random.default_rng(0).standard_normal((3, 3))   # mixed signs
    root = tens(lib, x_np, True)
    copy = root.clone()
    view = copy.view(9)
    lib.nn.functional.relu(view, inplace=True)   # relu saves its output: the view, written in place
    o = {"names": (gname(copy), view.grad_fn is not None), "values": arr(copy)}
    o["grads"] = grads(lib, (copy * copy).sum() + view[2:5].sum(), (root,))
    inputs = tens(lib, x_np, True)
    tmp = (inputs * inputs - 0.5).view_as(inputs)
    lib.nn.functional.relu(tmp[1:], inplace=True)
    prob = (tmp * 2).sigmoid()
    try:
        (g,) = lib.autograd.grad(prob.sum(), [inputs], create_graph=True)
        o["first"] = arr(g)
        o["second"] = grads(lib, (g * g).sum(), (inputs,))
    except Exception as e:  # noqa: BLE001
        o["first"] = type(e).__name__
    return o


@scenario("test_inplace_on_view_backprop_view, test_inplace_on_view_modify_base, test_leaf_assignment, "
          "test_no_grad_assignment, test_setitem (basic indices), test_unused_output")
def setitem_and_history_spreading(lib):
    o = {}
    a, b = tens(lib, [2.0, 5.0]), tens(lib, [3.0], True)
    res = a.narrow(0, 1, 1).mul_(b)
    res.sum().backward()
    o["backprop_view"] = (arr(b.grad), a.is_leaf, a.requires_grad, gname(a), arr(a))
    r = tens(lib, [1.5], True)
    x = lib.ones(5, dtype=lib.float64)
    v = x.select(0, 1)
    o["view_before"] = (v.requires_grad, v.grad_fn is None)
    x.add_(r)   # v now depends on r through its base
    o["view_after"] = (v.requires_grad, grads(lib, v, (r,)))
    x, y, z = grid(lib, 5, 5), tens(lib, np.arange(5.0), True), tens(lib, np.ones(5), True)
    x[0] = y
    x[1] = 2 * z
    o["leaf_assignment"] = (x.requires_grad, gname(x), grads(lib, x.sum(), (y, z)))
    x = grid(lib, 5, 5, requires_grad=True)
    with lib.no_grad():
        x[0] = tens(lib, np.ones(5))
    o["no_grad_assignment"] = (x.requires_grad, x.grad_fn is None, arr(x[0]))
    for size, index in (((4, 4), 1), ((1,), 0), ((4, 4), (slice(1, 3), 2))):
        x = lib.ones(*size, dtype=lib.float64, requires_grad=True)
        y = x + 2
        y[index] = 2
        o[f"setitem{size}{index}"] = (y._version, gname(y), grads(lib, y.sum(), (x,)))
        val = lib.full(tuple(x[index].shape), 7.0, dtype=lib.float64, requires_grad=True)
        y = x + 2
        y[index] = val
        o[f"setitem_tensor{size}{index}"] = grads(lib, (y * y).sum(), (x, val))
    x = grid(lib, 6, 2, requires_grad=True)
    out = x.chunk(3)[1] * 4 + 2
    o["unused_output"] = grads(lib, out.sum(), (x,))
    return o


@scenario("issue 25: views taken earlier see the new history; test_inplace_on_view_backprop_view_of_view")
def earlier_views_see_new_history(lib):
    x = tens(lib, np.linspace(-1.0, 1.0, 12).reshape(3, 4), True)
    y = x * 2
    a, flat, col = y[0], y.view(-1), y[:, 1]
    y.select(0, 1).mul_(x[1])   # written through a third view
    o = {"names": (gname(y), a.grad_fn is not None, flat.grad_fn is not None),
         "values": (arr(a), arr(flat), arr(col))}
    loss = (a * a).sum() + (flat * 3).sum() + col.exp().sum()
    o["grads"] = grads(lib, loss, (x,))
    y2 = x.sin()
    t = y2.t()
    t[1:3].add_(x[:, :2].t() * 2)   # a write through a transpose, read through the base and a slice
    o["through_t"] = (arr(y2), grads(lib, (y2 * y2).sum() + y2[2].sum(), (x,)))
    return o


@scenario("test_inplace_not_requires_grad, test_autograd_multiple_views_python, "
          "test_custom_function_inplace_on_view_of_leaf, test_custom_function_inplace_on_non_default_view")
def custom_function_views(lib):
    Function = lib.autograd.Function

    class MyFn(Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.view_as(inp)

        @staticmethod
        def backward(ctx, grad):
            return grad

    class ComplexView(Function):
        @staticmethod
        def forward(ctx, a, idx):
            ctx.save_for_backward(a)
            ctx.idx = idx
            return a.select(0, idx)

        @staticmethod
        def backward(ctx, grad):
            (a,) = ctx.saved_tensors
            res = lib.zeros_like(a)
            res.select(0, ctx.idx).copy_(grad)
            return res, None

    class Dirty(Function):
        @staticmethod
        def forward(ctx, inp):
            inp.add_(1)
            ctx.mark_dirty(inp)
            return inp

        @staticmethod
        def backward(ctx, g):
            return g

    o = {}
    a, b = grid(lib, 1, 2), tens(lib, [0.5], True)
    view_a = MyFn.apply(a)
    o["custom_view_iadd"] = attempt(lambda: view_a.__iadd__(b), CUSTOM_VIEW)
    o["custom_view_copy_"] = attempt(lambda: MyFn.apply(grid(lib, 1, 2)).copy_(b), CUSTOM_VIEW)
    o["unbind_copy_"] = attempt(lambda: grid(lib, 1, 2).unbind()[0].copy_(b), MULTI)
    a = grid(lib, 1, 2)
    a.select(1, 0).copy_(b)
    o["select_copy_"] = (a.requires_grad, gname(a), arr(a), grads(lib, (a * a).sum(), (b,)))
    c = ComplexView.apply(grid(lib, 2, requires_grad=True).clone(), 1)
    o["complex_view_iadd"] = attempt(lambda: c.__iadd__(1), MODIFIED)
    leaf = tens(lib, [1.0, 2.0], True)
    o["mark_dirty_view_of_leaf"] = attempt(lambda: Dirty.apply(leaf.view_as(leaf)), LEAF_VIEW)
    s, _ = leaf.split([1, 1], dim=0)
    o["mark_dirty_split_output"] = attempt(lambda: Dirty.apply(s), "output of a function that returns multiple view")
    return o


@scenario("test_autograd_python_custom_function_inplace (an input that is a view), test_custom_function_local_inplace")
def custom_function_inplace_on_view_input(lib):
    Function = lib.autograd.Function

    class MyAdder(Function):
        @staticmethod
        def forward(ctx, a, b):
            a.add_(b)
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    class MyBadAdder(Function):
        @staticmethod
        def forward(ctx, a, b):
            a.add_(b)
            ctx.mark_dirty(a)
            return a, a + b

        @staticmethod
        def backward(ctx, ga, gab):
            return ga + gab, ga + gab

    class Local(Function):
        @staticmethod
        def forward(ctx, inp, inplace):
            view = inp.clone()[:3]
            if inplace:
                view += 2
            return view

        @staticmethod
        def backward(ctx, grad):
            return grad, None

    o = {}
    a, b = tens(lib, [1.0, 2.0], True), tens(lib, [3.0, -1.0], True)
    c = MyAdder.apply(a.clone().view_as(a), b)
    o["adder_on_view"] = (arr(c), c.grad_fn is not None, grads(lib, (c * c).sum(), (a, b)))
    o["bad_adder_on_view"] = attempt(lambda: MyBadAdder.apply(a.clone().view_as(a), b),
                                     "your Function modifies inplace an input that is a view of another Tensor")
    base = grid(lib, 10, requires_grad=True)
    o["local_inplace"] = (gname(Local.apply(base, False)), gname(Local.apply(base, True)),
                          arr(Local.apply(base, True)))
    return o


@scenario("test_inplace (saved tensors), test_detach_then_inplace_raises_in_autograd, "
          "test_no_grad_modifies_version; issue 25: saved tensors read their storage")
def saved_tensor_versions_through_views(lib):
    def x():
        return tens(lib, [1.0, 2.0, 3.0], True)
    o = {}
    y = x().clone()   # saved y, written through a view
    s = y * y
    y[0].mul_(2)
    o["saved_base_view_write"] = attempt(lambda: s.sum().backward(), SAVED)
    y = x().clone()   # saved view, written through the base
    v = y[1:]
    s = v * v
    y.add_(1)
    o["saved_view_base_write"] = attempt(lambda: s.sum().backward(), SAVED)
    y = x().clone()   # saved view, written through another view
    s = y[:2].exp()   # exp saves its result (not a view of y): unaffected
    y[1:].mul_(3)
    o["unrelated_write"] = (attempt(lambda: s.sum().backward()), arr(y))
    leaf = x()        # test_detach_then_inplace_raises_in_autograd
    s = leaf ** 2
    leaf.detach().zero_()
    o["detach_write"] = (attempt(lambda: s.sum().backward(), SAVED), arr(leaf))
    leaf = x()        # test_no_grad_modifies_version, through a view
    s = (leaf * leaf).sum()
    with lib.no_grad():
        leaf[1:] *= 2
    o["no_grad_view_write"] = attempt(lambda: s.backward(), SAVED)
    leaf = x()        # .data keeps its own counter: no error, and backward reads the new values
    h = leaf * 1
    s = h * h
    h.data[1:].mul_(10)
    s.sum().backward()
    o["data_write_seen"] = (arr(leaf.grad), h._version)
    leaf = x()
    h = leaf * 1
    s = h.sin()   # saves h
    h.data.copy_(tens(lib, [0.0, 0.0, 0.0]))
    s.sum().backward()
    o["data_copy_seen"] = arr(leaf.grad)
    return o


@scenario("issue 25: iterating rows and writing them (Tensor.__iter__ is unbind)")
def iterate_rows_and_write(lib):
    x = grid(lib, 3, 2)
    for i, r in enumerate(x):
        r.mul_(i)
    o = {"rows_written": arr(x)}
    for r in x:
        r[0] = -1.0
    o["setitem_rows"] = arr(x)
    y = grid(lib, 3, 2, requires_grad=True).clone()
    o["with_history"] = attempt(lambda: [r.add_(1) for r in y], MULTI)
    return o
