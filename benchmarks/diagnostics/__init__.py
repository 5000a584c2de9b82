"""GPU diagnostics: one-off tools that answered a question about capture and replay on a GPU.

They are not part of ``python -m benchmarks`` (except ``gpu_smoke.py``, which a ``--device gpu`` run
starts with) and print their findings; what they found is written down in docs/capture.md,
docs/performance.md and benchmarks/results/. ``README.md`` in this folder gives one line per tool:
the question it answers and its command. They import ``benchmarks.common`` and ``benchmarks.capture``
(the same models as the capture benchmark) and jgrad's capture knobs (``jgrad.runtime._compile``,
``jgrad.runtime._capture``).
"""
