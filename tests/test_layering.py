"""The import direction of the code base (docs/design.md, "The house").

Every module of jgrad belongs to one layer, and the folders are the layers: ``jgrad/core/`` (the tensor and
what describes it) at the bottom, the engine (``jgrad/autograd/``), the runtime (``jgrad/runtime/``: how an op
runs), the op library (``jgrad/ops/``), the library built on ops (``nn``, ``optim``, ``func``, ...), the tools
(profiler, viz, serialization) and the public namespace on top. Every import, at any depth (module level or
inside a function), points down the layers or stays in its own; imports form no cycle, at any depth; and an
import inside a function never crosses a layer (a dependency on another layer is declared at the top of the
module, where a reader sees it). Where a lower layer needs a higher one at run time, the higher one installs
itself when it loads (``core._tensor.above``, ``graphs.replay_observers``, ...). ``ALLOWED`` lists the
exceptions, each with its reason. ``jgrad`` never imports ``interop``, the adapters to other libraries.
"""
import ast
import functools
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.one_execution_mode  # static checks: one run is enough

ROOT = pathlib.Path(__file__).resolve().parent.parent
JGRAD = ROOT / "jgrad"

# Bottom first: (layer, what it is, the modules in it: packages or modules, the longest match wins).
LAYERS = (
    ("core", "the tensor and what describes it; devices' streams", ("jgrad.core", "jgrad.streams")),
    ("engine", "autograd: nodes, the engine, custom Functions, grad mode", ("jgrad.autograd",)),
    ("runtime", "how an op runs: the door, auto segments, compile, capture", ("jgrad.runtime", "jgrad.random",
                                                                             "jgrad.graphs")),
    ("ops", "the op library", ("jgrad.ops",)),
    ("library", "what is built on ops", ("jgrad.nn", "jgrad.optim", "jgrad.func", "jgrad.distributed",
                                         "jgrad.distributions", "jgrad.utils", "jgrad.amp", "jgrad.linalg",
                                         "jgrad.fft", "jgrad.special", "jgrad.sparse", "jgrad.compiler",
                                         "jgrad.cuda", "jgrad.accelerator", "jgrad.backends", "jgrad.onnx")),
    ("tools", "pictures, traces and checkpoints of all of the above", ("jgrad.profiler", "jgrad.viz",
                                                                       "jgrad.serialization")),
    ("api", "the public namespace", ("jgrad", "jgrad.__main__")),
)

# (importer, imported): why this import may break a rule above. Keep it short.
ALLOWED = {
}


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(JGRAD.rglob("*.py"))}


@functools.lru_cache(maxsize=None)
def _imports(name):
    """((imported module or name, line, at module level?), ...) of module ``name``, relative imports resolved."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    top_level = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        at_top = id(node) in top_level
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, at_top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((mod, node.lineno, at_top))
            found += [(f"{mod}.{a.name}", node.lineno, at_top) for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            fn = node.func
            fname = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if fname in ("import_module", "__import__"):
                found.append((node.args[0].value, node.lineno, at_top))
    return tuple(found)


def _resolve(target):
    """The jgrad module an import names (the longest known prefix), or None."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in MODULES:
            return cand
    return None


def _edges(name, top_only=False, fn_only=False):
    """{jgrad module: line} that ``name`` imports. Its own packages are left out: Python initialises a
    package before its modules, so ``from . import x`` inside it depends on ``x``, not on the package."""
    parts = name.split(".")
    ancestors = {".".join(parts[:i]) for i in range(1, len(parts))}
    out = {}
    for target, line, at_top in _imports(name):
        if (top_only and not at_top) or (fn_only and at_top):
            continue
        mod = _resolve(target)
        if mod is not None and mod != name and mod not in ancestors:
            out.setdefault(mod, line)
    return out


def _layer(name):
    """The index of ``name``'s layer in LAYERS (None: no layer claims it)."""
    best = None
    for i, (_, _, members) in enumerate(LAYERS):
        for m in members:
            if (name == m or name.startswith(m + ".")) and (best is None or len(m) > best[1]):
                best = (i, len(m))
    return None if best is None else best[0]


