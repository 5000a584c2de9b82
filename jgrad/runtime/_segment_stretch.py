"""Eager stretches: while no structure a program repeats is due to compile, "auto" mode runs it as eager mode does.

Note [Eager stretches]
~~~~~~~~~~~~~~~~~~~~~~
Why: until a structure compiles, its segments run op by op, and recording them first costs ~20-25% over eager
mode's dispatch on the 2-core CPU (each op is recorded, then run at the barrier). A structure compiles once its
op-by-op runs have cost what its compile is expected to (the ski-rental rule, ``compile_payback``), which for a
small model is hundreds of steps: a first run of 80 LSTM steps paid that tax on every step and compiled nothing
(1.44x eager mode's time).

What: after each barrier (``after_run``), the structures that ran op by op since the last stretch (the *window*)
are looked at. When the window holds ``min_window`` runs (two, of structures a stretch stood for before), the
latest two are of structures that repeated, none of its structures is due to compile, no compiled structure ran
in the last ``min_window`` runs (a stretch would run it eagerly too), and nothing else is pending, recording stops
(``_segment.auto[0]`` is False; the user's mode stays "auto") for a stretch of barrier points (a host read, an
optimizer step's end): ops run as in eager mode. At the stretch's end the time it took is credited to the window's structures as if
they had run op by op (``interp_seconds``, in proportion to what each cost in the window, scaled by the share
of the window's wall time its runs took, so that the program's own Python is not counted as rent), and
recording resumes. A structure whose credit reaches its expected compile then compiles at its next barrier, as
before; stretches resume only while it is not compiled. So a short run costs eager mode's time plus the windows,
and a long one compiles what pays back, as before, a little later (the eager stretch costs less than the
op-by-op runs it stands for).

Stretch lengths double (from 2 barrier points up to ``max_stretch``) and end before the first of the window's
structures would be due, estimated from the window's time per run, or as soon as a background compile finishes
(what it compiled may run compiled from its next barrier).

A structure compiling in the background does not keep stretches from starting (it did until 2026-11-27): until its
compile is done it runs op by op, recorded first, which costs more than eager mode, and on two cores a compile of
a few seconds spans many steps. It earns no credit (its compile is paid for), and the stretch ends at the first
barrier point after a compile finishes. REINFORCE's first "auto" run spent ~12 episodes recording while its
environment step compiled, 2-4x eager mode's time each. A structure whose compile failed is treated the same way
(since 2026-11-27): it runs op by op for good, so stretches stand for it without crediting it, and a compile that
fails ends the stretch under way as one that succeeds does (the structures are looked at again). Switching modes
(a ``jgrad.func`` trace switches to eager mode and back) ends a stretch uncredited and starts a new window.

Imports nothing of jgrad; ``_segment`` installs it (the barrier calls ``after_run``; ``step_boundary`` and the
host-sync hook call ``point``) and gives it the knobs and the recording flag.
"""
from __future__ import annotations

import time

_clock = time.perf_counter


def _may_compile(entry):
    """Whether ``entry``'s op-by-op runs still go toward a compile: none in flight and none that failed."""
    return entry.thread is None and entry.failed is None


