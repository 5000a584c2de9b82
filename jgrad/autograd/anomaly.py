"""Anomaly mode: forward tracebacks on nodes and NaN checks on backward outputs.

Imports ``grad_mode``; the engine, which imports this module, installs its thread-local state (``_engine_tls``).
"""
from __future__ import annotations

import os
import traceback
import warnings

import jax.numpy as jnp

from .grad_mode import state as _state


_JGRAD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# python_anomaly_mode.h keeps both in the node's metadata dict under these keys.
ANOMALY_TRACE_KEY = "traceback_"
ANOMALY_PARENT_KEY = "parent_"
_engine_tls = None  # autograd.engine's thread-local state, installed by the engine when it loads


def record_forward_trace(node) -> None:
    """Node constructor in anomaly mode: store_stack() and assign_parent(current node)."""
    frames = traceback.extract_stack()
    # Drop the trailing frames inside jgrad itself (dispatcher, Function.apply, Node.__init__):
    # the trace ends at the user's line that created the node.
    end = len(frames)
    while end > 1 and frames[end - 1].filename.startswith(_JGRAD_DIR):
        end -= 1
    stack = traceback.format_list(frames[:end])
    node._anomaly_trace = "".join(stack)
    meta = node.metadata
    meta[ANOMALY_TRACE_KEY] = stack
    parent = _engine_tls.current_node  # set while the engine evaluates a node (create_graph backward)
    if parent is not None:
        meta[ANOMALY_PARENT_KEY] = parent


def _trace_messages(fn):
    """print_stack(): the failing node's forward trace, then those of the nodes that induced it."""
    trace = fn._anomaly_trace
    if trace is None:
        msgs = [f"Error detected in {fn.name()}. No forward pass information available. Enable detect anomaly "
                "during forward pass for more information."]
    else:
        msgs = [f"Error detected in {fn.name()}. Traceback of forward call that caused the error:\n{trace}"]
    seen = {id(fn)}
    parent = fn._metadata.get(ANOMALY_PARENT_KEY) if fn._metadata else None
    while parent is not None and id(parent) not in seen:
        seen.add(id(parent))
        ptrace = parent._anomaly_trace
        if ptrace is None:
            msgs.append(f"Error detected in {parent.name()}. No forward pass information available. Enable "
                        "detect anomaly during forward pass for more information.")
        else:
            msgs.append(f"\n\nPrevious calculation was induced by {parent.name()}. Traceback of forward call "
                        f"that induced the previous calculation:\n{ptrace}")
        parent = parent._metadata.get(ANOMALY_PARENT_KEY) if parent._metadata else None
    return msgs


def report_forward_trace(fn, exc) -> None:
    """Warn with the forward traceback of ``fn`` (and its parents) and attach it to ``exc``."""
    for msg in _trace_messages(fn):
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
