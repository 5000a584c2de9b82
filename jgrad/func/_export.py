"""``jgrad.export_stablehlo``: a module or function as a serialized StableHLO program, through ``jax.export``.

jgrad's export format is StableHLO (what XLA, IREE and ``jax.export.deserialize`` run), not ONNX: a
PyTorch program's ``torch.onnx.export(model, args, f)`` becomes ``jg.export_stablehlo(model, args, f)``.
The forward is traced once with the example arguments' shapes and dtypes: jgrad tensors whose storage is a
JAX tracer flow through jgrad's ops (every op is a ``jax.jit`` kernel), under ``no_grad`` and eager
execution; the parameters and buffers become constants of the program, as ONNX initializers do. A module is
exported in eval mode, as ``torch.onnx.export`` does by default, and put back in its mode afterwards.

Imports ``_tensor``, ``_dtype``, ``_segment`` (eager while tracing) and ``grad_mode``.
"""
from __future__ import annotations

import os

import jax

from ..core import _dtype
from ..runtime import _segment
from ..core._tensor import Tensor
from ..autograd.grad_mode import no_grad

__all__ = ["export_stablehlo"]


def _is_tensor(x):
    return isinstance(x, Tensor)


def export_stablehlo(model, args, f=None, *, kwargs=None, platforms=None):
    """Trace ``model(*args, **kwargs)`` into a ``jax.export.Exported`` (returned); with ``f`` (a path or a binary
    file), also write its serialized bytes there (``jax.export``'s format; it needs the ``flatbuffers`` package).

    ``args`` is a tensor or a tuple of them (nested lists, tuples and dicts of tensors work too, and so does
    ``kwargs``); the program takes one array per tensor of ``args`` then ``kwargs``, in order, of the same shape
    and dtype, and returns the outputs' arrays in the outputs' structure. Run it with
    ``jax.export.deserialize(data).call(*arrays)``. ``platforms`` (e.g. ``["cpu", "cuda"]``) defaults to the
    platform of the first tensor argument. Shapes are static; anything that reads a tensor on the host inside the
    forward (``item()``, ``bool(t)``, Python control flow on values) cannot be traced.
    """
    args = args if isinstance(args, tuple) else (args,)
    kwargs = dict(kwargs or {})
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=_is_tensor)
    positions = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)]
    if not positions:
        raise ValueError("export_stablehlo(): args must contain at least one tensor to give the program an input")
    first = leaves[positions[0]]
    specs = [jax.ShapeDtypeStruct(tuple(leaves[i].shape), leaves[i].dtype.np) for i in positions]

    def program(*arrays):
        flat = list(leaves)
        for i, a in zip(positions, arrays):
            flat[i] = Tensor._make(a, leaves[i]._device)
        call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, flat)
        with no_grad():
            out = model(*call_args, **call_kwargs)
        out_leaves, tree = jax.tree_util.tree_flatten(out, is_leaf=_is_tensor)
        return jax.tree_util.tree_unflatten(tree, [t._value if isinstance(t, Tensor) else t for t in out_leaves])

    training = getattr(model, "training", None)
    if training:
        model.eval()
    try:
        # Eager from here: leaving "auto" mode runs the pending work (the model's weights may be pending results),
        # which must happen before the trace starts, not inside it.
        with _segment.execution_mode("eager"), _dtype.x64_scope():
            plats = platforms if platforms is not None else [_platform(first)]
            exported = jax.export.export(jax.jit(program), platforms=plats)(*specs)
    finally:
        if training:
            model.train(True)
    if f is not None:
        _write(f, _serialize(exported))
    return exported


def _serialize(exported) -> bytes:
    try:
        import flatbuffers  # noqa: F401  (jax.export's serialization format)
    except ImportError:
        raise ImportError("export_stablehlo(f=...) writes jax.export's serialization, which needs the flatbuffers "
                          "package: pip install flatbuffers (or jgrad[export]). Without f, export_stablehlo returns "
                          "the jax.export.Exported: call it with .call(*arrays); .mlir_module() is the StableHLO "
                          "text.") from None
    return exported.serialize()


def _platform(t) -> str:
    kind = t.device.type
    return "cuda" if kind == "gpu" else kind


def _write(f, data: bytes) -> None:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            fh.write(data)
    else:
        f.write(data)
