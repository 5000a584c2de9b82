"""Thread-local autograd state and the grad-mode context managers.

Imports ``_tls`` only.
"""
from __future__ import annotations

import functools
import inspect
import threading


from ..core._tensor import Tensor
from ..core._tls import state  # noqa: E402  (re-exported: the autograd package reads it here)


def is_grad_enabled() -> bool:
    """Whether ops record history in this thread."""
    return state.grad_enabled


class _DecoratorContextManager:
    """Usable as ``with no_grad():`` and as ``@no_grad()`` (also on generators)."""

    def __call__(self, func):
        if inspect.isgeneratorfunction(func):
            @functools.wraps(func)
            def gen_wrapper(*args, **kwargs):
                gen = func(*args, **kwargs)
                try:  # the generator's return ends this one (a StopIteration escaping would be an error)
                    with self.clone():
                        response = gen.send(None)
                    while True:
                        try:
                            request = yield response
                        except GeneratorExit:
                            with self.clone():
                                gen.close()
                            raise
                        except BaseException as e:  # forward throw() into the generator
                            with self.clone():
                                response = gen.throw(e)
                        else:
                            with self.clone():
                                response = gen.send(request)
                except StopIteration as stop:
                    return stop.value
            return gen_wrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)
        return wrapper

    def clone(self):
        return self.__class__()


class set_grad_enabled(_DecoratorContextManager):
    """Enable or disable grad mode; takes effect at once, also usable as a context manager."""

    def __init__(self, mode: bool):
        self.prev = state.grad_enabled
        self.mode = bool(mode)
        state.grad_enabled = self.mode

    def __enter__(self):
        state.grad_enabled = self.mode

    def __exit__(self, *exc):
        state.grad_enabled = self.prev

    def __call__(self, func):
        state.grad_enabled = self.prev  # as a decorator, only the calls change grad mode (PyTorch)
        return super().__call__(func)

    def clone(self):
        return self.__class__(self.mode)


class _NoParamDecoratorContextManager(_DecoratorContextManager):
    """Also usable as ``@no_grad``, without parentheses."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)


class no_grad(_NoParamDecoratorContextManager):
    """Context manager / decorator that disables gradient recording."""

    def __enter__(self):
        self.prev = state.grad_enabled
        state.grad_enabled = False

    def __exit__(self, *exc):
        state.grad_enabled = self.prev


class enable_grad(_NoParamDecoratorContextManager):
    """Context manager / decorator that enables gradient recording."""

    def __enter__(self):
        self.prev = state.grad_enabled
        state.grad_enabled = True

    def __exit__(self, *exc):
        state.grad_enabled = self.prev


def is_inference_mode_enabled() -> bool:
    """Whether inference mode is on in this thread."""
    return state.inference


class inference_mode(_DecoratorContextManager):
    """``no_grad`` that also marks every tensor made inside as an inference tensor (``Tensor.is_inference()``):
    one that can never be saved for backward or written in place outside inference mode. ``mode=False`` turns
    inference mode off and grad mode on. A context manager, and a decorator with or without parentheses."""

    def __new__(cls, mode_or_orig_func=True, **kwargs):
        if mode_or_orig_func is None or isinstance(mode_or_orig_func, bool):
            return super().__new__(cls)
        return cls()(mode_or_orig_func)  # @inference_mode without parentheses

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)

    def __enter__(self):
        self.prev = (state.grad_enabled, state.inference)
        state.grad_enabled, state.inference = not self.mode, self.mode
        if self.mode:
            _mark_inference(1)

    def __exit__(self, *exc):
        state.grad_enabled, state.inference = self.prev
        if self.mode:
            _mark_inference(-1)

    def clone(self):
        return self.__class__(self.mode)


_marking = [0, None]  # inference_mode blocks open in any thread; Tensor._make as it was before
_marking_lock = threading.Lock()


def _mark_inference(delta):
    """While some thread is in inference mode, ``Tensor._make`` marks what it makes in such a thread as an
    inference tensor; outside it, tensor creation costs nothing more."""
    with _marking_lock:
        _marking[0] += delta
        if _marking[0] == delta == 1:
            make = _marking[1] = Tensor.__dict__["_make"].__func__

            def _make(cls, *args, **kwargs):
                t = make(cls, *args, **kwargs)
                if state.inference:
                    t._inference = True
                return t
            Tensor._make = classmethod(_make)
        elif _marking[0] == 0:
            Tensor._make = classmethod(_marking[1])
