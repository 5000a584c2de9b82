"""The op library: each op is a jax forward and a jax backward, run through ``_dispatch``."""
from . import creation, linalg, nn_ops, pointwise, random_ops, reduction, shape  # noqa: F401
from .creation import (arange, as_tensor, empty, empty_like, eye, from_numpy, full, full_like, linspace, ones,  # noqa: F401
                       ones_like, tensor, zeros, zeros_like)
from .from_jax import from_jax  # noqa: F401
from .linalg import (bmm, dot, einsum, get_float32_matmul_precision, linear, matmul, mm,  # noqa: F401
                     set_float32_matmul_precision)
from .nn_ops import cross_entropy, embedding, layer_norm, log_softmax, mse_loss, softmax  # noqa: F401
from .pointwise import *  # noqa: F401,F403
from .random_ops import (bernoulli, dropout, normal, rand, rand_like, randint, randint_like, randn,  # noqa: F401
                         randn_like, randperm)
from .reduction import (all, amax, amin, any, argmax, argmin, logsumexp, max, mean, min, norm, prod, std,  # noqa: F401
                        sum, var)
from .shape import (broadcast_to, cat, chunk, concat, concatenate, expand, flatten, flip, gather,  # noqa: F401
                    index_select, masked_fill, narrow, nonzero, pad, permute, repeat, reshape, roll, scatter,
                    scatter_add, select, split, squeeze, stack, t, transpose, tril, triu, unbind,
                    unflatten, unsqueeze)

swapaxes = transpose
