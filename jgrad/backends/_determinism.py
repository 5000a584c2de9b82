"""``torch.use_deterministic_algorithms`` and its companions: the setting, recorded and read back.

jgrad's kernels are XLA's. On the CPU they are deterministic; on GPUs XLA picks deterministic scatters and
reductions only under ``--xla_gpu_deterministic_ops``, an ``XLA_FLAGS`` entry read when the backend starts, so
a later call cannot switch them. The setting is therefore kept for programs that read it back (and for
``set_deterministic_debug_mode``), and no op raises for being nondeterministic (docs/differences.md).

Imports nothing from jgrad.
"""
from __future__ import annotations

_state = {"mode": False, "warn_only": False}
_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Record whether ops must be deterministic (``torch.use_deterministic_algorithms``)."""
    if not isinstance(mode, bool):
        raise TypeError(f"_set_deterministic_algorithms(): argument 'mode' (position 1) must be bool, not "
                        f"{type(mode).__name__}")
    if not isinstance(warn_only, bool):
        raise TypeError(f"_set_deterministic_algorithms(): argument 'warn_only' must be bool, not "
                        f"{type(warn_only).__name__}")
    _state["mode"], _state["warn_only"] = mode, warn_only


def are_deterministic_algorithms_enabled() -> bool:
    return _state["mode"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _state["warn_only"]


def set_deterministic_debug_mode(debug_mode) -> None:
    """0 / ``"default"``: off; 1 / ``"warn"``: on, warn only; 2 / ``"error"``: on."""
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise RuntimeError(f"invalid value of debug_mode, expected one of `default`, `warn`, `error`, but got "
                               f"{debug_mode}")
        debug_mode = _DEBUG_MODES[debug_mode]
    if not isinstance(debug_mode, int):
        raise TypeError(f"debug_mode must be str or int, but got {type(debug_mode)}")
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got {debug_mode}")
    use_deterministic_algorithms(bool(debug_mode != 0), warn_only=bool(debug_mode == 1))


def get_deterministic_debug_mode() -> int:
    return 0 if not _state["mode"] else (1 if _state["warn_only"] else 2)
