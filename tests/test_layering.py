"""The import direction of the code base (docs/design.md, "Layers").

``jgrad`` is the framework and never imports ``interop``, the adapters to other libraries, which
depend on it. Inside jgrad, module-level imports form no cycle (a reader can go from the bottom up),
and the documented direction ``ops -> _dispatch -> autograd`` holds: autograd never imports the door
or the op library, and streams, graphs and random never import the op library. Function-level imports
count: a rule broken inside a function is broken.
"""
import ast
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.one_execution_mode  # static checks: one run is enough

ROOT = pathlib.Path(__file__).resolve().parent.parent
JGRAD = ROOT / "jgrad"


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(JGRAD.rglob("*.py"))}


def _imports(name):
    """[(imported module or name, line, at module level?)] of module ``name``, relative imports resolved."""
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
    return found


def _resolve(target):
    """The jgrad module an import names (the longest known prefix), or None."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in MODULES:
            return cand
    return None


def _edges(name, top_only=False):
    """{jgrad module: line} that ``name`` imports. Its own packages are left out: Python initialises a
    package before its modules, so ``from . import x`` inside it depends on ``x``, not on the package."""
    parts = name.split(".")
    ancestors = {".".join(parts[:i]) for i in range(1, len(parts))}
    out = {}
    for target, line, at_top in _imports(name):
        if top_only and not at_top:
            continue
        mod = _resolve(target)
        if mod is not None and mod != name and mod not in ancestors:
            out.setdefault(mod, line)
    return out


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


def test_module_level_imports_form_no_cycle():
    graph = {m: _edges(m, top_only=True) for m in MODULES}
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for dep in graph[m]:
            if state.get(dep) == "open":
                cycle = stack[stack.index(dep):] + [dep]
                pytest.fail("module-level import cycle: " + " -> ".join(cycle) + " (give the shared concept one "
                            "home below both, or import at the call with a reason)")
            if dep not in state:
                visit(dep)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)


def _forbidden(modules, banned):
    bad = []
    for m in modules:
        for dep, line in _edges(m).items():
            if any(dep == b or dep.startswith(b + ".") for b in banned):
                bad.append(f"{MODULES[m].relative_to(ROOT)}:{line}: {m} imports {dep}")
    return bad


def _package(prefix):
    return [m for m in MODULES if m == prefix or m.startswith(prefix + ".")]


@pytest.mark.parametrize("modules, banned", [
    # ops -> _dispatch -> autograd: the engine knows nothing of the door, the recorder or the op library.
    (_package("jgrad.autograd"), ("jgrad.runtime._dispatch", "jgrad.ops", "jgrad.runtime._segment", "jgrad.runtime._capture",
                                  "jgrad.runtime._backward_plan", "jgrad.graphs", "jgrad.nn", "jgrad.optim")),
    # streams, graphs and random sit under the op library (factories come through jgrad.core._factories).
    (["jgrad.streams", "jgrad.graphs", "jgrad.runtime._graphed", "jgrad.random"], ("jgrad.ops",)),
    (["jgrad.streams"], ("jgrad.runtime._dispatch", "jgrad.runtime._segment", "jgrad.graphs")),
    # the tensor and the recorder are below everything that records or runs ops
    (["jgrad.core._tensor", "jgrad.core._recorder", "jgrad.runtime._capture", "jgrad.runtime._compile"], ("jgrad.ops", "jgrad.nn", "jgrad.optim")),
], ids=["autograd", "streams-graphs-random", "streams", "tensor-recorder"])
def test_documented_direction(modules, banned):
    assert modules
    bad = _forbidden(modules, banned)
    assert not bad, "imports against the documented direction (docs/design.md, \"Layers\"):\n" + "\n".join(bad)


def test_the_recorder_depends_only_on_dtypes():
    assert set(_edges("jgrad.core._recorder")) <= {"jgrad.core._dtype"}, _edges("jgrad.core._recorder")
