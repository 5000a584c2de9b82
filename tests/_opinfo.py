"""The OpInfo harness: run one op of jgrad and of the reference (PyTorch) on the same sample inputs, in every
variant the reference has (function, method, in-place ``name_``, ``inplace=True``), and compare the outcomes:
values (NaN where NaN, signed zeros), shapes, dtypes, gradients (PyTorch's autograd under the same random
cotangents) and errors (exception class and message). Never compares jgrad with itself.

An entry (``OpInfo``) is one line of ``tests/_opinfo_table.py``; ``run_entry`` returns one ``Case`` per
(variant, dtype, sample) with ``status`` "ok" or what differs. ``python tests/_opinfo.py`` prints the sweep's
counts and every difference (``--thorough``: all dtypes and samples; ``--grep NAME``: only those entries).
"""
from __future__ import annotations

import inspect
import math
import operator
import os
import re
import sys

import numpy as np

import jgrad as jg
import jgrad.nn.functional as JF

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # the tests skip with a reason; the reference is PyTorch
    torch = TF = None

THOROUGH = os.environ.get("JGRAD_TEST_THOROUGH") == "1"
FLOATS = ("float32", "float64")
INTS = ("int64", "int32", "uint8")
ALL = FLOATS + INTS + ("bool",)
# What CI sweeps (JGRAD_TEST_THOROUGH=1: every dtype an entry names): one float type and the default integer
# type; float64 is the gradient's dtype (gradients are always checked in float64).
QUICK = ("float32", "int64")


class S:
    """One sample: positional and keyword arguments. NumPy arrays become tensors (of their dtype) on both sides;
    lists of arrays become lists of tensors; anything else is passed as it is. ``grad``: differentiate this
    sample (its floating arrays) in the gradient check."""

    __slots__ = ("args", "kwargs", "grad", "desc")

    def __init__(self, *args, grad=True, desc="", **kwargs):
        self.args, self.kwargs, self.grad, self.desc = args, kwargs, grad, desc

    def __repr__(self):
        if self.desc:
            return self.desc
        def r(a):
            if isinstance(a, np.ndarray):
                return f"{a.dtype}{list(a.shape)}"
            if isinstance(a, (list, tuple)) and a and isinstance(a[0], np.ndarray):
                return "[" + ",".join(r(x) for x in a) + "]"
            return repr(a)
        return ", ".join([r(a) for a in self.args] + [f"{k}={r(v)}" for k, v in self.kwargs.items()])


class OpInfo:
    """One op of the table.

    ``name``: ``"sin"`` (``jg.sin``/``torch.sin``, with the method and in-place variants the reference has),
    ``"F.relu"`` (``nn.functional``), ``"Tensor.byte"`` (a method only), ``"operator.ifloordiv"`` (a Python
    operator; the ``i`` forms check that the left operand is written), ``"nn.Linear"`` (a module call).
    ``samples(dtype) -> [S]``; ``dtypes``: those swept (each sample's arrays are of that dtype unless the
    generator says otherwise); ``grad``: compare gradients; ``values``: compare values (False for random ops:
    shapes, dtypes and errors only); ``variants``: restrict the variants; ``auto``: also swept in "auto"
    execution mode in CI (every entry is in ``JGRAD_TEST_THOROUGH=1``); ``tol``: (rtol, atol) for floats;
    ``call``: (jgrad_fn, torch_fn) instead of resolving ``name``; ``composite``: written with other entries' ops
    (losses, norms...), so CI checks its values and leaves its gradient (those ops' gradients, each checked in
    its own entry) to ``JGRAD_TEST_THOROUGH=1``."""

    __slots__ = ("name", "samples", "dtypes", "grad", "values", "variants", "auto", "tol", "call", "composite")

    def __init__(self, name, samples, dtypes=ALL, *, grad=True, values=True, variants=None, auto=False, tol=None,
                 call=None, composite=False):
        self.name, self.samples, self.dtypes, self.grad, self.values = name, samples, dtypes, grad, values
        self.variants, self.auto, self.tol, self.call = variants, auto, tol, call
        self.composite = composite

    def __repr__(self):
        return self.name


class Case:
    __slots__ = ("op", "variant", "dtype", "sample", "status", "detail")

    def __init__(self, op, variant, dtype, sample, status, detail=""):
        self.op, self.variant, self.dtype, self.sample = op, variant, dtype, sample
        self.status, self.detail = status, detail

    def __repr__(self):
        return f"{self.op} [{self.variant}, {self.dtype}] ({self.sample!r}): {self.status}: {self.detail}"


