"""The tensor layer, at the bottom of jgrad: the tensor and what describes it.

``_tensor`` (a tensor: its storage, autograd metadata and version counter), ``_recorder`` (a storage whose value
is still to come: ``Buffer``, and the ``Recorder`` that makes them), ``_host_copies`` (a pinned host copy of a
small result), ``_dtype``, ``_device``, ``_accelerators`` (devices' memory statistics), ``_tls`` (per-thread
switches), ``_layout`` (where a view's elements sit), ``_factories`` (the tensor factories, filled in by the op
library), ``_idmap`` and ``_format`` (``repr``). Internal: no import path here is a public promise.

Imports nothing of jgrad above it but ``jgrad.streams`` (docs/design.md, "The house").
"""
