"""The op library: each op is a jax forward and a jax backward, run through ``_dispatch``.

Imports the op families, ``pointwise`` first (the others build on its helpers). Every family imports
``_dispatch`` (``Op``, ``call``...), ``_tensor``, ``_dtype`` and ``ops._registry``, plus the families it
builds on; none imports ``nn``, ``optim`` or ``graphs``. ``ops.creation`` fills in ``jgrad.core._factories``,
the factories lower layers call.
"""
from . import pointwise, pointwise_inplace, comparison, conversion  # noqa: F401  (elementwise first: the families build on it)
from . import (attention, conv, creation, indexing, linalg, misc, nn_ops, normalization,  # noqa: F401
               random_ops, reduction, shape, sorting)
from . import elementwise, activations, products, assemble, stats  # noqa: F401  (issue 26: the missing names)
from .creation import (arange, as_tensor, empty, empty_like, eye, from_numpy, full, full_like, linspace, ones,  # noqa: F401
                       ones_like, tensor, zeros, zeros_like, logspace, tril_indices, triu_indices)
from .from_jax import from_jax  # noqa: F401
from .linalg import (bmm, dot, einsum, get_float32_matmul_precision, linear, matmul, mm,  # noqa: F401
                     set_float32_matmul_precision)
from .misc import (addcdiv, addcmul, cumprod, cumsum, index_add, lerp, logcumsumexp, masked_select,  # noqa: F401
                   movedim, moveaxis, outer, repeat_interleave, take_along_dim, xlogy)
from .nn_ops import cross_entropy, embedding, layer_norm, log_softmax, mse_loss, softmax  # noqa: F401
from .pointwise import *  # noqa: F401,F403
from .comparison import *  # noqa: F401,F403
from .random_ops import (bernoulli, dropout, multinomial, normal, rand, rand_like, randint,  # noqa: F401
                         randint_like, randn, randn_like, randperm, poisson, alpha_dropout, feature_alpha_dropout)
from .reduction import (all, amax, amin, any, argmax, argmin, logsumexp, max, mean, min, norm, prod, std,  # noqa: F401
                        sum, var)
from .sorting import argsort, bucketize, kthvalue, msort, searchsorted, sort, topk  # noqa: F401
from .shape import (as_strided, broadcast_to, cat, chunk, concat, concatenate, diagonal, expand, flatten,  # noqa: F401
                    flip, pad, permute, repeat, reshape, roll, split, squeeze, stack, t, transpose, tril, triu,
                    unbind, unflatten, unfold, unsqueeze)
from .indexing import gather, index_select, masked_fill, narrow, nonzero, scatter, scatter_add, select  # noqa: F401

from . import compat  # noqa: E402,F401  (legacy tensor types, memory formats, Tensor.__format__: PyTorch's first names)
from .compat import (BFloat16Tensor, BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor,  # noqa: E402,F401
                     HalfTensor, IntTensor, LongTensor, ShortTensor, broadcast_shapes, broadcast_tensors,
                     channels_last, channels_last_3d, contiguous_format, is_complex, is_floating_point,
                     memory_format, preserve_format)
from .elementwise import *  # noqa: F401,F403
from .products import *  # noqa: F401,F403
from .assemble import *  # noqa: F401,F403
from .stats import *  # noqa: F401,F403
from .activations import (celu, elu, gelu, hardshrink, hardtanh, leaky_relu, logsigmoid, prelu, selu,  # noqa: F401
                          silu, softplus, softshrink, threshold)
from .misc import outer as ger  # noqa: F401

swapaxes = transpose

# The math namespaces (jgrad.linalg, fft, special, distributions): their op families, and the names PyTorch
# also exposes at the top level. The families' module names do not clash with a PyTorch name that
# ``from .ops import *`` exports (``jg.complex`` is the function); ``jgrad`` binds ``jg.linalg`` itself.
from . import (complex_ops, decompositions, linalg_methods, matrix_functions, norms, random_dists,  # noqa: E402,F401
               special_ops, spectral, statistics)
from .complex_ops import *  # noqa: F401,F403,E402
from .linalg_methods import *  # noqa: F401,F403,E402
from .special_ops import *  # noqa: F401,F403,E402
from .statistics import *  # noqa: F401,F403,E402

from . import sparse_coo, sparse_dispatch  # noqa: E402,F401  (issue 30: COO tensors on BCOO; their ops)
from .sparse_coo import layout, sparse_coo, sparse_coo_tensor, strided  # noqa: E402,F401
from . import sparse_csr as _sparse_csr  # noqa: E402  (CSR tensors on BCSR)
from .sparse_csr import sparse_csr, sparse_csr_tensor  # noqa: E402,F401
from .stft import istft, stft  # noqa: E402,F401  (issue 30: torch.stft / istft on jnp.fft)

from . import inplace  # noqa: F401,E402  (last: in-place variants of the methods that exist by now)