# ---- resolving an entry's callables -------------------------------------------------------------
def _lookup(mod, path):
    obj = mod
    for p in path.split("."):
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj


def _method(name):
    def f(self, *a, **k):
        m = getattr(self, name, None)
        if m is None:
            raise _Missing(f"Tensor.{name}")
        return m(*a, **k)
    return f


class _Missing(Exception):
    """jgrad lacks the name (counted as a difference, "missing")."""


def _resolve(lib, name):
    """The function ``name`` names in ``lib`` ("jg" or "torch"), or a stub raising ``_Missing``."""
    if name.startswith("Tensor."):
        return _method(name[7:])
    if name.startswith("operator."):
        return _OPERATORS[name[9:]]
    if name.startswith("F."):
        fn = getattr(JF if lib == "jg" else TF, name[2:], None)
    else:
        fn = _lookup(jg if lib == "jg" else torch, name)
    if fn is None:
        def missing(*a, **k):
            raise _Missing(name)
        return missing
    return fn


def _inplace_op(op):
    def f(a, b):
        alias = a
        a = op(a, b)
        if a is not alias:  # the operator rebound instead of writing: the alias kept its old value
            raise _Missing("in-place operator (it returned a new tensor)")
        return alias
    return f


_OPERATORS = {n: getattr(operator, n) for n in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor", "lshift",
    "rshift", "neg", "pos", "abs", "invert", "eq", "ne", "lt", "le", "gt", "ge")}
_OPERATORS.update({n: _inplace_op(getattr(operator, n)) for n in (
    "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "imatmul", "iand", "ior", "ixor", "ilshift",
    "irshift")})
_OPERATORS.update({f"r{n}": (lambda op: lambda a, b: op(b, a))(getattr(operator, n))
                   for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and_", "or_", "xor",
                             "matmul", "lshift", "rshift")})


def variants(info):
    """``{variant: (jgrad_fn, torch_fn, writes_first_arg)}`` of an entry, from what the reference offers."""
    name = info.name
    if info.call is not None:
        out = {"fn": (info.call[0], info.call[1], False)}
    elif name.startswith(("Tensor.", "operator.")):
        out = {"fn": (_resolve("jg", name), _resolve("torch", name), name.startswith("operator.i"))}
    elif name.startswith("F."):
        out = {"fn": (_resolve("jg", name), _resolve("torch", name), False)}
        tfn = getattr(TF, name[2:])
        try:
            params = inspect.signature(tfn).parameters
        except (TypeError, ValueError):
            params = {}
        if "inplace" in params:
            out["inplace=True"] = (_kw(_resolve("jg", name), inplace=True), _kw(tfn, inplace=True), True)
    else:
        out = {"fn": (_resolve("jg", name), _resolve("torch", name), False)}
        short = name.split(".")[-1]
        if "." not in name and hasattr(torch.Tensor, short):
            out["method"] = (_method(short), _method(short), False)
        if "." not in name and hasattr(torch.Tensor, short + "_") and not short.endswith("_"):
            out["inplace"] = (_method(short + "_"), _method(short + "_"), True)
    if info.variants is not None:
        out = {k: v for k, v in out.items() if k in info.variants}
    return out


def _kw(fn, **extra):
    return lambda *a, **k: fn(*a, **{**k, **extra})


# ---- running one call ----------------------------------------------------------------------------
def _convert(x, lib, grad):
    if isinstance(x, np.ndarray):
        if lib == "jg":
            t = jg.tensor(x)
            return t.requires_grad_() if grad and x.dtype.kind == "f" else t
        t = torch.tensor(x)
        return t.requires_grad_() if grad and x.dtype.kind == "f" else t
    if isinstance(x, list) and x and all(isinstance(v, np.ndarray) for v in x):
        return [_convert(v, lib, grad) for v in x]
    if isinstance(x, tuple) and x and all(isinstance(v, np.ndarray) for v in x):
        return tuple(_convert(v, lib, grad) for v in x)
    if isinstance(x, _DType):
        return x.jg if lib == "jg" else x.torch
    return x


class _DType:
    """A dtype argument (``dtype=D("int32")``): ``jg.int32`` on one side, ``torch.int32`` on the other."""

    def __init__(self, name):
        self.name = name
        self.jg, self.torch = getattr(jg, name), getattr(torch, name)

    def __repr__(self):
        return self.name


D = _DType


def _inputs(sample, lib, grad):
    args = [_convert(a, lib, grad) for a in sample.args]
    kwargs = {k: _convert(v, lib, grad) for k, v in sample.kwargs.items()}
    return args, kwargs