def _where(m, dep, line):
    return f"{MODULES[m].relative_to(ROOT)}:{line}: {m} imports {dep}"


def _find_cycle(graph):
    """One cycle of ``graph`` ({node: iterable of nodes}) as a list of nodes, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for dep in graph[m]:
            if state.get(dep) == "open":
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_jgrad_never_imports_interop():
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line}: imports {target}"
           for m in MODULES for target, line, _ in _imports(m)
           if target == "interop" or target.startswith("interop.")]
    assert not bad, "jgrad must not import interop (interop depends on jgrad):\n" + "\n".join(bad)


def test_importing_jgrad_loads_no_interop_module():
    code = ("import sys, jgrad; bad = sorted(m for m in sys.modules if m == 'interop' or m.startswith('interop.')); "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"import jgrad loaded interop modules: {r.stdout} {r.stderr[-2000:]}"


def test_interop_still_offers_dlpack():
    import interop
    import jgrad

    assert interop.from_dlpack is jgrad.from_dlpack
    assert interop.dlpack.from_dlpack is jgrad.from_dlpack


def test_every_module_has_a_layer_and_no_top_level_module_is_private():
    homeless = sorted(m for m in MODULES if _layer(m) is None)
    assert not homeless, f"modules no layer claims (add them to LAYERS, and to docs/design.md): {homeless}"
    private = sorted(p.name for p in JGRAD.glob("_*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not private, f"private modules at the top of jgrad/ (put them in the package of their layer): {private}"


def test_imports_point_down_the_layers():
    bad = [_where(m, dep, line) + f" ({LAYERS[_layer(m)][0]} -> {LAYERS[_layer(dep)][0]})"
           for m in MODULES for dep, line in _edges(m).items()
           if _layer(dep) > _layer(m) and (m, dep) not in ALLOWED]
    assert not bad, ("imports that point up the layers (docs/design.md, \"The house\": let the higher layer install "
                     "itself instead):\n" + "\n".join(bad))


def test_function_level_imports_stay_in_their_layer():
    bad = [_where(m, dep, line) + " inside a function"
           for m in MODULES for dep, line in _edges(m, fn_only=True).items()
           if _layer(dep) != _layer(m) and (m, dep) not in ALLOWED]
    assert not bad, ("a dependency on another layer belongs at the top of the module, where a reader sees it:\n"
                     + "\n".join(bad))


@pytest.mark.parametrize("top_only", [True, False], ids=["module-level", "any-depth"])
def test_imports_form_no_cycle(top_only):
    graph = {m: [d for d in _edges(m, top_only=top_only) if (m, d) not in ALLOWED] for m in MODULES}
    cycle = _find_cycle(graph)
    assert cycle is None, ("import cycle: " + " -> ".join(cycle) + " (give the shared concept one home below "
                           "both, or let the higher module install itself into the lower one)")


def test_allowlist_entries_are_used_and_say_why():
    for (m, dep), why in ALLOWED.items():
        assert m in MODULES and dep in _edges(m), f"{m} no longer imports {dep}: drop it from ALLOWED"
        assert len(why.split()) >= 4, f"ALLOWED[{m!r}, {dep!r}] needs a reason"


def test_the_recorder_depends_only_on_dtypes():
    assert set(_edges("jgrad.core._recorder")) <= {"jgrad.core._dtype"}, _edges("jgrad.core._recorder")


def test_every_from_import_names_a_module_that_exists():
    """``from .x import y`` whose ``x`` is not a jgrad module fails only when the line runs: inside a function or a
    thread that may be never, or after a module moved (a background compile once died on ``from ._dtype``)."""
    missing = []
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "jgrad"):
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                if mod not in MODULES:
                    missing.append(f"{name}:{node.lineno} imports from {mod}, which is not a module of jgrad")
    assert not missing, "\n".join(missing)
