"""Pictures of the autograd graph, as SVG, in pure Python (no graphviz binary).

    >>> import jgrad as jg
    >>> x = jg.randn(3, requires_grad=True)
    >>> pic = jg.viz.draw_graph((x * x).sum())
    >>> pic.svg.startswith("<svg")
    True

``draw_graph`` walks ``next_edges`` from a tensor's ``grad_fn`` (or from a
``Node``, or from several tensors) and lays the nodes out in layers by their
longest distance from a root, so every edge points down. Each node shows its
name (``MulBackward0``, ``AccumulateGrad`` with the leaf's shape, a custom
Function's ``<Class>Backward``) and the shapes of the tensors it saved for
backward; its fill colour is the stream its forward ran on (so its backward
runs there too), with a legend. The result shows inline in Jupyter
(``_repr_svg_``) and can be written to a file with ``save(path)``.

Imports ``_tensor``, ``autograd.node`` and ``streams``.
"""
from __future__ import annotations

from xml.sax.saxutils import escape as _escape

from .autograd.node import Node, SavedVariable, gradient_edge
from .core._tensor import Tensor
from .streams import default_stream

__all__ = ["draw_graph", "GraphPicture"]

# Fill colours per stream, in order of first appearance (a colour-blind safe palette).
_PALETTE = ("#a6cee3", "#fdbf6f", "#b2df8a", "#cab2d6", "#fb9a99", "#ffff99", "#8dd3c7", "#bebada",
            "#80b1d3", "#fccde5", "#d9d9d9", "#ccebc5")
_NO_STREAM = "#eeeeee"
_CHAR_W = 7.2      # average glyph width of the 12px monospace font, in px
_LINE_H = 15
_PAD_X, _PAD_Y = 10, 6
_GAP_X, _GAP_Y = 26, 46
_MARGIN = 16


def _shape(shape) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


def _dt(dtype) -> str:
    return str(dtype).replace("jgrad.", "")


def _dtype_name(x) -> str:
    try:
        import numpy as np
        return str(np.dtype(x.dtype))
    except Exception:  # noqa: BLE001 - a tracer or an odd dtype: only a label
        return str(getattr(x, "dtype", "?"))


def stream_label(stream) -> str:
    """A short human name for a stream: ``cpu default``, ``cpu:1 stream 7``, or ``no stream``."""
    if stream is None:
        return "no stream"
    try:
        if default_stream(stream.device) is stream:
            return f"{stream.device} default"
    except Exception:  # noqa: BLE001 - a label only
        pass
    return f"{stream.device} stream {stream.id}"


def _saved_of(node):
    """Descriptions of the tensors ``node`` saved for backward, or None when it saved none.

    OpNode keeps ``saved``/``saved_out`` (SavedVariable lists, None once freed);
    a custom Function keeps them on ``ctx._saved``.
    """
    entries = []
    freed = False
    if hasattr(node, "op") and hasattr(node, "saved"):  # OpNode
        if getattr(node, "released", False):
            freed = True
        for group in (node.saved, node.saved_out):
            for s in group or ():
                if type(s) is SavedVariable:
                    entries.append(s)
    elif hasattr(node, "ctx"):  # BackwardCFunction
        ctx = node.ctx
        saved = getattr(ctx, "_saved", None)
        if saved is None and getattr(ctx, "_released", False):
            freed = True
        for s in saved or ():
            if type(s) is SavedVariable:
                entries.append(s)
    if freed:
        return ["saved: (freed)"]
    out = []
    for s in entries:
        d = s.data
        if d is None:
            out.append("saved ?")
        else:
            out.append(f"saved {_shape(d.shape)} {_dtype_name(d)}")
    return out


def _roots_of(obj):
    """(root nodes, output labels) for a tensor, a Node, or a list/tuple of them."""
    items = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    roots, outputs = [], []
    for i, it in enumerate(items):
        if isinstance(it, Tensor):
            edge = gradient_edge(it)
            if edge is None:
                raise ValueError(f"draw_graph(): tensor {i} does not require grad, so it has no autograd graph "
                                 "to draw.")
            roots.append(edge[0])
            outputs.append((f"tensor {_shape(it.shape)} {_dt(it.dtype)}", edge[0]))
        elif isinstance(it, Node):
            roots.append(it)
        else:
            raise TypeError(f"draw_graph() takes a Tensor, a Node, or a list of them, but got "
                            f"{type(it).__name__}.")
    if not roots:
        raise ValueError("draw_graph() needs at least one tensor or node.")
    return roots, outputs


