"""``jgrad.autograd.graph``: introspection of the running backward."""
from __future__ import annotations

from .engine import current_execution_order, current_graph_task_id  # noqa: F401
from .node import GraphRoot, Node  # noqa: F401


def get_gradient_edge(tensor):
    """The (node, input_nr) a gradient for ``tensor`` flows into."""
    from .node import gradient_edge
    edge = gradient_edge(tensor)
    if edge is None:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does not require "
                           "gradients")
    return edge
