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


state = _State()