def _leaves(args, kwargs):
    out = []
    for a in list(args) + list(kwargs.values()):
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if getattr(t, "requires_grad", False) and t.is_leaf:
                out.append(t)
    return out


def _flat(out):
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            res.extend(_flat(o))
        return res
    return [out]


def _np(t):
    if isinstance(t, jg.Tensor):
        a = np.asarray(t.detach().numpy())
        return a.astype(np.float32) if a.dtype.name in ("bfloat16", "float16") else a
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    t = t.detach()
    if t._is_zerotensor():  # PyTorch's symbolic zero gradients (sgn's)
        return np.zeros(tuple(t.shape), str(t.dtype).split(".")[-1])
    return t.cpu().numpy()


def _dtname(t):
    return str(t.dtype).split(".")[-1]


_JAXY = re.compile(r"jax|jnp\.|lax\.|Incompatible shapes for broadcasting|XLA|tracer|Traced<|ShapedArray|"
                   r"weak_type|TypeError: unsupported operand", re.I)


def _outcome(fn, args, kwargs, writes, sync=False):
    try:
        out = fn(*args, **kwargs)
        if sync:  # a check on the device's values (a GPU's, or "auto" mode's) reports here: the op's own error
            jg.synchronize()
    except _Missing as e:
        return ("missing", str(e))
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return ("error", type(e), str(e))
    if writes and args:
        return ("ok", out, args[0])
    return ("ok", out, None)


def _norm_msg(msg):
    msg = re.sub(r" \((integer division|\w+) issued at .*$", "", msg, flags=re.S)  # a deferred check's "where"
    msg = re.sub(r"\s+", " ", msg)  # PyTorch's sources wrap some messages with runs of spaces
    return re.sub(r" \(position \d+\)", "", msg).strip()


def _compare_values(j, t, tol, what):
    """None when jgrad's output ``j`` matches torch's ``t``, else what differs."""
    if isinstance(t, torch.Tensor):
        if not isinstance(j, jg.Tensor):
            return f"{what}: jgrad returned {type(j).__name__}, torch a Tensor"
        if tuple(j.shape) != tuple(t.shape):
            return f"{what}: shape {tuple(j.shape)} != torch's {tuple(t.shape)}"
        if _dtname(j) != _dtname(t):
            return f"{what}: dtype {_dtname(j)} != torch's {_dtname(t)}"
        a, b = _np(j), _np(t)
        return _compare_arrays(a, b, tol, what)
    if isinstance(t, (tuple, list)):
        if not isinstance(j, (tuple, list)) or len(j) != len(t):
            return f"{what}: jgrad returned {type(j).__name__} of {len(j) if hasattr(j, '__len__') else '?'}, " \
                   f"torch {type(t).__name__} of {len(t)}"
        for i, (a, b) in enumerate(zip(j, t)):
            r = _compare_values(a, b, tol, f"{what}[{i}]")
            if r:
                return r
        return None
    if isinstance(t, (bool, int, float)) or t is None:
        if type(j) is not type(t) and not (isinstance(t, float) and isinstance(j, float)):
            return f"{what}: jgrad returned {j!r}, torch {t!r}"
        if isinstance(t, float) and math.isnan(t) and math.isnan(j):
            return None
        return None if j == t else f"{what}: {j!r} != torch's {t!r}"
    if isinstance(t, torch.dtype):
        return None if str(j).split(".")[-1] == str(t).split(".")[-1] else f"{what}: {j} != torch's {t}"
    return None if j == t else f"{what}: {j!r} != torch's {t!r}"


def _compare_arrays(a, b, tol, what):
    if b.dtype.kind == "f":
        rtol, atol = tol or ((2e-5, 1e-6) if b.dtype == np.float32 else (1e-9, 1e-12))
        a, b = a.astype(np.float64), b.astype(np.float64)
        nan = np.isnan(b)
        if (np.isnan(a) != nan).any():
            i = np.argwhere(np.isnan(a) != nan)[0]
            return f"{what}: NaN mismatch at {tuple(i)}: jgrad {a[tuple(i)]}, torch {b[tuple(i)]}"
        inf = np.isinf(b)
        if (np.isinf(a) != inf).any() or (a[inf] != b[inf]).any():
            return f"{what}: inf mismatch: jgrad {a[inf | np.isinf(a)]}, torch {b[inf | np.isinf(a)]}"
        fin = ~(nan | inf)
        if not np.allclose(a[fin], b[fin], rtol=rtol, atol=atol):
            err = np.abs(a[fin] - b[fin]) - rtol * np.abs(b[fin])
            k = int(np.argmax(err))
            return f"{what}: values differ (max excess {err[k]:.3g}: jgrad {a[fin][k]!r}, torch {b[fin][k]!r})"
        zero = fin & (b == 0) & (a == 0)
        if (np.signbit(a[zero]) != np.signbit(b[zero])).any():
            return f"{what}: signed zero differs"
        return None
    if not np.array_equal(a, b):
        return f"{what}: values differ: jgrad {a.ravel()[:8]}, torch {b.ravel()[:8]}"
    return None


