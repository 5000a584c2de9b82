"""Known value bounds of integer tensors: indices a jgrad op made in range, so their range checks can be skipped.

Note [Known bounds]
~~~~~~~~~~~~~~~~~~~
Why: an index a jgrad op has just drawn or computed is in range by construction (``Categorical.sample()``'s
action is in ``[0, K)``, ``argmax`` along a dimension in ``[0, size)``), yet the op reading it (``gather``,
``embedding``, a distribution's support check) checked it again. On a value that is pending ("auto" mode) or on
an accelerator that check is a device-side one (Note [Deferred checks] in ``_checks``): two recorded steps, a
flag read at the next host sync and the gate of the step's in-place writes. A REINFORCE policy step paid ~30%
of its host time for the two checks of its action.

What: the ops whose results are in range whatever their inputs' values (``categorical``, ``multinomial``,
``randint``, ``randperm``, ``argmax``, ``argmin``: JAX's argmax and top_k return an index in range even for
NaN inputs) mark their result with ``[low, high)``; a view of it and a widening integer cast keep the mark, and
``cat`` and ``stack`` of marked tensors mark theirs with the range that covers them all. ``tensor()`` of integer
host data marks its result with the data's range (since 2026-11-27: a language model's batches are slices of a
token tensor made that way, and the embedding's and the loss's index checks of every step were device-side ones,
whose gate in "auto" mode covered the optimizer's ~170 writes of a GPT step); the host has the values, and the
copy is the tensor's own, so a min and a max over them are all it costs.
The checks (``_checks.check_range``, ``distributions.utils.require_constraint``) skip a tensor whose mark
covers the range they require. The mark holds only while the tensor holds the very storage it was made for
at the same version: any write (in place, through a view, ``.data =``, ``set_``) rebinds ``_data`` or bumps
the version counter, and the mark no longer counts (a pending result that got its value at a barrier keeps it).
It keeps the marked array alive until the tensor dies or is marked again (an index tensor: small).

Imports nothing of jgrad: ops, views and checks use it.
"""
from __future__ import annotations

import numpy as np


def mark(t, low: int, high: int):
    """``t``'s values are known to be integers in ``[low, high)`` (its current storage, at its version)."""
    if high > low and _fits(t, low, high):
        t._bounds = (int(low), int(high), t._data, t._vc, t._vc[0])
    return t


def known(t):
    """``(low, high)`` when ``t``'s values are known to lie in ``[low, high)``, else None."""
    b = t._bounds
    if b is None or b[3] is not t._vc or b[4] != t._vc[0]:
        return None
    made, d = b[2], t._data
    if made is not d and (d is None or getattr(made, "_val", None) is not d):  # (a pending result now has its value)
        return None
    return b[0], b[1]


def within(t, low: int, high: int) -> bool:
    """Whether ``t``'s values are known to lie in ``[low, high)``."""
    b = known(t)
    return b is not None and low <= b[0] and b[1] <= high


def inherit(out, src):
    """``out`` (a view of ``src``, or a cast of it to an integer dtype that holds its range) keeps its bounds."""
    b = known(src)
    if b is not None:
        mark(out, *b)
    return out


def join(out, inputs):
    """``out`` (the values of ``inputs`` put together: ``cat``, ``stack``) keeps the bounds that cover all of
    theirs, when each has some."""
    low = high = None
    for t in inputs:
        b = known(t) if t._bounds is not None else None
        if b is None:
            return out
        low, high = (b[0], b[1]) if low is None else (min(low, b[0]), max(high, b[1]))
    if low is not None:
        mark(out, low, high)
    return out


def from_host(t, values):
    """Mark ``t``, just made from the host array ``values`` (a copy: nothing else writes it), with its values'
    range when they are integers."""
    if values.dtype.kind in "iu" and values.size:
        mark(t, int(values.min()), int(values.max()) + 1)
    return t


_RANGES: dict = {}  # numpy dtype -> (min, max) of an integer dtype, None for the others


def _fits(t, low, high):
    d = t._data
    dt = (d if d is not None else t._aval).dtype
    r = _RANGES.get(dt, False)
    if r is False:
        try:
            info = np.iinfo(dt)
            r = _RANGES[dt] = (int(info.min), int(info.max))
        except ValueError:  # a float or bool dtype: no integer bounds
            r = _RANGES[dt] = None
    return r is not None and r[0] <= low and high - 1 <= r[1]
