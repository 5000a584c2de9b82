"""What tiered execution did: the counts of ``segment_cache_info()``, one ``StructureInfo`` per structure, and why
each structure was new (what differed from the nearest structure seen before it); and which Python scalars of a
step differ from a step seen before at the same point (``varying_scalars``: they become dynamic inputs).

Imports nothing of jgrad; ``_segment`` (which owns the trie whose nodes ``why_new`` walks) and ``_segment_barrier``
(which keeps the counts and asks ``why_new``) import it. Each node knows its ``parent`` (a weak reference), its step
``key`` ``(kernel, argument tree, refs, stream index, new input avals)``, its ``depth`` and the ``plans`` of the
structures that ended there.
"""
from __future__ import annotations

from typing import NamedTuple

_COUNTS = ("segments", "ops", "structures", "interpreted", "compiled_runs", "donated_runs", "copied_runs",
           "call_seconds", "compiles", "compile_seconds", "compile_failures", "evicted", "rolled_back",
           "eager_stretches", "stretch_points")


class StructureInfo(NamedTuple):
    """One structure (a segment's ops and the results still referenced at its barrier): its size, how often it
    ran and how, and why it was new."""

    ops: int            #: steps (kernels) recorded
    runs: int           #: barriers that ran it
    compiled_runs: int  #: of those, runs as one compiled executable
    status: str         #: "compiled", "compiling", "op by op", "failed" (its compile failed)
    why: str            #: what differed from the nearest structure seen before it


class SegmentCacheInfo:
    """Counts of tiered execution since the last ``segment_cache_clear()``, and ``per_structure``: a
    ``StructureInfo`` per structure (the latest ``max_listed`` of them), in the order they were first seen."""

    __slots__ = _COUNTS + ("per_structure",)

    def __init__(self, **kw):
        for k in _COUNTS:
            setattr(self, k, kw.get(k, 0))
        self.per_structure = tuple(kw.get("per_structure", ()))

    @property
    def hit_rate(self) -> float:
        """Fraction of segments that ran as a compiled executable."""
        return self.compiled_runs / self.segments if self.segments else 0.0

    def _asdict(self):
        return {k: getattr(self, k) for k in _COUNTS} | {"hit_rate": self.hit_rate}

    def __repr__(self):
        return ("SegmentCacheInfo(" + ", ".join(f"{k}={getattr(self, k):.3f}" if k.endswith("seconds") else
                                                f"{k}={getattr(self, k)!r}" for k in _COUNTS)
                + f", hit_rate={self.hit_rate:.2f})")

    def report(self) -> str:
        """A table of the structures: ops, runs, compiled runs, status and why each was new."""
        lines = [f"{'#':>4} {'ops':>6} {'runs':>6} {'compiled':>8}  {'status':<9} why new"]
        for i, s in enumerate(self.per_structure):
            lines.append(f"{i:>4} {s.ops:>6} {s.runs:>6} {s.compiled_runs:>8}  {s.status:<9} {s.why}")
        return "\n".join(lines)


def op_name(fn):
    return getattr(fn, "__name__", None) or type(fn).__name__


def _ref_text(r):
    if type(r) is int:
        return f"result of op-output {r}" if r >= 0 else f"input {~r}"
    if r[0] == "l":
        return f"the Python {r[1].__name__} {r[2]!r}"
    return "a slice of a packed output"


def _aval_text(a):
    if isinstance(a, type):
        return f"a dynamic Python {a.__name__}"
    shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
    return f"{dtype}{list(shape)}" if shape is not None else repr(a)


def _score(k, o):
    """How alike two step keys are (higher: nearer)."""
    s = (k[0] is o[0]) * 4 + (op_name(k[0]) == op_name(o[0])) * 8 + (k[1] == o[1]) * 2 + (k[3] == o[3])
    s += (k[4] == o[4]) * 2
    if len(k[2]) == len(o[2]):
        s += sum(a == b for a, b in zip(k[2], o[2])) / (1 + len(k[2]))
    return s


