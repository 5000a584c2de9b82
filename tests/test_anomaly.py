"""Anomaly mode: forward tracebacks on nodes, NaN checks of backward outputs, the failing
node's forward traceback (and those of the nodes that induced it) as a warning and an
exception note.

Scenarios ported from PyTorch's test/test_autograd.py (upstream test named in each comment),
written fresh against jgrad.
"""
import warnings

import numpy as np
import pytest

import jgrad as jg
from jgrad import autograd as A
from jgrad.autograd import Function, detect_anomaly

F64 = jg.float64
SIZE = 10
NAN_AT_0 = [float("nan")] + [1.0] * (SIZE - 1)


def leaf(data, device=None):
    return jg.tensor(data, dtype=F64, device=device, requires_grad=True)


def messages(w):
    return [str(x.message) for x in w]


def _error_warnings(w):
    return [m for m in messages(w) if "Error detected in" in m or "Previous calculation" in m]


class NanFunc(Function):
    # test_anomaly_detect_nan's MyFunc
    @staticmethod
    def forward(ctx, inp1, inp2, fail_0th):
        ctx.fail_0th = fail_0th
        return inp1.sum(0, keepdim=True)

    @staticmethod
    def backward(ctx, g):
        gI = g.expand(SIZE) * jg.tensor(NAN_AT_0, dtype=F64)
        if ctx.fail_0th:
            return gI, None, None
        return None, gI, None


def test_detect_anomaly_nan_in_builtin_node_shows_forward_trace():
    x = leaf([1.0, 2.0])
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        anomaly = detect_anomaly()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with anomaly:
            a = x * float("inf")  # the culprit: d(x*inf)/dx = g * inf, and g is 0 below
            out = (a * 0.0).sum()
            with pytest.raises(RuntimeError, match=r"^Function 'MulBackward0' returned nan values in its 0th "
                                                   r"output\.") as info:
                out.backward()
    errs = _error_warnings(w)
    assert len(errs) == 1
    assert errs[0].startswith("Error detected in MulBackward0. Traceback of forward call that caused the error:\n")
    assert "a = x * float(\"inf\")" in errs[0]  # the forward line of the culprit, not of another node
    assert "test_anomaly.py" in errs[0] and "jgrad/runtime/_dispatch.py" not in errs[0]
    assert errs[0] in "\n".join(getattr(info.value, "__notes__", []))  # also on the exception
    assert not A.is_anomaly_enabled()


def test_anomaly_detect_nan_custom_function():
    # test_anomaly_detect_nan
    inp = leaf(np.ones(SIZE))
    NanFunc.apply(inp, inp, True).backward()  # anomaly mode off: no check

    out = NanFunc.apply(inp, inp, True)  # forward outside anomaly mode
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="Function 'NanFuncBackward' returned nan values in its 0th output."):
            with detect_anomaly():
                out.backward()
    assert "No forward pass information" in _error_warnings(w)[0]

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="Function 'NanFuncBackward' returned nan values in its 1th output."):
            with detect_anomaly():
                out = NanFunc.apply(inp, inp, False)
                out.backward()
    assert "NanFunc.apply" in _error_warnings(w)[0]


def test_anomaly_mode_no_check_nan():
    # test_anomaly_mode_no_check_nan
    class MyFunc(Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.clone()

        @staticmethod
        def backward(ctx, g):
            return jg.full((10, 10), float("nan"), dtype=F64)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with detect_anomaly(check_nan=False):
            assert A.is_anomaly_enabled() and not A.is_anomaly_check_nan_enabled()
            inp = leaf(np.ones((10, 10)))
            out = MyFunc.apply(inp).sum()
            out.backward(retain_graph=True)
            with detect_anomaly(check_nan=True):
                with pytest.raises(RuntimeError, match="Function 'MyFuncBackward' returned nan values in its 0th "
                                                       "output."):
                    out.backward(retain_graph=True)
            out.backward()
    assert np.isnan(np.asarray(inp.grad.numpy())).all()


def test_anomaly_grad_warnings():
    # test_anomaly_grad_warnings: an error that is not a NaN also reports the forward trace
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation has been "
                                           "modified by an inplace operation") as info:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            with detect_anomaly():
                a = leaf(np.ones(5))
                d1 = a + 1
                d2 = d1 ** 2
                d1 += 1
                A.grad(d2.sum(), a)
    msgs = messages(w)
    assert len(msgs) == 2
    assert "Anomaly Detection has been enabled" in msgs[0]
    assert "Error detected in PowBackward0" in msgs[1] and "d2 = d1 ** 2" in msgs[1]
    assert "Hint: the backtrace further above shows the operation that failed" in str(info.value)


