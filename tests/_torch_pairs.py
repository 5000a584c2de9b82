"""Helpers for tests that run the same code on jgrad and torch."""
import numpy as np
import torch

import jgrad as jg


def npy(t):
    if isinstance(t, (jg.Tensor, torch.Tensor)):
        return np.asarray(t.detach().numpy())
    return np.asarray(t)


def pair(a, requires_grad=False):
    """The same data as a jgrad and a torch tensor."""
    a = np.asarray(a)
    return jg.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)
