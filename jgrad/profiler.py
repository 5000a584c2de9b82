"""A profiler of backward passes: which node ran when, on which stream and thread.

    with jg.profiler.profile() as prof:
        loss.backward()
    print(prof.table())
    prof.export_chrome_trace("trace.json")   # open in https://ui.perfetto.dev or chrome://tracing
    prof.timeline()                          # a matplotlib picture, one row per stream

While a ``profile`` is active it is one of the engine's ``node_observers``:
every backward node execution becomes an event (name, stream, device,
thread, start and end from ``time.perf_counter_ns``). ``sync=True`` blocks
on each node's outputs before taking its end time, so spans reflect device
time rather than JAX's asynchronous dispatch. ``record_function(name)``
adds a user span on the current stream, and ``record_span(...)`` lets other
jgrad modules (graph replay) add spans; both are no-ops when nothing is
being profiled.

Imports ``autograd.engine`` (its node observers), ``graphs`` (its replay observers), ``streams`` and
``viz`` (labels and colours): a tool at the top, which the layers below never import.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time

from . import graphs as _graphs
from .autograd import engine
from .streams import current_stream
from .viz import _PALETTE, stream_label

__all__ = ["profile", "record_function", "record_span", "ProfilerEvent"]

_active: list = []          # active profiles, innermost last
_active_lock = threading.Lock()
_now = time.perf_counter_ns


class ProfilerEvent:
    """One recorded span: a backward node (``kind="node"``), a user span (``"user"``) or another (``"replay"``...).

    ``stream`` is a short label (``cpu default``, ``cpu:1 stream 7``),
    ``stream_id`` the stream's id (None when the node had no stream),
    ``device`` the device's name, ``thread`` the name of the Python thread
    that ran it, ``start_ns``/``end_ns`` ``time.perf_counter_ns`` stamps,
    ``error`` True when the node raised.
    """

    __slots__ = ("name", "kind", "stream", "stream_id", "device", "thread", "start_ns", "end_ns", "task_id", "error")

    def __init__(self, name, kind, stream, stream_id, device, thread, start_ns, end_ns, task_id=None, error=False):
        self.name, self.kind, self.stream, self.stream_id, self.device = name, kind, stream, stream_id, device
        self.thread, self.start_ns, self.end_ns, self.task_id, self.error = thread, start_ns, end_ns, task_id, error

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self):
        return (f"ProfilerEvent({self.name!r}, kind={self.kind!r}, stream={self.stream!r}, thread={self.thread!r}, "
                f"duration_us={self.duration_ns / 1e3:.1f})")


def _stream_info(stream, device=None):
    """(label, id, device name) of a stream (None: the node had none)."""
    if stream is None:
        return "no stream", None, str(device) if device is not None else "cpu"
    return stream_label(stream), stream.id, str(stream.device)


class profile:  # noqa: N801 - named like torch.profiler.profile
    """Record backward node executions (and user spans) while the ``with`` block runs.

    ``sync=True`` waits for each node's output arrays before stamping its end,
    so a span covers the node's device work. After the block, ``events`` holds
    :class:`ProfilerEvent` records in start order; see ``table()``,
    ``key_averages()``, ``export_chrome_trace(path)`` and ``timeline()``.
    """

    def __init__(self, sync: bool = False):
        self.sync = bool(sync)
        self.events: list = []
        self._lock = threading.Lock()
        self._tls = threading.local()
        self._running = False
        self.start_ns = None
        self.end_ns = None

    # -- the context ----------------------------------------------------------------
    def __enter__(self):
        if self._running:
            raise RuntimeError("This profile is already running; a profile object can be entered only once at a time.")
        self.events = []
        self.start_ns = _now()
        self.end_ns = None
        self._running = True
        with _active_lock:
            _active.append(self)
            if record_span not in _graphs.replay_observers:
                _graphs.replay_observers.append(record_span)
        engine.node_observers.append(self)
        return self

    def __exit__(self, *exc):
        try:
            _remove(engine.node_observers, self)
        finally:
            with _active_lock:
                _remove(_active, self)
                if not _active:
                    _remove(_graphs.replay_observers, record_span)
            self._running = False
            self.end_ns = _now()
            with self._lock:
                self.events.sort(key=lambda e: (e.start_ns, e.end_ns))
        return False

    # -- the engine's observer protocol ---------------------------------------------
    def node_begin(self, task, fn):
        stack = getattr(self._tls, "stack", None)
        if stack is None:
            stack = self._tls.stack = []
        stack.append(_now())

    def node_end(self, task, fn, outputs, *rest):
        stack = getattr(self._tls, "stack", None)
        if not stack:
            return
        start = stack.pop()
        if self.sync and outputs:
            for o in outputs:
                data = getattr(o, "_data", None)
                if data is not None:
                    try:
                        data.block_until_ready()
                    except Exception:  # noqa: BLE001 - a tracer (functionalize) has no device work to wait for
                        pass
        end = _now()
        if not self._running:
            return
        label, sid, dev = _stream_info(fn._stream, getattr(fn, "device", None))
        ev = ProfilerEvent(fn.name(), "node", label, sid, dev, threading.current_thread().name, start, end,
                           getattr(task, "id", None), outputs is None)
        with self._lock:
            self.events.append(ev)

    def _add(self, ev):
        if self._running:
            with self._lock:
                self.events.append(ev)

    # -- results ----------------------------------------------------------------------
    def _snapshot(self):
        with self._lock:
            return sorted(self.events, key=lambda e: (e.start_ns, e.end_ns))

    def key_averages(self) -> list:
        """Per (name, kind): count, total/mean/max microseconds and the streams it ran on, by total time."""
        groups: dict = {}
        for e in self._snapshot():
            g = groups.setdefault((e.name, e.kind), {"name": e.name, "kind": e.kind, "count": 0, "total_us": 0.0,
                                                     "max_us": 0.0, "streams": []})
            d = e.duration_ns / 1e3
            g["count"] += 1
            g["total_us"] += d
            g["max_us"] = max(g["max_us"], d)
            if e.stream not in g["streams"]:
                g["streams"].append(e.stream)
        rows = list(groups.values())
        for r in rows:
            r["mean_us"] = r["total_us"] / r["count"]
        rows.sort(key=lambda r: (-r["total_us"], r["name"]))
        return rows

    def table(self, row_limit: int = 50) -> str:
        """The ``key_averages()`` summary as a fixed-width text table."""
        rows = self.key_averages()
        head = ("Name", "Kind", "Calls", "Total us", "Mean us", "Max us", "Streams")
        body = [(r["name"], r["kind"], str(r["count"]), f"{r['total_us']:.1f}", f"{r['mean_us']:.1f}",
                 f"{r['max_us']:.1f}", ", ".join(r["streams"])) for r in rows[:row_limit]]
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
        right = {2, 3, 4, 5}

        def fmt(cells):
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        rule = "-" * len(fmt(head))
        lines = [rule, fmt(head), rule] + [fmt(b) for b in body] + [rule]
        total = sum(r["total_us"] for r in rows if r["kind"] == "node")
        lines.append(f"{sum(r['count'] for r in rows)} events; backward nodes total {total:.1f} us")
        if len(rows) > row_limit:
            lines.append(f"({len(rows) - row_limit} more rows not shown)")
        return "\n".join(lines)

    def __str__(self):
        return self.table()

    def export_chrome_trace(self, path) -> None:
        """Write the events as Chrome / Perfetto trace JSON (``traceEvents``, ``ph: "X"``).

        One process per device, one thread row per stream; each event's args
        hold the Python thread that ran it.
        """
        events = self._snapshot()
        t0 = self.start_ns if self.start_ns is not None else (events[0].start_ns if events else 0)
        pids: dict = {}
        tids: dict = {}
        out = []
        for e in events:
            pid = pids.setdefault(e.device, len(pids) + 1)
            key = (e.device, e.stream)
            if key not in tids:
                tids[key] = e.stream_id if e.stream_id is not None else 0
                # Perfetto wants non-negative thread ids; default streams have negative ones.
                if tids[key] < 0:
                    tids[key] = 1_000_000 - tids[key]
                out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[key],
                            "args": {"name": e.stream}})
            out.append({"name": e.name, "cat": e.kind, "ph": "X", "pid": pid, "tid": tids[key],
                        "ts": (e.start_ns - t0) / 1e3, "dur": max(e.duration_ns, 0) / 1e3,
                        "args": {"thread": e.thread, "stream": e.stream, "task": e.task_id, "error": e.error}})
        for dev, pid in pids.items():
            out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"jgrad {dev}"}})
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": out, "displayTimeUnit": "ms"}, f)

    def timeline(self, ax=None):
        """Draw one row per stream with a bar per node (matplotlib); returns the Axes.

        User and replay spans get hatched bars on rows of their own, coloured as their stream.
        """
        import matplotlib.pyplot as plt
        events = self._snapshot()
        made = ax is None
        if made:
            _, ax = plt.subplots(figsize=(10, 1.4 + 0.6 * max(1, len({(e.stream, e.kind) for e in events}))))
        t0 = self.start_ns if self.start_ns is not None else (events[0].start_ns if events else 0)

        def row_of(e):  # user and replay spans get rows of their own, under their stream's
            return e.stream if e.kind == "node" else f"{e.stream} ({e.kind})"

        rows: list = []
        for e in events:
            if row_of(e) not in rows:
                rows.append(row_of(e))
        colours = {}
        for e in events:
            colours.setdefault(e.stream, _PALETTE[len(colours) % len(_PALETTE)])
        span = max(((e.end_ns - t0) / 1e6 for e in events), default=1.0) or 1.0
        for e in events:
            r = rows.index(row_of(e))
            start, dur = (e.start_ns - t0) / 1e6, max(e.duration_ns / 1e6, span * 1e-3)
            hatch = "//" if e.kind != "node" else None
            ax.barh(r, dur, left=start, height=0.6, color=colours[e.stream], edgecolor="#333", linewidth=0.5,
                    hatch=hatch)
            if dur > span * 0.05:
                ax.text(start + dur / 2, r, e.name, ha="center", va="center", fontsize=7, clip_on=True)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows)
        ax.set_ylim(-0.6, len(rows) - 0.4 if rows else 0.6)
        ax.invert_yaxis()
        ax.set_xlim(left=0)
        ax.set_xlabel("time since profile start (ms)")
        ax.set_title("backward nodes per stream" + (" (sync=True)" if self.sync else ""), fontsize=10)
        if made:
            ax.figure.tight_layout()
        return ax


def _remove(lst, obj):
    for i in range(len(lst) - 1, -1, -1):
        if lst[i] is obj:
            del lst[i]
            return


def record_span(name, stream, start_ns, end_ns, *, kind="replay", thread=None) -> None:
    """Add a span (``time.perf_counter_ns`` stamps) on ``stream`` to every active profile; a no-op if none."""
    if not _active:
        return
    label, sid, dev = _stream_info(stream)
    ev = ProfilerEvent(str(name), kind, label, sid, dev, thread or threading.current_thread().name,
                       int(start_ns), int(end_ns))
    for p in list(_active):
        p._add(ev)


class record_function(contextlib.ContextDecorator):  # noqa: N801 - named like torch.profiler.record_function
    """Record a user span named ``name`` on the current stream (a context manager or a decorator)."""

    def __init__(self, name: str):
        self.name = str(name)
        self._starts = threading.local()

    def __enter__(self):
        if _active:
            stack = getattr(self._starts, "stack", None)
            if stack is None:
                stack = self._starts.stack = []
            stack.append((current_stream(), _now()))
        return self

    def __exit__(self, *exc):
        stack = getattr(self._starts, "stack", None)
        if stack:
            stream, start = stack.pop()
            record_span(self.name, stream, start, _now(), kind="user")
        return False