class Stretches:
    """The state of eager stretches (one per process: the recording flag is the process's)."""

    def __init__(self, knobs, recording, stats, worth_compiling, expected_seconds):
        self.knobs, self.recording, self.stats = knobs, recording, stats
        self.worth_compiling, self.expected_seconds = worth_compiling, expected_seconds
        self.reset()

    def reset(self):
        """Forget everything and end any stretch without crediting it (the structure cache was cleared)."""
        self.window = []          # the latest (entry, seconds of its op-by-op run, clock at its start)
        self.length = 2           # the next stretch's length in barrier points
        self.active = False       # a stretch is under way (recording is off)
        self.remaining = 0        # its barrier points left
        self.started = 0.0
        self.credit = ()          # (entry, seconds credited per second of stretch)
        self.compiles_at = 0      # compiles finished (or failed) when it started
        self.known = set()        # the structures stretches stood for (the program's repeating ones)
        self.since_compiled = 0   # runs recorded since the last one of a compiled (or compiling) structure

    def after_run(self, entry, compiled, seconds, others_pending):
        """A barrier ran ``entry`` (compiled or op by op, in ``seconds``): maybe start a stretch."""
        if compiled or entry.variants:
            # Compiled code runs faster than eager mode, and a stretch would run it eagerly too: no stretch until
            # ``min_window`` runs in a row have not been compiled ones. (One compiling in the background, or whose
            # compile failed, runs op by op, which costs more than eager mode: a stretch may stand for it.)
            self.window, self.since_compiled = [], 0
            return
        self.since_compiled += 1
        now = _clock()
        window, k = self.window, self.knobs
        window.append((entry, seconds, now - seconds))
        if len(window) > k.min_window:  # the latest runs: a structure seen once (the first step) drops out
            del window[0]
        if not k.eager_stretches or others_pending or len(window) < 2 or self.since_compiled < k.min_window:
            return
        if not k.background_compile or k.compile_payback <= 0:
            return  # compiles are due at once: recording is what makes them
        recent = [e for e, _, _ in window[-2:]]
        if any(e.seen_total < 2 for e in recent):
            return  # the program is not (yet) repeating what it runs now
        if len(window) < k.min_window and not all(e in self.known for e in recent):
            return  # (after a stretch, two runs of structures stretches stood for are window enough)
        entries = {id(e): e for e, _, _ in window if e.seen_total >= 2}.values()  # (one-offs earn no credit)
        if any(_may_compile(e) and self.worth_compiling(e) for e in entries):
            return  # due: its next barrier compiles it
        self._start(entries)

    def _start(self, entries):
        window, now = self.window, _clock()
        total = sum(s for _, s, _ in window) or 1e-9
        wall = max(now - window[0][2], total)
        share = {}
        for e, s, _ in window:
            if e.seen_total >= 2:
                share[id(e)] = share.get(id(e), 0.0) + s / wall  # op-by-op seconds per second of the program
        self.credit = tuple((e, share[id(e)]) for e in entries if _may_compile(e))  # (compiling: paid for)
        self.known.update(entries)
        # Run no longer than until the first structure is due, counting each barrier point as long as a run of the
        # window (a run spans one point or more: the stretch ends early rather than late).
        per_point = wall / len(window)
        k = self.knobs
        due = min((k.compile_payback * self.expected_seconds(e.weight, k.compile_prior) - e.interp_seconds) / r
                  for e, r in self.credit if r > 0) if any(r > 0 for _, r in self.credit) else float("inf")
        points = max(1, int(min(self.length, due / per_point)))  # (due is inf when every structure compiles)
        self.length = min(2 * self.length, k.max_stretch)
        self.window = []
        self.remaining, self.started, self.active = points, now, True
        self.compiles_at = self._compiles_done()
        self.stats.eager_stretches += 1
        self.recording[0] = False

    def abandon(self):
        """End the stretch under way without crediting it and start a new window (the program switched modes);
        the structures stretches stood for stay known."""
        self.credit, self.remaining, self.active = (), 0, False
        self.window = []

    def point(self):
        """A barrier point (a host read, an optimizer step's end) passed during a stretch."""
        self.stats.stretch_points += 1
        self.remaining -= 1
        if self.remaining <= 0 or self._compiles_done() != self.compiles_at:
            self.end()  # (a background compile finished: its structure may run compiled from its next barrier)

    def _compiles_done(self):
        """Compiles finished so far, those that failed included."""
        return self.stats.compiles + self.stats.compile_failures

    def end(self):
        """End the stretch under way: credit its time to the window's structures; recording resumes."""
        if not self.active:
            return
        elapsed = _clock() - self.started
        for e, rate in self.credit:
            e.interp_seconds += elapsed * rate
        self.credit, self.remaining, self.active = (), 0, False
        self.recording[0] = True
