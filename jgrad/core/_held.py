"""Dicts read once, checked again by identity in a few bulk steps: ``HeldDicts``.

Both caches that skip a walk on a repeated call ask, on every call, whether dicts the last walk read still hold
the same entries: the trace cache's guards (``func/_guards.Guards``: the globals, ``__dict__``s and module dicts a
function reached) and ``jg.compile``'s module trees (``compiler._ModuleTree``: every submodule's ``_parameters``,
``_buffers`` and ``_modules``). Imports nothing.
"""
from __future__ import annotations

import itertools
import operator

_is, _chain = operator.is_, itertools.chain.from_iterable


class HeldDicts:
    """Dicts and what each held when added: its length, its keys (unless ``keys`` is False: a reader of the values
    alone) and its values. ``hold()`` compares them again by identity in C loops (``map``, ``chain``, ``all``) over
    values views made once. The dicts and their entries are held, so none can have been replaced by a new object
    at its address. Call ``finish()`` once every dict is added."""

    __slots__ = ("dicts", "lens", "keys", "views", "vals")

    def __init__(self, keys=True):
        self.dicts, self.lens, self.views, self.vals = [], [], [], []
        self.keys = [] if keys else None

    def add(self, d):
        view = d.values()  # (live: made once, read on every check)
        self.dicts.append(d)
        self.views.append(view)
        self.lens.append(len(d))
        if self.keys is not None:
            self.keys.extend(d)
        self.vals.extend(view)

    def extend(self, dicts):
        """``add`` each of ``dicts``, in a few bulk steps."""
        views = [d.values() for d in dicts]
        self.dicts.extend(dicts)
        self.views.extend(views)
        self.lens.extend(map(len, dicts))
        if self.keys is not None:
            self.keys.extend(_chain(dicts))
        self.vals.extend(_chain(views))

    def finish(self):
        self.lens = tuple(self.lens)

    def hold(self):
        """Whether each dict has the same length and, in order, the same keys and values (by identity). The lengths
        are compared first: ``map`` stops at the shorter, so ``all`` then compares one to one."""
        return (tuple(map(len, self.dicts)) == self.lens
                and (self.keys is None or all(map(_is, _chain(self.dicts), self.keys)))
                and all(map(_is, _chain(self.views), self.vals)))
