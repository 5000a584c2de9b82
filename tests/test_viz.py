"""jg.viz.draw_graph: an SVG picture of the autograd graph (pure Python)."""
import xml.etree.ElementTree as ET

import pytest

import jgrad as jg

SVG = "{http://www.w3.org/2000/svg}"


def _reachable_names(fn):
    seen, out, stack = set(), [], [fn]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        out.append(n.name())
        stack.extend(nxt for nxt, _ in n.next_functions)
    return sorted(out)


def _texts(svg):
    root = ET.fromstring(svg)
    assert root.tag == SVG + "svg"
    return [t.text for t in root.iter(SVG + "text")]


def test_small_graph_names_match_next_functions_and_svg_parses():
    x = jg.randn(3, 4, requires_grad=True)
    w = jg.randn(4, 2, requires_grad=True)
    y = (x @ w).relu().sum()
    pic = jg.viz.draw_graph(y)
    names = sorted(n["name"] for n in pic.nodes)
    assert names == _reachable_names(y.grad_fn)
    assert names == sorted(["SumBackward0", "ReluBackward0", "MmBackward0", "AccumulateGrad", "AccumulateGrad"])
    texts = _texts(pic.svg)
    for name in names:
        assert name in texts
    assert "leaf [3, 4] float32" in texts and "leaf [4, 2] float32" in texts
    assert "saved [3, 4] float32" in texts  # mm saved both operands
    assert "tensor [] float32" in texts     # the output tensor's box
    assert pic._repr_svg_() == pic.svg
    # one edge per non-None next edge; every edge points to a deeper layer
    assert len(pic.edges) == 4
    for a, b, _ in pic.edges:
        assert pic.nodes[b]["layer"] > pic.nodes[a]["layer"]


def test_layout_is_deterministic_and_longest_path_layered(tmp_path):
    def build():
        jg.manual_seed(0)
        x = jg.randn(5, requires_grad=True)
        a = x.exp()
        return (a * x + a).sum()  # x feeds layers at different depths

    p1, p2 = jg.viz.draw_graph(build()), jg.viz.draw_graph(build())
    strip = lambda s: s  # noqa: E731 - no ids or addresses in the document
    assert strip(p1.svg) == strip(p2.svg)
    acc = [n for n in p1.nodes if n["name"] == "AccumulateGrad"]
    assert len(acc) == 1 and acc[0]["layer"] == max(n["layer"] for n in p1.nodes)
    path = tmp_path / "g.svg"
    p1.save(path)
    ET.parse(path)


def test_show_saved_false_and_freed_saved_tensors():
    x = jg.randn(3, requires_grad=True)
    y = (x.sin() * 2).sum()
    assert "saved [3] float32" in _texts(jg.viz.draw_graph(y).svg)
    assert not any(t.startswith("saved") for t in _texts(jg.viz.draw_graph(y, show_saved=False).svg))
    y.backward()
    assert "saved: (freed)" in _texts(jg.viz.draw_graph(y.grad_fn).svg)


def test_two_streams_get_distinct_colours_and_a_legend():
    s = jg.Stream()
    x = jg.randn(4, requires_grad=True)
    s.wait_stream(jg.current_stream())
    with jg.stream(s):
        h = x * 3
    jg.current_stream().wait_stream(s)
    y = h.exp().sum()
    pic = jg.viz.draw_graph(y)
    by_name = {n["name"]: n["stream"] for n in pic.nodes}
    assert by_name["MulBackward0"] != by_name["ExpBackward0"]
    assert len(pic.streams) == 2 and len(set(pic.streams.values())) == 2
    root = ET.fromstring(pic.svg)
    fills = {r.get("fill") for g in root.iter(SVG + "g") if g.get("class") == "node" for r in g.iter(SVG + "rect")}
    assert fills == set(pic.streams.values())
    texts = _texts(pic.svg)
    assert "streams" in texts and all(label in texts for label in pic.streams)


def test_custom_function_node_several_tensors_and_a_node():
    class Square(jg.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * a * g

    x = jg.randn(2, 3, requires_grad=True)
    y1 = Square.apply(x).sum()
    y2 = (x + 1).mean()
    pic = jg.viz.draw_graph([y1, y2])
    names = [n["name"] for n in pic.nodes]
    assert "SquareBackward" in names and names.count("AccumulateGrad") == 1
    sq = next(n for n in pic.nodes if n["name"] == "SquareBackward")
    assert sq["lines"] == ["saved [2, 3] float32"]
    assert jg.viz.draw_graph(y1.grad_fn).nodes[0]["name"] == "SumBackward0"


def test_bad_arguments_have_clear_errors():
    with pytest.raises(ValueError, match="does not require grad"):
        jg.viz.draw_graph(jg.ones(2))
    with pytest.raises(TypeError, match="takes a Tensor"):
        jg.viz.draw_graph(3)


def test_importing_jgrad_does_not_import_matplotlib():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import sys, jgrad; print('matplotlib' in sys.modules)"],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