def _overloads(msg):
    """PyTorch's argument parser lists every overload; jgrad says what is wrong in one sentence (docs/differences.md,
    "Errors"): the class must match, the wording is jgrad's own."""
    return "received an invalid combination of arguments" in msg or "takes 1 positional argument" in msg


def compare_outcomes(jo, to, tol):
    """(status, detail) of jgrad's outcome against torch's."""
    if to[0] == "missing":
        return "no reference", f"torch has no {to[1]}"
    if jo[0] == "missing":
        return ("missing", jo[1]) if to[0] == "ok" else ("missing", f"{jo[1]} (torch raises {to[1].__name__})")
    if to[0] == "error":
        if jo[0] == "ok":
            return "missing error", f"torch raises {to[1].__name__}: {to[2][:160]}"
        if jo[1].__name__ != to[1].__name__:
            return "error class", f"jgrad {jo[1].__name__}: {jo[2][:120]} | torch {to[1].__name__}: {to[2][:120]}"
        if _JAXY.search(jo[2]):
            return "error message", f"JAX's message: {jo[2][:160]} | torch: {to[2][:160]}"
        if _norm_msg(jo[2]) != _norm_msg(to[2]) and not _overloads(to[2]):
            return "error message", f"jgrad: {jo[2][:160]} | torch: {to[2][:160]}"
        return "ok", ""
    if jo[0] == "error":
        return "spurious error", f"{jo[1].__name__}: {jo[2][:200]}"
    r = _compare_values(jo[1], to[1], tol, "output")
    if r is None and to[2] is not None:
        if jo[1] is not jo[2] and isinstance(jo[1], jg.Tensor) and isinstance(to[1], torch.Tensor) \
                and to[1] is to[2]:
            return "value", "in-place variant returned a new tensor, not its input"
        r = _compare_values(jo[2], to[2], tol, "written input")
    return ("ok", "") if r is None else ("value", r)


