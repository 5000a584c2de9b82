"""Every op as PyTorch computes it: the OpInfo sweep (tests/_opinfo.py, tests/_opinfo_table.py) against the
installed PyTorch, and a check that every public op of jgrad has an entry.

Each entry's cases (variants x dtypes x samples, plus gradients in float64) must agree with PyTorch: values
(NaN, infinities and signed zeros included), shapes, dtypes, gradients and errors (class and message), except
the differences listed in ``KNOWN`` (each also in docs/differences.md). CI sweeps each entry's edge-value sample
in float32/int64, its failing samples and its float64 gradient in eager mode, and the entries marked
``auto=True`` in "auto" mode; ``JGRAD_TEST_THOROUGH=1`` sweeps every dtype, sample and variant of every entry
in both modes (tests/_opinfo.py, ``run_entry``).
"""
from __future__ import annotations

import os
import re

import pytest

torch = pytest.importorskip("torch", reason="the OpInfo sweep compares with PyTorch, which is not installed")

import jgrad as jg  # noqa: E402
from _opinfo import THOROUGH, run_entry, variants  # noqa: E402
from _opinfo_table import (KNOWN, NOT_OPS, OTHER_RELEASE, PENDING, REFERENCE_TORCH, TABLE,  # noqa: E402
                           TESTED_ELSEWHERE)

# another torch release than the pinned reference, or its AVX-512 kernels: their known differences at edge values
# are not jgrad's failures
_KNOWN = KNOWN + (OTHER_RELEASE if not (torch.__version__.startswith(REFERENCE_TORCH)
                                        and torch.backends.cpu.get_cpu_capability() != "AVX512") else [])


def _ids():
    seen = {}
    out = []
    for info in TABLE:
        n = seen.get(info.name, 0)
        seen[info.name] = n + 1
        out.append(info.name if n == 0 else f"{info.name}#{n}")
    return out


def _known(case):
    text = repr(case)
    return next((reason for op, pattern, reason in _KNOWN if op == case.op and re.search(pattern, text)), None)


@pytest.mark.parametrize("info", TABLE, ids=_ids())
def test_op_agrees_with_pytorch(info, _execution_mode):
    if _execution_mode == "auto" and not (THOROUGH or info.auto):
        pytest.skip("CI sweeps this entry in eager mode; JGRAD_TEST_THOROUGH=1 sweeps it in auto mode too")
    cases = run_entry(info)
    bad = [c for c in cases if c.status != "ok" and _known(c) is None]
    assert not bad, f"{len(bad)} of {len(cases)} cases differ from torch {torch.__version__}:\n" + "\n".join(
        map(repr, bad[:25]))


def _public_names():
    """Every public op and method of jgrad: ``jg.<op>``, ``Tensor.<method>`` (operators too) and ``F.<fn>``."""
    from jgrad.ops._registry import TENSOR_METHODS
    import jgrad.nn.functional as F
    names = set()
    for n in dir(jg):
        obj = getattr(jg, n)
        if not n.startswith("_") and callable(obj) and getattr(obj, "__module__", "").startswith("jgrad.ops"):
            names.add(n)
    names |= {f"Tensor.{n}" for n in TENSOR_METHODS if not n.startswith("_")}
    names |= {f"Tensor.{n}" for n in dir(jg.Tensor) if n.startswith("__") and n.strip("_") in _OPERATOR_NAMES}
    names |= {f"F.{n}" for n in F.__all__}
    return names


_OPERATOR_NAMES = {o.rstrip("_") for o in (
    "add sub mul truediv floordiv mod pow matmul and or xor lshift rshift neg pos abs invert eq ne lt le gt ge "
    "radd rsub rmul rtruediv rfloordiv rmod rpow rmatmul rand ror rxor rlshift rrshift iadd isub imul itruediv "
    "ifloordiv imod ipow imatmul iand ior ixor ilshift irshift").split()}


def _covered():
    out = set()
    for info in TABLE:
        name = info.name
        if name.startswith("operator."):
            op = name[9:].rstrip("_")
            out.add(f"Tensor.__{op}__")
            continue
        out.add(name)
        if "." not in name:
            for v in variants(info):
                if v == "method":
                    out.add(f"Tensor.{name}")
                elif v == "inplace":
                    out.add(f"Tensor.{name}_")
    return out


@pytest.mark.one_execution_mode
def test_every_public_op_has_an_entry():
    missing = sorted(_public_names() - _covered() - set(PENDING) - set(NOT_OPS) - set(TESTED_ELSEWHERE))
    assert not missing, ("public ops without an OpInfo entry (add one line to tests/_opinfo_table.py, or to "
                         f"PENDING/NOT_OPS with a reason): {missing}")


def test_names_tested_elsewhere_are_in_their_test_files():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    texts = {}
    for name, path in TESTED_ELSEWHERE.items():
        text = texts.get(path)
        if text is None:
            with open(os.path.join(root, path)) as f:
                text = texts[path] = f.read()
        base = name.split(".")[-1]
        # the indexing operators are spelled x[...] and x[...] = v
        pattern = {"__getitem__": r"\w\[[^\]]+\]", "__setitem__": r"\w\[[^\]]+\] = "}.get(
            base, r"[.\s(\[\'\"]" + re.escape(base) + r"\b")
        assert re.search(pattern, text), f"{path} does not name {name}"
