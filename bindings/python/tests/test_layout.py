"""The package's modules form layers: no import cycle between them, and no module imports
another inside a function (which is how a cycle hides). __init__ is the top and imports all."""
import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "tensorref"


def imports(path: pathlib.Path):
    """(module imported, whether at module level) for each import of a package module."""
    tree = ast.parse(path.read_text())
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            names = [node.module] if node.module else [a.name for a in node.names]
            for name in names:
                yield name.split(".")[0], id(node) in top


def graph():
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {m: {(dep, top) for dep, top in imports(p) if dep in modules} for m, p in modules.items()}


def test_no_module_imports_another_inside_a_function():
    late = [f"{m} -> {dep}" for m, deps in graph().items() for dep, top in deps if not top]
    assert late == []


def test_the_modules_import_each_other_without_a_cycle():
    edges = {m: {dep for dep, _ in deps} for m, deps in graph().items()}
    state: dict[str, str] = {}

    def visit(m, path):
        if state.get(m) == "done":
            return
        assert state.get(m) != "open", "import cycle: " + " -> ".join(path + [m])
        state[m] = "open"
        for dep in sorted(edges[m]):
            visit(dep, path + [m])
        state[m] = "done"

    for m in sorted(edges):
        visit(m, [])
