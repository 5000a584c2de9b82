"""Per-thread autograd switches, read on every op (plain attributes of a threading.local).

Imports nothing of jgrad: the bottom layer.
"""
from __future__ import annotations

import threading


class _State(threading.local):
    def __init__(self):
        self.grad_enabled = True
        self.anomaly_enabled = False
        self.anomaly_check_nan = True
        self.multithreading_enabled = True
        self.inference = False          # jgrad.inference_mode
        self.saved_hooks = []           # (pack, unpack) of saved_tensors_hooks, innermost last
        self.saved_hooks_disabled = None  # disable_saved_tensors_hooks' message


state = _State()