def key_difference(key, other):
    """What differs between two step keys, in words (``key`` is the new one)."""
    fn, tree, refs, st, new = key
    name = op_name(fn)
    if fn is not other[0]:
        if name == op_name(other[0]):
            return f"{name} with other static attributes (another kernel)"
        return f"{name} where it had {op_name(other[0])}"
    if st != other[3]:
        return f"{name} on another stream"
    if tree != other[1] or len(refs) != len(other[2]):
        return f"{name} with another argument structure"
    for j, (a, b) in enumerate(zip(refs, other[2])):
        if a != b:
            if type(a) is tuple and type(b) is tuple and a[0] == b[0] == "l":
                return (f"{name}: Python scalar argument {j} is {a[2]!r} where it was {b[2]!r} (a constant of the "
                        "structure; it becomes a dynamic input once seen varying)")
            return f"{name}: argument {j} is {_ref_text(a)} where it was {_ref_text(b)}"
    for a, b in zip(new, other[4]):
        if a != b:
            return f"{name}: an input {_aval_text(a)} where it was {_aval_text(b)} (a new shape or dtype)"
    return f"{name}: {len(new)} new inputs where it had {len(other[4])}"


def nearest_sibling(parent, key, limit=256):
    """The key among ``parent``'s children (other than ``key``) most like ``key``, or None."""
    best, best_score = None, -1
    for n, k in enumerate(parent.children):
        if n >= limit:
            break
        if k is key or k == key:
            continue
        s = _score(key, k)
        if s > best_score:
            best, best_score = k, s
    return best


def why_new(node, out_idx):
    """Why the structure (trie ``node``, live outputs ``out_idx``) is new: what differed from the nearest
    structure seen before it (the one sharing the longest prefix of ops)."""
    if node.plans and len(node.plans) > 1:
        (outs, spares), (other, other_spares) = _plan_key(out_idx), _plan_key(
            next(k for k in node.plans if k != out_idx))
        if outs == other:
            return (f"the same {node.depth} ops and results; {len(spares)} arrays let go of given to it to write "
                    f"into (Segment.recycle) where it had {len(other_spares)}")
        return (f"the same {node.depth} ops; other results still referenced at the barrier ({len(outs)} where "
                f"it had {len(other)})")
    if node.children:
        return (f"its barrier came after op {node.depth} ({op_name(node.key[0])}), where a structure seen before "
                "went on (a host read or step end at another point)")
    child, cur = node, _up(node)
    while cur is not None:
        if len(cur.children) > 1:
            other = nearest_sibling(cur, child.key)
            if other is not None:
                return f"op {child.depth}: " + key_difference(child.key, other)
        if cur.plans:
            return (f"it goes on past op {cur.depth} ({op_name(cur.key[0])}), where a structure seen before had its "
                    "barrier (a host read or step end at another point)")
        child, cur = cur, _up(cur)
    return "the first structure"


def _plan_key(k):
    """(live output indices, avals of the recycled arrays) of a plan's key (``Segment._run``)."""
    return k if k and type(k[0]) is tuple else (k, ())


def _up(node):
    return node.parent() if node.parent is not None else None  # (held weakly: None once that trie was dropped)


def varying_scalars(parent, key, limit=64):
    """The argument positions of Python scalars in step ``key`` whose values differ from those of a step seen before
    at trie node ``parent`` that is otherwise the same (same jitted kernel, arguments, stream and inputs), or None.

    Only jitted kernels: they trace a Python scalar anyway (a new value compiles nothing in eager mode either), so
    passing it as an input changes nothing but the structure."""
    fn, treedef, refs, st, new = key
    if not hasattr(fn, "lower") or not any(type(r) is tuple and r[0] == "l" for r in refs):
        return None
    for n, k in enumerate(parent.children):
        if n >= limit:
            return None
        if k[0] is not fn or k[1] != treedef or k[3] != st or k[4] != new or len(k[2]) != len(refs):
            continue
        pos = []
        for j, (a, b) in enumerate(zip(refs, k[2])):
            if a != b:
                if not (type(a) is tuple and type(b) is tuple and a[0] == b[0] == "l" and a[1] is b[1]):
                    break
                pos.append(j)
        else:
            if pos:
                return frozenset(pos)
    return None
