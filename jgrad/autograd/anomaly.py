"""Anomaly mode: forward tracebacks on nodes and NaN checks on backward outputs."""
from __future__ import annotations

import traceback
import warnings

import jax.numpy as jnp

from .grad_mode import state as _state


def record_forward_trace(node) -> None:
    node._anomaly_trace = "".join(traceback.format_stack()[:-3])


def report_forward_trace(fn, exc) -> None:
    trace = fn._anomaly_trace
    if trace is None:
        msg = (f"Error detected in {fn.name()}. No forward pass information available. Enable detect anomaly "
               "during forward pass for more information.")
    else:
        msg = f"Error detected in {fn.name()}. Traceback of forward call that caused the error:\n{trace}"
    warnings.warn(msg, UserWarning, stacklevel=2)
    if hasattr(exc, "add_note"):
        exc.add_note(msg)


def check_nan(fn, outputs) -> None:
    for i, out in enumerate(outputs):
        if out is not None and (out.dtype.is_floating_point or out.dtype.is_complex) and bool(jnp.isnan(out._value).any()):
            raise RuntimeError(f"Function '{fn.name()}' returned nan values in its {i}th output.")


def is_anomaly_enabled() -> bool:
    return _state.anomaly_enabled


def is_anomaly_check_nan_enabled() -> bool:
    return _state.anomaly_check_nan


class detect_anomaly:
    """Context manager that records forward tracebacks and checks backward outputs for NaN."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = check_nan
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should "
                      "only be enabled for debugging.", UserWarning, stacklevel=2)

    def __enter__(self):
        self.prev = (_state.anomaly_enabled, _state.anomaly_check_nan)
        _state.anomaly_enabled, _state.anomaly_check_nan = True, self.check_nan

    def __exit__(self, *exc):
        _state.anomaly_enabled, _state.anomaly_check_nan = self.prev

    def __call__(self, func):
        import functools

        @functools.wraps(func)
        def wrapper(*a, **k):
            with self.__class__(self.check_nan):
                return func(*a, **k)
        return wrapper


class set_detect_anomaly:
    """Turn anomaly mode on or off; takes effect at once, usable as a context manager."""

    def __init__(self, mode: bool, check_nan: bool = True):
        self.prev = (_state.anomaly_enabled, _state.anomaly_check_nan)
        _state.anomaly_enabled, _state.anomaly_check_nan = bool(mode), check_nan

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state.anomaly_enabled, _state.anomaly_check_nan = self.prev
