"""Thread-local autograd state and the grad-mode context managers.

Imports ``_tls`` only.
"""
from __future__ import annotations

import functools
import inspect


from .._tls import state  # noqa: E402  (re-exported: the autograd package reads it here)


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

    def clone(self):
        return self.__class__(self.mode)


class no_grad(_DecoratorContextManager):
    """Context manager / decorator that disables gradient recording."""

    def __enter__(self):
        self.prev = state.grad_enabled
        state.grad_enabled = False

    def __exit__(self, *exc):
        state.grad_enabled = self.prev


class enable_grad(_DecoratorContextManager):
    """Context manager / decorator that enables gradient recording."""

    def __enter__(self):
        self.prev = state.grad_enabled
        state.grad_enabled = True

    def __exit__(self, *exc):
        state.grad_enabled = self.prev


class inference_mode(no_grad):
    """Same as ``no_grad`` in jgrad (JAX arrays carry no version/view state to skip)."""

    def __init__(self, mode: bool = True):
        self.mode = mode

    def __enter__(self):
        self.prev = state.grad_enabled
        if self.mode:
            state.grad_enabled = False

    def clone(self):
        return self.__class__(self.mode)
