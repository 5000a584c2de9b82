"""``jgrad.onnx`` (``torch.onnx``): importable, so programs that ``import torch.onnx`` at the top run; jgrad
exports StableHLO, not ONNX.

``export`` (and ``dynamo_export``) raise a ``RuntimeError`` that points to ``jgrad.export_stablehlo(model,
args, f)``, which writes the model as a serialized ``jax.export`` StableHLO program (run it with
``jax.export.deserialize(data).call(*arrays)``; XLA and IREE compile it). ``is_in_onnx_export()`` is False.

Imports nothing of jgrad.
"""
from __future__ import annotations

__all__ = ["export", "dynamo_export", "is_in_onnx_export", "OnnxExporterError"]


class OnnxExporterError(RuntimeError):
    """Raised by ``export``: jgrad has no ONNX exporter."""


_POINTER = ("jgrad exports StableHLO through jax.export, not ONNX: use jgrad.export_stablehlo(model, args, f) "
            "instead of torch.onnx.export(model, args, f). It traces the model with the example args (in eval mode) "
            "and writes a serialized StableHLO program to f; run it with jax.export.deserialize(data).call(*arrays) "
            "or compile it with XLA or IREE.")


def export(model, args=(), f=None, *a, **kw):
    """Not available: raises with a pointer to ``jgrad.export_stablehlo``."""
    raise OnnxExporterError(f"torch.onnx.export: {_POINTER}")


def dynamo_export(model, *a, **kw):
    """Not available: raises with a pointer to ``jgrad.export_stablehlo``."""
    raise OnnxExporterError(f"torch.onnx.dynamo_export: {_POINTER}")


def is_in_onnx_export() -> bool:
    """False: jgrad never runs a model inside an ONNX export."""
    return False
