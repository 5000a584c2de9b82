"""The runtime: how an op runs, eager, recorded in "auto" mode, compiled or captured.

The door (``_dispatch``: every op and every backward node's kernel) and the tape record it makes (``_tape``);
"auto" segments (``_segment``, and how one runs, fails and is counted: ``_segment_run``, ``_segment_fail``,
``_segment_info``); compiling recorded steps (``_compile``), ``jg.compile``'s programs (``_compiled``) and the
ops' kernel bounds (``_kernel_cache``); capture (``_capture``, ``_graphed``); deferred device-side checks
(``_checks``); the backward pass as one recorded step (``_backward_plan``); views and writes through them
(``_views``, ``_view_writes``); DLPack (``_dlpack``); what a ``jgrad.func`` trace read and did, for its trace
cache (``_trace_log``). Internal: no import path here is a public promise.

Imports the tensor layer (``jgrad.core``), ``jgrad.streams`` and the engine (``jgrad.autograd``); the op library
and everything above import it (docs/design.md, "The house").
"""
