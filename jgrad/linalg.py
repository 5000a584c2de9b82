"""``jgrad.linalg``: ``torch.linalg`` under its names, on ``jnp.linalg`` and ``jax.scipy.linalg`` (re-exports of
the op library's ``decompositions``, ``matrix_functions`` and ``norms``). docs/math.md lists what is covered.

Imports the op library only.
"""
from .ops.decompositions import (LinAlgError, cholesky, det, eigh, eigvalsh, inv, qr, slogdet, solve,  # noqa: F401
                                 svd, svdvals)
from .ops.linalg import matmul  # noqa: F401
from .ops.matrix_functions import (diagonal, lstsq, matrix_exp, matrix_power, matrix_rank, pinv,  # noqa: F401
                                   solve_triangular, vecdot)
from .ops.norms import cross, matrix_norm, multi_dot, norm, vector_norm  # noqa: F401

__all__ = ["LinAlgError", "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "lstsq", "matmul",
           "matrix_exp", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr", "slogdet",
           "solve", "solve_triangular", "svd", "svdvals", "vecdot", "vector_norm"]