class GraphPicture:
    """An SVG picture of an autograd graph.

    ``svg`` is the document; ``nodes`` a list of dicts (``name``, ``lines``,
    ``stream``, ``layer``, ``x``, ``y``) and ``edges`` a list of
    ``(from_index, to_index, input_nr)`` describing what was drawn;
    ``streams`` maps each stream label to its colour.
    """

    def __init__(self, svg: str, nodes: list, edges: list, streams: dict):
        self.svg = svg
        self.nodes = nodes
        self.edges = edges
        self.streams = streams

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path) -> None:
        """Write the SVG document to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.svg)

    def __repr__(self):
        return f"<jgrad.viz.GraphPicture: {len(self.nodes)} nodes, {len(self.edges)} edges>"


def draw_graph(tensor_or_node_or_list, *, show_saved=True) -> GraphPicture:
    """Draw the autograd graph reachable from a tensor's ``grad_fn`` (or a Node, or several tensors).

    Nodes are laid out in layers by their longest distance from a root (each
    edge points from a node to the node its gradient flows into next); node
    colours are streams, explained by the legend. ``show_saved=False`` hides
    the shapes of saved tensors. Returns a :class:`GraphPicture`.
    """
    roots, outputs = _roots_of(tensor_or_node_or_list)

    # Discover nodes breadth-first (a deterministic order: roots, then next_edges order).
    order, index = [], {}
    queue = []
    for r in roots:
        if r not in index:
            index[r] = len(order)
            order.append(r)
            queue.append(r)
    edges = []
    qi = 0
    while qi < len(queue):
        fn = queue[qi]
        qi += 1
        for e in fn.next_edges:
            if e is None:
                continue
            nxt, input_nr = e
            if nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
                queue.append(nxt)
            edges.append((index[fn], index[nxt], input_nr))

    # Longest-path layering (Kahn's order over the DAG), so every edge points down.
    n = len(order)
    indeg = [0] * n
    succ = [[] for _ in range(n)]
    for a, b, _ in edges:
        succ[a].append(b)
        indeg[b] += 1
    layer = [0] * n
    ready = [i for i in range(n) if indeg[i] == 0]
    ri = 0
    while ri < len(ready):
        i = ready[ri]
        ri += 1
        for j in succ[i]:
            layer[j] = max(layer[j], layer[i] + 1)
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)

    # Text and colour of each node.
    stream_colour: dict = {}
    infos = []
    for i, fn in enumerate(order):
        lines = []
        if type(fn).__name__ == "AccumulateGrad":
            var = fn.variable
            lines.append(f"leaf {_shape(var.shape)} {_dt(var.dtype)}")
        if show_saved:
            lines.extend(_saved_of(fn))
        label = stream_label(fn._stream)
        if label not in stream_colour:
            stream_colour[label] = _NO_STREAM if fn._stream is None else \
                _PALETTE[sum(1 for k in stream_colour if k != "no stream") % len(_PALETTE)]
        infos.append({"name": fn.name(), "lines": lines, "stream": label, "layer": layer[i]})

    # Order within layers: discovery order, then one barycentre pass against the layer above.
    layers: dict = {}
    for i in range(n):
        layers.setdefault(layer[i], []).append(i)
    preds = [[] for _ in range(n)]
    for a, b, _ in edges:
        preds[b].append(a)
    pos = {}
    for li in sorted(layers):
        members = layers[li]
        if li > 0:
            members.sort(key=lambda i: (sum(pos[p] for p in preds[i]) / len(preds[i]) if preds[i] else 0.0, i))
        for k, i in enumerate(members):
            pos[i] = k

    # Sizes and coordinates.
    def box(info):
        texts = [info["name"]] + info["lines"]
        w = max(len(t) for t in texts) * _CHAR_W + 2 * _PAD_X
        h = len(texts) * _LINE_H + 2 * _PAD_Y
        return w, h

    out_boxes = [(label, index[fn]) for label, fn in outputs]
    top = _MARGIN
    out_h = (_LINE_H + 2 * _PAD_Y + _GAP_Y) if out_boxes else 0
    sizes = [box(info) for info in infos]
    row_w = {li: sum(sizes[i][0] for i in m) + _GAP_X * (len(m) - 1) for li, m in layers.items()}
    row_h = {li: max(sizes[i][1] for i in m) for li, m in layers.items()}
    width = max(row_w.values()) + 2 * _MARGIN
    y = top + out_h
    for li in sorted(layers):
        x = _MARGIN + (width - 2 * _MARGIN - row_w[li]) / 2
        for i in layers[li]:
            w, h = sizes[i]
            infos[i].update(x=round(x, 1), y=round(y, 1), w=round(w, 1), h=round(h, 1))
            x += w + _GAP_X
        y += row_h[li] + _GAP_Y
    graph_bottom = y - _GAP_Y
    legend = list(stream_colour.items())
    legend_h = (_LINE_H + 8) * len(legend) + 24
    legend_w = max([len("streams")] + [len(k) + 4 for k in legend]) * _CHAR_W + 20
    width = max(width, legend_w + 2 * _MARGIN)
    height = graph_bottom + _MARGIN + legend_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="12">',
             '<defs><marker id="jgrad-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
             'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/>'
             '</marker></defs>',
             f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="white"/>']

    def arrow(x1, y1, x2, y2, dashed=False, title=None):
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        t = f"<title>{_escape(title)}</title>" if title else ""
        parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#555" '
                     f'stroke-width="1.2"{dash} marker-end="url(#jgrad-arrow)">{t}</line>')

    # Output tensors (dashed boxes above their grad_fn).
    if out_boxes:
        ow = [len(lbl) * _CHAR_W + 2 * _PAD_X for lbl, _ in out_boxes]
        total = sum(ow) + _GAP_X * (len(ow) - 1)
        x = max(_MARGIN, (width - total) / 2)
        for (lbl, target), w in zip(out_boxes, ow):
            h = _LINE_H + 2 * _PAD_Y
            parts.append(f'<g class="output"><rect x="{x:.1f}" y="{top:.1f}" width="{w:.1f}" height="{h:.1f}" '
                         f'rx="10" fill="white" stroke="#333" stroke-dasharray="4 3"/>'
                         f'<text x="{x + w / 2:.1f}" y="{top + _PAD_Y + 11:.1f}" text-anchor="middle">'
                         f'{_escape(lbl)}</text></g>')
            t = infos[target]
            arrow(x + w / 2, top + h, t["x"] + t["w"] / 2, t["y"])
            x += w + _GAP_X

    for a, b, input_nr in edges:
        s, t = infos[a], infos[b]
        arrow(s["x"] + s["w"] / 2, s["y"] + s["h"], t["x"] + t["w"] / 2, t["y"],
              title=f"{s['name']} -> {t['name']} (input {input_nr})")

    for info in infos:
        fill = stream_colour[info["stream"]]
        parts.append(f'<g class="node"><title>{_escape(info["name"])} on {_escape(info["stream"])}</title>'
                     f'<rect x="{info["x"]:.1f}" y="{info["y"]:.1f}" width="{info["w"]:.1f}" '
                     f'height="{info["h"]:.1f}" rx="4" fill="{fill}" stroke="#333"/>')
        cx = info["x"] + info["w"] / 2
        ty = info["y"] + _PAD_Y + 11
        parts.append(f'<text x="{cx:.1f}" y="{ty:.1f}" text-anchor="middle" font-weight="bold">'
                     f'{_escape(info["name"])}</text>')
        for line in info["lines"]:
            ty += _LINE_H
            parts.append(f'<text x="{cx:.1f}" y="{ty:.1f}" text-anchor="middle" fill="#333">{_escape(line)}</text>')
        parts.append("</g>")

    # Legend.
    ly = graph_bottom + _MARGIN
    parts.append(f'<g class="legend"><text x="{_MARGIN}" y="{ly + 12:.1f}" font-weight="bold">streams</text>')
    for k, (label, colour) in enumerate(legend):
        yy = ly + 20 + k * (_LINE_H + 8)
        parts.append(f'<rect x="{_MARGIN}" y="{yy:.1f}" width="16" height="{_LINE_H:.0f}" fill="{colour}" '
                     f'stroke="#333"/><text x="{_MARGIN + 24}" y="{yy + 12:.1f}">{_escape(label)}</text>')
    parts.append("</g></svg>")

    nodes = [{k: info[k] for k in ("name", "lines", "stream", "layer", "x", "y")} for info in infos]
    return GraphPicture("\n".join(parts), nodes, edges, dict(stream_colour))
