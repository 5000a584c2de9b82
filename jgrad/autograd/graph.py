"""``jgrad.autograd.graph``: introspection of the running backward.

Imports ``engine`` and ``node``.
"""
from __future__ import annotations

from typing import NamedTuple

from .engine import current_execution_order, current_graph_task_id  # noqa: F401
from .node import GraphRoot, Node  # noqa: F401


class GradientEdge(NamedTuple):
    """An edge of the graph: ``grad()``/``backward()`` accept it in ``inputs=`` like a tensor."""

    node: Node
    output_nr: int


def get_gradient_edge(tensor):
    """The (node, output_nr) a gradient for ``tensor`` flows into (``torch.autograd.graph``)."""
    from .node import gradient_edge
    edge = gradient_edge(tensor)
    if edge is None:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does not require "
                           "gradients")
    return GradientEdge(*edge)