def test_nested_anomaly_detect_nan_reports_parent_traces():
    # test_nested_anomaly_detect_nan: nodes created by a create_graph backward remember the
    # node that created them, and the report walks up that chain
    class MyFunc(Function):
        @staticmethod
        def forward(ctx, inp1, fail_0th):
            ctx.fail_0th = fail_0th
            ctx.save_for_backward(inp1)
            return inp1.sum(0, keepdim=True)

        @staticmethod
        def backward(ctx, g):
            inp, = ctx.saved_tensors
            g = g.expand(SIZE)
            gI = MyFunc2.apply(g * inp, g + inp, ctx.fail_0th)
            return gI, None

    class MyFunc2(Function):
        @staticmethod
        def forward(ctx, inp1, inp2, fail_0th):
            ctx.fail_0th = fail_0th
            return inp1 * 2.0 + inp2

        @staticmethod
        def backward(ctx, g):
            nan = g * jg.tensor(NAN_AT_0, dtype=F64)
            if ctx.fail_0th:
                return nan, g, None
            return g, nan, None

    inp = leaf(np.ones(SIZE))
    ginp, = A.grad(MyFunc.apply(inp, True), (inp,), create_graph=True)
    ginp.sum().backward()  # no anomaly mode: fine

    ginp, = A.grad(MyFunc.apply(inp, True), (inp,), create_graph=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="Function 'MyFunc2Backward' returned nan values in its 0th output."):
            with detect_anomaly():
                ginp.sum().backward()
    assert "No forward pass information" in _error_warnings(w)[0]

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="Function 'MyFunc2Backward' returned nan values in its 1th output."):
            with detect_anomaly():
                out = MyFunc.apply(inp, False)
                ginp, = A.grad(out, (inp,), create_graph=True)
                ginp.sum().backward()
    errs = _error_warnings(w)
    assert len(errs) == 2
    assert errs[0].startswith("Error detected in MyFunc2Backward.") and "MyFunc2.apply" in errs[0]
    assert errs[1].startswith("\n\nPrevious calculation was induced by MyFuncBackward. Traceback of forward call "
                              "that induced the previous calculation:\n")
    assert "MyFunc.apply" in errs[1]
    node = ginp.grad_fn
    assert "traceback_" in node.metadata and node.metadata["parent_"].name() == "MyFuncBackward"


def test_anomaly_in_a_device_thread():
    x = leaf([1.0, 2.0], device="cpu:1")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with detect_anomaly():
            y = (x * float("inf")) * 0.0
            with pytest.raises(RuntimeError, match="Function 'MulBackward0' returned nan values in its 0th output."):
                y.sum().backward()
    errs = _error_warnings(w)  # raised on the worker, re-emitted on the caller
    assert len(errs) == 1 and "y = (x * float(\"inf\")) * 0.0" in errs[0]
    (x * 2).sum().backward()  # the engine is still usable
    np.testing.assert_allclose(np.asarray(x.grad.numpy()), [2.0, 2.0])


def test_set_detect_anomaly_and_errors_without_nan():
    with A.set_detect_anomaly(True):
        assert A.is_anomaly_enabled()
        x = leaf([1.0])

        class Boom(Function):
            @staticmethod
            def forward(ctx, t):
                return t.clone()

            @staticmethod
            def backward(ctx, g):
                raise ValueError("boom")

        out = Boom.apply(x)
    assert not A.is_anomaly_enabled()
    # forward recorded in anomaly mode, backward outside it: no report
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="boom"):
            out.sum().backward()
    assert _error_warnings(w) == []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with A.set_detect_anomaly(True):
            with pytest.raises(ValueError, match="boom") as info:
                Boom.apply(x).sum().backward()
    assert "out = Boom.apply(x)" not in _error_warnings(w)[0]
    assert "Boom.apply(x).sum().backward()" in _error_warnings(w)[0]
    assert any("Error detected in BoomBackward" in n for n in info.value.__notes__)
