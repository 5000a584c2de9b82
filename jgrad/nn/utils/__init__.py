"""``jgrad.nn.utils`` (``torch.nn.utils``): gradient clipping, parameters as one vector, ``rnn`` (padding and
packing sequences), ``parametrize`` / ``parametrizations`` and the hook-based ``weight_norm`` / ``spectral_norm``.

Imports its modules.
"""
from . import rnn  # noqa: F401
from .clip_grad import clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm
from .convert_parameters import parameters_to_vector, vector_to_parameters
from . import parametrizations, parametrize  # noqa: F401  (issue 30)
from .hook_norms import remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm", "parameters_to_vector",
           "vector_to_parameters", "rnn", "parametrize", "parametrizations", "weight_norm", "remove_weight_norm",
           "spectral_norm", "remove_spectral_norm"]
