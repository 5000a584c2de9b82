"""``IdWeakMap``: a map keyed by an object's identity whose entry goes when the object dies.

jax.Arrays cannot key a dict or a ``WeakKeyDictionary`` (they are unhashable, and equality is elementwise);
jgrad still needs to attach facts to particular arrays: memory another library may write
(``_segment.mark_external``), the host copy of a result (``_host_copies``). Imports nothing of jgrad.
"""
from __future__ import annotations

import weakref


class IdWeakMap:
    __slots__ = ("_entries",)

    def __init__(self):
        self._entries: dict = {}   # id(obj) -> (weakref to obj, value)

    def __setitem__(self, obj, value) -> None:
        key, entries = id(obj), self._entries
        entries[key] = (weakref.ref(obj, lambda _: entries.pop(key, None)), value)

    def get(self, obj, default=None):
        entry = self._entries.get(id(obj))
        return entry[1] if entry is not None and entry[0]() is obj else default

    def __contains__(self, obj) -> bool:
        entry = self._entries.get(id(obj))
        return entry is not None and entry[0]() is obj

    def __len__(self) -> int:
        return len(self._entries)
