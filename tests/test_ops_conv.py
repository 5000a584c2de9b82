"""Convolutions, pooling and the functional normalizations against PyTorch (values and gradients)."""
import numpy as np
import pytest
import torch

import jgrad as jg
import jgrad.nn.functional as F
from _vs_torch import compare, rand, same_error

TF = torch.nn.functional


@pytest.mark.parametrize("name,shapes,kw", [
    ("conv2d", [(2, 4, 7, 6), (6, 2, 3, 2), (6,)], dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2)),
    ("conv2d", [(4, 7, 6), (6, 4, 3, 3), None], dict(padding="same")),           # unbatched
    ("conv2d", [(2, 4, 7, 6), (6, 4, 4, 2), None], dict(padding="same", dilation=2)),  # even kernel
    ("conv1d", [(2, 3, 9), (5, 3, 3), (5,)], dict(stride=2, padding=2)),
    ("conv3d", [(1, 2, 4, 5, 4), (3, 2, 2, 3, 2), (3,)], dict(padding=(1, 0, 1))),
    ("conv_transpose2d", [(2, 4, 5, 4), (4, 3, 3, 2), (6,)], dict(stride=2, padding=1, output_padding=1, groups=2)),
    ("conv_transpose2d", [(2, 4, 5, 4), (4, 3, 3, 3), None], dict(stride=3, padding=2, dilation=2)),
    ("conv_transpose1d", [(2, 4, 5), (4, 3, 3), (3,)], dict(stride=2)),
])
def test_convolutions(name, shapes, kw):
    arrays = [rand(s, i) if s is not None else None for i, s in enumerate(shapes)]
    compare(lambda *a: getattr(F, name)(*a, **kw), lambda *a: getattr(TF, name)(*a, **kw), arrays, what=name)


@pytest.mark.parametrize("name,shape,kw", [
    ("max_pool2d", (2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1)),
    ("max_pool2d", (2, 3, 7, 6), dict(kernel_size=(3, 2), stride=2, padding=1, ceil_mode=True, return_indices=True)),
    ("max_pool2d", (3, 8, 9), dict(kernel_size=2, dilation=2, return_indices=True)),
    ("max_pool1d", (2, 3, 9), dict(kernel_size=3, stride=2, ceil_mode=True)),
    ("avg_pool2d", (2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1)),
    ("avg_pool2d", (2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ("avg_pool2d", (2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("avg_pool2d", (2, 3, 7, 6), dict(kernel_size=2, divisor_override=3)),
    ("avg_pool1d", (2, 3, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("adaptive_avg_pool2d", (2, 3, 7, 6), dict(output_size=(3, 4))),
    ("adaptive_avg_pool2d", (2, 3, 7, 6), dict(output_size=1)),
    ("adaptive_avg_pool1d", (2, 3, 7), dict(output_size=3)),
    ("adaptive_max_pool2d", (2, 3, 7, 6), dict(output_size=(3, 4), return_indices=True)),
    ("adaptive_max_pool1d", (2, 3, 7), dict(output_size=5)),
])
def test_pooling(name, shape, kw):
    compare(lambda x: getattr(F, name)(x, **kw), lambda x: getattr(TF, name)(x, **kw), [rand(shape, 3)], what=name)


def test_conv_and_pool_errors_are_pytorchs():
    x, t = jg.ones(1, 3, 5, 5), torch.ones(1, 3, 5, 5)
    same_error(lambda: F.conv2d(x, jg.ones(4, 2, 3, 3)), lambda: TF.conv2d(t, torch.ones(4, 2, 3, 3)))
    same_error(lambda: F.conv2d(jg.ones(1, 4, 5, 5), jg.ones(4, 2, 3, 3), groups=3),
               lambda: TF.conv2d(torch.ones(1, 4, 5, 5), torch.ones(4, 2, 3, 3), groups=3))
    same_error(lambda: F.conv2d(jg.ones(1, 3, 2, 2), jg.ones(4, 3, 3, 3)),
               lambda: TF.conv2d(torch.ones(1, 3, 2, 2), torch.ones(4, 3, 3, 3)))
    same_error(lambda: F.conv2d(jg.ones(3, 5), jg.ones(4, 3, 3, 3)), lambda: TF.conv2d(torch.ones(3, 5),
                                                                                       torch.ones(4, 3, 3, 3)))
    same_error(lambda: F.conv2d(x, jg.ones(4, 3, 3, 3), stride=2, padding="same"),
               lambda: TF.conv2d(t, torch.ones(4, 3, 3, 3), stride=2, padding="same"))
    same_error(lambda: F.conv2d(x, jg.ones(4, 3, 3, 3), bias=jg.ones(3)),
               lambda: TF.conv2d(t, torch.ones(4, 3, 3, 3), bias=torch.ones(3)))
    same_error(lambda: F.max_pool2d(jg.ones(1, 1, 4, 4), 3, padding=2),
               lambda: TF.max_pool2d(torch.ones(1, 1, 4, 4), 3, padding=2))
    same_error(lambda: F.max_pool2d(jg.ones(1, 1, 2, 2), 3), lambda: TF.max_pool2d(torch.ones(1, 1, 2, 2), 3))


def test_batch_norm_training_updates_running_stats():
    x = rand((4, 3, 5), 4)
    jm, jv = jg.zeros(3, dtype=jg.float64), jg.ones(3, dtype=jg.float64)
    tm, tv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    compare(lambda a, w, b: F.batch_norm(a, jm, jv, w, b, training=True, momentum=0.3),
            lambda a, w, b: TF.batch_norm(a, tm, tv, w, b, training=True, momentum=0.3),
            [x, rand(3, 5), rand(3, 6)])
    np.testing.assert_allclose(jm.numpy(), tm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(jv.numpy(), tv.numpy(), rtol=1e-12)
    compare(lambda a: F.batch_norm(a, jm, jv, training=False), lambda a: TF.batch_norm(a, tm, tv, training=False),
            [x])
    same_error(lambda: F.batch_norm(jg.ones(1, 3), jm, jv, training=True),
               lambda: TF.batch_norm(torch.ones(1, 3), tm, tv, training=True))


def test_instance_group_and_rms_norm():
    x = rand((2, 6, 5), 7)
    compare(lambda a, w, b: F.group_norm(a, 3, w, b), lambda a, w, b: TF.group_norm(a, 3, w, b),
            [x, rand(6, 8), rand(6, 9)])
    jm, jv = jg.zeros(6, dtype=jg.float64), jg.ones(6, dtype=jg.float64)
    tm, tv = torch.zeros(6, dtype=torch.float64), torch.ones(6, dtype=torch.float64)
    compare(lambda a, w: F.instance_norm(a, jm, jv, w), lambda a, w: TF.instance_norm(a, tm, tv, w), [x, rand(6, 10)])
    np.testing.assert_allclose(jv.numpy(), tv.numpy(), rtol=1e-12)
    compare(lambda a, w: F.rms_norm(a, (5,), w), lambda a, w: TF.rms_norm(a, (5,), w), [x, rand(5, 11)])
    compare(lambda a: F.rms_norm(a, (6, 5), eps=1e-3), lambda a: TF.rms_norm(a, (6, 5), eps=1e-3), [x])
    same_error(lambda: F.group_norm(jg.ones(2, 6, 3), 4), lambda: TF.group_norm(torch.ones(2, 6, 3), 4))
