"""The house's shape, checked over the source: no function over 80 lines, no two modules
importing each other (lazy imports and TYPE_CHECKING ones included), no module importing
another's private names. The layers between packages are import-linter's (pyproject.toml,
`lint-imports` in .ci/run).

Why these three are not left to the linters (checked 2026-11-26, ruff 0.17.6, import-linter 2.17):
ruff has no rule on a function's length in lines (PLR0915 counts statements, C901 branches);
ruff's PLC2701 (import-private-name, a preview rule) leaves alone a private name imported from
the same top-level package, which is the only case here (gridbench.tracking.sync importing
gridbench.tracking.journaled._describe passed it); and import-linter's acyclic_siblings also
forbids cycles between sibling packages, which the layers contract allows in its `:` layer
(over gridbench it reports three: its cycle breakers were datasets -> workloads, tracking ->
trial and trial -> workloads), so it cannot stand in for the module-level check."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gridbench"
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, tuple[Path, ast.Module]]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if path.name == "__init__.py" else parts)
        modules[name] = (path, ast.parse(path.read_text(encoding="utf-8")))
    return modules


def _imports(name: str, path: Path, tree: ast.Module, known: set[str]) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import in the module, at any depth."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.append((submodule, [], node.lineno) if submodule in known else (base, [alias.name], node.lineno))
    return found


def _owner(target: str, known: set[str]) -> str | None:
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return cycles


def test_no_function_is_longer_than_80_lines():
    long = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, tree in _modules().values()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, "split these into steps of their own:\n" + "\n".join(long)


def test_no_two_modules_import_each_other():
    modules = _modules()
    known = set(modules)
    edges: dict[str, set[str]] = {}
    for name, (path, tree) in modules.items():
        for target, _, _ in _imports(name, path, tree, known):
            owner = _owner(target, known)
            if owner is not None and owner != name:
                edges.setdefault(name, set()).add(owner)
    cycles = _cycles(edges)
    assert not cycles, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_module_imports_another_modules_private_names():
    modules = _modules()
    known = set(modules)
    private = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {taken} from {target}"
        for name, (path, tree) in modules.items()
        for target, names, line in _imports(name, path, tree, known)
        for taken in names
        if target.startswith("gridbench") and taken.startswith("_") and not taken.startswith("__")
    ]
    assert not private, "make these public where they are defined, or move them:\n" + "\n".join(private)


def test_the_checks_find_what_they_look_for():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(edges) == [["a", "b", "c"]]
    tree = ast.parse("def f():\n    from gridbench.x import _hidden, shown\n    import gridbench.y\n")
    found = _imports("gridbench.z", PACKAGE / "z.py", tree, {"gridbench.x", "gridbench.y", "gridbench.z"})
    assert found == [("gridbench.x", ["_hidden"], 2), ("gridbench.x", ["shown"], 2), ("gridbench.y", [], 3)]