# ---- gradients ------------------------------------------------------------------------------------
def _grad_case(jfn, tfn, sample, tol, writes):
    """Gradients of every floating input under the same random cotangents, or None when nothing to compare."""
    if writes:  # differentiate through the in-place write on a non-leaf copy of the first input
        jfn0, tfn0 = jfn, tfn
        jfn = lambda a, *r, **k: jfn0(a * 1, *r, **k)  # noqa: E731
        tfn = lambda a, *r, **k: tfn0(a * 1, *r, **k)  # noqa: E731
    ta, tk = _inputs(sample, "torch", True)
    tleaves = _leaves(ta, tk)
    if not tleaves:
        return None
    try:
        tout = [o for o in _flat(tfn(*ta, **tk)) if isinstance(o, torch.Tensor) and o.requires_grad]
    except Exception:  # noqa: BLE001 - torch refuses the sample: the value sweep compares errors
        return None
    ja, jk = _inputs(sample, "jg", True)
    jleaves = _leaves(ja, jk)
    try:
        jout = [o for o in _flat(jfn(*ja, **jk)) if isinstance(o, jg.Tensor) and o.requires_grad]
    except Exception as e:  # noqa: BLE001
        return "grad", f"forward with requires_grad raised {type(e).__name__}: {str(e)[:160]}"
    if not tout:
        return None if not jout else ("grad", "jgrad output requires grad, torch's does not")
    if len(jout) != len(tout):
        return "grad", f"{len(jout)} differentiable outputs, torch {len(tout)}"
    rng = np.random.default_rng(7)
    cots = [rng.standard_normal(tuple(o.shape)).astype(_np(o).dtype) for o in tout]
    try:
        tg = torch.autograd.grad(tout, tleaves, [torch.tensor(c) for c in cots], allow_unused=True)
    except Exception as e:  # noqa: BLE001 - PyTorch refuses the gradient: jgrad must too
        try:
            jg.autograd.grad(jout, jleaves, [jg.tensor(c) for c in cots], allow_unused=True)
        except Exception as e2:  # noqa: BLE001
            if type(e2).__name__ == type(e).__name__:
                return "ok", ""
            return "grad", f"backward: jgrad {type(e2).__name__}: {str(e2)[:100]} | torch {type(e).__name__}"
        return "grad", f"torch's backward raises {type(e).__name__}: {str(e)[:120]}; jgrad's does not"
    try:
        jgr = jg.autograd.grad(jout, jleaves, [jg.tensor(c) for c in cots], allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return "grad", f"backward raised {type(e).__name__}: {str(e)[:160]}"
    for i, (a, b, leaf) in enumerate(zip(jgr, tg, tleaves)):
        a = np.zeros(tuple(leaf.shape)) if a is None else _np(a)
        b = np.zeros(tuple(leaf.shape)) if b is None else _np(b)
        r = _compare_arrays(a.astype(b.dtype), b, tol, f"gradient of input {i}")
        if r:
            return "grad", r
    return "ok", ""


# ---- one entry ----------------------------------------------------------------------------------
def entry_dtypes(info, thorough=THOROUGH):
    if thorough:
        return info.dtypes
    quick = [d for d in info.dtypes if d in QUICK]
    return quick or list(info.dtypes[:1])


def run_entry(info, *, thorough=THOROUGH, grads=True):
    """Every case of one entry: [Case].

    Thorough: every dtype, sample and variant, and the gradients of every sample in every variant. CI, sized by
    what costs (XLA compiles one kernel per op, shape and dtype): the first sample of each dtype (the edge
    values, one tensor, one compile) and the samples that do not differentiate (``grad=False``: mostly inputs
    that must fail, refused before anything compiles), in every variant; the gradient of the first
    differentiable sample through the function."""
    cases = []
    vs = variants(info)
    for k, dt in enumerate(entry_dtypes(info, thorough)):
        samples = info.samples(dt)
        if not thorough:
            samples = samples[:1] + [s for s in samples[1:] if not s.grad and k == 0]
        for s in samples:
            for vname, (jfn, tfn, writes) in vs.items():
                c = _value_case(info, vname, jfn, tfn, writes, dt, s)
                if c is not None:
                    cases.append(c)
    if grads and info.grad and (thorough or not info.composite):
        gsamples = [s for s in (info.samples("float64") if "float64" in info.dtypes else []) if s.grad]
        for s in gsamples if thorough else gsamples[:1]:
            for vname, (jfn, tfn, writes) in vs.items():
                if vname != "fn" and not thorough:
                    continue  # CI: the function's gradient (in-place variants' in JGRAD_TEST_THOROUGH=1)
                r = _grad_case(jfn, tfn, s, info.tol, writes)
                if r is not None:
                    cases.append(Case(info.name, vname + "/grad", "float64", s, *r))
    return cases


def _value_case(info, vname, jfn, tfn, writes, dt, s):
    if vname in ("method", "inplace") and not (s.args and isinstance(s.args[0], np.ndarray)):
        return None  # a sample whose first argument is not a tensor (pow(2, t)) has no method form
    ta, tk = _inputs(s, "torch", False)
    to = _outcome(tfn, ta, tk, writes)
    ja, jk = _inputs(s, "jg", False)
    jo = _outcome(jfn, ja, jk, writes, sync=True)
    if not info.values and to[0] == "ok" and jo[0] == "ok":  # random ops: structure only
        to = ("ok", _structure(to[1]), None)
        jo = ("ok", _structure(jo[1]), None)
    status, detail = compare_outcomes(jo, to, info.tol)
    return Case(info.name, vname, dt, s, status, detail)


def _structure(out):
    if isinstance(out, (tuple, list)):
        return tuple(_structure(o) for o in out)
    if isinstance(out, (jg.Tensor, torch.Tensor)):
        return (tuple(out.shape), _dtname(out))
    return out


def main(argv):
    from _opinfo_table import TABLE
    thorough = "--thorough" in argv
    grep = argv[argv.index("--grep") + 1] if "--grep" in argv else None
    counts, bad = {}, []
    for info in TABLE:
        if grep and not re.search(grep, info.name):
            continue
        try:
            cases = run_entry(info, thorough=thorough)
        except Exception as e:  # noqa: BLE001 - a harness failure on one entry is reported, the sweep goes on
            cases = [Case(info.name, "?", "?", "", "harness", f"{type(e).__name__}: {e}")]
        for c in cases:
            counts[c.status] = counts.get(c.status, 0) + 1
            if c.status != "ok":
                bad.append(c)
    for c in bad:
        print(c)
    total = sum(counts.values())
    print(f"{counts.get('ok', 0)} of {total} cases agree with torch {torch.__version__}; {counts}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _opinfo  # the table imports this module by name: one copy of its classes
    _opinfo.main(sys.argv[1:])
